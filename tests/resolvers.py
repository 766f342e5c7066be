"""A DNS resolver for tests: fixed answers for a few names that point at
non-public addresses, the sandbox resolver for every other name.

``TWISTED_DNS_RESOLVER = "tests.resolvers.PrivateNamesResolver"``. The 10.x
and 169.254.x answers are never connected to: the SSRF guard refuses them
before any connection attempt (tests send no packet outside 127.0.0.0/8).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet import defer

from sandbox.resolver import SandboxResolver

if TYPE_CHECKING:
    from collections.abc import Sequence

    from twisted.internet.defer import Deferred

ANSWERS = {
    "internal.test": "10.0.0.7",
    "metadata.test": "169.254.169.254",
    "rebind.test": "127.0.0.2",
    "public.test": "127.0.0.1",
}


class PrivateNamesResolver(SandboxResolver):
    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        answer = ANSWERS.get(name.lower().rstrip("."))
        if answer is not None:
            return defer.succeed(answer)
        return super().getHostByName(name, timeout)
