"""One failure policy: which failures are retried, when, and for how long.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``FAILURE_POLICY_ENABLED``,
``RETRY_DELAY_JITTER``, ``RETRY_DELAY_SCALE``, ``RETRY_AFTER_MAX``,
``RETRY_THROTTLED_TIME_BUDGET``; and Scrapy's retry settings, which bound
what the policy retries (the policy decides when): ``RETRY_ENABLED`` (False:
nothing is retried), ``RETRY_TIMES`` and the ``max_retry_times`` meta key
(at most that many retries, in every class but ``retry_after``, where the
server says when to come back: there only ``max_retry_times`` bounds them),
``RETRY_HTTP_CODES`` and ``RETRY_EXCEPTIONS`` (a status or exception not
listed is not retried: its class's failure is terminal at once) and
``RETRY_PRIORITY_ADJUST`` (added to a retry's priority; ``meta["retry_times"]``
counts the retries, as with Scrapy's ``RetryMiddleware``).

Every failed download is put in one *failure class* (:func:`classify`), and
the class's :class:`Policy` says whether it is retried, after how long (an
exponential curve with jitter, or the server's ``Retry-After`` up to a cap),
how many attempts it may take and how long after its first failure it is
given up. The table is :data:`POLICIES`; the README shows it.

A retry never waits in a worker: :class:`FailurePolicyMiddleware` (which
replaces Scrapy's ``RetryMiddleware``) returns a copy of the request with its
delay in ``meta["frontier_delay_ms"]``; the scheduler hands the parent's
lease over to it in the script that puts it in the frontier's ``delayed``
ZSET, where it waits until due, whoever dies meanwhile. A request whose
budget is spent goes on to the spider's errback with its failure record in
``meta["failure"]``; the spider stores the page and dead-letters it
(:mod:`extensions.core.frontier.deadletters`).

A 429 or 503 with ``Retry-After`` is not a failure budget: a server that says
when to come back is honoured, attempt after attempt, until the class's time
budget is spent.
"""

from __future__ import annotations

import gzip
import logging
import random
import time
import zlib
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadCancelledError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    IgnoreRequest,
    ResponseDataLossError,
)
from twisted.internet import error as twisted_error
from twisted.web.client import ResponseFailed

from extensions.meta import FAILURE_META

if TYPE_CHECKING:
    from scrapy.http import Request

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Policy:
    """How one failure class is treated."""

    retried: bool
    attempts: int = 1  # fetches in all, the first included (0: no limit)
    initial: float = 0.0  # seconds before the first retry (doubles per retry)
    cap: float = 0.0  # largest delay between two attempts
    budget: float = 0.0  # seconds after the first failure it is given up
    note: str = ""


# The policy table (the README's failure table is this, in words).
POLICIES: dict[str, Policy] = {
    # A name that does not resolve rarely starts resolving within minutes:
    # one retry 30 s later, then give up (a dead link on the internet).
    "dns": Policy(True, 2, 30.0, 30.0, 120.0, "DNS name not found / no address"),
    # The server is down or overloaded: a few spaced retries; after
    # BREAKER_THRESHOLD failures the host's circuit breaker parks its queue.
    "connection": Policy(
        True, 4, 15.0, 300.0, 3600.0, "connection refused / reset / timeout"
    ),
    "tls": Policy(True, 2, 60.0, 60.0, 600.0, "TLS handshake / certificate failure"),
    "http_5xx": Policy(True, 3, 30.0, 600.0, 3600.0, "HTTP 500, 502, 504, other 5xx"),
    # 429 / 503 without Retry-After: the host's back-off
    # (extensions.downloadermiddlewares.backoff)
    # parks it as well.
    "throttled": Policy(True, 5, 60.0, 3600.0, 21600.0, "429/503 without Retry-After"),
    # 429 / 503 with Retry-After: no attempt limit, only the time budget
    # (RETRY_THROTTLED_TIME_BUDGET); the delay is the server's, capped.
    "retry_after": Policy(True, 0, 0.0, 0.0, 21600.0, "429 / 503 with Retry-After"),
    "too_large": Policy(False, note="over DOWNLOAD_MAXSIZE or the decompression limit"),
    "unparseable": Policy(
        False, note="a body that does not decode, or the spider fails on it"
    ),
    "redirect_loop": Policy(False, note="redirect or meta refresh back into its chain"),
    # A failure of a host judged down (HOST_DOWN_AFTER): the host's breaker
    # has failed long enough, so this request is not retried.
    "host_down": Policy(False, note="every connection failing for HOST_DOWN_AFTER"),
    "too_many_redirects": Policy(False, note="more than REDIRECT_MAX_TIMES redirects"),
}  # fmt: skip

DNS_ERRORS: tuple[type[BaseException], ...] = (
    CannotResolveHostError,
    twisted_error.DNSLookupError,
)
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    TimeoutError,
    ConnectionRefusedError,
    ConnectionResetError,
    twisted_error.ConnectError,
    twisted_error.ConnectionLost,
    twisted_error.ConnectionDone,
    twisted_error.TimeoutError,
    ResponseFailed,
    # A body shorter than its Content-Length (the connection closed
    # mid-body): Scrapy's RetryMiddleware retries it too.
    ResponseDataLossError,
)
THROTTLE_CODES = frozenset({429, 503})
# Statuses that are retried as connection trouble (Scrapy retries them too).
TIMEOUT_CODES = frozenset({408})


def _brotli_errors() -> tuple[type[BaseException], ...]:
    try:
        from brotli import error as BrotliError
    except ImportError:  # brotli is optional for Scrapy
        return ()
    return (BrotliError,)


# A body whose Content-Encoding does not decode (a corrupt gzip, deflate or
# brotli stream: Scrapy's HttpCompressionMiddleware raises these): the
# response is unparseable, and fetching it again gives the same bytes.
DECODE_ERRORS: tuple[type[BaseException], ...] = (
    zlib.error,
    gzip.BadGzipFile,
    *_brotli_errors(),
)


def _tls_errors() -> tuple[type[BaseException], ...]:
    try:
        from OpenSSL.SSL import Error as OpenSSLError
    except ImportError:  # pyOpenSSL is a Scrapy dependency; be safe anyway
        return ()
    return (OpenSSLError,)


TLS_ERRORS = _tls_errors()
# Everything a download may fail with that is not a bug: what a caller that
# fetches on its own (the robots.txt middleware) catches, and nothing else.
DOWNLOAD_ERRORS: tuple[type[BaseException], ...] = (
    *DNS_ERRORS,
    *CONNECTION_ERRORS,
    *TLS_ERRORS,
    *DECODE_ERRORS,
    DownloadCancelledError,
)


def classify_exception(exc: BaseException) -> str | None:
    """The failure class of a download exception; None when no policy
    applies (an ``IgnoreRequest`` of a filter, a programming error).

    An exception may name its own class with a ``failure_reason`` attribute,
    or, for an ``IgnoreRequest``, a ``reason`` one (the SSRF guard's
    refusals say ``blocked_address``, the trap filter's ``url_too_long``,
    ...): it is terminal.

    >>> classify_exception(CannotResolveHostError("x"))
    'dns'
    >>> classify_exception(DownloadTimeoutError("x"))
    'connection'
    >>> classify_exception(IgnoreRequest("filtered")) is None
    True
    >>> classify_exception(IgnoreRequest("max redirections reached"))
    'too_many_redirects'
    >>> classify_exception(zlib.error("invalid code lengths set"))
    'unparseable'
    """
    reason = getattr(exc, "failure_reason", None)
    if reason is None and isinstance(exc, IgnoreRequest):
        # The refusals of the SSRF guard and the trap filter name theirs.
        reason = getattr(exc, "reason", None)
    if isinstance(reason, str):
        return reason
    if isinstance(exc, DownloadCancelledError):
        return "too_large"  # DOWNLOAD_MAXSIZE cancels the download
    if isinstance(exc, IgnoreRequest):
        # Scrapy says these two with an IgnoreRequest: tell them by the
        # message (RedirectMiddleware) and by the cause (HttpCompression).
        if str(exc) == "max redirections reached":
            return "too_many_redirects"
        if type(exc.__cause__).__name__ == "_DecompressionMaxSizeExceeded":
            return "too_large"
        return None
    if isinstance(exc, DNS_ERRORS):
        return "dns"
    if TLS_ERRORS and isinstance(exc, TLS_ERRORS):
        return "tls"
    if isinstance(exc, ResponseFailed) and any(
        TLS_ERRORS and isinstance(r.value, TLS_ERRORS) for r in exc.reasons
    ):
        return "tls"
    if isinstance(exc, CONNECTION_ERRORS):
        return "connection"
    if isinstance(exc, DECODE_ERRORS):
        return "unparseable"
    return None


def classify_status(status: int, retry_after: float | None) -> str | None:
    """The failure class of an HTTP status; None when it is a final answer.

    >>> classify_status(503, 1.0), classify_status(429, None)
    ('retry_after', 'throttled')
    >>> classify_status(502, None)
    'http_5xx'
    >>> classify_status(404, None) is None, classify_status(408, None)
    (True, 'connection')
    """
    if status in THROTTLE_CODES:
        return "retry_after" if retry_after is not None else "throttled"
    if status in TIMEOUT_CODES:
        return "connection"
    if 500 <= status <= 599:
        return "http_5xx"
    return None


def backoff_delay(policy: Policy, attempts: int, jitter: float, rand: float) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones:
    ``initial * 2**(attempts-1)``, capped, times ``1 + jitter * rand``
    (``rand`` in [-1, 1]).

    >>> p = Policy(True, 5, 10.0, 60.0, 3600.0)
    >>> [backoff_delay(p, n, 0.0, 0.0) for n in (1, 2, 3, 4)]
    [10.0, 20.0, 40.0, 60.0]
    >>> backoff_delay(p, 1, 0.2, 1.0)
    12.0
    """
    base = min(policy.cap, policy.initial * 2 ** max(0, attempts - 1))
    return base * (1.0 + jitter * rand)


@dataclass
class Decision:
    reason: str
    retry: bool
    delay: float  # seconds; meaningful when retry
    attempts: int  # attempts made so far, this one included
    waited: float = 0.0  # seconds of retry delays scheduled so far, this one included


class FailurePolicy:
    """Applies :data:`POLICIES` to one failure of one request."""

    def __init__(
        self,
        jitter: float,
        retry_after_max: float,
        throttled_budget: float,
        scale: float = 1.0,
    ) -> None:
        self.jitter = jitter
        self.retry_after_max = retry_after_max
        # The table's own delays and time budgets, scaled together (a server's
        # Retry-After is the server's: never scaled).
        self.policies = {
            name: Policy(
                p.retried,
                p.attempts,
                p.initial * scale,
                p.cap * scale,
                p.budget * scale,
                p.note,
            )
            for name, p in POLICIES.items()
        }
        self.policies["retry_after"] = Policy(
            True, 0, 0.0, 0.0, throttled_budget, POLICIES["retry_after"].note
        )

    def decide(
        self,
        reason: str,
        record: dict[str, Any],
        now: float,
        retry_after: float | None = None,
        max_attempts: int | None = None,
    ) -> Decision:
        """``record`` is the request's failure record so far (``attempts``,
        ``first``, ``waited``); the decision counts this failure. The time
        spent is the later of the clock since the first failure and the sum
        of the delays scheduled (a retry cannot come before its due time).
        ``max_attempts``: in place of the class's own attempt count."""
        attempts = int(record.get("attempts", 0)) + 1
        first = float(record.get("first") or now)
        waited = float(record.get("waited") or 0.0)
        policy = self.policies.get(reason)
        if policy is None or not policy.retried:
            return Decision(reason, False, 0.0, attempts)
        if reason == "retry_after":
            delay = min(retry_after or 0.0, self.retry_after_max)
            # A little jitter spreads a fleet's return; never earlier.
            delay *= 1.0 + self.jitter * random.random()
        else:
            delay = backoff_delay(
                policy, attempts, self.jitter, random.uniform(-1.0, 1.0)
            )
        limit = policy.attempts if max_attempts is None else max_attempts
        out_of_attempts = limit and attempts >= limit
        spent = max(now - first, waited) + delay
        out_of_time = policy.budget and spent > policy.budget
        if out_of_attempts or out_of_time:
            return Decision(reason, False, 0.0, attempts, waited)
        return Decision(reason, True, delay, attempts, waited + delay)


def failure_record(
    request: Request,
    decision: Decision,
    now: float,
    status: int | None,
    error: str | None,
) -> dict[str, Any]:
    """The request's failure record after this failure (JSON-safe)."""
    old = request.meta.get(FAILURE_META) or {}
    return {
        "reason": decision.reason,
        "attempts": decision.attempts,
        "first": old.get("first") or now,
        "last": now,
        "waited": round(decision.waited, 3),
        "status": status,
        "error": error,
        "terminal": not decision.retry,
    }


# Failures that say the host (not the page) is unwell: they count towards
# the circuit breaker. An HTTP error response never does.
CONNECTION_FAILURES: tuple[type[BaseException], ...] = (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    TimeoutError,
    ConnectionError,
    twisted_error.ConnectError,
    twisted_error.ConnectionLost,
    twisted_error.TimeoutError,
    twisted_error.DNSLookupError,
)


# Failures that say the host's name does not resolve (HostUnresolvable, the
# robots middleware's, is a CannotResolveHostError).
DNS_FAILURES: tuple[type[BaseException], ...] = (
    CannotResolveHostError,
    twisted_error.DNSLookupError,
)


def parse_retry_after(
    value: bytes | str | None, now: float | None = None
) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an
    HTTP date; None when absent or unparseable; never negative.

    >>> parse_retry_after(b"120")
    120.0
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0)
    10.0
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0)
    0.0
    >>> parse_retry_after(b"soon") is None, parse_retry_after(None) is None
    (True, True)
    >>> parse_retry_after("-5")
    0.0
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if not text:
        return None
    try:
        return max(0.0, float(int(text)))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


class HostUnresolvable(CannotResolveHostError):
    """A page request failed without a connection: its host's name did not
    resolve when its robots.txt was fetched (the robots middleware raises
    it; the failure policy retries it like any DNS failure, and the circuit
    breaker does not count it: the robots.txt fetch was counted)."""


class HostDown(DownloadConnectionRefusedError):
    """A page request failed without a connection: its host's robots.txt got
    no connection ``ROBOTS_DOWN_AFTER`` times in a row (the robots
    middleware raises it; the failure policy treats it as a connection
    failure; the circuit breaker does not count it again, but the host-down
    verdict of ``HOST_DOWN_AFTER`` is judged on it)."""


class TrapFiltered(IgnoreRequest):
    """A request refused by a trap limit; ``reason`` names the limit.

    ``dead_letter`` False: the refusal is recorded in the page store only (a
    filtered record), not in the dead-letter queue, whose entries live in
    Redis memory: a trap budget may refuse millions of URLs.
    """

    def __init__(self, reason: str, detail: str, *, dead_letter: bool = True) -> None:
        self.reason = reason
        self.dead_letter = dead_letter
        super().__init__(f"{reason}: {detail}")
