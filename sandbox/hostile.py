"""Hostile corners of the sandbox web, each behind a feature name.

They live on the spec's trap host (``site-001``) and are linked from its root
page only when their feature is on; with the feature off the paths answer 404.

=============  =================================================================
feature        paths and behaviour
=============  =================================================================
calendar       ``/calendar/YYYY/MM``: prev/next month links, forever (a trap)
redirects      ``/redirect/chain/1`` -301-> ``2`` -302-> ``3`` -307->
               ``/redirect/landing.html`` (200); ``/redirect/loop/a`` <-302-> ``b``
slow           ``/slow/N.html`` (N = 1, 2, 3) answers after N seconds
errors         ``/error/500.html``, ``/error/503.html``, ``/error/429-seconds.html``
               (``Retry-After: 2``), ``/error/429-date.html`` (``Retry-After``: an
               HTTP date 3 s ahead), ``/error/flaky.html`` (503 twice, then 200)
malformed      ``/malformed/unclosed.html`` (unclosed tags),
               ``/malformed/garbage.html`` (invalid UTF-8 and NUL bytes)
encodings      ``ENCODING_PAGES``: windows-1252 / Shift_JIS with the charset in
               the header only or in a ``<meta>`` only, UTF-8 with a BOM only
bomb           ``BOMB_PATHS``: ``/bomb.html`` (``Content-Encoding: gzip``, ~2 MB),
               ``/bomb-deflate.html`` (``deflate``, zlib-wrapped, ~2 MB) and
               ``/bomb-br.html`` (``br``, ~0.4 MB), each inflating to
               ``BOMB_SIZE`` (2 GiB)
huge           ``/huge.html``: a ``HUGE_SIZE`` (20 MiB) HTML page
duplicates     ``/dup/original.html`` = ``/dup/copy-a.html`` = ``/dup/copy-b.html``
               byte for byte; ``/dup/near-a.html``, ``/dup/near-b.html``: the
               original with ``NEAR_CHANGED_WORDS`` words changed
traps          ``/repeat/``: every page links ``a/`` and ``b/a/`` (relative), so
               ``/repeat/a/a/a/...`` and ``/repeat/b/a/b/a/...`` never end;
               ``/session/page.html?sid=N`` links ``?sid=N+1``;
               ``/s/<token>/page.html`` links the next token (a session id in
               the path); ``/sid/<token>/page.html`` too, with random-looking
               ids (a UUID, 22 characters of base64url, 16 of base62 in turn,
               :func:`session_token`) for ``SID_TRAP_PAGES`` (60) pages;
               ``/facets``: every page links each facet value added to its
               query (``?color=red&size=m&...``), a combinatorial explosion
failures       ``/fail/links.html`` links hosts whose names do not resolve
               (``*.nxdomain.sandbox.test``, see :mod:`sandbox.resolver`) and
               a host that is down (``down.sandbox.test`` on port 1: refused);
               ``/fail/long/1`` -302-> ``2`` ... ``LONG_CHAIN`` (30) hops ->
               ``/fail/landing.html``; ``/fail/loop/a`` <-302-> ``b``;
               ``/fail/refresh/a`` <-meta refresh-> ``b``;
               ``/fail/retry-later.html``: 503 with ``Retry-After:
               RETRY_LATER_SECONDS`` the first time (per server run), then
               200; ``/fail/throttled.html``: always 429 with ``Retry-After: 1``;
               ``/fail/offsite.html`` -302-> ``OFFSITE_URL`` (out of scope)
ssrf           ``/ssrf/link.html`` links ``PRIVATE_LINK`` and ``/ssrf/redirect.html``
               -302-> ``PRIVATE_REDIRECT``: names in the crawl's scope that
               :mod:`sandbox.resolver` resolves to 127.0.0.2 (the SSRF guard's
               corner; crawl with ``ADDRESS_ALLOWLIST=127.0.0.1/32``)
content        ``/content/label-base64.html`` (``charset=base64`` in the header)
               and ``/content/label-rot13.html`` (``<meta charset=rot13>``),
               ``/content/label-undefined.html`` (``charset=undefined``),
               UTF-8 really, each linking ``/content/reached-<label>.html``;
               ``/content/files.html`` links ``CONTENT_FILES``: a small PDF,
               a PNG, a zip and an extensionless ``application/octet-stream``
manylinks      ``/many/links.html``: ``MANY_LINKS`` (100,000) links to
               ``/many/<N>.html`` (404), ~4 MB of HTML
hostdown       ``/hostdown/links.html`` links ``HOST_DOWN_LINKS`` (40) pages of
               the host that is down (``DOWN_HOST``: refused), for a
               per-host bound on a server that stays down
dnsdown        ``/dnsdown/links.html`` links ``DNS_DOWN_LINKS`` (40) pages of a
               host whose name does not resolve (``DNS_DOWN_HOST``), for a
               per-host bound on a dead name
unparseable    ``UNPARSEABLE_PATHS``: ``/unparseable/gzip.html`` (``Content-Encoding:
               gzip``, a gzip header over a corrupt deflate stream),
               ``/unparseable/not-gzip.html`` (``gzip`` over plain bytes) and
               ``/unparseable/br.html`` (``br`` over bytes no brotli decoder
               takes): a response nobody can decode, the same every time
etag           every page gets ``ETag``/``Last-Modified``; ``If-None-Match`` /
               ``If-Modified-Since`` get a 304 (see ``Site.page_response``)
=============  =================================================================

The module reads no settings.
"""

from __future__ import annotations

import asyncio
import base64
import random
import re
import struct
import time
import uuid
import zlib
from email.utils import formatdate
from typing import TYPE_CHECKING

import brotli

from sandbox.site import HTML, Page, Request, Response, make_page, stable_hash

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterable

    from sandbox.site import Site

BOMB_SIZE = 2 * 1024**3
# path -> Content-Encoding of the bomb served there.
BOMB_PATHS: dict[str, str] = {
    "/bomb.html": "gzip",
    "/bomb-deflate.html": "deflate",
    "/bomb-br.html": "br",
}
# path -> (Content-Encoding, body) of the responses that do not decode.
UNPARSEABLE_PATHS = {
    "/unparseable/gzip.html": (
        "gzip",
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 64,
    ),
    "/unparseable/not-gzip.html": (
        "gzip",
        b"<html><body>plain, not gzip</body></html>",
    ),
    "/unparseable/br.html": ("br", b"\xff\xff\xff\xff not a brotli stream"),
}
HUGE_SIZE = 20 * 1024**2
NEAR_CHANGED_WORDS = 3
CALENDAR_START = "/calendar/2024/01"
SLOW_SECONDS = {"/slow/1.html": 1.0, "/slow/2.html": 2.0, "/slow/3.html": 3.0}
# Times /error/flaky.html answers 503 before it answers 200 (per server run).
FLAKY_FAILURES = 2
RETRY_AFTER_SECONDS = 2
# The failures feature: redirect hops of /fail/long/, the first Retry-After of
# /fail/retry-later.html, the hosts /fail/links.html links.
LONG_CHAIN = 30
RETRY_LATER_SECONDS = 5
UNRESOLVABLE_HOSTS = ("gone-1.nxdomain.sandbox.test", "gone-2.nxdomain.sandbox.test")
DOWN_HOST = "down.sandbox.test:1"
HOST_DOWN_LINKS = 40
DNS_DOWN_HOST = "dead.nxdomain.sandbox.test:1"
DNS_DOWN_LINKS = 40
OFFSITE_URL = "http://elsewhere.example/"
# The ssrf feature's targets (":{port}" filled in by the server's port).
PRIVATE_LINK = "http://internal.private.sandbox.test:{port}/"
PRIVATE_REDIRECT = "http://metadata.private.sandbox.test:{port}/latest/meta-data/"
RETRY_AFTER_DATE_SECONDS = 3
SAMPLE_LATIN = "Café “naïve” résumé — 5 € à la carte"
SAMPLE_JAPANESE = "日本語のページです。こんにちは、世界"
SAMPLE_BOM = "Grüße aus Köln — 東京 ☃"
# path -> (Python codec, where the charset is declared, text the page contains)
ENCODING_PAGES: dict[str, tuple[str, str, str]] = {
    "/enc/cp1252-header.html": ("cp1252", "header", SAMPLE_LATIN),
    "/enc/cp1252-meta.html": ("cp1252", "meta", SAMPLE_LATIN),
    "/enc/shift_jis-header.html": ("shift_jis", "header", SAMPLE_JAPANESE),
    "/enc/shift_jis-meta.html": ("shift_jis", "meta", SAMPLE_JAPANESE),
    "/enc/utf8-bom.html": ("utf-8", "bom", SAMPLE_BOM),
}
_CHARSET_NAMES = {"cp1252": "windows-1252", "shift_jis": "Shift_JIS"}
DUPLICATE_EXACT = ("/dup/original.html", "/dup/copy-a.html", "/dup/copy-b.html")
DUPLICATE_NEAR = ("/dup/near-a.html", "/dup/near-b.html")

MANY_LINKS = 100_000
# Hostile charset labels: path -> (where the label is, the label).
HOSTILE_LABELS: dict[str, tuple[str, str]] = {
    "/content/label-base64.html": ("header", "base64"),
    "/content/label-rot13.html": ("meta", "rot13"),
    # Python's "undefined" codec: a text codec that refuses every byte.
    "/content/label-undefined.html": ("header", "undefined"),
}
LABEL_SAMPLE = "Grüße — déjà vu"
# Non-HTML files /content/files.html links: path -> (content type, body).
_PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01"
    b"\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f"
    b"\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82"
)
_PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)
CONTENT_FILES: dict[str, tuple[str, bytes]] = {
    "/content/report.pdf": ("application/pdf", _PDF),
    "/content/picture.png": ("image/png", _PNG),
    "/content/archive.zip": ("application/zip", b"PK\x05\x06" + b"\x00" * 18),
    "/content/blob": ("application/octet-stream", bytes(range(256)) * 4),
}
# Of CONTENT_FILES, those LINK_SKIP_EXTENSIONS leaves alone by default.
CONTENT_FETCHED = ("/content/report.pdf", "/content/blob")

_SID_RE = re.compile(r"^/sid/([A-Za-z0-9_-]+)/page\.html$")
# Pages of the /sid/ chain: far more than any test's variant budget, finite
# so that a crawl that does not detect the ids still ends.
SID_TRAP_PAGES = 60
# Token n is (n * _SID_MUL + _SID_ADD) mod the shape's modulus, written in the
# shape: random-looking, and turned back into n by the modular inverse.
_SID_MUL = 0x9E3779B97F4A7C15F39CC0605CEDC835
_SID_ADD = 0x2545F4914F6CDD1D6A09E667F3BCC909
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SID_MODULI = (2**128, 2**128, 62**16)


def session_token(n: int) -> str:
    """The session id of page ``n`` of the ``/sid/`` trap: a UUID, 22
    characters of base64url (16 bytes) or 16 of base62, by ``n % 3``.

    >>> [session_token(n) for n in range(3)]  # doctest: +NORMALIZE_WHITESPACE
    ['2545f491-4f6c-dd1d-6a09-e667f3bcc909', 'w31uSs63WTNdpqbIUKqRPg',
     'a2T3xp839qJ85Ttr']
    >>> all(session_number(session_token(n)) == n for n in range(SID_TRAP_PAGES))
    True
    """
    shape = n % 3
    x = (n * _SID_MUL + _SID_ADD) % _SID_MODULI[shape]
    if shape == 0:
        return str(uuid.UUID(int=x))
    if shape == 1:
        return base64.urlsafe_b64encode(x.to_bytes(16, "big")).decode().rstrip("=")
    digits = []
    for _ in range(16):
        x, d = divmod(x, 62)
        digits.append(_BASE62[d])
    return "".join(reversed(digits))


def session_number(token: str) -> int | None:
    """The page number of a ``/sid/`` token, None for a token it never made."""
    try:
        if len(token) == 36:
            shape, x = 0, uuid.UUID(token).int
        elif len(token) == 22:
            shape, x = 1, int.from_bytes(base64.urlsafe_b64decode(token + "=="), "big")
        elif len(token) == 16:
            shape, x = 2, 0
            for c in token:
                x = x * 62 + _BASE62.index(c)
        else:
            return None
    except ValueError:
        return None
    modulus = _SID_MODULI[shape]
    n = (x - _SID_ADD) * pow(_SID_MUL, -1, modulus) % modulus
    if n % 3 != shape or n >= SID_TRAP_PAGES or session_token(n) != token:
        return None
    return n


ENTRY_PATHS: dict[str, tuple[str, ...]] = {
    "calendar": (CALENDAR_START,),
    "redirects": ("/redirect/chain/1", "/redirect/loop/a"),
    "slow": tuple(SLOW_SECONDS),
    "errors": (
        "/error/500.html",
        "/error/503.html",
        "/error/429-seconds.html",
        "/error/429-date.html",
        "/error/flaky.html",
    ),
    "malformed": ("/malformed/unclosed.html", "/malformed/garbage.html"),
    "encodings": tuple(ENCODING_PAGES),
    "bomb": tuple(BOMB_PATHS),
    "huge": ("/huge.html",),
    "unparseable": tuple(UNPARSEABLE_PATHS),
    "hostdown": ("/hostdown/links.html",),
    "dnsdown": ("/dnsdown/links.html",),
    "duplicates": DUPLICATE_EXACT + DUPLICATE_NEAR,
    "etag": (),
    "content": (*HOSTILE_LABELS, "/content/files.html"),
    "manylinks": ("/many/links.html",),
    "failures": (
        "/fail/links.html",
        "/fail/long/1",
        "/fail/loop/a",
        "/fail/refresh/a",
        "/fail/retry-later.html",
        "/fail/throttled.html",
        "/fail/offsite.html",
    ),
    "ssrf": ("/ssrf/link.html", "/ssrf/redirect.html"),
    "traps": (
        "/repeat/",
        "/session/page.html?sid=1",
        f"/s/{0:020x}/page.html",
        f"/sid/{session_token(0)}/page.html",
        "/facets",
    ),
}
# Paths reached only through a feature's redirects or its own pages' links.
FOLLOWED_PATHS: dict[str, tuple[str, ...]] = {
    "content": (
        *(f"/content/reached-{label}.html" for _, label in HOSTILE_LABELS.values()),
        *CONTENT_FETCHED,
    ),
    "redirects": (
        "/redirect/chain/2",
        "/redirect/chain/3",
        "/redirect/landing.html",
        "/redirect/loop/b",
    ),
}
_CALENDAR_RE = re.compile(r"^/calendar/(\d{4})/(\d{2})$")
_TOKEN_RE = re.compile(r"^/s/([0-9a-f]{20})/page\.html$")
FACETS = {
    "color": ("red", "green", "blue"),
    "size": ("s", "m", "l", "xl"),
    "brand": ("acme", "globex", "initech"),
    "sort": ("price", "name"),
}


def entry_paths(features: Iterable[str]) -> list[str]:
    """Paths the trap host's root links to for ``features``.

    >>> entry_paths({"redirects", "bomb"})  # doctest: +NORMALIZE_WHITESPACE
    ['/bomb.html', '/bomb-deflate.html', '/bomb-br.html', '/redirect/chain/1',
     '/redirect/loop/a']
    """
    return [p for f in sorted(features) for p in ENTRY_PATHS[f]]


def feature_paths(features: Iterable[str]) -> list[str]:
    """Every finite path a crawl requests for ``features`` (calendar: entry only).

    >>> feature_paths({"redirects"})  # doctest: +NORMALIZE_WHITESPACE
    ['/redirect/chain/1', '/redirect/loop/a', '/redirect/chain/2',
     '/redirect/chain/3', '/redirect/landing.html', '/redirect/loop/b']
    """
    features = sorted(features)
    return entry_paths(features) + [
        p for f in features for p in FOLLOWED_PATHS.get(f, ())
    ]


def build_bomb(
    size: int, encoding: str = "gzip", prefix: bytes = b"<!DOCTYPE html><html><body><p>"
) -> bytes:
    """A body in ``encoding`` that inflates to ``size`` bytes (``prefix`` then spaces).

    ``gzip`` and ``deflate`` (RFC 9110: the zlib format) share one deflate
    stream: a full flush resets the deflate state, so 1 MiB of spaces
    compresses to the same ~1 KB block every time and the bomb is that block
    repeated, with a correct checksum and length (the checksums are the slow
    part: ~0.5 s/GiB). ``br`` streams the spaces through a quality-1 brotli
    compressor a MiB at a time (~0.1 s/GiB, ~0.2 MB per GiB).

    >>> import gzip, zlib, brotli
    >>> size = 3 * 1024 * 1024 + 5
    >>> data = build_bomb(size)
    >>> len(data) < 10_000, len(gzip.decompress(data))
    (True, 3145733)
    >>> len(zlib.decompress(build_bomb(size, "deflate")))
    3145733
    >>> len(brotli.decompress(build_bomb(size, "br")))
    3145733
    """
    mib = 1 << 20
    full, rest = divmod(size - len(prefix), mib)
    block_data, tail_data = b" " * mib, b" " * rest
    if encoding == "br":
        brot = brotli.Compressor(quality=1)
        parts = [brot.process(prefix)]
        parts += [brot.process(block_data) for _ in range(full)]
        return b"".join([*parts, brot.process(tail_data), brot.finish()])
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = comp.compress(prefix) + comp.flush(zlib.Z_FULL_FLUSH)
    block = comp.compress(block_data) + comp.flush(zlib.Z_FULL_FLUSH)
    tail = comp.compress(tail_data) + comp.flush(zlib.Z_FINISH)
    stream = b"".join([head, block * full, tail])
    if encoding == "deflate":
        adler = zlib.adler32(prefix)
        for _ in range(full):
            adler = zlib.adler32(block_data, adler)
        adler = zlib.adler32(tail_data, adler)
        return b"\x78\xda" + stream + struct.pack(">I", adler & 0xFFFFFFFF)
    crc = zlib.crc32(prefix)
    for _ in range(full):
        crc = zlib.crc32(block_data, crc)
    crc = zlib.crc32(tail_data, crc)
    header = b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x02\xff"
    trailer = struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)
    return header + stream + trailer


def many_links_body(links: int = MANY_LINKS) -> bytes:
    """The body of ``/many/links.html``: ``links`` anchors to ``/many/<N>.html``.

    >>> body = many_links_body(3)
    >>> body.count(b"<a href="), b'<a href="/many/2.html">' in body
    (4, True)
    """
    anchors = "".join(f'<a href="/many/{n}.html">page {n}</a>\n' for n in range(links))
    return _html("Many links", f"<p>{anchors}</p>").encode()


def _html(title: str, body: str, charset: str = "utf-8") -> str:
    return (
        f'<!DOCTYPE html>\n<html>\n<head>\n<meta charset="{charset}">\n'
        f"<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n"
        f'{body}\n<p><a href="/">Home</a></p>\n</body>\n</html>\n'
    )


class Hostile:
    """Answers the hostile paths of one :class:`~sandbox.site.Site`."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.features = site.spec.features
        self.flaky_count = 0
        self.retry_later_served = False
        self._bombs: dict[str, asyncio.Future[bytes]] = {}
        self._huge: Page | None = None
        self._many: bytes | None = None
        self._dups: dict[str, Page] | None = None

    def handle(self, req: Request) -> Response | Awaitable[Response] | None:
        path = req.path
        f = self.features
        if "calendar" in f and path.startswith("/calendar/"):
            return self.calendar(path)
        if "redirects" in f and path.startswith("/redirect/"):
            return self.redirect(path)
        if "slow" in f and path in SLOW_SECONDS:
            return self.slow(path, req)
        if "errors" in f and path.startswith("/error/"):
            return self.error(path, req)
        if "malformed" in f and path.startswith("/malformed/"):
            return self.malformed(path)
        if "encodings" in f and path in ENCODING_PAGES:
            return self.encoded(path)
        if "bomb" in f and path in BOMB_PATHS:
            return self.bomb(BOMB_PATHS[path])
        if "hostdown" in f and path == "/hostdown/links.html":
            return _host_pages("A host that is down", DOWN_HOST, HOST_DOWN_LINKS)
        if "dnsdown" in f and path == "/dnsdown/links.html":
            return _host_pages(
                "A host whose name does not resolve", DNS_DOWN_HOST, DNS_DOWN_LINKS
            )
        if "unparseable" in f and path in UNPARSEABLE_PATHS:
            encoding, body = UNPARSEABLE_PATHS[path]
            headers = [("Content-Type", HTML), ("Content-Encoding", encoding)]
            return Response(200, body, headers)
        if "huge" in f and path == "/huge.html":
            return self.site.page_response(self.huge(), req)
        if "failures" in f and path.startswith("/fail/"):
            return self.failure(path, req)
        if "ssrf" in f and path.startswith("/ssrf/"):
            return self.ssrf(path)
        if "content" in f and path.startswith("/content/"):
            return self.content(path)
        if "manylinks" in f and path == "/many/links.html":
            return self.many_links()
        if "traps" in f and path.startswith(
            ("/repeat/", "/session/", "/s/", "/sid/", "/facets")
        ):
            return self.trap(path, req.query)
        if "duplicates" in f and path.startswith("/dup/"):
            page = self.duplicates().get(path)
            return None if page is None else self.site.page_response(page, req)
        return None

    # --- content ---------------------------------------------------------------
    def content(self, path: str) -> Response | None:
        if path in HOSTILE_LABELS:
            where, label = HOSTILE_LABELS[path]
            link = f'<p>{LABEL_SAMPLE}</p><a href="reached-{label}.html">next</a>'
            if where == "header":
                html = _html(f"Label {label}", link)
                return Response(
                    200,
                    html.encode(),
                    [("Content-Type", f"text/html; charset={label}")],
                )
            html = _html(f"Label {label}", link, charset=label)
            return Response(200, html.encode(), [("Content-Type", "text/html")])
        if path.startswith("/content/reached-"):
            return Response(
                200, _html("Reached", "").encode(), [("Content-Type", HTML)]
            )
        if path == "/content/files.html":
            links = "".join(f'<p><a href="{p}">{p}</a></p>' for p in CONTENT_FILES)
            return Response(
                200, _html("Files", links).encode(), [("Content-Type", HTML)]
            )
        if path in CONTENT_FILES:
            ctype, body = CONTENT_FILES[path]
            return Response(200, body, [("Content-Type", ctype)])
        return None

    def many_links(self) -> Response:
        if self._many is None:
            self._many = many_links_body()
        return Response(200, self._many, [("Content-Type", HTML)])

    # --- failures ------------------------------------------------------------
    def failure(self, path: str, req: Request) -> Response | None:
        if path == "/fail/links.html":
            port = self.site.port
            urls = [f"http://{h}:{port}/" for h in UNRESOLVABLE_HOSTS]
            urls += [f"http://{UNRESOLVABLE_HOSTS[0]}:{port}/page.html"]
            urls += [f"http://{DOWN_HOST}/", f"http://{DOWN_HOST}/page.html"]
            links = "".join(f'<a href="{u}">{u}</a>\n' for u in urls)
            body = _html("Dead links", links)
            return Response(200, body.encode(), [("Content-Type", HTML)])
        match = re.match(r"^/fail/long/(\d+)$", path)
        if match and 1 <= int(match.group(1)) <= LONG_CHAIN:
            n = int(match.group(1))
            nxt = f"/fail/long/{n + 1}" if n < LONG_CHAIN else "/fail/landing.html"
            return Response(302, b"", [("Location", nxt)])
        if path in ("/fail/loop/a", "/fail/loop/b"):
            other = "/fail/loop/b" if path.endswith("a") else "/fail/loop/a"
            return Response(302, b"", [("Location", other)])
        if path in ("/fail/refresh/a", "/fail/refresh/b"):
            other = "/fail/refresh/b" if path.endswith("a") else "/fail/refresh/a"
            head = f'<meta http-equiv="refresh" content="0; url={other}">'
            body = f"<!DOCTYPE html><html><head>{head}</head><body></body></html>"
            return Response(200, body.encode(), [("Content-Type", HTML)])
        if path == "/fail/offsite.html":
            return Response(302, b"", [("Location", OFFSITE_URL)])
        if path == "/fail/landing.html":
            body = _html("Landed", f"<p>After {LONG_CHAIN} redirects.</p>")
            return Response(200, body.encode(), [("Content-Type", HTML)])
        if path == "/fail/retry-later.html":
            if req.method == "GET" and not self.retry_later_served:
                self.retry_later_served = True
                return Response(
                    503,
                    _html("Come back later", "<p>Busy.</p>").encode(),
                    [("Content-Type", HTML), ("Retry-After", str(RETRY_LATER_SECONDS))],
                )
            body = _html("Later", "<p>Served after its Retry-After.</p>")
            return Response(200, body.encode(), [("Content-Type", HTML)])
        if path == "/fail/throttled.html":
            slow_down = _html("Too many requests", "<p>Slow down.</p>").encode()
            return Response(
                429, slow_down, [("Content-Type", HTML), ("Retry-After", "1")]
            )
        return None

    # --- ssrf ----------------------------------------------------------------
    def ssrf(self, path: str) -> Response | None:
        port = self.site.port
        if path == "/ssrf/link.html":
            url = PRIVATE_LINK.format(port=port)
            body = _html("Internal link", f'<a href="{url}">{url}</a>')
            return Response(200, body.encode(), [("Content-Type", HTML)])
        if path == "/ssrf/redirect.html":
            return Response(
                302, b"", [("Location", PRIVATE_REDIRECT.format(port=port))]
            )
        return None

    # --- calendar ------------------------------------------------------------
    def calendar(self, path: str) -> Response | None:
        match = _CALENDAR_RE.match(path)
        if not match:
            return None
        year, month = int(match.group(1)), int(match.group(2))
        if not (1 <= year <= 9999 and 1 <= month <= 12):
            return None
        prev_y, prev_m = (year, month - 1) if month > 1 else (year - 1, 12)
        next_y, next_m = (year, month + 1) if month < 12 else (year + 1, 1)
        links = []
        if prev_y >= 1:
            links.append(f'<a href="/calendar/{prev_y:04d}/{prev_m:02d}">Previous</a>')
        if next_y <= 9999:
            links.append(f'<a href="/calendar/{next_y:04d}/{next_m:02d}">Next</a>')
        rng = random.Random(stable_hash(self.site.spec.seed, "calendar", path))
        events = "".join(
            f"<li>{day:02d}: {self.site.words(rng, 4)}</li>\n"
            for day in sorted(rng.sample(range(1, 29), 5))
        )
        body = f"<nav>{' | '.join(links)}</nav>\n<ul>\n{events}</ul>"
        return Response(
            200,
            _html(f"Events {year:04d}-{month:02d}", body).encode(),
            [("Content-Type", HTML)],
        )

    # --- traps ---------------------------------------------------------------
    def trap(self, path: str, query: str) -> Response | None:
        if path.startswith("/repeat/") and path.endswith("/"):
            links = ["a/", "b/a/"]
        elif path == "/session/page.html" and query.startswith("sid="):
            sid = int(query[4:]) if query[4:].isdigit() else 0
            links = [f"/session/page.html?sid={sid + 1}"]
        elif match := _TOKEN_RE.match(path):
            links = [f"/s/{int(match.group(1), 16) + 1:020x}/page.html"]
        elif match := _SID_RE.match(path):
            n = session_number(match.group(1))
            if n is None:
                return None
            nxt = n + 1
            links = (
                [f"/sid/{session_token(nxt)}/page.html"] if nxt < SID_TRAP_PAGES else []
            )
        elif path == "/facets":
            chosen = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
            links = []
            for name, values in FACETS.items():
                for value in values:
                    if chosen.get(name) != value:
                        q = sorted({**chosen, name: value}.items())
                        links.append("/facets?" + "&".join(f"{k}={v}" for k, v in q))
        else:
            return None
        items = "".join(f'<li><a href="{u}">{u}</a></li>\n' for u in links)
        body = _html("Trap", f"<ul>\n{items}</ul>")
        return Response(200, body.encode(), [("Content-Type", HTML)])

    # --- redirects -----------------------------------------------------------
    def redirect(self, path: str) -> Response | None:
        site, t = self.site, self.site.spec.trap_host
        hops = {
            "/redirect/chain/1": (301, "/redirect/chain/2"),
            "/redirect/chain/2": (
                302,
                site.spec.url(t, "/redirect/chain/3", site.port),
            ),
            "/redirect/chain/3": (307, "/redirect/landing.html"),
            "/redirect/loop/a": (302, "/redirect/loop/b"),
            "/redirect/loop/b": (302, "/redirect/loop/a"),
        }
        if path in hops:
            status, location = hops[path]
            return Response(status, b"", [("Location", location)])
        if path == "/redirect/landing.html":
            body = _html("Landed", "<p>The end of a chain of three redirects.</p>")
            return Response(200, body.encode(), [("Content-Type", HTML)])
        return None

    # --- slow ---------------------------------------------------------------
    async def slow(self, path: str, req: Request) -> Response:
        await asyncio.sleep(SLOW_SECONDS[path])
        body = _html("Slow page", f"<p>This page took {SLOW_SECONDS[path]:g} s.</p>")
        return self.site.page_response(make_page(body.encode(), 1_704_067_200.0), req)

    # --- errors -------------------------------------------------------------
    def error(self, path: str, req: Request) -> Response | None:
        def page(status: int, *headers: tuple[str, str]) -> Response:
            body = _html(f"Error {status}", "<p>Something went wrong.</p>").encode()
            return Response(status, body, [("Content-Type", HTML), *headers])

        if path == "/error/500.html":
            return page(500)
        if path == "/error/503.html":
            return page(503)
        if path == "/error/429-seconds.html":
            return page(429, ("Retry-After", str(RETRY_AFTER_SECONDS)))
        if path == "/error/429-date.html":
            when = formatdate(time.time() + RETRY_AFTER_DATE_SECONDS, usegmt=True)
            return page(429, ("Retry-After", when))
        if path == "/error/flaky.html":
            if req.method == "GET":
                self.flaky_count += 1
                if self.flaky_count <= FLAKY_FAILURES:
                    return page(503, ("Retry-After", "1"))
            body = _html("Flaky page", "<p>Third time lucky.</p>").encode()
            return Response(200, body, [("Content-Type", HTML)])
        return None

    # --- malformed ------------------------------------------------------------
    def malformed(self, path: str) -> Response | None:
        spec = self.site.spec
        t = spec.trap_host
        other = spec.page_path(t, 1 % spec.pages_on(t))
        if path == "/malformed/unclosed.html":
            body = (
                "<html><head><title>Unclosed tags</title><body><div class=main>"
                "<p>Some <b>"
                f'text <a href="/">home<p>more text <a href={other}>next<table><tr>'
                "<td>cell<td><div><ul><li>one<li>two <i>italic <b>bold <p>para"
            ).encode()
            return Response(200, body, [("Content-Type", HTML)])
        if path == "/malformed/garbage.html":
            rng = random.Random(stable_hash(spec.seed, "garbage"))
            noise = bytes(rng.randrange(256) for _ in range(3000))
            body = (
                b"<html><head><title>Garbage \xff\xfe\x00</title></head><body><p>"
                + noise[:1500]
                + b'<a href="/">home</a>\x00\x00\xc3\x28\xe2\x82<p>'
                + noise[1500:]
                + f'<a href="{other}">next</a>'.encode()
            )
            return Response(200, body, [("Content-Type", HTML)])
        return None

    # --- encodings -------------------------------------------------------------
    def encoded(self, path: str) -> Response:
        codec, where, text = ENCODING_PAGES[path]
        charset = _CHARSET_NAMES.get(codec, codec)
        if where == "bom":
            head, content_type = "", "text/html"
        elif where == "meta":
            head = (
                '<meta http-equiv="Content-Type" '
                f'content="text/html; charset={charset}">\n'
            )
            content_type = "text/html"
        else:
            head, content_type = "", f"text/html; charset={charset}"
        html = (
            f"<!DOCTYPE html>\n<html>\n<head>\n{head}<title>{text}</title>\n</head>\n"
            f'<body>\n<h1>{text}</h1>\n<p>{text}</p>\n<p><a href="/">Home</a></p>\n'
            "</body>\n</html>\n"
        )
        body = html.encode(codec)
        if where == "bom":
            body = b"\xef\xbb\xbf" + body
        return Response(200, body, [("Content-Type", content_type)])

    # --- bomb and huge ---------------------------------------------------------
    async def bomb(self, encoding: str) -> Response:
        if encoding not in self._bombs:
            loop = asyncio.get_running_loop()
            self._bombs[encoding] = loop.run_in_executor(
                None, build_bomb, BOMB_SIZE, encoding
            )
        body = await self._bombs[encoding]
        headers = [("Content-Type", HTML), ("Content-Encoding", encoding)]
        return Response(200, body, headers)

    def huge(self) -> Page:
        if self._huge is None:
            site = self.site
            t = site.spec.trap_host
            links = [(t, "/"), *((t, site.spec.page_path(t, k)) for k in range(1, 5))]
            rng = random.Random(stable_hash(site.spec.seed, "huge"))
            body = site.render_html(t, "/huge.html", links, rng, size=HUGE_SIZE)
            # The paragraphs fill up to the size; pad the last bytes exactly.
            body = body.replace(b"</body>", b" " * (HUGE_SIZE - len(body)) + b"</body>")
            self._huge = make_page(body, 1_704_067_200.0)
        return self._huge

    # --- duplicates ------------------------------------------------------------
    def duplicates(self) -> dict[str, Page]:
        if self._dups is None:
            site = self.site
            spec = site.spec
            t = spec.trap_host
            links = [
                (t, "/"),
                *((t, spec.page_path(t, k % spec.pages_on(t))) for k in range(1, 12)),
            ]
            rng = random.Random(stable_hash(spec.seed, "dup"))
            original = site.render_html(
                t, "/dup/original.html", links, rng, size=12_000
            )
            mtime = spec.last_modified(t, "/dup/original.html")
            pages = {p: make_page(original, mtime) for p in DUPLICATE_EXACT}
            for n, path in enumerate(DUPLICATE_NEAR):
                pages[path] = make_page(near_duplicate(original, n + 1), mtime)
            self._dups = pages
        return self._dups


def near_duplicate(
    html: bytes, variant: int, changes: int = NEAR_CHANGED_WORDS
) -> bytes:
    """``html`` with ``changes`` words of its paragraphs replaced.

    >>> a = b"<p>one two three four five six seven eight nine ten</p>"
    >>> b = near_duplicate(a, 1, changes=2)
    >>> b != a, len(a.split()) == len(b.split())
    (True, True)
    >>> sum(x != y for x, y in zip(a.split(), b.split()))
    2
    """
    words = list(re.finditer(rb"(?<=[ >])([a-z]{3,})(?=[ .<])", html))
    # Only words inside paragraphs of text, never tags or attribute values.
    words = [
        m
        for m in words
        if html.rfind(b"<p>", 0, m.start()) > html.rfind(b"</p>", 0, m.start())
    ]
    rng = random.Random(variant)
    chosen = sorted(rng.sample(range(len(words)), min(changes, len(words))))
    out, last = [], 0
    for n in chosen:
        m = words[n]
        out += [
            html[last : m.start()],
            b"changed" + str(variant).encode() + bytes([97 + n % 26]),
        ]
        last = m.end()
    out.append(html[last:])
    return b"".join(out)


def _host_pages(title: str, host: str, n: int) -> Response:
    """A page linking ``n`` pages of ``host`` (the hostdown and dnsdown
    corners)."""
    urls = [f"http://{host}/p/{i}.html" for i in range(n)]
    links = "".join(f'<a href="{u}">{u}</a>\n' for u in urls)
    html = _html(title, links).encode()
    return Response(200, html, [("Content-Type", HTML)])
