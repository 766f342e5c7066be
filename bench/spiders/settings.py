"""Scrapy settings of the bench's stock crawlers (stock Scrapy, scrapy-redis).

Used through ``SCRAPY_SETTINGS_MODULE=bench.spiders.settings`` so that
``scrapy runspider`` does not load the webcrawl project (whose add-on would
switch webcrawl's own scheduler, dupefilter and middlewares on). Everything
the three crawlers must share (concurrency, delay, user agent) is passed by
:mod:`bench.crawlers` with ``-s``; this file only holds what stock Scrapy
needs to crawl the sandbox web at all.

Settings read: none.
"""

from extensions.settings.defaults import WEBCRAWL_USER_AGENT
from sandbox.resolver import SANDBOX_RESOLVER

BOT_NAME = "bench"
SPIDER_MODULES: list[str] = []
# *.sandbox.test resolves to 127.0.0.1, as for webcrawl.
TWISTED_DNS_RESOLVER = SANDBOX_RESOLVER
# The same user agent as webcrawl, so robots.txt groups match the same way.
USER_AGENT = WEBCRAWL_USER_AGENT
ROBOTSTXT_OBEY = True
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
RETRY_TIMES = 2
DOWNLOAD_TIMEOUT = 30
# Scrapy's default jitter (0.5-1.5 x DOWNLOAD_DELAY) would break a per-host
# delay by design; a user who asks for politeness turns it off.
DOWNLOAD_DELAY_JITTER = 0
DEPTH_PRIORITY = 0
# The storage pipeline they share reads its settings from webcrawl's defaults;
# this add-on installs them and switches no webcrawl component on.
ADDONS = {"webcrawl.addon.WebcrawlDefaults": 0}
