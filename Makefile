# Two commands on a fresh machine: `make up` and `make test` (see README).
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: up test test-machine test-fast test-durations lint web web-types chromium bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Runtime install (torch is the registry's CUDA build: ~3 GB the first time).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "installing rankzero and torch (the first time: ~3 GB, a few minutes)…"
	$(BIN)/pip install --progress-bar on -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# Front-end libraries come from the npm registry (web/package.json + lockfile), copied into web/static/vendor;
# the same install brings the dashboard's checkers (typescript, openapi-typescript: devDependencies).
web/static/vendor/.built: web/package.json web/package-lock.json
	cd web && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	mkdir -p web/static/vendor
	cp web/node_modules/uplot/dist/uPlot.iife.min.js web/node_modules/uplot/dist/uPlot.min.css web/static/vendor/
	mkdir -p web/static/vendor/swagger-ui
	cp web/node_modules/swagger-ui-dist/swagger-ui-bundle.js web/node_modules/swagger-ui-dist/swagger-ui.css web/static/vendor/swagger-ui/
	touch $@

web: web/static/vendor/.built

# The dashboard's types of the REST shapes (web/types/api.d.ts), generated from the app's OpenAPI (no server).
web-types: $(VENV)/.installed web
	$(BIN)/python web/openapi_types.py

# Debian's chromium for the browser tests (Playwright drives it; no browser download).
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Debian's bubblewrap: every job runs in its sandbox (worker/sandbox.py; RANKZERO_SANDBOX=off to go without);
# libseccomp2: the jobs' seccomp filter is built with it (worker/sandbox_seccomp.py, through pyseccomp).
sandbox:
	@{ command -v bwrap >/dev/null && /sbin/ldconfig -p | grep -q 'libseccomp\.so\.2 '; } || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 >/dev/null; }

up: $(VENV)/.installed web sandbox
	$(BIN)/rankzero up

# Python: lint, format, import contracts, types (basedpyright, [tool.pyright] in pyproject.toml).
# The dashboard: tsc over the plain JS files (// @ts-check; web/jsconfig.json).
lint: $(VENV)/.installed-test web
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python -m tools.check_house  # no import cycle; no file in worker/ over 450 lines, core/ over 700
	$(BIN)/basedpyright --project .  # this folder's pyproject.toml, never a pyrightconfig.json in a parent folder
	cd web && npm run --silent check

# The suite runs on TEST_WORKERS pytest-xdist workers at once: most slow tests wait on processes, not the CPU.
# tests/support/parallel.py decides which tests share a worker and starts the longest first (tests/durations.json);
# the run ends with the 25 slowest tests and the seconds per folder.
# The workers share two cores, so every test's deadline (a last resort: tests/support/deadlines.py) and its
# pytest-timeout are scaled by 3; a passing test returns on its event as soon as it happens.
# COMPILE: the suite starts thousands of Python processes (workers, APIs, ranks, CLIs), and a machine that sets
# PYTHONDONTWRITEBYTECODE (CI's does) has them all compile the project's modules from source: compiled once
# before the run, they read the bytecode (~0.2 s of CPU less per worker or API start). User code in tests'
# folders is left alone (bundles never pack __pycache__ anyway: core/bundles/format.py).
TEST_WORKERS ?= 4
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --timeout=900
export RANKZERO_TEST_DEADLINE_SCALE ?= 3

test: test-machine $(VENV)/.installed-test web chromium sandbox lint
	$(BIN)/python -m compileall -q -j 0 core api worker trainer cli rankzero tests/support  # see COMPILE below
	$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) --durations=25; status=$$?; \
	$(PYTHON) -m tests.machine stop; exit $$status

# First, with the machine's python3: the Debian packages the suite needs (one apt run), then the Docker set-up
# and the project's image started in the background, so they overlap the venv install and the lint
# (tests/machine.py; the deploy tests wait for it). After the suite, `stop` ends the daemon if it started one.
test-machine:
	$(PYTHON) -m tests.machine install
	$(PYTHON) -m tests.machine start

# Re-measure tests/durations.json (what starts first) from a whole run; commit the file it writes.
test-durations: $(VENV)/.installed-test web chromium sandbox
	RANKZERO_WRITE_DURATIONS=tests/durations.json $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_PARALLEL)

# The unit tier: no server, worker, browser or torchrun (tests/conftest.py marks those `slow`); CPU-bound, so one
# xdist worker per core (FAST_WORKERS).
FAST_WORKERS ?= 2
test-fast: $(VENV)/.installed-test web
	$(BIN)/pytest -q -p no:cacheprovider -n $(FAST_WORKERS) --dist loadgroup --no-loadscope-reorder -m "not slow"

bench: $(VENV)/.installed  # every figure of issue 29 in one table each, beside its baseline (bench/all.py --help)
	$(BIN)/python bench/all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) web/node_modules web/static/vendor
