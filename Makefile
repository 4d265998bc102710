# The two commands of the README's quick start. Both create (or reuse) .venv in the project root.
#   make demo   set up and run the main job on the embedded in-memory store
#   make test   set up everything the test suite needs and run all of it
# The suite needs: Python packages (PyPI), XTDB 1.24.5 jars (Maven Central, via Maven),
# tokenizer data (a package registry), PostgreSQL (Debian packages) for the cluster test, Chromium
# (Debian packages) for the inspector's browser tests.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test check typing-view pytest deps-test postgres chromium clients clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

# The main job: replay the example agent session the project ships (naive vs managed tokens per
# model call), then print the context the model saw at the last call.
demo: $(VENV)/.installed
	$(BIN)/selfctx replay adapters/cli/sample_session.json --show -1

# PostgreSQL server binaries for the two-node XTDB cluster test (skipped without them).
postgres:
	@if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing PostgreSQL from Debian packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	else echo "PostgreSQL is not installed and cannot be installed here: the cluster test will be skipped"; fi

# A headless browser for the inspector's tests (tests/ui), driven by Playwright's Python client:
# Debian's chromium, never a browser Playwright would download.
chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Chromium from Debian packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null; \
	else echo "Chromium is not installed and cannot be installed here: the browser tests will fail (install Debian's chromium)"; fi

deps-test: $(VENV)/.installed-dev postgres chromium
	$(BIN)/selfctx xtdb fetch
	$(BIN)/selfctx tokenizer install

# What mypy checks: the package as it installs (selfctx, selfctx.domain, ...), seen through
# symbolic links to the top-level folders, since mypy cannot follow the editable install's
# package-dir mapping. selfctx's own __init__ is adapters/api/__init__.py (decision 0060).
TYPING := $(VENV)/typing/selfctx
typing-view: | $(BIN)/python
	mkdir -p $(TYPING)
	for d in domain application adapters contracts; do ln -sfn ../../../$$d $(TYPING)/$$d; done
	ln -sfn ../../../adapters/api/__init__.py $(TYPING)/__init__.py

check: $(VENV)/.installed-dev typing-view
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	PYTHONPATH=$(VENV)/typing $(BIN)/lint-imports

# The real agents the proxy tests run (tests/proxy), installed into the project, never globally:
# Claude Code and Codex CLI from npm (versions pinned in tests/clients/package-lock.json), aider
# from PyPI in a virtualenv of its own (.clients/aider: it pins many packages), the Pi coding agent as the dev
# dependency of the Pi extension (adapters/pi). Registry downloads are cached in ~/.npm and
# ~/.cache/pip. Install scripts are not run, whatever npm's default, except Claude Code's, run
# by name: it copies the native binary out of the platform package npm installed beside it.
CLIENTS := tests/clients
AIDER_VERSION := 0.86.2
$(CLIENTS)/node_modules/.installed: $(CLIENTS)/package.json $(CLIENTS)/package-lock.json
	npm ci --prefix $(CLIENTS) --ignore-scripts --no-audit --no-fund --loglevel=error
	cd $(CLIENTS)/node_modules/@anthropic-ai/claude-code && node install.cjs
	touch $@
AIDER := .clients/aider
$(AIDER)/.installed-$(AIDER_VERSION):
	$(PYTHON) -m venv $(AIDER)
	$(AIDER)/bin/pip install --quiet --disable-pip-version-check aider-chat==$(AIDER_VERSION)
	touch $@
adapters/pi/node_modules/.installed: adapters/pi/package.json adapters/pi/package-lock.json
	npm ci --prefix adapters/pi --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@
clients: $(CLIENTS)/node_modules/.installed $(AIDER)/.installed-$(AIDER_VERSION) \
	adapters/pi/node_modules/.installed

pytest: deps-test clients
	$(BIN)/pytest

test: check pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	rm -rf $(CLIENTS)/node_modules .clients adapters/pi/node_modules
