"""The shared robots.txt path on Protego's corpus of real robots.txt files.

Protego's source distribution ships 4,231 robots.txt files fetched from
popular sites (``tests/test_data/``, see Protego's
``tests/test_on_fetched_robotstxt.py``). Each goes through the path a fleet
takes: the fetching worker records the answer (RFC 9309 status handling, the
``ROBOTS_MAX_SIZE`` cut, the host delay, the raw file in the Redis cache), then
other workers, with nothing in memory, read it back from Redis and decide.
Their decisions must be Protego's own on the same bytes, for a sample of
paths per file (the file's own rule paths and a few common ones) and two user
agents, and nothing may crash.

The corpus is downloaded once (``pip download`` of the installed Protego
version's sdist) into ``.webcrawl/cache/`` (gitignored), so later runs in the
same clone read it from disk. The test is skipped, saying why, only when no
package index can be reached.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

import pytest
from protego import Protego
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request

from extensions.connection import async_client
from extensions.downloadermiddlewares.robotstxt import SharedRobotsTxtMiddleware
from extensions.settings import defaults
from tests.support.sdist import unpacked_sdist
from tests.utils import get_crawler

if TYPE_CHECKING:
    from pathlib import Path

# Ours (no group of its own anywhere: the ``*`` group decides) and one many
# files give a group of its own.
USER_AGENTS = ("webcrawl", "Googlebot")
COMMON_PATHS = ("/", "/index.html", "/search?q=a", "/wp-admin/", "/%7Euser/a b")
RULE = re.compile(rb"^\s*(?:dis)?allow\s*:\s*(\S+)", re.IGNORECASE | re.MULTILINE)


def protego_corpus() -> Path:
    """The directory of Protego's robots.txt corpus, fetched on first use."""
    data = "tests/test_data"
    return (
        unpacked_sdist("protego", lambda name: name.startswith(data + "/"), data) / data
    )


def sample_paths(body: bytes) -> list[str]:
    """The file's own rule paths (wildcards filled in, a longer variant of
    each) and a few common ones."""
    paths: list[str] = []
    for raw in RULE.findall(body)[:6]:
        path = raw.decode("utf-8", "replace").replace("*", "x").rstrip("$")
        if path.startswith("/"):
            paths += [path, path + "x"]
    return [*dict.fromkeys(paths), *COMMON_PATHS]


def reference(body: bytes, max_size: int) -> Protego:
    """Protego on what RFC 9309 says to read of the file, decoded as Scrapy's
    Protego parser decodes it."""
    return Protego.parse(body[:max_size].decode("utf-8-sig", errors="ignore"))


async def allowed(reader: SharedRobotsTxtMiddleware, request: Request) -> bool:
    try:
        result = await reader.process_request(request)
    except IgnoreRequest:
        return False
    assert result is None, f"{request.url}: deferred, not decided ({result})"
    return True


def middleware(redis_url: str, user_agent: str) -> SharedRobotsTxtMiddleware:
    crawler = get_crawler(
        settings_dict={"REDIS_URL": redis_url, "ROBOTSTXT_USER_AGENT": user_agent}
    )
    return SharedRobotsTxtMiddleware.from_crawler(crawler)


@pytest.fixture(scope="module")
def corpus() -> list[Path]:
    files = sorted(protego_corpus().iterdir())
    assert len(files) >= 4000, f"only {len(files)} files in Protego's corpus"
    return files


# The corpus in SHARDS interleaved parts, so that pytest-xdist can spread
# the CPU over its processes; every file is in exactly one part.
SHARDS = 4


@pytest.mark.slow  # 20 s of CPU: not for make test-fast
@pytest.mark.parametrize("shard", range(SHARDS))
def test_decisions_match_protego_on_its_corpus(
    redis_url: str, corpus: list[Path], shard: int
) -> None:
    max_size = defaults.ROBOTS_MAX_SIZE
    mismatches: list[str] = []
    decisions = 0
    files = corpus[shard::SHARDS]

    async def main() -> None:
        nonlocal decisions
        writer = middleware(redis_url, USER_AGENTS[0])
        readers = [middleware(redis_url, ua) for ua in USER_AGENTS]
        try:
            for k, path in enumerate(files):
                body = path.read_bytes()
                base = f"http://site-{shard + k * SHARDS}.corpus.test"
                await writer.cache.record(f"{base}:80", 200, body)
                ref = reference(body, max_size)
                for ua, reader in zip(USER_AGENTS, readers, strict=True):
                    if ua != USER_AGENTS[0] and ua.lower().encode() not in body.lower():
                        continue  # no group of its own: decided as the first
                    for p in sample_paths(body):
                        # The URL as a Request holds it (Scrapy drops an
                        # empty query, quotes spaces): what both decide on.
                        request = Request(base + p)
                        ours = await allowed(reader, request)
                        decisions += 1
                        if ours != ref.can_fetch(request.url, ua):
                            mismatches.append(f"{path.name} {ua} {p}: ours {ours}")
        finally:
            for mw in (writer, *readers):
                await async_client(mw.crawler).aclose()

    asyncio.run(main())
    print(f"{len(files)} of {len(corpus)} robots.txt files, {decisions} decisions")
    assert not mismatches, f"{len(mismatches)} differ, e.g. {mismatches[:10]}"


@pytest.mark.parametrize(
    ("status", "fetchable"), [(404, True), (301, True), (500, False), (429, False)]
)
def test_status_classes_on_corpus_files(
    redis_url: str, corpus: list[Path], status: int, fetchable: bool
) -> None:
    """Whatever the file says, RFC 9309's status class decides for a non-2xx
    answer: 4xx (and a redirect not followed) allows all; 5xx and 429 send
    every request back to the frontier (the host is parked)."""
    sample = corpus[::200]

    async def main() -> None:
        writer = middleware(redis_url, USER_AGENTS[0])
        reader = middleware(redis_url, USER_AGENTS[0])
        try:
            for i, path in enumerate(sample):
                base = f"http://status-{i}.corpus.test"
                await writer.cache.record(f"{base}:80", status, path.read_bytes())
                for p in sample_paths(path.read_bytes()):
                    result = await reader.process_request(Request(base + p))
                    if fetchable:
                        assert result is None, (path.name, p)
                    else:
                        assert isinstance(result, Request), (path.name, p)
        finally:
            for mw in (writer, reader):
                await async_client(mw.crawler).aclose()

    asyncio.run(main())
