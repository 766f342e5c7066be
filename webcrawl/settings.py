"""Scrapy settings of the webcrawl project.

Our own settings, their defaults and allowed ranges live in each package's
defaults module (:mod:`extensions.settings.defaults`, :mod:`pipelines.defaults`,
:mod:`webcrawl.defaults`; the README's settings table); this file sets
Scrapy's and switches the system on through the add-on, which checks every
value before the crawl starts. Override any of them with ``-s NAME=value`` or scrapyd's
``setting=NAME=value``.
"""

from extensions.settings.defaults import WEBCRAWL_USER_AGENT

BOT_NAME = "webcrawl"
SPIDER_MODULES = ["webcrawl.spiders"]
NEWSPIDER_MODULE = "webcrawl.spiders"
COMMANDS_MODULE = "webcrawl.commands"

ADDONS = {"webcrawl.addon.Webcrawl": 0}

# Identify the crawler and give site owners a way to reach us.
USER_AGENT = WEBCRAWL_USER_AGENT

# Obey robots.txt (fleet-wide: one fetch per host,
# extensions.downloadermiddlewares.robotstxt).
ROBOTSTXT_OBEY = True

# Politeness: enforced per host across the whole fleet by the lock middleware
# and the frontier's host schedule (not per process, as stock Scrapy does).
DOWNLOAD_DELAY = 1.0
CONCURRENT_REQUESTS = 32
CONCURRENT_REQUESTS_PER_DOMAIN = 32
DOWNLOAD_DELAY_JITTER = 0
AUTOTHROTTLE_ENABLED = False
DOWNLOAD_TIMEOUT = 30
DOWNLOAD_MAXSIZE = 16 * 1024 * 1024
DOWNLOAD_WARNSIZE = 4 * 1024 * 1024

# Retries: the failure policy decides when (extensions.utils.failures); Scrapy's
# RETRY_TIMES bounds how many: room for the policy's largest class (5
# attempts of a throttled host).
RETRY_TIMES = 4

# The frontier orders requests; Scrapy's own breadth-first settings would only
# reorder what the frontier already leased.
DEPTH_LIMIT = 0
DEPTH_PRIORITY = 0

# No Referer header on requests: it would travel with every queued request and
# cost ~80 bytes of Redis per URL (as much as the URL itself). Set it to True
# to send Referer headers (and record PageItem.referrer) at that cost.
REFERER_ENABLED = False

# No console into a fleet worker: the telnet console and Scrapy 2.19's
# RemoteControl (an HTTP endpoint that runs Python code) stay off.
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False
LOG_LEVEL = "INFO"
FEED_EXPORT_ENCODING = "utf-8"
