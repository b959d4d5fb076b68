# Every target sets itself up: a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: run test lint bench chromium postgresql wrk strace node clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Python 3.11+ is needed (found $$($(PYTHON) --version)); set PYTHON=python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	@touch $@

# requirements-integrations.txt: the agent frameworks the adapters are tested with.
$(VENV)/.installed-dev: pyproject.toml requirements-integrations.txt | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]' -r requirements-integrations.txt
	@touch $@ $(VENV)/.installed $(VENV)/.installed-postgres $(VENV)/.installed-otel

# The PostgreSQL driver, an extra: installed by `make run` only when
# GUARD_STORE names a postgresql:// store (the file store needs none).
$(VENV)/.installed-postgres: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[postgres]'
	@touch $@ $(VENV)/.installed

# The OpenTelemetry SDK and OTLP exporter, an extra: installed by `make run`
# only when an OTLP endpoint is set (docs/operations.md, "Traces").
$(VENV)/.installed-otel: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[otel]'
	@touch $@ $(VENV)/.installed

run: $(VENV)/.installed $(if $(filter postgresql://% postgres://%,$(GUARD_STORE)),$(VENV)/.installed-postgres) $(if $(OTEL_EXPORTER_OTLP_ENDPOINT)$(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT),$(VENV)/.installed-otel)
	$(BIN)/guardd

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python .ci/import_cycles.py
	$(BIN)/python sdk/unasync.py --check
	$(BIN)/python sdk/models.py --check

test: $(VENV)/.installed-dev chromium postgresql lint sdk-ts/node_modules/.package-lock.json \
		tests/oidc_provider/node_modules/.package-lock.json
	$(BIN)/pytest
	cd sdk-ts && npm test

bench: $(VENV)/.installed-dev wrk strace postgresql
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

# The PostgreSQL store's tests and benchmark start their own server with Debian's
# initdb and pg_ctl (never a system service); `make run` needs no database.
postgresql:
	@if ls /usr/lib/postgresql/*/bin/initdb /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's postgresql for the PostgreSQL store's tests"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq postgresql >/dev/null; \
	else \
		echo "make test and make bench need PostgreSQL's initdb and pg_ctl: run 'sudo apt-get install postgresql'" >&2; exit 1; \
	fi

# The TypeScript client (sdk-ts/) is built and tested with Node.js 20.12+ and npm;
# its tests start this checkout's guardd from $(VENV).
node:
	@if command -v node >/dev/null && command -v npm >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's nodejs and npm for the TypeScript client"; \
		$(APT_GET) update -qq && $(APT_GET) install -y -qq nodejs npm >/dev/null; \
	else \
		echo "make test needs Node.js and npm: run 'sudo apt-get install nodejs npm'" >&2; exit 1; \
	fi
	@node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 12) ? 0 : 1)' \
		|| { echo "the TypeScript client needs Node.js 20.12 or later (found $$(node --version))" >&2; exit 1; }

sdk-ts/node_modules/.package-lock.json: sdk-ts/package-lock.json | node
	cd sdk-ts && npm ci --no-audit --no-fund

# The sign-in tests run a real OpenID provider (oidc-provider, on Node.js).
tests/oidc_provider/node_modules/.package-lock.json: tests/oidc_provider/package-lock.json | node
	cd tests/oidc_provider && npm ci --no-audit --no-fund

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
	rm -rf sdk-ts/node_modules sdk-ts/dist sdk-ts/build
