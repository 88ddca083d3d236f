# One entry point for people and CI. Every target bootstraps .venv on a fresh clone.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export CDK_DISABLE_CLI_TELEMETRY := true
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install run lint test synth demo bench torture clean

install: $(STAMP)

# Reinstall when the project definition changes, or when the venv's Python went away.
$(STAMP): pyproject.toml
	@if [ ! -x $(BIN)/python ] || ! $(BIN)/python -c 'import sys' >/dev/null 2>&1; then \
	  rm -rf $(VENV); $(PY) -m venv $(VENV); fi
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

run: install
	$(BIN)/leasefence local

# Lint, format check and type check; make test runs it first, so CI fails on any of them.
# infra joins after the construct split lands
LINT_PATHS := layers functions

lint: install
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy $(LINT_PATHS)

test: install lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=12

# Offline: no issuer is known here, so the placeholder is allowed explicitly (a real deploy
# passes -c jwtIssuer=... or -c createUserPool=true to cdk). More context: SYNTH_ARGS='-c k=v'.
synth: install
	$(BIN)/python infra/app.py -c allowPlaceholderIssuer=true $(SYNTH_ARGS)

demo: install
	$(BIN)/leasefence demo

bench: install
	$(BIN)/leasefence bench --out bench-report.json

torture: install
	$(BIN)/leasefence torture --operations 10000 --seed $${SEED:-1}

clean:
	rm -rf $(VENV) cdk.out .pytest_cache .mypy_cache .ruff_cache
