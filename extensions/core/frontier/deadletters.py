"""The dead-letter queue: every URL whose story ended in a terminal failure.

One HASH of URL -> JSON entry per frontier partition (a letter in its
host's), with per-reason counts kept in step by its scripts (in
:mod:`extensions.core.frontier.lua`); a letter with no page record yet is
listed until the scheduler hands it to the page store. The entry format,
the reasons, unrecorded letters and re-queueing: ``docs/dead-letters.md``.

Settings read: none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from extensions import meta
from extensions.connection.scripts import script
from extensions.core.frontier.frontier import PartitionedFrontier, QueuedRequest
from extensions.core.frontier.lua import (
    DLQ_ADD_LUA,
    DLQ_REMOVE_LUA,
    DLQ_UNRECORDED_LUA,
    HOST_DOWN_LUA,
)
from extensions.core.frontier.serialization import request_to_bytes
from extensions.keys import FrontierKeys
from extensions.meta import FAILURE_META
from extensions.utils.hosts import host_key, host_partition, hostname_of

if TYPE_CHECKING:
    from collections.abc import Iterable

    import redis.asyncio as aredis
    from scrapy import Request, Spider

# Per-attempt meta a re-queued request must not carry: its failure history,
# the redirect chain it followed, the politeness deferrals it went through.
_ATTEMPT_META = (
    FAILURE_META,
    "redirect_urls",
    "redirect_reasons",
    "redirect_times",
    "redirect_ttl",
    "politeness_deferrals",
    "politeness_deferred",
    "politeness_lock",
    meta.HOST_DOWN,
)


@dataclass
class DeadLetter:
    """One terminal failure, as the spider or a middleware reports it."""

    url: str
    host: str
    reason: str
    request: str  # the frontier's serialization, failure history removed
    priority: int = 0
    status: int | None = None
    error: str | None = None
    attempts: int = 1
    first_failure: float | None = None
    last_failure: float | None = None  # set when written (Redis's clock)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> DeadLetter:
        """The letter of a stored entry (unknown fields ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in entry.items() if k in names})


def dead_letter(
    request: Request,
    spider: Spider | None,
    reason: str,
    *,
    status: int | None = None,
    error: str | None = None,
) -> DeadLetter:
    """The dead letter of ``request``: the request as it was first queued
    (the first URL of a redirect chain, no per-attempt meta), with the
    failure record it carries (``meta["failure"]``) when it has one.
    Raises :class:`extensions.core.frontier.serialization.UnserializableRequest`."""
    record = request.meta.get(FAILURE_META) or {}
    urls = request.meta.get("redirect_urls") or [request.url]
    meta = {k: v for k, v in request.meta.items() if k not in _ATTEMPT_META}
    original = request.replace(url=urls[0], meta=meta)
    return DeadLetter(
        url=urls[0],
        host=host_key(urls[0]),
        reason=reason,
        request=request_to_bytes(original, spider).decode(),
        priority=request.priority,
        status=status if status is not None else record.get("status"),
        error=error if error is not None else record.get("error"),
        attempts=int(record.get("attempts") or 1),
        first_failure=record.get("first"),
    )


def matches(entry: dict[str, Any], reason: str | None, host: str | None) -> bool:
    """The ``--reason`` / ``--host`` filter of the commands; ``host`` matches
    the host key (``http://a.test:80``) or the bare host name.

    >>> e = {"reason": "dns", "host": "http://a.test:80"}
    >>> matches(e, "dns", None), matches(e, None, "a.test"), matches(e, "tls", None)
    (True, True, False)
    """
    if reason and entry.get("reason") != reason:
        return False
    if host:
        key = str(entry.get("host", ""))
        if host.lower() not in (key, hostname_of(key)):
            return False
    return True


class DeadLetters:
    """Asynchronous access to one crawl's dead-letter queue.

    With several frontier partitions each partition has its own queue (the
    frontier's commit and the host-down sweep write dead letters in the
    script that reads the host's queue and record: one slot); a letter goes
    to its host's partition, and the reads here cover every partition.
    """

    def __init__(self, client: aredis.Redis, prefix: str, partitions: int = 1) -> None:
        self.client = client
        self.prefix = prefix
        self.partitions = partitions
        self.parts = [FrontierKeys(prefix, p, partitions) for p in range(partitions)]
        self.keys = self.parts[0]

    def _keys(self, hostkey: str) -> FrontierKeys:
        return self.parts[host_partition(hostkey, self.partitions)]

    async def add(self, letters: Iterable[DeadLetter], *, recorded: bool = True) -> int:
        """Store ``letters``; return how many URLs were new to the queue.
        ``recorded=False``: no page record exists for them (the spider's
        errback makes one for its own): they are listed for
        :meth:`unrecorded`."""
        new = 0
        for letter in letters:
            k = self._keys(letter.host)
            new += int(
                await script(self.client, DLQ_ADD_LUA)(
                    keys=[k.dlq, k.dlq_reasons, k.dlq_unrecorded],
                    args=[
                        letter.url,
                        letter.reason,
                        letter.to_json(),
                        "0" if recorded else "1",
                    ],
                )
            )
        return new

    async def unrecorded(self, page: int) -> tuple[list[DeadLetter], int]:
        """Up to ``page`` dead letters per partition that have no page
        record yet (:data:`DLQ_UNRECORDED_LUA`), taken off the list, and how
        many are still listed after them."""
        letters: list[DeadLetter] = []
        left = 0
        for k in self.parts:
            reply = await script(self.client, DLQ_UNRECORDED_LUA)(
                keys=[k.dlq, k.dlq_unrecorded], args=[page]
            )
            left += int(reply[0])
            letters += [DeadLetter.from_entry(json.loads(e)) for e in reply[1:]]
        return letters, left

    async def host_down(
        self,
        hostkey: str,
        after_ms: int,
        ttl_ms: int,
        error: str,
        reason: str = "host_down",
    ) -> tuple[int, int, bool]:
        """Judge ``hostkey`` down if it has been failing for ``after_ms``,
        and then dead-letter its waiting requests with ``reason``
        (``host_down``, or ``dns``: see :data:`HOST_DOWN_LUA`):
        ``(requests dead-lettered, end of the verdict in force in epoch ms
        of the Redis clock or 0 when none, whether this call made it)``."""
        k = self._keys(hostkey)
        n, down, made = await script(self.client, HOST_DOWN_LUA)(
            keys=[
                k.host(hostkey),
                k.queue(hostkey),
                k.ready,
                k.delayed,
                k.dlq,
                k.dlq_reasons,
                k.dlq_unrecorded,
            ],
            args=[hostkey, int(after_ms), int(ttl_ms), error[:500], reason],
        )
        return int(n), int(down), bool(made)

    async def sizes(self) -> dict[str, int]:
        """Dead letters per reason class (one HGETALL per partition: cheap
        enough for a status poll)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for k in self.parts:
                pipe.hgetall(k.dlq_reasons)
            replies = cast("list[dict[bytes, bytes]]", await pipe.execute())
        total: dict[str, int] = {}
        for raw in replies:
            for reason, n in raw.items():
                total[reason.decode()] = total.get(reason.decode(), 0) + int(n)
        return {r: n for r, n in sorted(total.items()) if n > 0}

    async def entries(
        self, reason: str | None = None, host: str | None = None
    ) -> list[dict[str, Any]]:
        """The entries matching the filters, oldest last failure first."""
        return [entry for _p, _blob, entry in await self._matching(reason, host)]

    async def _matching(
        self, reason: str | None, host: str | None
    ) -> list[tuple[int, bytes, dict[str, Any]]]:
        """:meth:`entries`, each with its partition and its stored JSON."""
        found = []
        for p, k in enumerate(self.parts):
            async for _url, blob in self.client.hscan_iter(k.dlq, count=1000):
                entry = json.loads(blob)
                if matches(entry, reason, host):
                    found.append((p, blob, entry))
        found.sort(key=lambda t: (t[2].get("last_failure") or 0, t[2]["url"]))
        return found

    async def purge(self, reason: str | None = None, host: str | None = None) -> int:
        found = await self._matching(reason, host)
        return await self._delete([(p, e["url"], b"") for p, _blob, e in found])

    async def requeue(self, reason: str | None = None, host: str | None = None) -> int:
        """Put the matching requests back in the frontier, exactly as first
        queued and past the dupefilter (which has seen them), then delete
        their entries. Queued before deleted: a stop in between leaves a URL
        both queued and dead-lettered, never neither. An entry the commit
        wrote again (a host judged down dead-letters its requests) is kept:
        it is not counted as re-queued."""
        found = await self._matching(reason, host)
        frontier = PartitionedFrontier(self.client, self.prefix, self.partitions)
        done = 0
        for i in range(0, len(found), 500):
            chunk = found[i : i + 500]
            await frontier.commit(
                [
                    QueuedRequest(
                        e["host"], int(e.get("priority") or 0), e["request"].encode()
                    )
                    for _p, _blob, e in chunk
                ]
            )
            done += await self._delete([(p, e["url"], blob) for p, blob, e in chunk])
        return done

    async def _delete(self, entries: list[tuple[int, str, bytes]]) -> int:
        """Delete ``(partition, url, expected entry)`` triples (see
        :data:`DLQ_REMOVE_LUA`)."""
        by_part: dict[int, list[str | bytes]] = {}
        for p, url, expected in entries:
            by_part.setdefault(p, []).extend((url, expected))
        n = 0
        for p, args in sorted(by_part.items()):
            k = self.parts[p]
            for i in range(0, len(args), 1000):
                n += int(
                    await script(self.client, DLQ_REMOVE_LUA)(
                        keys=[k.dlq, k.dlq_reasons], args=args[i : i + 1000]
                    )
                )
        return n
