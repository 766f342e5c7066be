"""A Scrapy DNS resolver that sends ``*.sandbox.test`` to 127.0.0.1.

Names under ``nxdomain.sandbox.test`` do not resolve (an immediate
``DNSLookupError``): the sandbox's dead links, as on the internet. Names
under ``dnstimeout.sandbox.test`` do not resolve either, but only after
:data:`DNS_TIMEOUT_SECONDS`, as a name whose servers do not answer fails on
the internet. Names
under ``private.sandbox.test`` resolve to 127.0.0.2: a name in the crawl's
scope that points at the operator's own network, which the SSRF guard must
refuse after resolution (nothing of the sandbox listens there, so a guard
that let it through would meet a refused connection, not a page).

``SANDBOX_ADDRESSES`` (a setting: JSON, host name -> loopback address, as
:meth:`sandbox.site.SiteSpec.address_setting` writes it) gives hosts
addresses of their own, so several names share one address (a shared
server) while others have one each; the sandbox server listens on each.

Use it with ``TWISTED_DNS_RESOLVER = "sandbox.resolver.SandboxResolver"``
(Scrapy >= 2.19; the older ``DNS_RESOLVER`` name still works, with a
deprecation warning). Every other name goes to Scrapy's default
:class:`scrapy.resolver.CachingThreadedResolver`, so the settings it reads
apply unchanged: ``DNSCACHE_ENABLED``, ``DNSCACHE_SIZE``, ``DNS_TIMEOUT``.

Sandbox names are answered at once and kept out of Scrapy's ``dnscache``:
the downloader maps slot keys through that cache when
``CONCURRENT_REQUESTS_PER_IP`` is set, and every sandbox host sharing
127.0.0.1 would otherwise collapse into a single slot.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Self, cast

from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer, task
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IReactorTime, IResolverSimple
from zope.interface import implementer

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrapy.crawler import Crawler
    from twisted.internet.base import ReactorBase
    from twisted.internet.defer import Deferred

SANDBOX_SUFFIX = ".sandbox.test"
SANDBOX_ADDRESS = "127.0.0.1"
UNRESOLVABLE_SUFFIX = ".nxdomain" + SANDBOX_SUFFIX
DNS_TIMEOUT_SUFFIX = ".dnstimeout" + SANDBOX_SUFFIX
# Seconds a name under DNS_TIMEOUT_SUFFIX takes to fail.
DNS_TIMEOUT_SECONDS = 2.0
PRIVATE_SUFFIX = ".private" + SANDBOX_SUFFIX
PRIVATE_ADDRESS = "127.0.0.2"
# The setting value that installs this resolver. The production settings name
# no sandbox code: the demo, the tests and the benchmarks pass it with ``-s``.
SANDBOX_RESOLVER = "sandbox.resolver.SandboxResolver"


def is_sandbox_name(name: str) -> bool:
    """True for names under ``sandbox.test`` (any case, trailing dot allowed).

    >>> is_sandbox_name("site-000.sandbox.test")
    True
    >>> is_sandbox_name("SITE-1.Sandbox.Test.")
    True
    >>> is_sandbox_name("sandbox.test.example.com"), is_sandbox_name("example.com")
    (False, False)
    """
    return name.lower().rstrip(".").endswith(SANDBOX_SUFFIX)


@implementer(IResolverSimple)
class SandboxResolver(CachingThreadedResolver):
    """``CachingThreadedResolver`` plus a static answer for the sandbox web.

    Built by Scrapy with ``from_crawler(crawler, reactor)`` (inherited) and
    installed with ``install_on_reactor()`` (inherited: ``installResolver``,
    which also wraps it as the reactor's ``IHostnameResolver``, the one
    ``HostnameEndpoint`` uses).
    """

    addresses: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler, reactor: ReactorBase) -> Self:
        resolver = super().from_crawler(crawler, reactor)
        raw = crawler.settings.get("SANDBOX_ADDRESSES") or "{}"
        table = json.loads(raw) if isinstance(raw, str) else dict(raw)
        resolver.addresses = {str(k).lower(): str(v) for k, v in table.items()}
        return resolver

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        if name.lower().rstrip(".").endswith(UNRESOLVABLE_SUFFIX):
            return defer.fail(DNSLookupError(f"{name}: no such name (sandbox)"))
        if name.lower().rstrip(".").endswith(DNS_TIMEOUT_SUFFIX):

            def timed_out() -> str:
                raise DNSLookupError(f"{name}: timed out (sandbox)")

            clock = cast("IReactorTime", self.reactor)
            return task.deferLater(clock, DNS_TIMEOUT_SECONDS, timed_out)
        if name.lower().rstrip(".").endswith(PRIVATE_SUFFIX):
            return defer.succeed(PRIVATE_ADDRESS)
        if is_sandbox_name(name):
            key = name.lower().rstrip(".")
            return defer.succeed(self.addresses.get(key, SANDBOX_ADDRESS))
        return super().getHostByName(name, timeout)
