"""Priority scoring of requests entering the frontier.

The setting ``FRONTIER_PRIORITY_FUNCTION`` names a callable
``(request, context) -> int``; the frontier queues the request with the
returned priority (higher first). ``None`` or an empty string keeps
``request.priority`` untouched. The default, :func:`seed_priority`, is the
scoring of the seed design (shared/seeds/000, section 4.5) added to the
request's own priority, so Scrapy's conventions (robots.txt requests first,
retries' ``RETRY_PRIORITY_ADJUST``, ``DEPTH_PRIORITY``) still count.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from extensions.utils.hosts import host_key

if TYPE_CHECKING:
    from scrapy import Request

MEDIA_EXTENSIONS = frozenset(
    [
        "jpg",
        "jpeg",
        "png",
        "gif",
        "webp",
        "svg",
        "ico",
        "bmp",
        "tif",
        "tiff",
        "mp3",
        "mp4",
        "avi",
        "mov",
        "mkv",
        "webm",
        "wav",
        "ogg",
        "flac",
        "pdf",
        "doc",
        "docx",
        "xls",
        "xlsx",
        "ppt",
        "pptx",
        "zip",
        "gz",
        "tgz",
        "bz2",
        "xz",
        "7z",
        "rar",
        "tar",
        "exe",
        "dmg",
        "iso",
        "apk",
        "css",
        "js",
        "woff",
        "woff2",
        "ttf",
    ]
)


# Hosts whose counts a worker remembers (least recently seen forgotten first):
# about 240 bytes each for a 40-character host key (measured with
# tracemalloc), so at most ~12 MB however long the crawl runs. A host
# forgotten and seen again simply counts as new for a few more requests.
HOST_COUNTS_MAX = 50_000
# The "new host" bonus applies below this many requests of the host.
NEW_HOST_REQUESTS = 10


class ScoringContext(Protocol):
    def host_count(self, host: str) -> int:
        """Requests of ``host`` (a :func:`extensions.utils.hosts.host_key`, as
        the frontier names hosts) this worker has scheduled so far."""
        ...


class LocalHostCounts:
    """Per-host counts seen by this worker: the "new domain" signal without a
    Redis round trip per link (the seed design's ``HGET`` per URL). Approximate
    by design: each worker counts what it schedules. Keys are host keys
    (:func:`extensions.utils.hosts.host_key`); at most ``max_hosts`` are kept, the
    least recently seen forgotten first.

    >>> c = LocalHostCounts(max_hosts=2)
    >>> for h in ("a", "a", "b", "c"):
    ...     c.add(h)
    >>> c.host_count("a"), c.host_count("b"), c.host_count("c"), len(c)
    (0, 1, 1, 2)
    """

    def __init__(self, max_hosts: int = HOST_COUNTS_MAX) -> None:
        self.max_hosts = max_hosts
        self._counts: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._counts)

    def host_count(self, host: str) -> int:
        return self._counts.get(host, 0)

    def add(self, host: str) -> None:
        counts = self._counts
        counts[host] = counts.get(host, 0) + 1
        counts.move_to_end(host)
        if len(counts) > self.max_hosts:
            counts.popitem(last=False)


def seed_priority(request: Request, context: ScoringContext) -> int:
    """Seed 000's score (base 100, -10 per depth level, -20 for media and
    documents, -10 for a query over 50 characters, -5 for a URL over 100,
    +5 for a host with fewer than 10 pages), clamped to 0..100, plus
    ``request.priority``. The host is looked up by its host key, the name
    the scheduler counts it under.

    >>> from scrapy import Request
    >>> ctx = LocalHostCounts()
    >>> seed_priority(Request("https://a.test/"), ctx)
    100
    >>> seed_priority(Request("https://a.test/x.pdf", meta={"depth": 2}), ctx)
    65
    >>> seed_priority(Request("https://a.test/?" + "q" * 60, priority=3), ctx)
    98
    >>> for _ in range(10):
    ...     ctx.add(host_key("https://a.test/"))
    >>> seed_priority(Request("https://a.test/x.pdf", meta={"depth": 2}), ctx)
    60
    """
    url = request.url
    parts = urlsplit(url)
    score = 100 - 10 * int(request.meta.get("depth", 0))
    last = parts.path.rsplit("/", 1)[-1]
    if "." in last and last.rsplit(".", 1)[1].lower() in MEDIA_EXTENSIONS:
        score -= 20
    if len(parts.query) > 50:
        score -= 10
    if len(url) > 100:
        score -= 5
    if context.host_count(host_key(url)) < NEW_HOST_REQUESTS:
        score += 5
    return max(0, min(100, score)) + request.priority
