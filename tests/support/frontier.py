"""Queued requests for the frontier's tests: one to commit, and the URLs of
what a lease handed out."""

from __future__ import annotations

from scrapy import Request

from extensions.core.frontier.frontier import QueuedRequest
from extensions.core.frontier.serialization import request_from_bytes, request_to_bytes


def q(url: str, priority: int = 0, host: str = "http://a.test:80") -> QueuedRequest:
    return QueuedRequest(host, priority, request_to_bytes(Request(url)))


def urls(batch: list[tuple[str, bytes]]) -> list[str]:
    return [request_from_bytes(m).url for _, m in batch]
