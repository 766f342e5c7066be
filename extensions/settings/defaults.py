"""The one home of the ``extensions`` package's settings and their defaults.

Grouped by component, one comment line per setting (the README's settings
table is generated from these comments by :mod:`webcrawl.docs`). The type and
allowed range of each setting are declared beside its default (see
:mod:`extensions.settings.config`); the webcrawl add-on installs these defaults at
``default`` priority and refuses a crawl whose values are outside them, so a
component reads ``settings.getint("NAME")`` with no fallback of its own.

Components used without the add-on get these defaults with
``extensions.settings.config.install(settings, extensions.settings.defaults)``.

``scrapy_rules`` bounds the Scrapy settings these components honour
(``DOWNLOAD_DELAY`` is enforced fleet-wide, so a negative one is refused).
"""

from __future__ import annotations

from typing import Annotated, Any

from extensions.settings.config import AnyOf, Each, Range, Spec

# --- Connections --------------------------------------------------------------
# Redis shared by the fleet; empty: REDIS_HOST/PORT/DB/PARAMS if any is set, else the embedded redis-server under WEBCRAWL_HOME.
REDIS_URL = ""
# Redis host when REDIS_URL is empty (scrapy-redis's setting; localhost when only REDIS_PORT, REDIS_DB or REDIS_PARAMS is set).
REDIS_HOST = ""
# Redis port when REDIS_URL is empty (scrapy-redis's setting).
REDIS_PORT: Annotated[int, Range(1, 65535)] = 6379
# Redis database when REDIS_URL is empty (scrapy-redis's setting).
REDIS_DB: Annotated[int, Range(0)] = 0
# Client options when REDIS_URL is empty (scrapy-redis's setting): password, username, ssl, ssl_*, socket_timeout, socket_connect_timeout... (docs/migrating-from-scrapy-redis.md).
REDIS_PARAMS: dict[str, Any] = {}
# Directory of embedded state (embedded Redis data, SQLite page store).
WEBCRAWL_HOME = ".webcrawl"
# Seconds between tries while Redis is unreachable (doubles up to the cap).
REDIS_RETRY_INITIAL: Annotated[float, Range(above=0)] = 0.5
# Cap of the wait between tries while Redis is unreachable.
REDIS_RETRY_MAX: Annotated[float, Range(above=0)] = 30.0
# REDIS_URL names a node of a Redis Cluster (False: detected at start-up from INFO cluster).
REDIS_CLUSTER = False

# --- Frontier (extensions.core.scheduler, extensions.core.frontier.frontier) ----------------------
# Requests leased per round trip to Redis.
FRONTIER_BATCH_SIZE: Annotated[int, Range(1, 100_000)] = 32
# Keep this many leased requests in the worker's local buffer (0: 2 x CONCURRENT_REQUESTS).
FRONTIER_BUFFER_SIZE: Annotated[int, Range(0)] = 0
# Frontier partitions, each under its own hash tag (a Redis Cluster spreads them); hosts map by hash. Unset on a Redis Cluster: the crawl's recorded count, else one per master.
FRONTIER_PARTITIONS: Annotated[int, Range(1, 256)] = 1
# Seconds a lease lives without renewal before another worker may take it back.
FRONTIER_LEASE_TIMEOUT: Annotated[float, Range(above=0)] = 120.0
# Seconds between renewals of this worker's leases (and reclaim of expired ones).
FRONTIER_HEARTBEAT_INTERVAL: Annotated[float, Range(above=0)] = 10.0
# Keep the crawl's Redis keys when the crawl closes (False: flush them on close).
SCHEDULER_PERSIST = True
# Flush this crawl's frontier and dupefilter keys when a worker opens.
SCHEDULER_FLUSH_ON_START = False
# Dotted path of the function that scores a request's priority (empty: keep request.priority).
FRONTIER_PRIORITY_FUNCTION = "extensions.core.frontier.scoring.seed_priority"
# Requests one host may queue in Redis; more go to FRONTIER_SPILL_STORE (0: no cap).
FRONTIER_HOST_QUEUE_MAX: Annotated[int, Range(0)] = 10_000
# Redis used_memory (bytes; a cluster's fullest master) past which new requests go to FRONTIER_SPILL_STORE (0: off).
FRONTIER_MAX_MEMORY: Annotated[int, Range(0)] = 0
# Dotted path of the spill store class (from_crawler; empty: no spill, queues grow in Redis).
FRONTIER_SPILL_STORE = ""
# Spilled requests moved back per refill; a host is refilled when its queue is shorter.
FRONTIER_SPILL_BATCH: Annotated[int, Range(1, 100_000)] = 500

# --- Seeds and idling, for any spider (extensions.core.seeds, extensions.spidermiddlewares.seeds) -----
# Seconds between polls of the seed list while it is empty.
SEED_POLL_INTERVAL: Annotated[float, Range(above=0)] = 1.0
# Seeds taken from the list per poll.
SEED_BATCH_SIZE: Annotated[int, Range(1, 10_000)] = 100
# Close after this many seconds with nothing to do (0: run as a service).
MAX_IDLE_TIME_BEFORE_CLOSE: Annotated[float, Range(0)] = 0
# Seed key of a spider without a redis_key attribute, %(name)s: the spider's name (scrapy-redis's setting).
REDIS_START_URLS_KEY = "%(name)s:start_urls"
# The seed keys are SETs (scrapy-redis's setting; taken reliably, in no order).
REDIS_START_URLS_AS_SET = False
# The seed keys are ZSETs (scrapy-redis's setting; taken reliably, highest score first).
REDIS_START_URLS_AS_ZSET = False
# Keys a seed's "meta" may set on its request itself, control keys (proxy, cookiejar...) included; any other key goes under meta["user"].
SEED_META_KEYS: list[str] = []

# --- Continuous crawling (extensions.extensions.recrawl) ---------------------------------
# Revisit every stored page: a next-visit time per page, conditional GET, a revisit policy.
RECRAWL_ENABLED = False
# Shortest revisit interval of a page, seconds.
RECRAWL_MIN_INTERVAL: Annotated[float, Range(above=0)] = 3600.0
# First revisit interval of a page the crawl knows nothing about yet (no Cache-Control/Expires hint), seconds.
RECRAWL_DEFAULT_INTERVAL: Annotated[float, Range(above=0)] = 86400.0
# Longest revisit interval of a page, seconds.
RECRAWL_MAX_INTERVAL: Annotated[float, Range(above=0)] = 2_592_000.0
# Largest share of the fleet's fetches spent on revisits while it is saturated (the rest is left to new URLs).
RECRAWL_REVISIT_SHARE: Annotated[float, Range(above=0, high=1)] = 1.0
# Dotted path of the policy function(visit, bounds) -> next interval in seconds.
RECRAWL_POLICY = "extensions.extensions.recrawl.budgeted_interval"
# Class path of a store for next visits beyond RECRAWL_WINDOW (empty: the whole schedule in Redis).
RECRAWL_SCHEDULE_STORE = ""
# Seconds ahead whose revisits are kept in Redis when RECRAWL_SCHEDULE_STORE is set.
RECRAWL_WINDOW: Annotated[float, Range(above=0)] = 3600.0
# Due revisits claimed per poll of the schedule.
RECRAWL_BATCH_SIZE: Annotated[int, Range(1, 100_000)] = 100
# Seconds between polls of the schedule for due revisits.
RECRAWL_POLL_INTERVAL: Annotated[float, Range(above=0)] = 1.0

# --- Politeness (extensions.downloadermiddlewares.politeness, extensions.downloadermiddlewares.robotstxt, extensions.downloadermiddlewares.backoff) --
# Take the fleet-wide per-host download lock before each download.
POLITENESS_ENABLED = True
# Lock keys, each a fleet-wide lock: "host" (scheme://host:port), "domain" (registered domain), "ip" (resolved address), or several ("host,ip").
POLITENESS_KEY: Annotated[str, AnyOf("host", "domain", "ip")] = "host"
# Seconds between two downloads from one IP address when POLITENESS_KEY names ip (0: DOWNLOAD_DELAY).
IP_DOWNLOAD_DELAY: Annotated[float, Range(0)] = 0.0
# Seconds between two downloads from one registered domain when POLITENESS_KEY names domain (0: DOWNLOAD_DELAY).
DOMAIN_DOWNLOAD_DELAY: Annotated[float, Range(0)] = 0.0
# Seconds a request may wait for its host here; longer: back to the frontier.
POLITENESS_MAX_WAIT: Annotated[float, Range(0)] = 30.0
# Times a request may go back to the frontier before it waits in place.
POLITENESS_MAX_DEFERRALS: Annotated[int, Range(0)] = 3
# User agent identifying webcrawl with a contact (set USER_AGENT to it).
WEBCRAWL_USER_AGENT = "webcrawl/0.1 (+https://example.com/webcrawl)"
# Obey robots.txt (when ROBOTSTXT_OBEY) through the fleet-wide cache, in place of Scrapy's middleware.
ROBOTS_ENABLED = True
# Seconds a fetched robots.txt is cached for the whole fleet.
ROBOTS_TTL: Annotated[float, Range(above=0)] = 86400.0
# Bytes of a robots.txt that are parsed (RFC 9309: at least 500 KiB).
ROBOTS_MAX_SIZE: Annotated[int, Range(500 * 1024)] = 512000
# Redirects followed when fetching robots.txt (RFC 9309: at least 5).
ROBOTS_MAX_REDIRECTS: Annotated[int, Range(5, 100)] = 5
# Seconds before a robots.txt fetch times out (then: unreachable, disallow all for now).
ROBOTS_FETCH_TIMEOUT: Annotated[float, Range(above=0)] = 30.0
# Seconds a request waits in a fetch slot for its host's robots.txt; longer: back to the frontier as long.
ROBOTS_WAIT_MAX: Annotated[float, Range(above=0)] = 2.0
# Seconds before an unreachable robots.txt is fetched again (doubles per failure).
ROBOTS_RETRY_INITIAL: Annotated[float, Range(above=0)] = 60.0
# Cap of the wait before an unreachable robots.txt is fetched again.
ROBOTS_RETRY_MAX: Annotated[float, Range(above=0)] = 3600.0
# robots.txt fetches in a row without a connection after which a host is down (its pages then fail; 0: never).
ROBOTS_DOWN_AFTER: Annotated[int, Range(0)] = 4
# Cap in seconds of the robots.txt Crawl-delay / Request-rate honoured.
ROBOTS_CRAWL_DELAY_MAX: Annotated[float, Range(0)] = 60.0
# Push the Sitemap: URLs of each robots.txt onto the seed list (once per TTL).
ROBOTS_SITEMAP_SEEDS = True
# Back off on BACKOFF_HTTP_CODES; open a host's breaker on connection failures.
BACKOFF_ENABLED = True
# HTTP statuses that raise the host's back-off.
BACKOFF_HTTP_CODES: Annotated[list[int], Each(Range(100, 599))] = [429, 503]
# Seconds of the first back-off of a host (doubles per further 429/503).
BACKOFF_INITIAL: Annotated[float, Range(above=0)] = 60.0
# Cap in seconds of a host's back-off and of a Retry-After honoured.
BACKOFF_MAX: Annotated[float, Range(above=0)] = 86400.0
# Random variation of each back-off (0.1: +-10%).
BACKOFF_JITTER: Annotated[float, Range(0, below=1)] = 0.1
# Seconds without a raise after which a host's back-off is forgiven.
BACKOFF_QUIET_PERIOD: Annotated[float, Range(0)] = 1800.0
# Consecutive connection failures or timeouts of a host that open its circuit breaker.
BREAKER_THRESHOLD: Annotated[int, Range(1)] = 5
# Seconds an open breaker parks the host before a probe (doubles per reopening).
BREAKER_COOLDOWN: Annotated[float, Range(above=0)] = 300.0
# Cap in seconds of a breaker's cool-down.
BREAKER_MAX_COOLDOWN: Annotated[float, Range(above=0)] = 86400.0
# Seconds a host may fail every connection (at least BREAKER_THRESHOLD
# failures, no response) before it is judged down: its waiting requests are
# dead-lettered as host_down (0: never).
HOST_DOWN_AFTER: Annotated[float, Range(0)] = 900.0
# Seconds a host's name may fail to resolve (two failures at least that far apart, no response between) before all its requests are dead-lettered as dns (0: never).
DNS_DOWN_AFTER: Annotated[float, Range(0)] = 30.0
# Seconds a host-down verdict lasts: its new requests go straight to the DLQ.
HOST_DOWN_TTL: Annotated[float, Range(above=0)] = 3600.0

# --- Failure policy (extensions.utils.failures, extensions.core.frontier.deadletters) ----------------------
# Retry failures by the README's failure table, in Redis (replaces Scrapy's RetryMiddleware).
FAILURE_POLICY_ENABLED = True
# Random variation of each retry delay (0.2: +-20%; a Retry-After only ever later).
RETRY_DELAY_JITTER: Annotated[float, Range(0, below=1)] = 0.2
# Factor on every delay and time budget of the failure table (not on Retry-After).
RETRY_DELAY_SCALE: Annotated[float, Range(above=0, below=1000)] = 1.0
# Cap in seconds of a Retry-After honoured for a retry.
RETRY_AFTER_MAX: Annotated[float, Range(above=0)] = 3600.0
# Seconds after its first 429/503 with Retry-After that a request is given up.
RETRY_THROTTLED_TIME_BUDGET: Annotated[float, Range(above=0)] = 21600.0

# --- Safety: SSRF guard and trap limits (extensions.downloadermiddlewares.ssrf, extensions.spidermiddlewares.traps) --
# Let the crawler connect to loopback, private, link-local and other non-public addresses.
ALLOW_PRIVATE_ADDRESSES = False
# CIDR ranges connected to even though non-public (e.g. ["10.1.0.0/16"]); the rest stays refused.
ADDRESS_ALLOWLIST: list[str] = []
# Turn on the trap filter on the spider's output (the limits below and URLLENGTH_LIMIT).
TRAPS_ENABLED = True
# Most path segments of a URL followed (0: no limit).
TRAP_MAX_PATH_DEPTH: Annotated[int, Range(0)] = 20
# Most times one path segment may occur in a URL (/a/b/a/b/a/b, /a/a/a; 0: no limit).
TRAP_MAX_SEGMENT_REPEATS: Annotated[int, Range(0)] = 2
# Distinct URLs of a host admitted, fleet-wide (0: no limit).
HOST_MAX_PAGES: Annotated[int, Range(0)] = 0
# Distinct query strings (or dated / session-id variants) of one path of a host admitted, fleet-wide (0: no limit).
TRAP_MAX_QUERY_VARIANTS: Annotated[int, Range(0)] = 500
# Links followed per page (more are dropped and counted; 0: no limit).
MAX_OUTLINKS_PER_PAGE: Annotated[int, Range(0)] = 1000

# --- Bloom dupefilter (extensions.dupefilters, extensions.core.bloom) ---------------
# Items the first Bloom layer holds at BLOOM_ERROR_RATE (3.5 MB of Redis); later
# layers grow by BLOOM_GROWTH, so six layers hold 100.8 M (see extensions.core.bloom).
BLOOM_CAPACITY: Annotated[int, Range(1)] = 1_600_000
# False-positive rate of the first layer while it is within its capacity.
BLOOM_ERROR_RATE: Annotated[float, Range(above=0, below=1)] = 0.0002
# Capacity multiplier of each new layer of a scalable filter.
BLOOM_GROWTH: Annotated[float, Range(1)] = 2.0
# Key prefix when there is no spider name (the spider name wins when there is one).
BLOOM_KEY_PREFIX = ""
# Most layers a scalable filter grows to (then it warns, like BLOOM_SCALABLE = False).
BLOOM_MAX_LAYERS: Annotated[int, Range(1)] = 8
# Allocate each shard at its full size when its layer is created (no realloc slack).
BLOOM_PREALLOCATE = True
# Add a layer when the newest is full, so the false-positive rate stays bounded.
BLOOM_SCALABLE = True
# Most bits in one Redis string (2**32 = 512 MB, Redis's limit); larger layers shard.
BLOOM_SHARD_BITS: Annotated[int, Range(64, 2**32)] = 2**32
# Seconds between refreshes of the BITCOUNT-based dupefilter stats (0: only on close).
BLOOM_STATS_INTERVAL: Annotated[float, Range(0)] = 60.0
# Error-rate ratio of each new layer to the previous one (bound: rate / (1 - this)).
BLOOM_TIGHTENING: Annotated[float, Range(above=0, below=1)] = 0.9

# --- Fleet statistics (extensions.extensions.fleetstats) ---------------------------------
# Seconds between folds of this worker's stats into Redis (one script call; 0: off).
STATS_FOLD_INTERVAL: Annotated[float, Range(0)] = 5.0
# Log the fleet's rates, frontier depth and leases every LOGSTATS_INTERVAL seconds.
STATS_LOG_FLEET = True

# --- Metrics (extensions.extensions.metrics) --------------------------------------------
# First port of this worker's Prometheus /metrics (0: off); busy: the next ones upward.
METRICS_PORT: Annotated[int, Range(0, 65535)] = 0
# Address /metrics binds (0.0.0.0: let a Prometheus on another machine scrape it).
METRICS_HOST = "127.0.0.1"
# Ports tried from METRICS_PORT upward before a worker gives up serving metrics.
METRICS_PORT_TRIES: Annotated[int, Range(1, 1000)] = 16
# Seconds between refreshes of the frontier gauges (a Redis scan of the ready hosts).
METRICS_REFRESH_INTERVAL: Annotated[float, Range(above=0)] = 5.0

# Scrapy settings the components above honour, with the values they allow.
scrapy_rules = [
    Spec("DOWNLOAD_DELAY", 0.0, float, Range(0)),
    Spec("DOWNLOAD_TIMEOUT", 180.0, float, Range(above=0)),
    Spec("CONCURRENT_REQUESTS", 16, int, Range(1)),
    Spec("URLLENGTH_LIMIT", 2083, int, Range(0)),
    # AutoThrottle, fleet-wide (extensions.extensions.throttle).
    Spec("AUTOTHROTTLE_TARGET_CONCURRENCY", 1.0, float, Range(above=0)),
    Spec("AUTOTHROTTLE_START_DELAY", 5.0, float, Range(0)),
    Spec("AUTOTHROTTLE_MAX_DELAY", 60.0, float, Range(0)),
]
