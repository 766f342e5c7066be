"""Requests as compact, safe bytes for the frontier (never pickle).

A queued request is the JSON of ``Request.to_dict()`` with every field that
holds its default left out, top-level field names shortened, and the URL kept
in front as plain text::

    https://a.test/page            a GET with nothing else to say
    https://a.test/p\\n{"m":{"depth":2}}   anything else: a short JSON tail

The request comes back as it was made: its URL as given (the canonical
form is the dupefilter's key, never a replacement), method, body, headers,
``priority`` (``"p"``, when not 0: the ZSET score holds the *scored*
priority, which orders the queue), meta (``download_slot`` included) and
``dont_filter``. A ``dont_filter`` request carries a random ``"u"`` so that
identical ones stay distinct members of their host's queue (each is
scheduled, as ``dont_filter`` says). This keeps a typical queued page
request under 200 bytes of Redis memory, ZSET overhead included (see
``bench/RESULTS.md``). JSON means a shared Redis
holds data, not code: anyone who can write to it cannot run code in workers.
Decoding keeps it that way: a stored request class must be one of
:data:`REQUEST_CLASSES` (Scrapy would import any dotted path it is given), and
a callback or errback must name a public method the spider itself defines
(or ``parse``), a method of the spider's own code (private ones too), or
``CrawlSpider``'s rule callbacks (``_callback``, ``_errback``); anything else
raises :class:`CorruptEntry`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from scrapy import Request, Spider
from scrapy.spiders import CrawlSpider
from scrapy.utils.request import request_from_dict

from extensions.meta import FRONTIER_LEASE

# Values equal to these are not stored (Request's own defaults).
_DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "method": "GET",
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
    "flags": [],
    "cb_kwargs": {},
}
_SHORT = {
    "callback": "c",
    "errback": "e",
    "headers": "h",
    "method": "M",
    "body": "b",
    "cookies": "k",
    "meta": "m",
    "encoding": "n",
    "dont_filter": "f",
    "flags": "F",
    "cb_kwargs": "a",
    "_class": "C",
    "priority": "p",
}
_LONG = {v: k for k, v in _SHORT.items()}
# Meta keys never stored: per-attempt state that must not survive a re-queue.
TRANSIENT_META = frozenset({"download_latency", FRONTIER_LEASE})
# JSON key of a dont_filter request's random tag (see the module docstring).
UNIQUE = "u"
# Scrapy's own methods that are callbacks by design: CrawlSpider's rules.
SCRAPY_CALLBACKS: dict[type, frozenset[str]] = {
    CrawlSpider: frozenset({"_callback", "_errback"})
}


# The request classes a queued entry may name (``_class``): the ones Scrapy
# ships that webcrawl's components can produce. Anything else is refused
# before Scrapy's ``load_object`` would import it.
REQUEST_CLASSES = frozenset(
    {
        "scrapy.http.request.Request",
        "scrapy.http.request.form.FormRequest",
        "scrapy.http.request.json_request.JsonRequest",
    }
)


class CorruptEntry(ValueError):
    """A frontier entry that is not a request this project wrote: bad bytes,
    bad JSON, a request class or callback that is not allowed."""


class UnserializableRequest(ValueError):
    """The request cannot be stored as JSON (e.g. a lambda callback or a meta
    value JSON cannot represent)."""


def _encode_value(value: Any) -> Any:
    if isinstance(value, bytes):
        # Header values and bodies are bytes: keep them as latin-1 text with a
        # marker, which round-trips every byte.
        return {"$b": value.decode("latin-1")}
    if isinstance(value, dict):
        # Header names are bytes: JSON keys must be text (latin-1 round-trips).
        return {
            (k.decode("latin-1") if isinstance(k, bytes) else str(k)): _encode_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_encode_value(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise UnserializableRequest(f"cannot store a {type(value).__name__} in JSON")


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and "$b" in value:
            raw = value["$b"]
            if not isinstance(raw, str):
                raise CorruptEntry("a bytes value that is not text")
            try:
                return raw.encode("latin-1")
            except UnicodeEncodeError:
                raise CorruptEntry("a bytes value beyond latin-1") from None
        return {k: _decode_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_value(v) for v in value]
    return value


def _method_name(spider: Spider | None, func: Any) -> str | None:
    """The name of the spider method ``func``, found by name first: Scrapy's
    own lookup scans every member of the spider (``inspect.getmembers``), a
    cost paid for every outlink of every page."""
    if func is None or isinstance(func, str):
        return func
    name = getattr(func, "__name__", "")
    self_of = getattr(func, "__self__", None)
    if spider is not None and self_of is spider and getattr(spider, name, None) == func:
        return str(name)
    raise _SlowPath


class _SlowPath(Exception):
    pass


def _request_dict(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, with a fast path for callbacks."""
    try:
        d: dict[str, Any] = {
            "url": request.url,
            "callback": _method_name(spider, request.callback),
            "errback": _method_name(spider, request.errback),
            "headers": dict(request.headers),
        }
        for attr in request.attributes:
            d.setdefault(attr, getattr(request, attr))
        if type(request) is not Request:  # subclasses add their own fields
            return request.to_dict(spider=spider)
        return d
    except _SlowPath:
        try:
            return request.to_dict(spider=spider)
        except ValueError as exc:  # a callback that is not a spider method
            raise UnserializableRequest(str(exc)) from exc


def request_to_bytes(
    request: Request, spider: Spider | None = None, *, unique: bool = False
) -> bytes:
    """Serialize ``request`` for the frontier; ``unique`` tags it as a
    ``dont_filter`` request is tagged (a scheduler whose dupefilter lets
    identical requests through keeps each).

    >>> from scrapy import Request
    >>> request_to_bytes(Request("https://a.test/x"))
    b'https://a.test/x'
    >>> request_to_bytes(Request("https://a.test/x", meta={"depth": 2}, priority=9))
    b'https://a.test/x\\n{"m":{"depth":2},"p":9}'
    """
    d = _request_dict(request, spider)
    url = d.pop("url")
    if "\n" in url:
        raise UnserializableRequest("URL contains a newline")
    if unique or d.get("dont_filter"):
        d[UNIQUE] = uuid.uuid4().hex[:12]
    meta = d.get("meta") or {}
    if any(k in meta for k in TRANSIENT_META):
        d["meta"] = {k: v for k, v in meta.items() if k not in TRANSIENT_META}
    rest = {
        _SHORT.get(k, k): _encode_value(v)
        for k, v in d.items()
        if k not in _DEFAULTS or v != _DEFAULTS[k]
    }
    if not rest:
        return url.encode()
    try:
        tail = json.dumps(rest, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UnserializableRequest(str(exc)) from exc
    return f"{url}\n{tail}".encode()


def request_from_bytes(
    data: bytes, spider: Spider | None = None, priority: int = 0
) -> Request:
    """Inverse of :func:`request_to_bytes`; raises :class:`CorruptEntry` (only)
    for an entry it will not turn into a request.

    >>> r = request_from_bytes(b'https://a.test/x\\n{"m":{"depth":2}}', priority=3)
    >>> r.url, r.meta["depth"], r.priority
    ('https://a.test/x', 2, 3)
    >>> from scrapy import Request
    >>> h = Request("https://a.test/", headers={"Referer": "https://b.test/"})
    >>> request_from_bytes(request_to_bytes(h)).headers["Referer"]
    b'https://b.test/'
    >>> request_from_bytes(b'https://a.test/\\n{"C":"this.s"}')
    Traceback (most recent call last):
    ...
    extensions...CorruptEntry: request class 'this.s' is not allowed
    """
    try:
        text = data.decode()
        url, _, tail = text.partition("\n")
        d: dict[str, Any] = {"url": url, "priority": priority}
        if tail:
            fields = json.loads(tail)
            if not isinstance(fields, dict):
                raise CorruptEntry("the JSON tail is not an object")
            fields.pop(UNIQUE, None)
            for k, v in fields.items():
                d[str(_LONG.get(k, k))] = _decode_value(v)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CorruptEntry(f"not a stored request: {exc}") from None
    cls = d.get("_class")
    if cls is not None and cls not in REQUEST_CLASSES:
        raise CorruptEntry(f"request class {str(cls)[:100]!r} is not allowed")
    for name in ("callback", "errback"):
        if d.get(name):
            _check_method(spider, d[name])
    try:
        return request_from_dict(d, spider=spider)
    except (TypeError, ValueError, AttributeError) as exc:
        # Fields of the wrong type or shape reach Request's constructor.
        raise CorruptEntry(f"not a stored request: {exc}") from None


def _check_method(spider: Spider | None, name: Any) -> None:
    """A stored callback names a method the spider may be called back with:
    ``parse``, a method of the spider's own code (a class that is not
    Scrapy's; private names too, never a dunder), or one of Scrapy's
    callbacks by design (:data:`SCRAPY_CALLBACKS`). Never another attribute
    of Scrapy's classes, such as ``close`` or ``_set_crawler``: a shared
    Redis holds data, and must not choose what a worker runs."""
    ok = (
        isinstance(name, str)
        and spider is not None
        and name.isidentifier()
        and not name.startswith("__")
        and callable(getattr(type(spider), name, None))
        and (name == "parse" or _defined_by_spider_code(type(spider), name))
    )
    if not ok:
        raise CorruptEntry(f"callback {str(name)[:100]!r} is not a spider method")


def _defined_by_spider_code(cls: type, name: str) -> bool:
    """Whether the class that defines ``name`` for ``cls`` (first in its
    MRO) is the spider's own code, or names it a Scrapy callback."""
    for klass in cls.__mro__:
        if name in vars(klass):
            if name in SCRAPY_CALLBACKS.get(klass, ()):
                return True
            return not klass.__module__.startswith("scrapy.") and klass is not object
    return False
