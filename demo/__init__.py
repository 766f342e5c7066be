"""The demo: ``make demo`` (``python -m demo``) crawls the sandbox web with
the local fleet of :mod:`tests.support.localcrawl` (the harness the tests and
benchmarks share). Not part of the application: the scrapyd egg holds
``webcrawl``, ``extensions`` and ``pipelines`` only."""
