"""The failure policy as a downloader middleware, in place of ``RetryMiddleware``.

Settings read (defaults in :mod:`extensions.settings.defaults`):
``FAILURE_POLICY_ENABLED``, ``RETRY_DELAY_JITTER``, ``RETRY_DELAY_SCALE``,
``RETRY_AFTER_MAX``, ``RETRY_THROTTLED_TIME_BUDGET``; and Scrapy's retry
settings, which bound what the policy retries (the policy decides when):
``RETRY_ENABLED`` (False: nothing is retried), ``RETRY_TIMES`` and the
``max_retry_times`` meta key (at most that many retries, in every class but
``retry_after``, where the server says when to come back: there only
``max_retry_times`` bounds them), ``RETRY_HTTP_CODES`` and
``RETRY_EXCEPTIONS`` (a status or exception not listed is not retried: its
class's failure is terminal at once) and ``RETRY_PRIORITY_ADJUST`` (added to
a retry's priority; ``meta["retry_times"]`` counts the retries, as with
Scrapy's ``RetryMiddleware``).

The policy itself (failure classes, delays, budgets) is pure and lives in
:mod:`extensions.utils.failures`; this middleware applies it to each failed
download and hands a retry back to the scheduler with its delay in
``meta["frontier_delay_ms"]``, so the retry waits in Redis, never in a worker.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Self

from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import load_object
from scrapy.utils.python import global_object_name
from scrapy.utils.response import response_status_message

from extensions.meta import DELAY_META, FAILURE_META
from extensions.meta import HOST_DOWN as HOST_DOWN_META
from extensions.settings import config, defaults
from extensions.utils.failures import (
    POLICIES,
    Decision,
    FailurePolicy,
    classify_exception,
    classify_status,
    failure_record,
    parse_retry_after,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request, Response

logger = logging.getLogger(__name__)


class FailurePolicyMiddleware:
    """Downloader middleware (at 550, in place of Scrapy's RetryMiddleware):
    classify each failure, schedule its retry in Redis, or mark it terminal.

    Order: below the back-off middleware (560), which sees a 429/503 or a
    connection failure first and parks the host; a retry then waits for the
    later of its own due time and the host's park.
    """

    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        config.require(s, defaults)
        if not s.getbool("FAILURE_POLICY_ENABLED"):
            raise NotConfigured("FAILURE_POLICY_ENABLED is False")
        self.crawler = crawler
        self.policy = FailurePolicy(
            s.getfloat("RETRY_DELAY_JITTER"),
            s.getfloat("RETRY_AFTER_MAX"),
            s.getfloat("RETRY_THROTTLED_TIME_BUDGET"),
            s.getfloat("RETRY_DELAY_SCALE"),
        )
        # Scrapy's retry settings bound the policy (module docstring).
        self.retry_enabled = s.getbool("RETRY_ENABLED")
        self.max_retry_times = s.getint("RETRY_TIMES")
        self.retry_http_codes = frozenset(int(c) for c in s.getlist("RETRY_HTTP_CODES"))
        self.retry_exceptions = tuple(
            load_object(e) if isinstance(e, str) else e
            for e in s.getlist("RETRY_EXCEPTIONS")
        )
        self.priority_adjust = s.getint("RETRY_PRIORITY_ADJUST")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_response(
        self, request: Request, response: Response
    ) -> Request | Response:
        if request.meta.get("dont_retry"):
            return response
        retry_after = parse_retry_after(response.headers.get(b"Retry-After"))
        reason = classify_status(response.status, retry_after)
        if reason is None:
            return response
        retry = self._decide(
            request,
            reason,
            response.status,
            f"HTTP {response.status}",
            retry_after,
            final=response.status not in self.retry_http_codes,
            scrapy_reason=response_status_message(response.status),
        )
        return retry if retry is not None else response

    def process_exception(
        self, request: Request, exception: Exception
    ) -> Request | None:
        reason = classify_exception(exception)
        if reason is None and isinstance(exception, self.retry_exceptions):
            # Listed in RETRY_EXCEPTIONS, known to no class: retried as a
            # connection failure (Scrapy retries whatever the list names).
            reason = "connection"
        verdict = request.meta.get(HOST_DOWN_META)
        if reason is not None and verdict:
            # Set by the back-off middleware (560): the host is judged down
            # (True) or its name unresolvable ("dns"): given up at once.
            reason = verdict if isinstance(verdict, str) else "host_down"
        if reason is None or request.meta.get("dont_retry"):
            # dont_retry (robots.txt fetches, a spider's own choice): no
            # policy; the errback still classifies a final failure.
            return None
        error = f"{type(exception).__name__}: {exception}"[:500]
        final = bool(verdict) or not isinstance(exception, self.retry_exceptions)
        return self._decide(
            request,
            reason,
            None,
            error,
            None,
            final=final,
            scrapy_reason=global_object_name(exception.__class__),
        )

    def _decide(
        self,
        request: Request,
        reason: str,
        status: int | None,
        error: str,
        retry_after: float | None,
        *,
        final: bool = False,
        scrapy_reason: str = "",
    ) -> Request | None:
        """``final``: given up whatever the policy (a host verdict, a status
        or exception Scrapy's retry settings do not retry); ``scrapy_reason``:
        the reason Scrapy's RetryMiddleware would count it under."""
        stats = self.crawler.stats
        assert stats is not None
        now = time.time()
        record = request.meta.get(FAILURE_META) or {}
        # A request's own max_retry_times says how many (Scrapy's meaning).
        exact = request.meta.get("max_retry_times")
        decision = self.policy.decide(
            reason,
            record,
            now,
            retry_after,
            None if exact is None else max(1, int(exact) + 1),
        )
        if final or not self._may_retry(request, reason, decision.attempts):
            decision = Decision(reason, False, 0.0, decision.attempts, decision.waited)
        request.meta[FAILURE_META] = failure_record(
            request, decision, now, status, error
        )
        if not decision.retry:
            stats.inc_value(f"failures/terminal/{reason}")
            if reason in POLICIES and POLICIES[reason].retried:
                stats.inc_value("retry/max_reached")
            logger.info(
                "Gave up retrying %s after %d attempts (%s: %s)",
                request.url, decision.attempts, reason, error,
            )  # fmt: skip
            return None
        # Scrapy's RetryMiddleware's stats names, for dashboards built on them
        # (its reasons too: a status text or an exception's class path).
        stats.inc_value("retry/count")
        stats.inc_value(f"retry/reason_count/{reason}")
        stats.inc_value(f"retry/reason_count/{scrapy_reason}")
        logger.debug(
            "Retrying %s in %.1f s (%s, attempt %d)",
            request.url, decision.delay, reason, decision.attempts,
        )  # fmt: skip
        meta = dict(request.meta)
        meta[DELAY_META] = round(decision.delay * 1000)
        meta["retry_times"] = decision.attempts  # retries, this one included
        return request.replace(
            dont_filter=True,
            meta=meta,
            priority=request.priority + self.priority_adjust,
        )

    def _may_retry(self, request: Request, reason: str, attempts: int) -> bool:
        """Whether Scrapy's retry settings let a request that failed its
        ``attempts``-th time be tried again."""
        if not self.retry_enabled:
            return False
        limit = request.meta.get("max_retry_times")
        if limit is None:
            if reason == "retry_after":
                return True  # the server's word, bounded by its time budget
            limit = self.max_retry_times
        return attempts <= int(limit)
