"""Host identity: the one name of a host every module keys by.

:func:`host_key` is the frontier's dispatch key (``scheme://host:port``, RFC
9309's identity of a robots.txt), :func:`host_partition` the frontier
partition a host belongs to, :func:`registered_domain` the registrable domain
(``POLITENESS_KEY=domain``). Pure functions: no Redis, no settings.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from urllib.parse import urlsplit

import mmh3
from scrapy.http import Request

DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21, "ws": 80, "wss": 443}
# What POLITENESS_KEY may name, in the order a request takes its locks (a
# fixed order: two requests never each hold the lock the other waits for).
KEY_KINDS = ("host", "domain", "ip")


def politeness_keys(value: str) -> tuple[str, ...]:
    """The lock kinds a ``POLITENESS_KEY`` names, in :data:`KEY_KINDS` order.

    >>> politeness_keys("ip, host"), politeness_keys("domain")
    (('host', 'ip'), ('domain',))
    """
    named = {part.strip() for part in str(value).split(",")}
    return tuple(kind for kind in KEY_KINDS if kind in named)


def host_key(url_or_request: str | Request) -> str:
    """The frontier's dispatch key of a URL: ``scheme://host:port``, lowercased,
    the default port made explicit: RFC 9309's identity of a robots.txt (not
    Scrapy's slot key, which is the bare hostname; see :mod:`extensions.keys`).

    >>> host_key("http://A.Test/x?y=1")
    'http://a.test:80'
    >>> host_key("https://a.test:8443/")
    'https://a.test:8443'
    >>> host_key("HTTPS://user:pw@Example.COM")
    'https://example.com:443'
    >>> host_key("http://[::1]:8080/p")
    'http://[::1]:8080'
    >>> host_key(Request("http://127.0.0.1:5000/robots.txt"))
    'http://127.0.0.1:5000'
    """
    url = url_or_request.url if isinstance(url_or_request, Request) else url_or_request
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:  # a port out of range: keep the URL's own text
        port = None
    if port is None:
        port = DEFAULT_PORTS.get(scheme, 0)
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


@lru_cache(maxsize=65_536)
def host_partition(hostkey: str, partitions: int) -> int:
    """The frontier partition of a host (``FRONTIER_PARTITIONS``): MurmurHash3
    (32-bit, seed 0) of its :func:`host_key` modulo the partition count, the
    same on every worker and every run (Python's ``hash`` is salted per
    process). Everything keyed by host lives in that partition: its queue,
    its record, its download lock.

    >>> host_partition("http://a.test:80", 1)
    0
    >>> [host_partition(f"http://h{i}.test:80", 4) for i in range(8)]
    [2, 1, 0, 0, 1, 0, 3, 3]
    """
    if partitions <= 1:
        return 0
    return mmh3.hash(hostkey, 0, signed=False) % partitions


def hostname_of(key: str) -> str:
    """The bare host name of a :func:`host_key`.

    >>> hostname_of("http://a.test:80")
    'a.test'
    >>> hostname_of("http://[::1]:8080")
    '::1'
    """
    return urlsplit(key).hostname or ""


@lru_cache(maxsize=1)
def _extractor() -> object:
    import tldextract

    # The snapshot of the public suffix list bundled with tldextract: no
    # network fetch at run time.
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def registered_domain(hostname: str) -> str:
    """The registrable domain of a host name (public suffix + one label); IP
    addresses and names without a known suffix are returned as they are.

    >>> registered_domain("www.bbc.co.uk")
    'bbc.co.uk'
    >>> registered_domain("a.b.example.com")
    'example.com'
    >>> registered_domain("127.0.0.1")
    '127.0.0.1'
    >>> registered_domain("localhost")
    'localhost'
    """
    hostname = hostname.lower().strip("[]")
    try:
        ipaddress.ip_address(hostname)
        return hostname
    except ValueError:
        pass
    ext = _extractor()(hostname)  # type: ignore[operator]
    return str(ext.top_domain_under_public_suffix or hostname)
