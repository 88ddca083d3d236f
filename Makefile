# One entry point for people and CI. Every target bootstraps .venv on a fresh clone.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every Python dependency of every extra, pinned (make lock); it ships inside leasefence_infra.
LOCK := infra/leasefence_infra/requirements.lock
UV_VERSION := 0.13.9
# The CDK CLI pinned in package-lock.json, installed by npm ci (stamp: reinstall when it changes).
NODE_STAMP := node_modules/.installed
WHEELS_STAMP := $(VENV)/.wheels
CDK := npx --no-install cdk
# Create .venv, or recreate it when its Python went away ($(1): what to print first).
MAKE_VENV = if [ ! -x $(BIN)/python ] || ! $(BIN)/python -c 'import sys' >/dev/null 2>&1; then \
	  echo "$(1)creating $(VENV) with $$($(PY) --version)"; rm -rf $(VENV); $(PY) -m venv $(VENV); \
	  else echo "$(1)$(VENV) is there ($$($(BIN)/python --version))"; fi
# pip's output goes to this log; a failed step prints its tail and the log's path.
INSTALL_LOG := $(VENV)/install.log
LOGGED = logged() { "$$@" >>$(INSTALL_LOG) 2>&1 || { tail -n 25 $(INSTALL_LOG) >&2; \
	  echo "failed: $$* (the whole log: $(INSTALL_LOG))" >&2; exit 1; }; }
# Node.js, for the CDK CLI and aws-cdk-lib's jsii runtime (synth, deploy, docs, collect, test).
NEED_NODE = command -v node >/dev/null && command -v npm >/dev/null \
	  && [ "$$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] \
	  || { echo "make $(or $(MAKECMDGOALS),install) needs Node.js 22 or 24 (20 works too) with npm on the PATH, for the CDK \
	  CLI and aws-cdk-lib; make run, make lint and make install-python do not" >&2; exit 1; }

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export CDK_DISABLE_CLI_TELEMETRY := true
export CDK_DISABLE_VERSION_CHECK := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install install-python lock run lint collect dynalite generated-clients test test-typescript test-dynalite docs dist synth deploy demo bench torture modelcheck screenshots clean

# Both parts: install-python (.venv: run, lint, demo, ...) and the CDK part (Node.js).
install: $(STAMP) $(NODE_STAMP) $(WHEELS_STAMP)
install-python: $(STAMP)

# Reinstall when the project definition or the lock changes, or when the venv's Python went away.
# The lock is a constraint: every distribution installed is the locked version.
$(STAMP): pyproject.toml $(LOCK)
	@$(call MAKE_VENV,[1/2] )
	@echo "[2/2] installing the locked Python packages (log: $(INSTALL_LOG); minutes the first time)"
	@: >$(INSTALL_LOG); $(LOGGED); logged $(BIN)/pip install --upgrade pip \
	  && logged $(BIN)/pip install -c $(LOCK) -e '.[dev]'
	@touch $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	@$(NEED_NODE)
	npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

# The core layer's aarch64 wheels into the wheel cache, so that make synth works offline.
$(WHEELS_STAMP): $(STAMP)
	@$(NEED_NODE)
	$(BIN)/python -c 'from leasefence_infra.bundling import fetch_wheels; fetch_wheels()'
	@touch $(WHEELS_STAMP)

# Re-resolve the lock for Python 3.11+ on every platform (Lambda: 3.12, arm64). Pins that still
# satisfy pyproject.toml are kept; LOCK_ARGS=--upgrade (or --upgrade-package NAME) moves them.
lock:
	@$(MAKE_VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION)
	$(BIN)/uv pip compile pyproject.toml --all-extras --universal --python-version 3.11 \
	  --custom-compile-command 'make lock' --quiet $(LOCK_ARGS) -o $(LOCK)

# ARGS: more options of leasefence local, e.g. make run ARGS='--port 9000 --logs'.
run: install-python
	$(BIN)/leasefence local --samples $(ARGS)

# Lint, format check and type check; make test runs it first, so CI fails on any of them.
LINT_PATHS := layers tools functions infra examples

lint: install-python
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy $(LINT_PATHS)

# Any two test folders collect together (tests/test_layout.py checks the causes statically; these
# pairs cross the shared fixtures, the kit's plugin and the infra helpers for real).
COLLECT_PAIRS := tests/api,tests/tools/kit tests/tools/cli,tests/worker tests/engine,tests/tools/local

collect: install
	@for pair in $(COLLECT_PAIRS); do \
	  $(BIN)/python -m pytest --collect-only -q $${pair/,/ } >/dev/null \
	    || { echo "pytest --collect-only $${pair/,/ } failed" >&2; exit 1; }; done

# dynalite, a second DynamoDB-compatible endpoint for the tests of leasefence local
# --dynamodb-endpoint (Node, from its own lockfile in tests/support/dynalite).
DYNALITE := tests/support/dynalite
DYNALITE_STAMP := $(DYNALITE)/node_modules/.installed

dynalite: $(DYNALITE_STAMP)

$(DYNALITE_STAMP): $(DYNALITE)/package.json $(DYNALITE)/package-lock.json
	npm ci --prefix $(DYNALITE) --no-audit --no-fund --loglevel=error
	@touch $(DYNALITE_STAMP)

# The TypeScript SDK (sdk/typescript, its own lockfile): npm ci, then its tests on Node's test
# runner (tsc first) against a leasefence local of their own on free ports.
TS_SDK := sdk/typescript
TS_SDK_STAMP := $(TS_SDK)/node_modules/.installed

$(TS_SDK_STAMP): $(TS_SDK)/package.json $(TS_SDK)/package-lock.json
	@$(NEED_NODE)
	npm ci --prefix $(TS_SDK) --no-audit --no-fund --loglevel=error
	@touch $(TS_SDK_STAMP)

test-typescript: install-python $(TS_SDK_STAMP)
	cd $(TS_SDK) && npm test


# The client generators and linters the tests of openapi.json run (tests/generated_clients): the
# npm ones from that folder's own lockfile, openapi-python-client in a virtualenv of its own
# (it needs typer<0.28; the project locks a newer one), from python-requirements.lock.
GENERATED := tests/generated_clients
GENERATED_STAMP := $(GENERATED)/node_modules/.installed
GENERATOR_VENV := $(VENV)/openapi-python-client
GENERATOR_STAMP := $(GENERATOR_VENV)/.installed

generated-clients: $(GENERATED_STAMP) $(GENERATOR_STAMP)

$(GENERATED_STAMP): $(GENERATED)/package.json $(GENERATED)/package-lock.json
	npm ci --prefix $(GENERATED) --no-audit --no-fund --loglevel=error
	@touch $(GENERATED_STAMP)

$(GENERATOR_STAMP): $(GENERATED)/python-requirements.lock $(STAMP)
	$(BIN)/uv venv --quiet --allow-existing --python $(BIN)/python $(GENERATOR_VENV)
	$(BIN)/uv pip install --quiet --python $(GENERATOR_VENV)/bin/python -r $(GENERATED)/python-requirements.lock
	@touch $(GENERATOR_STAMP)

test: install lint collect dynalite generated-clients test-typescript
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=12

# The engine's tests with dynalite as their DynamoDB (LEASEFENCE_TEST_DYNAMODB_ENDPOINT, any
# endpoint: tests/support/target.py); what it lacks is named, the result is in docs/reliability.md.
test-dynalite: install-python dynalite
	$(BIN)/python -m tests.support.on_dynalite $(BIN)/python -m pytest -q tests/engine $(ARGS)

# The documentation site (mkdocs.yml, docs/) into site/: the generated reference pages first
# (HTTP API from openapi.json, CLI, construct props), then a strict build (a broken link fails).
docs: install
	$(BIN)/python scripts/docs_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The packages this repository ships, into dist/ (emptied first). Today that is one: the Python
# distribution, as a wheel (dist/leasefence-<version>-py3-none-any.whl) and an sdist
# (dist/leasefence-<version>.tar.gz), built by the lock's uv with pyproject.toml's backend
# (setuptools). The Lambda handlers, the core layer's sources and the CDK constructs are inside it;
# package.json only pins the CDK CLI used here. How to install it: docs/installing.md.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/uv build --quiet --out-dir dist .

# Offline: no issuer is known here, so the placeholder is allowed explicitly (a real deploy
# passes -c jwtIssuer=... or -c createUserPool=true to cdk). More context: SYNTH_ARGS='-c k=v'.
synth: install
	@$(NEED_NODE)
	$(CDK) synth --quiet -c allowPlaceholderIssuer=true $(SYNTH_ARGS)

# Needs AWS credentials and a bootstrapped account, e.g.
# make deploy DEPLOY_ARGS='-c jwtIssuer=https://idp.example.com/ -c jwtAudience=leasefence'
deploy: install
	@$(NEED_NODE)
	$(CDK) deploy $(DEPLOY_ARGS)

demo: install-python
	$(BIN)/leasefence demo

bench: install-python
	$(BIN)/leasefence bench --out bench-report.json

# Every feature composed on the same operations (leasefence_tools.torture), over the default layout
# (each new tenant's write shards recorded at its first enqueue: 64; SHARDS=16, say, fixes a count
# for every tenant); SEED and OPERATIONS choose the run (python -m leasefence_tools.torture --help
# for the other switches). Last result: docs/reliability.md (seed 1, 5,000 operations, on b6dff2f:
# 0 violations, 1,376 s).
torture: install-python
	$(BIN)/leasefence torture --operations $${OPERATIONS:-5000} --seed $${SEED:-1} \
		--operation-shards $${SHARDS:-0}

# Every interleaving of the protocol at the larger bound, on the real engine (docs/reliability.md,
# "Model check"): 2 workers x 2 class-B operations x 3 attempts with every actor, the budgets
# 1 clock jump, 1 lost answer, 1 erasure and 1 requeue in all, cancel; symmetry reduced and the
# abstract digest (ARGS=--symmetry none --exact-histories for the exact search); ARGS for another
# bound (python -m leasefence_tools.modelcheck --help). Run to its end on 2026-12-07 (on 34bdc87,
# the marker read moved): 648,349 distinct states, 3,714,329 transitions, every invariant held,
# every state has a way out; 4,686 s CPU in one sitting (docs/reliability.md). The search is saved in .modelcheck/ as it
# goes (and on Ctrl-C): running it again takes it up.
modelcheck: install-python
	$(BIN)/python -m leasefence_tools.modelcheck --kinds bb --workers 2 --attempts 3 --erases 1 \
		--total-requeues 1 --checkpoint .modelcheck/bb-2-workers-3-attempts-budgets-1.pickle $(ARGS)
	$(BIN)/python -m leasefence_tools.modelcheck --mutations

# The operator console's screenshots (docs/console/*.png, shown by docs/console.md): a real
# `leasefence local --samples` in the system's Chromium (apt-get install -y chromium).
screenshots: install-python
	$(BIN)/python -m tests.console.screenshots docs/console

clean:
	rm -rf $(VENV) node_modules $(DYNALITE)/node_modules $(GENERATED)/node_modules $(TS_SDK)/node_modules $(TS_SDK)/build $(TS_SDK)/dist cdk.out site .pytest_cache .mypy_cache .ruff_cache
