# The two set-up commands of the README are `make demo` and `make test`; each sets up .venv first.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: env demo test test-all check-gen gen lint-proto breaking schema bench reference-env

env:
	@scripts/bootstrap.sh

demo: env
	$(BIN)/unirl-replay demo $(if $(OUT),--out $(OUT),)

# The whole default suite (CI runs exactly this): contract checks, then pytest.
test: env check-gen
	$(BIN)/python -m pytest -q

# Regenerate gen/ and schema/ from proto/ (the one documented regeneration command).
gen: env
	cd $(CURDIR) && $(BIN)/buf generate
	$(BIN)/python -m unirl_replay.jsonschema_gen --write schema

# Fail when gen/ or schema/ is stale, buf lint fails, or the v1 wire/JSON contract broke.
check-gen: env
	scripts/check_gen.sh

bench: env
	$(BIN)/python benchmarks/bench_trace_io.py

reference-env:
	envs/reference/install.sh
