# Two commands on a fresh machine: `make up` and `make test` (see README).
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: up test lint web chromium bench clean

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

# Front-end libraries come from the npm registry (web/package.json + lockfile), copied into web/static/vendor.
web/static/vendor/.built: web/package.json web/package-lock.json
	cd web && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	mkdir -p web/static/vendor
	cp web/node_modules/uplot/dist/uPlot.iife.min.js web/node_modules/uplot/dist/uPlot.min.css web/static/vendor/
	mkdir -p web/static/vendor/swagger-ui
	cp web/node_modules/swagger-ui-dist/swagger-ui-bundle.js web/node_modules/swagger-ui-dist/swagger-ui.css web/static/vendor/swagger-ui/
	touch $@

web: web/static/vendor/.built

# Debian's chromium for the browser tests (Playwright drives it; no browser download).
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Debian's bubblewrap: every job runs in its sandbox (worker/sandbox.py; RANKZERO_SANDBOX=off to go without).
sandbox:
	@command -v bwrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }

up: $(VENV)/.installed web sandbox
	$(BIN)/rankzero up

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/lint-imports

test: $(VENV)/.installed-test web chromium sandbox lint
	$(BIN)/pytest -q -p no:cacheprovider

bench: $(VENV)/.installed
	$(BIN)/python bench/trainer_overhead.py
	$(BIN)/python bench/service.py

clean:
	rm -rf $(VENV) web/node_modules web/static/vendor
