# The two set-up commands of the README: `make demo` runs a crawl, `make test`
# runs the tests. Both create .venv and install into it on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench bench-quick clean stop-redis

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m webcrawl.demo

# The live status page test drives Debian's headless Chromium.
test: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check . && $(PY) -m mypy

bench: $(STAMP)
	$(PY) -m bench.run

bench-quick: $(STAMP)
	$(PY) -m bench.run --quick

stop-redis: $(STAMP)
	$(PY) -m extensions.embedded_redis stop

clean:
	rm -rf $(VENV) .webcrawl .mypy_cache .ruff_cache .pytest_cache
