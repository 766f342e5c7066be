"""SSRF guard: refuse to connect to loopback, private and other non-public
addresses, checked on the address actually connected to.

Settings read: ``ALLOW_PRIVATE_ADDRESSES`` (True: the guard is off),
``ADDRESS_ALLOWLIST`` (CIDR ranges let through), ``DOWNLOAD_HANDLERS`` and
``DOWNLOAD_HANDLERS_BASE`` (the guard needs a Twisted HTTP handler).

How the check holds whatever ``TWISTED_DNS_RESOLVER`` says: Scrapy's HTTP/1.1
and HTTP/2 handlers connect through Twisted's ``HostnameEndpoint``, which asks
``reactor.nameResolver`` (an ``IHostnameResolver``) for the addresses of a
host, IP literals included, and connects to exactly the addresses it is
given. When the crawl opens, :class:`AddressGuard` wraps whatever resolver is
installed then (Scrapy installs ``TWISTED_DNS_RESOLVER`` before) with
:class:`GuardedResolver`, which drops every refused address before the
endpoint sees it. So a public name that resolves to 127.0.0.1 is refused, a
cached or rebinding answer is checked when it is used, and every redirect
hop (a new request, a new connection) is checked again. A refused host ends
with :class:`BlockedAddress` (an ``IgnoreRequest``: never retried, never
counted against the host's back-off) instead of a DNS lookup error; a
robots.txt refused this way counts as unavailable (RFC 9309: allow), so the
host's pages are then refused one by one, each with its record.

IP literals (``http://127.0.0.2/``, ``http://2130706434/``,
``http://0x7f000001/``, ``http://[::1]/``) are refused up front in
:meth:`AddressGuard.process_request`, before the host lock or any
connection; they would also meet the resolver check.

One policy per process: the reactor (and its resolver) is global, so the last
crawl opened in a process sets it; closing the crawl puts the previous
resolver back. Not covered: a download handler that does not connect through
Twisted (the guard refuses to start with one) and the address of an HTTP proxy
(``proxy`` meta): then the proxy connects on our behalf and must enforce the
same rule.

Stats: ``addresses/blocked`` and ``addresses/blocked/<category>``.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import CannotResolveHostError, IgnoreRequest, NotConfigured
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IHostnameResolver, IResolutionReceiver
from zope.interface import implementer

from extensions.settings import config, defaults

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from scrapy import Request
    from scrapy.crawler import Crawler
    from twisted.internet.interfaces import IAddress, IHostResolution

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Handlers that connect through HostnameEndpoint (and so reactor.nameResolver).
TWISTED_HANDLERS = frozenset(
    {
        "scrapy.core.downloader.handlers.http.HTTPDownloadHandler",
        "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler",
        "scrapy.core.downloader.handlers.http2.H2DownloadHandler",
    }
)


class BlockedAddress(IgnoreRequest):
    """A request refused because its host is (or resolves to) a refused address."""

    reason = "blocked_address"

    def __init__(self, host: str, refused: Sequence[tuple[str, str]]) -> None:
        self.host = host
        self.refused = list(refused)
        listed = ", ".join(f"{addr} ({why})" for addr, why in self.refused)
        super().__init__(f"{self.reason}: {host} -> {listed}")


class AddressPolicy:
    """Which addresses may be connected to.

    >>> p = AddressPolicy(["127.0.0.1/32"])
    >>> [p.refusal(a) for a in ("127.0.0.1", "127.0.0.2", "93.184.215.14")]
    [None, 'loopback', None]
    >>> [p.refusal(a) for a in ("10.1.2.3", "169.254.169.254", "::1", "fd00::1")]
    ['private', 'link_local', 'loopback', 'private']
    >>> [p.refusal(a) for a in ("0.0.0.0", "224.0.0.1", "240.0.0.1", "100.64.0.1")]
    ['unspecified', 'multicast', 'reserved', 'not_global']
    >>> p.refusal("::ffff:10.0.0.1"), p.refusal("fe80::1%eth0")
    ('private', 'link_local')
    """

    def __init__(self, allowlist: Iterable[str] = ()) -> None:
        self.allowlist: list[IPNetwork] = [
            ipaddress.ip_network(cidr.strip(), strict=False)
            for cidr in allowlist
            if cidr.strip()
        ]

    def refusal(self, address: str) -> str | None:
        """Why ``address`` is refused (its category), or None when allowed."""
        ip: IPAddress = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 reaches 10.0.0.1
        if any(ip.version == net.version and ip in net for net in self.allowlist):
            return None
        if ip.is_unspecified:
            return "unspecified"
        if ip.is_loopback:
            return "loopback"
        if ip.is_link_local:  # 169.254.169.254: cloud metadata
            return "link_local"
        if ip.is_multicast:
            return "multicast"
        if ip.is_private and not ip.is_reserved:
            return "private"
        if ip.is_reserved:
            return "reserved"
        if not ip.is_global:  # shared 100.64/10, documentation ranges, ...
            return "not_global"
        return None


def literal_address(host: str) -> str | None:
    """The address an IP-literal host names, in any form the resolver takes.

    >>> [literal_address(h) for h in ("127.0.0.2", "2130706434", "0x7f000001", "::1")]
    ['127.0.0.2', '127.0.0.2', '127.0.0.1', '::1']
    >>> literal_address("example.com") is None, literal_address("1.2.3.4.5") is None
    (True, True)
    """
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:  # decimal, octal and hex forms, as gethostbyname reads them
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return None


@implementer(IHostnameResolver)
class GuardedResolver:
    """An ``IHostnameResolver`` that passes on only the addresses the policy
    allows; ``on_refused(host, [(address, category), ...])`` is called when a
    resolution ends with every address refused."""

    def __init__(
        self,
        wrapped: Any,  # an IHostnameResolver (zope interfaces do not type-check)
        policy: AddressPolicy,
        on_refused: Callable[[str, list[tuple[str, str]]], None],
    ) -> None:
        self.wrapped = wrapped
        self.policy = policy
        self.on_refused = on_refused

    def resolveHostName(
        self,
        resolutionReceiver: IResolutionReceiver,
        hostName: str,
        portNumber: int = 0,
        addressTypes: Sequence[type[IAddress]] | None = None,
        transportSemantics: str = "TCP",
    ) -> IHostResolution:
        receiver = _FilteringReceiver(self, resolutionReceiver, hostName)
        return self.wrapped.resolveHostName(
            receiver, hostName, portNumber, addressTypes, transportSemantics
        )


@implementer(IResolutionReceiver)
class _FilteringReceiver:
    def __init__(self, guard: GuardedResolver, receiver: Any, host: Any) -> None:
        self.guard = guard
        self.receiver = receiver
        self.host = host.decode("ascii") if isinstance(host, bytes) else str(host)
        self.refused: list[tuple[str, str]] = []
        self.passed = 0

    def resolutionBegan(self, resolutionInProgress: IHostResolution) -> None:
        self.receiver.resolutionBegan(resolutionInProgress)

    def addressResolved(self, address: IAddress) -> None:
        host = getattr(address, "host", None)
        try:
            why = self.guard.policy.refusal(host) if host is not None else "unknown"
        except ValueError:  # not an IP address: fail closed
            why = "unknown"
        if why is None:
            self.passed += 1
            self.receiver.addressResolved(address)
        else:
            self.refused.append((str(host), why))

    def resolutionComplete(self) -> None:
        if self.refused and not self.passed:
            self.guard.on_refused(self.host, self.refused)
        self.receiver.resolutionComplete()


class AddressGuard:
    """Downloader middleware (order 900, see
    :data:`extensions.downloadermiddlewares.DOWNLOADER_MIDDLEWARES`)
    that installs :class:`GuardedResolver` for the crawl and turns its
    refusals into :class:`BlockedAddress`.

    Order: its ``process_exception`` runs after the politeness middleware's
    (950, which records the attempt) and before back-off (560) and Scrapy's
    retry (550), which never see a refusal.
    """

    # A refusal is matched to its request by host name; keep the latest few.
    MAX_REMEMBERED = 4096

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        config.require(s, defaults)
        if s.getbool("ALLOW_PRIVATE_ADDRESSES"):
            raise NotConfigured("ALLOW_PRIVATE_ADDRESSES is True")
        self.crawler = crawler
        try:
            self.policy = AddressPolicy(s.getlist("ADDRESS_ALLOWLIST"))
        except ValueError as exc:
            raise ValueError(f"ADDRESS_ALLOWLIST: {exc}") from exc
        handlers = {
            **s.getdict("DOWNLOAD_HANDLERS_BASE"),
            **s.getdict("DOWNLOAD_HANDLERS"),
        }
        for scheme in ("http", "https"):
            handler = handlers.get(scheme)
            path = handler if isinstance(handler, str) or handler is None else (
                f"{handler.__module__}.{handler.__qualname__}"
            )  # fmt: skip
            if path is not None and path not in TWISTED_HANDLERS:
                # A guard that silently does nothing is worse than none.
                raise ValueError(
                    f"the SSRF guard needs a Twisted download handler for {scheme} "
                    f"(got {path}); set ALLOW_PRIVATE_ADDRESSES=True to crawl "
                    "without it"
                )
        self._refused: dict[str, list[tuple[str, str]]] = {}
        self._previous: Any = None
        crawler.signals.connect(self._install, signal=signals.spider_opened)
        crawler.signals.connect(self._uninstall, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    # -- the resolver ---------------------------------------------------------

    def _install(self) -> None:
        from twisted.internet import reactor

        self._previous = reactor.nameResolver
        reactor.installNameResolver(
            GuardedResolver(self._previous, self.policy, self._remember)
        )
        logger.info(
            "SSRF guard on: non-public addresses refused%s",
            f" (allowed: {', '.join(map(str, self.policy.allowlist))})"
            if self.policy.allowlist
            else "",
        )

    def _uninstall(self) -> None:
        from twisted.internet import reactor

        current = reactor.nameResolver
        if isinstance(current, GuardedResolver) and self._previous is not None:
            reactor.installNameResolver(self._previous)

    def _remember(self, host: str, refused: list[tuple[str, str]]) -> None:
        if len(self._refused) >= self.MAX_REMEMBERED:
            self._refused.pop(next(iter(self._refused)))
        self._refused[host.lower().strip("[]")] = refused

    # -- requests -------------------------------------------------------------

    def _blocked(
        self, request: Request, host: str, refused: list[tuple[str, str]]
    ) -> BlockedAddress:
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value("addresses/blocked")
        for _, why in refused:
            stats.inc_value(f"addresses/blocked/{why}")
        logger.info("Refused to connect (SSRF guard): %s %s", request.url, refused)
        return BlockedAddress(host, refused)

    def process_request(self, request: Request) -> None:
        host = (urlsplit(request.url).hostname or "").lower()
        address = literal_address(host) if host else None
        if address is not None:
            why = self.policy.refusal(address)
            if why is not None:
                raise self._blocked(request, host, [(address, why)])

    def process_exception(self, request: Request, exception: Exception) -> None:
        # Scrapy's handlers wrap Twisted's DNSLookupError in CannotResolveHostError.
        if isinstance(exception, (DNSLookupError, CannotResolveHostError)):
            host = (urlsplit(request.url).hostname or "").lower()
            refused = self._refused.pop(host, None)
            if refused is not None:
                raise self._blocked(request, host, refused)
