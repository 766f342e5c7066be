"""The canonical form of a URL: what the frontier queues, the dupefilter
fingerprints and the page store records.

:func:`canonicalize_url` is w3lib's :func:`w3lib.url.canonicalize_url` (the
function Scrapy's request fingerprinter uses) plus webcrawl's own rules, in
this order:

1. A relative reference is resolved against ``base`` when one is given.
2. w3lib: the URL is made safe (IDNA host, percent-encoded UTF-8), the scheme
   and host are lowercased, dot segments (``.``/``..``) in the path are
   resolved, percent-encoding is normalized (``%7e`` -> ``~``, ``%2f`` ->
   ``%2F``), query arguments are sorted by key then value (blank values kept),
   an empty path becomes ``/``, and the fragment is dropped.
3. The default port of ``http`` (80) and ``https`` (443) is dropped, and so is
   the trailing dot of a fully qualified host name (``example.com.``).
4. Tracking parameters (:data:`TRACKING_PARAMS`, any ``utm_*``) and session
   ids in the query (:data:`SESSION_PARAMS`) are removed, matched without
   regard to case; so are session ids carried as path parameters
   (``;jsessionid=...``). A query left empty loses its ``?``.

The result is a fixed point: ``canonicalize_url(canonicalize_url(u)) ==
canonicalize_url(u)``, and the order of query arguments does not matter.

Settings read: none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy import Request

import re
from functools import lru_cache
from urllib.parse import unquote_plus, urljoin, urlsplit, urlunsplit

from w3lib.url import canonicalize_url as _w3lib_canonicalize_url

__all__ = [
    "SESSION_PARAMS",
    "TRACKING_PARAMS",
    "canonical_request",
    "canonicalize_url",
]

#: Query parameters that identify a click or a campaign, never a resource
#: (compared lowercased). Any parameter starting with ``utm_`` goes too.
TRACKING_PARAMS = frozenset(
    {
        # Google Ads / Analytics / DoubleClick
        "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "_ga", "_gl",
        # Meta, Microsoft, Yandex, X/Twitter, TikTok, LinkedIn, Instagram
        "fbclid", "msclkid", "yclid", "twclid", "ttclid", "li_fat_id", "igshid",
        # Mailchimp, HubSpot, Marketo, Vero, Adobe, Outbrain/Rakuten
        "mc_cid", "mc_eid", "_hsenc", "_hsmi", "__hssc", "__hstc", "__hsfp",
        "hsctatracking", "mkt_tok", "vero_id", "vero_conv", "s_cid",
        "rb_clickid", "oly_anon_id", "oly_enc_id", "wickedid",
    }
)  # fmt: skip

#: Query parameters that carry a server session id (compared lowercased); any
#: parameter starting with ``aspsessionid`` goes too.
SESSION_PARAMS = frozenset(
    {"jsessionid", "phpsessid", "sessionid", "session_id", "cfid", "cftoken",
     "zenid", "oscsid"}
)  # fmt: skip

_DEFAULT_PORTS = {"http": "80", "https": "443"}

# ";jsessionid=0A1B..." (Java servlets) and friends, up to the next "/", ";"
# or the end of the path.
_PATH_SESSION_RE = re.compile(
    r";(?:jsessionid|phpsessid|sessionid|sid)=[^/;]*", re.IGNORECASE
)


def _is_noise_param(name: str) -> bool:
    """Whether a (percent-encoded) query parameter name is tracking or session.

    >>> _is_noise_param("utm_source"), _is_noise_param("UTM%5FMedium")
    (True, True)
    >>> _is_noise_param("PHPSESSID"), _is_noise_param("ASPSESSIONIDQQGGQ")
    (True, True)
    >>> _is_noise_param("page"), _is_noise_param("sid")
    (False, False)
    """
    name = unquote_plus(name).lower()
    return (
        name.startswith(("utm_", "aspsessionid"))
        or name in TRACKING_PARAMS
        or name in SESSION_PARAMS
    )


def _strip_query(query: str) -> str:
    """Drop tracking and session parameters from an encoded query string.

    >>> _strip_query("a=1&fbclid=x&utm_source=y&z=")
    'a=1&z='
    >>> _strip_query("gclid=1")
    ''
    """
    if not query:
        return query
    kept = [
        part
        for part in query.split("&")
        if part and not _is_noise_param(part.partition("=")[0])
    ]
    return "&".join(kept)


def _normalize_netloc(scheme: str, netloc: str) -> str:
    """Drop the scheme's default port and a host's trailing dot.

    >>> _normalize_netloc("http", "example.com:80")
    'example.com'
    >>> _normalize_netloc("https", "example.com:80")
    'example.com:80'
    >>> _normalize_netloc("https", "user:pw@example.com.:443")
    'user:pw@example.com'
    >>> _normalize_netloc("http", "[::1]:80"), _normalize_netloc("http", "[::1]")
    ('[::1]', '[::1]')
    """
    userinfo, at, hostport = netloc.rpartition("@")
    if hostport.endswith("]"):  # IPv6 literal without a port
        host, port = hostport, ""
    else:
        host, _, port = hostport.rpartition(":")
        if not host:  # no colon at all
            host, port = hostport, ""
    if port and _DEFAULT_PORTS.get(scheme) == port:
        port = ""
    if host.endswith(".") and not host.startswith("["):
        host = host.rstrip(".")
    return f"{userinfo}{at}{host}{':' if port else ''}{port}"


def canonicalize_url(url: str, base: str | None = None) -> str:
    """The canonical form of ``url`` (resolved against ``base`` if given).

    Scheme and host lowercased, default port dropped, fragment removed:

    >>> canonicalize_url("HTTP://WWW.Example.COM:80/a#section-2")
    'http://www.example.com/a'
    >>> canonicalize_url("https://example.com:443")
    'https://example.com/'
    >>> canonicalize_url("https://example.com:8443/")
    'https://example.com:8443/'

    Query arguments sorted, percent-encoding normalized:

    >>> canonicalize_url("http://example.com/%7euser/a%2fb?b=2&a=%e2%82%ac")
    'http://example.com/~user/a%2Fb?a=%E2%82%AC&b=2'

    Tracking parameters and session ids removed (query and path parameter):

    >>> canonicalize_url("http://example.com/p?id=7&utm_source=x&fbclid=y&gclid=z")
    'http://example.com/p?id=7'
    >>> canonicalize_url("http://example.com/cart;jsessionid=0AB?PHPSESSID=9&x=1")
    'http://example.com/cart?x=1'
    >>> canonicalize_url("http://example.com/?utm_medium=email")
    'http://example.com/'

    Relative paths resolved (dot segments, and against a base):

    >>> canonicalize_url("http://example.com/a/./b/../c")
    'http://example.com/a/c'
    >>> canonicalize_url("../d?x=1#top", base="http://example.com/a/b/c")
    'http://example.com/a/d?x=1'

    Trailing dot of the host, internationalized host names:

    >>> canonicalize_url("http://example.com./x")
    'http://example.com/x'
    >>> canonicalize_url("http://b\\u00fccher.de/\\u00fc")
    'http://xn--bcher-kva.de/%C3%BC'
    """
    if base:
        url = urljoin(base, url)
    return _canonical(url)


# A page's links repeat on every page of its site: the same ~20 URLs are
# canonicalized again and again (enqueue, redirect checks). 16,384 entries of
# two short strings are ~5 MB.
@lru_cache(maxsize=16_384)
def _canonical(url: str) -> str:
    url = _w3lib_canonicalize_url(url)
    parts = urlsplit(url)
    netloc = _normalize_netloc(parts.scheme, parts.netloc)
    path = _PATH_SESSION_RE.sub("", parts.path)
    query = _strip_query(parts.query)
    return urlunsplit((parts.scheme, netloc, path, query, ""))


def canonical_request(request: Request) -> Request:
    """``request`` with its URL in canonical form: what a dupefilter
    fingerprints (the canonical URL is the dedup key beside a request, never
    a replacement of the URL it is fetched with).

    >>> from scrapy import Request
    >>> canonical_request(Request("http://A.test/p?b=2&a=1")).url
    'http://a.test/p?a=1&b=2'
    """
    canonical = canonicalize_url(request.url)
    return request if canonical == request.url else request.replace(url=canonical)
