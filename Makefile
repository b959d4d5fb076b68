# Every target sets itself up: a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: run test lint bench chromium wrk strace clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Python 3.11+ is needed (found $$($(PYTHON) --version)); set PYTHON=python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/guardd

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: $(VENV)/.installed-dev chromium lint
	$(BIN)/pytest

bench: $(VENV)/.installed-dev wrk strace
	$(BIN)/python -m bench

# The console tests drive Debian's Chromium; Playwright cannot download a browser here.
chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's chromium for the console tests"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq chromium >/dev/null; \
	else \
		echo "make test needs Chromium at /usr/bin/chromium: run 'sudo apt-get install chromium'" >&2; exit 1; \
	fi

wrk:
	@if command -v wrk >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's wrk for the HTTP benchmark"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq wrk >/dev/null; \
	else \
		echo "make bench needs wrk: run 'sudo apt-get install wrk'" >&2; exit 1; \
	fi

# The slow-disk benchmark delays guardd's fsyncs with strace's fault injection.
strace:
	@if command -v strace >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's strace for the slow-disk benchmark"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq strace >/dev/null; \
	else \
		echo "make bench needs strace: run 'sudo apt-get install strace'" >&2; exit 1; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
