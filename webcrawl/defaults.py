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

# --- Politeness (extensions.politeness, extensions.robots, extensions.backoff) --
# Take the fleet-wide per-host download lock before each download.
POLITENESS_ENABLED = True
# Lock key: "host" (scheme://host:port), "domain" (registered domain) or "ip".
POLITENESS_KEY = "host"
# Seconds a request may wait for its host here; longer: back to the frontier.
POLITENESS_MAX_WAIT = 30.0
# Times a request may go back to the frontier before it waits in place.
POLITENESS_MAX_DEFERRALS = 3
# User agent identifying webcrawl with a contact (set USER_AGENT to it).
WEBCRAWL_USER_AGENT = "webcrawl/0.1 (+https://example.com/webcrawl)"
# Obey robots.txt through the fleet-wide cache (ROBOTSTXT_OBEY must then be False).
ROBOTS_ENABLED = True
# Seconds a fetched robots.txt is cached for the whole fleet.
ROBOTS_TTL = 86400.0
# Bytes of a robots.txt that are parsed (RFC 9309: at least 500 KiB).
ROBOTS_MAX_SIZE = 512000
# Redirects followed when fetching robots.txt (RFC 9309: at least 5).
ROBOTS_MAX_REDIRECTS = 5
# Seconds before a robots.txt fetch times out (then: unreachable, disallow all for now).
ROBOTS_FETCH_TIMEOUT = 30.0
# Seconds before an unreachable robots.txt is fetched again (doubles per failure).
ROBOTS_RETRY_INITIAL = 60.0
# Cap of the wait before an unreachable robots.txt is fetched again.
ROBOTS_RETRY_MAX = 3600.0
# Cap in seconds of the robots.txt Crawl-delay / Request-rate honoured.
ROBOTS_CRAWL_DELAY_MAX = 60.0
# Push the Sitemap: URLs of each robots.txt onto the seed list (once per TTL).
ROBOTS_SITEMAP_SEEDS = True
# Back off on BACKOFF_HTTP_CODES; open a host's breaker on connection failures.
BACKOFF_ENABLED = True
# HTTP statuses that raise the host's back-off.
BACKOFF_HTTP_CODES = [429, 503]
# Seconds of the first back-off of a host (doubles per further 429/503).
BACKOFF_INITIAL = 60.0
# Cap in seconds of a host's back-off and of a Retry-After honoured.
BACKOFF_MAX = 86400.0
# Random variation of each back-off (0.1: +-10%).
BACKOFF_JITTER = 0.1
# Seconds without a raise after which a host's back-off is forgiven.
BACKOFF_QUIET_PERIOD = 1800.0
# Consecutive connection failures or timeouts of a host that open its circuit breaker.
BREAKER_THRESHOLD = 5
# Seconds an open breaker parks the host before a probe (doubles per reopening).
BREAKER_COOLDOWN = 300.0
# Cap in seconds of a breaker's cool-down.
BREAKER_MAX_COOLDOWN = 86400.0

# --- Safety: SSRF guard and trap limits (extensions.addresses, extensions.traps) --
# Let the crawler connect to loopback, private, link-local and other non-public addresses.
ALLOW_PRIVATE_ADDRESSES = False
# CIDR ranges connected to even though non-public (e.g. ["10.1.0.0/16"]); the rest stays refused.
ADDRESS_ALLOWLIST: list[str] = []
# Turn on the trap filter on the spider's output (the limits below).
TRAPS_ENABLED = True
# Longest path (segments) of a URL followed (0: no limit).
TRAP_MAX_PATH_DEPTH = 20
# Most times one path segment may occur in a URL (/a/b/a/b/a/b, /a/a/a; 0: no limit).
TRAP_MAX_SEGMENT_REPEATS = 2
# Distinct URLs admitted per host, fleet-wide (0: no limit).
HOST_MAX_PAGES = 0
# Distinct query strings (or date variants of a path) admitted per host and path, fleet-wide (0: no limit).
TRAP_MAX_QUERY_VARIANTS = 500
# Links followed per page (more are dropped and counted; 0: no limit).
MAX_OUTLINKS_PER_PAGE = 1000

# --- Bloom dupefilter (extensions.dupefilter, extensions.bloom) ---------------
# Items the first Bloom layer holds at BLOOM_ERROR_RATE (at 0.1%: 180 MB of Redis).
BLOOM_CAPACITY = 100_000_000
# False-positive rate of the first layer while it is within its capacity.
BLOOM_ERROR_RATE = 0.001
# Capacity multiplier of each new layer of a scalable filter.
BLOOM_GROWTH = 2.0
# Key prefix when there is no spider name (the spider name wins when there is one).
BLOOM_KEY_PREFIX = ""
# Most layers a scalable filter grows to (then it warns, like BLOOM_SCALABLE = False).
BLOOM_MAX_LAYERS = 8
# Allocate each shard at its full size when its layer is created (no realloc slack).
BLOOM_PREALLOCATE = True
# Add a layer when the newest is full, so the false-positive rate stays bounded.
BLOOM_SCALABLE = True
# Most bits in one Redis string (2**32 = 512 MB, Redis's limit); larger layers shard.
BLOOM_SHARD_BITS = 2**32
# Seconds between refreshes of the BITCOUNT-based dupefilter stats (0: only on close).
BLOOM_STATS_INTERVAL = 60.0
# Error-rate ratio of each new layer to the previous one (bound: rate / (1 - this)).
BLOOM_TIGHTENING = 0.5

# --- Page processing and storage (pipelines.storage, pipelines.stores) -------
# Pages written to the page store per batch.
PIPELINE_BATCH_SIZE = 50
# Seconds a buffered page waits at most before its batch is written.
PIPELINE_FLUSH_INTERVAL = 5.0
# Pages held at most (buffered + being written) before the engine is paused.
PIPELINE_MAX_BUFFER = 200
# zlib level of the stored HTML (0-9).
PIPELINE_ZLIB_LEVEL = 6
# Seconds before the first retry of a failed batch write (doubles up to the cap).
PIPELINE_RETRY_INITIAL = 0.5
# Cap of the wait between retries of a failed batch write.
PIPELINE_RETRY_MAX = 30.0
# Seconds close waits for buffered pages to be written before giving up on them.
PIPELINE_CLOSE_TIMEOUT = 60.0
# Dotted path of the page store class (empty: MongoStore if MONGO_URI, else SQLiteStore).
PAGE_STORE = ""
# MongoDB URI of the page store (empty: the SQLite store under WEBCRAWL_HOME).
MONGO_URI = ""
# MongoDB database of the page store.
MONGO_DATABASE = "webcrawl"
# Milliseconds pymongo waits for a server before a write counts as failed.
MONGO_TIMEOUT_MS = 5000
# Path of the SQLite page store (empty: WEBCRAWL_HOME/pages.sqlite3).
SQLITE_PATH = ""
# Check pages against the fleet's exact and near-duplicate index in Redis.
NEARDUP_ENABLED = True
# Largest SimHash Hamming distance that counts as a near-duplicate.
NEARDUP_MAX_DISTANCE = 3
# Pages with fewer words get no near-duplicate check (SimHash is noisy on them).
NEARDUP_MIN_WORDS = 20
# Members read at most from one SimHash band set per check.
NEARDUP_MAX_CANDIDATES = 64
