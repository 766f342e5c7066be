"""The demo and its local fleet: ``make demo`` (``python -m demo``) and the
helpers the tests and benchmarks share to crawl the sandbox web with real
``scrapy crawl web`` workers. Not part of the application: the scrapyd egg
holds ``webcrawl``, ``extensions`` and ``pipelines`` only."""
