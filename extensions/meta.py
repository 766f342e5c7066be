"""The ``Request.meta`` keys that cross modules, each named once.

Settings read: none.
"""

from __future__ import annotations

#: The frontier lease a request was handed out under (set by the scheduler
#: when it hands the request to the engine; carried to the item, whose
#: storage acknowledges it; a redirect or retry hands it over to its child).
FRONTIER_LEASE = "frontier_lease"

#: The host lock a request holds while it is downloaded (a dict set by the
#: politeness middleware: lock ``id``, ``host``, ``token``, ``spacing_ms``,
#: and ``fails``, the host's connection failures, which the back-off
#: middleware reads to close the circuit breaker).
POLITENESS_LOCK = "politeness_lock"

#: How often a request went back to the scheduler because its host could not
#: be fetched now (bounded by ``POLITENESS_MAX_DEFERRALS``).
POLITENESS_DEFERRALS = "politeness_deferrals"

#: Why a request was last sent back: ``parked``, ``spaced`` or ``robots``.
POLITENESS_DEFERRED = "politeness_deferred"

#: True: never defer this request to the scheduler; fail it with
#: ``HostParked`` when its host is parked (the robots.txt fetch).
DONT_DEFER = "dont_defer"

#: True: download without the host lock (Scrapy-style opt-out).
DONT_POLITENESS = "dont_politeness"
