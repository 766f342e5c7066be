"""The one home of webcrawl's own settings and their defaults.

Every component reads its settings with typed getters and these defaults, e.g.
``settings.getint("FRONTIER_BATCH_SIZE", defaults.FRONTIER_BATCH_SIZE)``, so a
setting means the same with or without the add-on. The README's settings table
is generated from the comments here (keep one comment line per setting).

Scrapy settings webcrawl also honours: ``DOWNLOAD_DELAY`` (enforced fleet-wide),
``USER_AGENT``, ``DEPTH_LIMIT``, ``REQUEST_FINGERPRINTER_CLASS``.
"""

from __future__ import annotations

# --- Connections --------------------------------------------------------------
# Redis shared by the fleet; empty: the embedded redis-server under WEBCRAWL_HOME.
REDIS_URL = ""
# Directory of embedded state (embedded Redis data, SQLite page store).
WEBCRAWL_HOME = ".webcrawl"

# --- Frontier (extensions.scheduler, extensions.frontier) ----------------------
# Requests leased per round trip to Redis.
FRONTIER_BATCH_SIZE = 32
# Keep this many leased requests in the worker's local buffer (0: 2 x CONCURRENT_REQUESTS).
FRONTIER_BUFFER_SIZE = 0
# Seconds a lease lives without renewal before another worker may take it back.
FRONTIER_LEASE_TIMEOUT = 120.0
# Seconds between renewals of this worker's leases (and reclaim of expired ones).
FRONTIER_HEARTBEAT_INTERVAL = 10.0
# Keep the crawl's Redis keys when the crawl closes (False: flush them on close).
SCHEDULER_PERSIST = True
# Flush this crawl's frontier and dupefilter keys when a worker opens.
SCHEDULER_FLUSH_ON_START = False
# Dotted path of the function that scores a request's priority (None: keep request.priority).
FRONTIER_PRIORITY_FUNCTION = "extensions.scoring.seed_priority"
# Seconds between tries while Redis is unreachable (doubles up to the cap).
REDIS_RETRY_INITIAL = 0.5
# Cap of the wait between tries while Redis is unreachable.
REDIS_RETRY_MAX = 30.0

# --- Seeds and the web spider (webcrawl.spiders.web) -------------------------
# Seconds between polls of the seed list while it is empty.
SEED_POLL_INTERVAL = 1.0
# Seeds taken from the list per poll.
SEED_BATCH_SIZE = 100
# Close after this many seconds with nothing to do (0: run as a service).
MAX_IDLE_TIME_BEFORE_CLOSE = 0
# Domains the crawl stays in (empty: the seeds' hosts, see WEB_SCOPE_SEED_HOSTS).
WEB_ALLOWED_DOMAINS: list[str] = []
# Restrict an empty WEB_ALLOWED_DOMAINS to the hosts of the seeds.
WEB_SCOPE_SEED_HOSTS = False
