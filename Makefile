# The two set-up commands of the README: `make demo` runs a crawl, `make test`
# runs the tests. Both create .venv and install into it on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck bench bench-quick clean stop-redis

# The project itself is not installed: the commands run from this directory
# (scrapy finds the project through scrapy.cfg, python -m through the current
# directory), and a venv without it is exactly what a scrapyd host holds, so a
# module missing from the egg cannot hide behind an installed copy (issue 17).
# An editable install left by an older Makefile is removed.
# --no-compile: pip would byte-compile every installed module (~12 s of a
# fresh install); what runs is compiled on first import instead, once (see
# PYTHONDONTWRITEBYTECODE below).
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --no-compile -r requirements-dev.txt
	$(PY) -m pip uninstall -q -y webcrawl 2>/dev/null || true
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m demo

# The tests run on TEST_WORKERS pytest-xdist processes (three times the 2
# cores of the developers' machine: most tests mostly wait on subprocesses;
# with 6, pytest took 375-403 s and vmstat saw the cores 93 % busy; with 4,
# 441 s); --dist loadgroup keeps
# the CPU-heavy fleets (xdist group "fleet": tests/support/__init__.py) in
# one of them, one at a time, while the rest spread. Bytecode is cached for
# the run (PYTHONDONTWRITEBYTECODE emptied): each xdist process, fork server
# and `scrapy` subprocess would otherwise compile the project, and pytest
# rewrite every test module, again. --durations=20 names the slowest tests.
TEST_WORKERS ?= 6
PYTEST_ONE := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -p no:cacheprovider
PYTEST := $(PYTEST_ONE) -n $(TEST_WORKERS) --dist loadgroup
# One collection first writes the bytecode (and pytest's rewritten test
# modules) that the xdist processes then read, instead of each compiling it
# all at once on a fresh clone; its errors, if any, the real run reports.
WARM_UP := $(PYTEST_ONE) --collect-only > /dev/null || true

# The live status page test drives Debian's headless Chromium.
test: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@# mypy and the warm-up collection are one process each: side by side
	@# on two cores.
	$(PY) -m mypy & mypy=$$!; $(WARM_UP); wait $$mypy
	$(PYTEST) --durations=20

# The inner loop: the unit tests only (no crawls, no subprocess fleets).
test-fast: $(STAMP)
	$(WARM_UP)
	$(PYTEST) -m "not slow"

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check . && $(PY) -m mypy

bench: $(STAMP)
	$(PY) -m bench.run

bench-quick: $(STAMP)
	$(PY) -m bench.run --quick

stop-redis: $(STAMP)
	$(PY) -m extensions.connection.embedded stop

clean:
	rm -rf $(VENV) .webcrawl .mypy_cache .ruff_cache .pytest_cache
