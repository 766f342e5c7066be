"""The sandbox web: a deterministic multi-host site from a :class:`SiteSpec`.

Everything here is a pure function of the spec (seed, hosts, pages per host,
shape, crawl-delay hosts, features): the same spec gives the same hosts, paths,
links, robots.txt files and page bytes in every process. :class:`SiteSpec`
answers the questions tests ask (which URLs exist, which a polite crawler can
reach, what robots.txt forbids); :class:`Site` renders the pages on demand,
keeps the most recent ones in an LRU cache and answers requests for the HTTP
server (:mod:`sandbox.server`).

Layout of one host ``site-NNN.sandbox.test``:

* ``/`` and ``/<section>/<slug>-<k>.html`` for ``k`` in ``1..pages-1``: the
  regular pages, 5-50 KB of HTML each with 10-40 links. Page ``k`` links to
  its children ``6k+1..6k+6`` (so every page is reachable from ``/``), to the
  first pages of the host (navigation), to random pages of the host and, about
  one link in seven, to random pages of other hosts (absolute URLs with port).
* ``/private/report-<j>.html``: pages robots.txt disallows (``/`` links to one,
  some other pages link to them too).
* ``/robots.txt``: ``Disallow: /private/`` (plus ``Crawl-delay`` on the hosts
  of ``crawl_delay_hosts``), except hosts whose index ends in 9 (and have no
  crawl delay): their robots.txt answers 404, so everything is allowed.
* Hostile corners (:mod:`sandbox.hostile`) live on :attr:`SiteSpec.trap_host`
  only, linked from its root page, and only when their feature is on.

The module reads no settings.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ipaddress
import itertools
import json
import random
import re
import time
from collections import deque
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence

DOMAIN = "sandbox.test"
SHAPES = ("uniform", "skewed")
FEATURES = frozenset(
    {
        "calendar",
        "redirects",
        "slow",
        "errors",
        "malformed",
        "encodings",
        "bomb",
        "huge",
        "duplicates",
        "etag",
        "content",
        "manylinks",
        "failures",
        "ssrf",
        "traps",
        "unparseable",
        "hostdown",
        "dnsdown",
        "slowrobots",
        "deadhosts",
    }
)
# Children per page in the spanning tree that makes every page reachable.
TREE_BRANCHING = 6
# Robots-disallowed pages per host, under /private/.
PRIVATE_PAGES = 2
# Bounds of a regular page's links and size (bytes).
MIN_LINKS, MAX_LINKS = 10, 40
MIN_PAGE_BYTES, MAX_PAGE_BYTES = 5_000, 50_000
# Share of the random links that point to another host.
CROSS_HOST_SHARE = 0.15
SECTIONS = ("news", "blog", "docs", "products", "guides", "events", "articles")
_SLUG_WORDS = [
    "alpha",
    "amber",
    "atlas",
    "beacon",
    "birch",
    "canyon",
    "cedar",
    "cobalt",
    "comet",
    "coral",
    "delta",
    "dune",
    "ember",
    "falcon",
    "fern",
    "fjord",
    "garnet",
    "glacier",
    "harbor",
    "hazel",
    "indigo",
    "iris",
    "jade",
    "juniper",
    "kelp",
    "lagoon",
    "lark",
    "lotus",
    "maple",
    "meadow",
    "mesa",
    "nova",
    "oak",
    "onyx",
    "opal",
    "orchid",
    "pebble",
    "pine",
    "quartz",
    "raven",
    "reef",
    "river",
    "saffron",
    "sage",
    "sierra",
    "spruce",
    "summit",
    "tundra",
    "umber",
    "valley",
    "violet",
    "willow",
    "yarrow",
    "zephyr",
]
_HOST_RE = re.compile(r"^site-(\d{3,})\.sandbox\.test$")
_PAGE_RE = re.compile(r"^/([a-z]+)/([a-z]+-[a-z]+)-(\d+)\.html$")
_PRIVATE_RE = re.compile(r"^/private/report-(\d+)\.html$")
# 2024-01-01T00:00:00Z: pages were "last modified" within the year after it.
_EPOCH_2024 = 1_704_067_200


def stable_hash(*parts: object) -> int:
    """A 64-bit hash of ``parts`` that is the same in every process
    (``hash()`` of a str is salted per process).

    >>> stable_hash(1, "a", 2) == stable_hash(1, "a", 2)
    True
    >>> stable_hash(1, "a", 2) == stable_hash(1, "a", 3)
    False
    """
    key = "\x1f".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def host_name(index: int) -> str:
    """The host name of site ``index``.

    >>> host_name(7)
    'site-007.sandbox.test'
    >>> host_name(1234)
    'site-1234.sandbox.test'
    """
    return f"site-{index:03d}.{DOMAIN}"


def host_index(host: str) -> int | None:
    """The index of a sandbox host name (port and case ignored), else None.

    >>> host_index("Site-042.sandbox.test:8080")
    42
    >>> host_index("site-42.sandbox.test") is None
    True
    >>> host_index("example.com") is None
    True
    """
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    match = _HOST_RE.match(name.lower())
    if match is None:
        return None
    index = int(match.group(1))
    return index if host_name(index) == name.lower() else None


def shared_addresses(
    hosts: int, shared: int, groups: int, base: str = "127.0.1.0"
) -> dict[int, str]:
    """Addresses for a web where hosts ``0..shared-1`` share ``groups``
    addresses (round robin) and every other host has one of its own.

    >>> shared_addresses(5, 4, 2)
    {0: '127.0.1.1', 1: '127.0.1.2', 2: '127.0.1.1', 3: '127.0.1.2', 4: '127.0.1.3'}
    """
    first = ipaddress.ip_address(base)
    out = {}
    for i in range(hosts):
        n = i % groups if i < shared else groups + (i - shared)
        out[i] = str(first + 1 + n)
    return out


def crawl_delay_map(hosts: int, count: int, delay: float) -> dict[int, float]:
    """``count`` hosts, spread evenly over ``2..hosts-1``, with ``delay``.

    Hosts 0 and 1 (the root and the trap host) keep no delay when there is
    room, so small test webs stay fast to crawl.

    >>> crawl_delay_map(100, 3, 2.0)
    {2: 2.0, 34: 2.0, 67: 2.0}
    >>> crawl_delay_map(3, 5, 1.0)
    {0: 1.0, 1: 1.0, 2: 1.0}
    """
    candidates = list(range(2, hosts)) if hosts - 2 >= count else list(range(hosts))
    count = min(count, len(candidates))
    if count <= 0:
        return {}
    step = len(candidates) / count
    return {candidates[int(n * step)]: float(delay) for n in range(count)}


@dataclass(frozen=True)
class SiteSpec:
    """What the sandbox web looks like; every answer is a pure function of it.

    ``crawl_delay_hosts`` maps host index -> ``Crawl-delay`` seconds;
    ``features`` names the hostile corners to switch on (see ``FEATURES``);
    ``change_period`` > 0 makes regular pages change over time, each at its
    own rate (:mod:`sandbox.changes`), served with ``ETag`` /
    ``Last-Modified`` and answering conditional requests with ``304``;
    ``change_profile`` picks the spread of rates (``classes``, ``measured``,
    ``loguniform``; see :data:`sandbox.changes.PROFILES`).
    """

    seed: int = 0
    hosts: int = 100
    pages_per_host: int = 50
    shape: str = "uniform"
    crawl_delay_hosts: Mapping[int, float] = field(default_factory=dict)
    features: frozenset[str] = frozenset()
    # > 0: pages change as Poisson processes of this scale (sandbox.changes).
    change_period: float = 0.0
    change_profile: str = "classes"
    # Host index -> the loopback address its name resolves to (the others:
    # SANDBOX_ADDRESS): hosts that share an address share a "machine". The
    # server listens on each; a crawler learns them from the resolver
    # (SANDBOX_ADDRESSES, see address_setting()).
    addresses: Mapping[int, str] = field(default_factory=dict)
    # Host index -> (seconds, n): the host's pages answer after that many
    # seconds, for its first n page requests (0: always), then at once: a
    # server that is slow, then fast.
    slow_hosts: Mapping[int, tuple[float, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.pages_per_host < 1:
            raise ValueError("hosts and pages_per_host must be >= 1")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, not {self.shape!r}")
        unknown = set(self.features) - FEATURES
        if unknown:
            raise ValueError(f"unknown features: {sorted(unknown)}")
        object.__setattr__(self, "features", frozenset(self.features))
        object.__setattr__(
            self,
            "crawl_delay_hosts",
            {int(k): float(v) for k, v in dict(self.crawl_delay_hosts).items()},
        )
        object.__setattr__(
            self, "addresses", {int(k): str(v) for k, v in dict(self.addresses).items()}
        )
        for address in self.addresses.values():
            if not ipaddress.ip_address(address).is_loopback:
                raise ValueError(f"not a loopback address: {address}")
        object.__setattr__(
            self,
            "slow_hosts",
            {
                int(k): (float(v[0]), int(v[1]))
                for k, v in dict(self.slow_hosts).items()
            },
        )

    def __hash__(self) -> int:
        return hash(
            (
                self.seed,
                self.hosts,
                self.pages_per_host,
                self.shape,
                tuple(sorted(self.crawl_delay_hosts.items())),
                self.features,
                self.change_period,
                self.change_profile,
                tuple(sorted(self.addresses.items())),
                tuple(sorted(self.slow_hosts.items())),
            )
        )

    # --- addresses -----------------------------------------------------------
    def address(self, i: int) -> str:
        """The address host ``i``'s name resolves to."""
        from sandbox.resolver import SANDBOX_ADDRESS

        return self.addresses.get(i, SANDBOX_ADDRESS)

    def listen_addresses(self) -> list[str]:
        """Every address the server listens on (SANDBOX_ADDRESS first)."""
        from sandbox.resolver import SANDBOX_ADDRESS

        return [
            SANDBOX_ADDRESS,
            *sorted(set(self.addresses.values()) - {SANDBOX_ADDRESS}),
        ]

    def address_setting(self) -> str:
        """The ``SANDBOX_ADDRESSES`` setting that makes the resolver give each
        host its address (JSON, host name -> address; '' when none differs).

        >>> SiteSpec(hosts=3, addresses={1: "127.0.1.1"}).address_setting()
        '{"site-001.sandbox.test": "127.0.1.1"}'
        """
        if not self.addresses:
            return ""
        return json.dumps(
            {host_name(i): a for i, a in sorted(self.addresses.items())}, sort_keys=True
        )

    # --- hosts --------------------------------------------------------------
    def host_name(self, i: int) -> str:
        """Name of host ``i`` (``site-000.sandbox.test``, ...)."""
        return host_name(i)

    def host_names(self) -> list[str]:
        return [host_name(i) for i in range(self.hosts)]

    def host_index(self, host: str) -> int | None:
        """Index of ``host`` (port ignored) if it belongs to this web."""
        i = host_index(host)
        return i if i is not None and i < self.hosts else None

    @property
    def trap_host(self) -> int:
        """The host that carries the hostile corners (1, or 0 with one host)."""
        return 1 if self.hosts > 1 else 0

    @functools.cached_property
    def _page_counts(self) -> tuple[int, ...]:
        total = self.hosts * self.pages_per_host
        if self.shape == "uniform" or self.hosts == 1:
            return (self.pages_per_host,) * self.hosts
        big = total // 2
        rest = total - big
        others = self.hosts - 1
        base, extra = divmod(rest, others)
        return (big, *tuple(max(1, base + (n < extra)) for n in range(others)))

    def pages_on(self, i: int) -> int:
        """Regular pages (``/`` included) of host ``i``; /private/ not counted."""
        return self._page_counts[i]

    # --- robots ---------------------------------------------------------------
    def robots_missing(self, i: int) -> bool:
        """True when host ``i``'s robots.txt answers 404 (everything allowed)."""
        return i % 10 == 9 and i not in self.crawl_delay_hosts

    def robots_txt(self, i: int) -> str | None:
        """Host ``i``'s robots.txt, or None for a 404."""
        if self.robots_missing(i):
            return None
        lines = [
            "# robots.txt of " + host_name(i),
            "User-agent: badbot",
            "Disallow: /",
            "",
            "User-agent: *",
            "Disallow: /private/",
        ]
        delay = self.crawl_delay_hosts.get(i)
        if delay is not None:
            lines.append(f"Crawl-delay: {delay:g}")
        return "\n".join(lines) + "\n"

    def crawl_delay(self, host: str | int) -> float | None:
        """The ``Crawl-delay`` of a host (name, with or without port, or index)."""
        i = host if isinstance(host, int) else self.host_index(host)
        if i is None:
            return None
        return self.crawl_delay_hosts.get(i)

    def is_disallowed(self, url: str) -> bool:
        """True when robots.txt forbids ``url`` to a ``*`` user agent."""
        parts = urlsplit(url)
        i = self.host_index(parts.netloc)
        if i is None or self.robots_missing(i):
            return False
        return (parts.path or "/").startswith("/private/")

    # --- pages and links -------------------------------------------------------
    def page_path(self, i: int, k: int) -> str:
        """Path of regular page ``k`` of host ``i`` (``/`` for ``k == 0``)."""
        return self._host_paths(i)[k]

    def _host_paths(self, i: int) -> tuple[str, ...]:
        paths = self._paths.get(i)
        if paths is None:
            paths = self._paths[i] = tuple(
                self._page_path(i, n) for n in range(self.pages_on(i))
            )
        return paths

    @functools.cached_property
    def _paths(self) -> dict[int, tuple[str, ...]]:
        return {}

    def _page_path(self, i: int, k: int) -> str:
        if k == 0:
            return "/"
        h = stable_hash(self.seed, "slug", i, k)
        n = len(_SLUG_WORDS)
        slug = f"{_SLUG_WORDS[h % n]}-{_SLUG_WORDS[(h // n) % n]}"
        return f"/{SECTIONS[k % len(SECTIONS)]}/{slug}-{k}.html"

    def private_path(self, j: int) -> str:
        return f"/private/report-{j}.html"

    def parse_path(self, i: int, path: str) -> tuple[str, int] | None:
        """``("page", k)`` or ``("private", j)`` for a known path of host ``i``."""
        if path == "/":
            return ("page", 0)
        match = _PAGE_RE.match(path)
        if match:
            k = int(match.group(3))
            if 0 < k < self.pages_on(i) and self.page_path(i, k) == path:
                return ("page", k)
            return None
        match = _PRIVATE_RE.match(path)
        if match and int(match.group(1)) < PRIVATE_PAGES:
            return ("private", int(match.group(1)))
        return None

    def links(self, i: int, k: int) -> list[tuple[int, str]]:
        """Links of regular page ``k`` of host ``i`` as ``(host, path)``, in page
        order, duplicates kept (a page may link to the same URL twice)."""
        n_pages = self.pages_on(i)
        rng = random.Random(stable_hash(self.seed, "links", i, k))
        out: list[tuple[int, str]] = [(i, "/")]
        out += [(i, self.page_path(i, j)) for j in range(1, min(5, n_pages))]
        first = TREE_BRANCHING * k + 1
        children = range(first, min(first + TREE_BRANCHING, n_pages))
        out += [(i, self.page_path(i, j)) for j in children]
        if k == 0 or rng.random() < 0.1:
            out.append((i, self.private_path(k % PRIVATE_PAGES)))
        # rng.random() is C code; randrange()/randint() cost 5x more in Python.
        rand = rng.random
        span = MAX_LINKS - MIN_LINKS + 1
        target = max(MIN_LINKS + int(rand() * span), len(out))
        own = self._host_paths(i)
        while len(out) < target:
            if self.hosts > 1 and rand() < CROSS_HOST_SHARE:
                j = int(rand() * (self.hosts - 1))
                j += j >= i
                paths = self._host_paths(j)
                out.append((j, paths[int(rand() * len(paths))]))
            else:
                out.append((i, own[int(rand() * n_pages)]))
        if k == 0 and i == self.trap_host:
            from sandbox.hostile import entry_paths

            out += [(i, p) for p in entry_paths(self.features)]
        return out

    def private_links(self, i: int, j: int) -> list[tuple[int, str]]:
        others = [self.private_path(n) for n in range(PRIVATE_PAGES) if n != j]
        return [(i, "/"), *((i, p) for p in others)]

    def url(self, i: int, path: str, port: int) -> str:
        return f"http://{host_name(i)}:{port}{path}"

    def page_urls(self, port: int) -> list[str]:
        """Every regular and /private/ page URL, host by host (no hostile ones)."""
        urls = []
        for i in range(self.hosts):
            urls += [
                self.url(i, self.page_path(i, k), port) for k in range(self.pages_on(i))
            ]
            urls += [
                self.url(i, self.private_path(j), port) for j in range(PRIVATE_PAGES)
            ]
        return urls

    def seed_urls(self, port: int) -> list[str]:
        """The root URL of every host."""
        return [self.url(i, "/", port) for i in range(self.hosts)]

    def reachable_urls(self, port: int, respect_robots: bool = True) -> set[str]:
        """URLs a crawler following every link from the roots would request.

        Robots-disallowed URLs are left out when ``respect_robots``. Hostile
        URLs count only when their feature is on (see
        :func:`sandbox.hostile.feature_paths`: redirect hops included); the
        calendar trap is infinite, so only its entry URL is ever included.
        robots.txt itself is not in the set.
        """
        from sandbox.hostile import feature_paths

        seen: set[tuple[int, str]] = set()
        todo: deque[tuple[int, str]] = deque((i, "/") for i in range(self.hosts))
        seen.update(todo)
        while todo:
            i, path = todo.popleft()
            parsed = self.parse_path(i, path)
            if parsed is None:
                continue
            kind, n = parsed
            links = self.links(i, n) if kind == "page" else self.private_links(i, n)
            for link in links:
                if link in seen:
                    continue
                if respect_robots and self.is_disallowed(self.url(*link, port)):
                    continue
                seen.add(link)
                todo.append(link)
        t = self.trap_host
        seen.update((t, p) for p in feature_paths(self.features))
        return {self.url(i, p, port) for i, p in seen}

    def last_modified(self, i: int, key: object) -> float:
        """A fixed "last modified" time (epoch s) for a page of host ``i``."""
        return float(_EPOCH_2024 + stable_hash(self.seed, "mtime", i, key) % 31_536_000)


# --- text --------------------------------------------------------------------
_SYLLABLES = [
    "ba",
    "be",
    "bi",
    "bo",
    "bu",
    "ca",
    "ce",
    "co",
    "da",
    "de",
    "di",
    "do",
    "fa",
    "fe",
    "fi",
    "fo",
    "ga",
    "ge",
    "go",
    "ha",
    "he",
    "hi",
    "ho",
    "ja",
    "jo",
    "ka",
    "ke",
    "ki",
    "ko",
    "la",
    "le",
    "li",
    "lo",
    "lu",
    "ma",
    "me",
    "mi",
    "mo",
    "mu",
    "na",
    "ne",
    "ni",
    "no",
    "nu",
    "pa",
    "pe",
    "pi",
    "po",
    "ra",
    "re",
    "ri",
    "ro",
    "ru",
    "sa",
    "se",
    "si",
    "so",
    "su",
    "ta",
    "te",
    "ti",
    "to",
    "tu",
    "va",
    "ve",
    "vi",
    "vo",
    "wa",
    "we",
    "wi",
    "za",
    "ze",
    "an",
    "en",
    "in",
    "on",
    "un",
    "ar",
    "er",
    "ir",
    "or",
    "ur",
    "al",
    "el",
    "il",
    "ol",
    "ter",
    "ler",
    "mer",
    "ver",
    "son",
    "ton",
    "ling",
    "ment",
    "tion",
    "ness",
]


@functools.lru_cache(maxsize=8)
def vocabulary(seed: int) -> tuple[str, ...]:
    """3000 word-like lowercase words, the same for the same seed."""
    rng = random.Random(stable_hash(seed, "vocabulary"))
    common = ["the", "of", "and", "a", "to", "in", "is", "for", "on", "with"]
    words: set[str] = set(common)
    while len(words) < 3000:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))))
    rest = sorted(words - set(common))
    rng.shuffle(rest)
    # Common words first: the corpus draws the first words most often.
    return (*common, *rest)


@functools.lru_cache(maxsize=8)
def corpus(seed: int) -> tuple[str, ...]:
    """600 paragraphs (150-900 characters, HTML-safe), the same for a seed."""
    vocab = vocabulary(seed)
    # Zipf-like: the first words of the vocabulary come up far more often.
    cum_weights = list(itertools.accumulate(1.0 / (r + 1) for r in range(len(vocab))))
    rng = random.Random(stable_hash(seed, "corpus"))
    paragraphs = []
    for _ in range(600):
        target = rng.randint(150, 900)
        sentences: list[str] = []
        size = 0
        while size < target:
            words = rng.choices(vocab, cum_weights=cum_weights, k=rng.randint(6, 18))
            sentence = " ".join(words).capitalize() + "."
            if size + len(sentence) + 1 > 900:
                break
            sentences.append(sentence)
            size += len(sentence) + 1
        paragraphs.append(" ".join(sentences))
    return tuple(paragraphs)


@functools.lru_cache(maxsize=8)
def phrases(seed: int) -> tuple[str, ...]:
    """2000 anchor texts of 1-3 words, the same for a seed."""
    vocab = vocabulary(seed)
    rng = random.Random(stable_hash(seed, "phrases"))
    return tuple(" ".join(rng.sample(vocab, rng.randint(1, 3))) for _ in range(2000))


# --- serving -----------------------------------------------------------------
@dataclass(slots=True)
class Response:
    """What the server sends: status, extra headers, body (HEAD drops it)."""

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class Request:
    """A parsed request as the site sees it (header names lowercased)."""

    method: str
    host: str
    path: str
    query: str
    headers: dict[str, str]


HTML = "text/html; charset=utf-8"
NOT_FOUND = (
    b"<!DOCTYPE html><html><head><title>Not found</title></head>"
    b"<body><h1>404 Not found</h1></body></html>"
)


@dataclass(slots=True)
class Page:
    body: bytes
    etag: str
    last_modified: str


def make_page(body: bytes, mtime: float) -> Page:
    etag = '"' + hashlib.blake2b(body, digest_size=8).hexdigest() + '"'
    return Page(body, etag, formatdate(mtime, usegmt=True))


def not_modified(page: Page, headers: Mapping[str, str]) -> bool:
    """RFC 9110 conditional GET: If-None-Match wins over If-Modified-Since."""
    inm = headers.get("if-none-match")
    if inm is not None:
        tags = {t.strip().removeprefix("W/") for t in inm.split(",")}
        return "*" in tags or page.etag in tags
    ims = headers.get("if-modified-since")
    if ims is not None:
        try:
            since = parsedate_to_datetime(ims).timestamp()
        except (TypeError, ValueError):
            return False
        return parsedate_to_datetime(page.last_modified).timestamp() <= since
    return False


class Site:
    """Renders and serves the pages of a :class:`SiteSpec` on one port.

    Pages are rendered on first request from ``(seed, host, path)`` and the
    last ``cache_pages`` kept in an LRU cache, so memory stays bounded however
    large the web is.
    """

    def __init__(self, spec: SiteSpec, port: int, cache_pages: int = 2048) -> None:
        from sandbox.changes import ChangeModel
        from sandbox.hostile import Hostile

        self.spec = spec
        self.port = port
        self.vocab = vocabulary(spec.seed)
        self.paragraphs = corpus(spec.seed)
        self.phrases = phrases(spec.seed)
        self.changes = (
            ChangeModel(spec.seed, spec.change_period, time.time(), spec.change_profile)
            if spec.change_period > 0
            else None
        )
        # Changing pages always carry validators: revisits are conditional.
        self.etag = "etag" in spec.features or self.changes is not None
        self.page: Callable[..., Page] = functools.lru_cache(maxsize=cache_pages)(
            self._render
        )
        self.hostile = Hostile(self)
        self._served: dict[int, int] = {}  # page requests of each slow host
        self._robots: dict[int, bytes | None] = {}
        for i in range(spec.hosts):
            txt = spec.robots_txt(i)
            self._robots[i] = txt.encode() if txt is not None else None

    # --- rendering ---------------------------------------------------------------
    def href(self, i: int, target: tuple[int, str], absolute: bool = False) -> str:
        j, path = target
        if j != i or absolute:
            return self.spec.url(j, path, self.port)
        return path

    def words(self, rng: random.Random, n: int) -> str:
        vocab = self.vocab
        size = len(vocab)
        rand = rng.random
        return " ".join([vocab[int(rand() * size)] for _ in range(n)])

    def phrase(self, rng: random.Random) -> str:
        """1-3 words: an anchor text."""
        return self.phrases[int(rng.random() * len(self.phrases))]

    def _render(
        self, i: int, kind: str, n: int, version: int = 0, mtime: float = 0.0
    ) -> Page:
        spec = self.spec
        if kind == "page":
            links = spec.links(i, n)
            path = spec.page_path(i, n)
        else:
            links = spec.private_links(i, n)
            path = spec.private_path(n)
        # Version 0 is the page as it always was; a changed page draws its
        # text (not its links: the link graph stays put) anew per version.
        parts: tuple[object, ...] = (version,) if version else ()
        rng = random.Random(stable_hash(spec.seed, "page", i, path, *parts))
        dead: list[str] = []
        if kind == "page" and "deadhosts" in spec.features:
            from sandbox.hostile import dead_links

            dead = dead_links(spec.seed, i, n, self.port)
        body = self.render_html(i, path, links, rng, extra_hrefs=dead)
        if not self.etag:  # validators cost a hash and a date: only when served
            return Page(body, "", "")
        return make_page(body, mtime or spec.last_modified(i, path))

    def render_html(
        self,
        i: int,
        path: str,
        links: list[tuple[int, str]],
        rng: random.Random,
        size: int | None = None,
        extra_hrefs: Sequence[str] = (),
    ) -> bytes:
        """A realistic page: head, nav, paragraphs, related links, footer;
        ``extra_hrefs`` (absolute URLs) join the related links."""
        host = host_name(i)
        rand = rng.random
        title = self.words(rng, 2 + int(rand() * 5)).title()
        paragraphs = self.paragraphs
        desc = paragraphs[int(rand() * len(paragraphs))][:150].rsplit(" ", 1)[0]
        anchors = [
            f'<a href="{self.href(i, t, absolute=rand() < 0.1)}">{self.phrase(rng)}</a>'
            for t in links
        ]
        nav, rest = anchors[:5], anchors[5:]
        inline = rest[: len(rest) // 3]
        related = rest[len(rest) // 3 :]
        related += [f'<a href="{u}">elsewhere</a>' for u in extra_hrefs]
        head = (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title} | {host}</title>\n"
            f'<meta name="description" content="{desc}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            "</head>\n<body>\n"
            f'<header><div class="brand">{host}</div><nav><ul>\n'
            + "".join(f"<li>{a}</li>\n" for a in nav)
            + f"</ul></nav></header>\n<main>\n<article>\n<h1>{title}</h1>\n"
        )
        tail = (
            "</article>\n<aside><h2>Related</h2><ul>\n"
            + "".join(f"<li>{a}</li>\n" for a in related)
            + "</ul></aside>\n</main>\n<footer><p>&copy; 2024 "
            + host
            + ". All rights reserved. Built with care in the sandbox.</p>"
            + "<p>Terms of use, privacy, accessibility and cookie notice apply."
            + "</p></footer>\n</body>\n</html>\n"
        )
        if size is None:
            target = 6_000 + int(rand() * (MAX_PAGE_BYTES - 6_000 + 1))
        else:
            target = size
        budget = target - len(head) - len(tail) - sum(len(a) + 8 for a in inline)
        parts: list[str] = []
        start = int(rand() * len(paragraphs))
        step = 1 + int(rand() * 49)
        idx = start
        while True:
            p = paragraphs[idx % len(paragraphs)]
            if len(p) + 8 > budget:
                break
            parts.append(p)
            budget -= len(p) + 8
            idx += step
        # Spread the inline links over the paragraphs.
        for n, a in enumerate(inline):
            pos = (n * len(parts)) // max(1, len(inline)) if parts else 0
            if parts:
                parts[pos] = parts[pos] + " See " + a + "."
            else:
                parts.append(a)
        body = "".join(f"<p>{p}</p>\n" for p in parts)
        return (head + body + tail).encode()

    # --- serving ---------------------------------------------------------------
    def handle(self, req: Request) -> Response | Awaitable[Response]:
        """Answer one request (the server adds Content-Length and drops HEAD
        bodies). Slow or expensive answers come back as an awaitable."""
        i = self.spec.host_index(req.host)
        if i is None:
            return Response(404, NOT_FOUND, [("Content-Type", HTML)])
        if req.method not in ("GET", "HEAD"):
            return Response(405, b"", [("Allow", "GET, HEAD")])
        if req.path == "/robots.txt":
            if "slowrobots" in self.spec.features and i == self.spec.trap_host:
                return self._slow_robots(i)
            return self._robots_response(i)
        parsed = self.spec.parse_path(i, req.path)
        if parsed is not None and i in self.spec.slow_hosts:
            seconds, first = self.spec.slow_hosts[i]
            self._served[i] = self._served.get(i, 0) + 1
            if not first or self._served[i] <= first:
                return self._slow(seconds, self._page_answer(i, req, parsed))
        if parsed is not None:
            return self._page_answer(i, req, parsed)
        if i == self.spec.trap_host:
            answer = self.hostile.handle(req)
            if answer is not None:
                return answer
        return Response(404, NOT_FOUND, [("Content-Type", HTML)])

    async def _slow(self, seconds: float, answer: Response) -> Response:
        await asyncio.sleep(seconds)
        return answer

    def _page_answer(self, i: int, req: Request, parsed: tuple[str, int]) -> Response:
        """A regular page (or a private one) of host ``i``."""
        if self.changes is not None and parsed[0] == "page":
            version, at = self.changes.version(i, req.path, time.time())
            if version:
                page = self.page(i, *parsed, version, at)
                return self.page_response(page, req)
        return self.page_response(self.page(i, *parsed), req)

    def _robots_response(self, i: int) -> Response:
        robots = self._robots[i]
        if robots is None:
            return Response(404, NOT_FOUND, [("Content-Type", HTML)])
        return Response(200, robots, [("Content-Type", "text/plain")])

    async def _slow_robots(self, i: int) -> Response:
        from sandbox.hostile import SLOW_ROBOTS_SECONDS

        await asyncio.sleep(SLOW_ROBOTS_SECONDS)
        return self._robots_response(i)

    def page_response(
        self, page: Page, req: Request, content_type: str = HTML
    ) -> Response:
        if not self.etag:
            return Response(200, page.body, [("Content-Type", content_type)])
        validators = [("ETag", page.etag), ("Last-Modified", page.last_modified)]
        if not_modified(page, req.headers):
            return Response(304, b"", validators)
        return Response(200, page.body, [("Content-Type", content_type), *validators])


def iter_links(html: bytes) -> Iterator[str]:
    """The ``href`` values of a page, in order (a regex, for tests and tools).

    >>> list(iter_links(b'<p><a href="/a">x</a> <a class="c" href="http://h/b">'))
    ['/a', 'http://h/b']
    """
    for match in re.finditer(rb'<a [^>]*href="([^"]*)"', html):
        yield match.group(1).decode("latin-1")
