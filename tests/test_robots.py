"""The shared robots.txt middleware: RFC 9309 status classes, redirects, size
limit and garbage, by one real crawl against loopback servers."""

from __future__ import annotations

import itertools
import random
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pytest
from scrapy.exceptions import NotConfigured

from extensions import defaults, keys
from extensions.embedded_redis import free_port
from extensions.robots import SharedRobotsTxtMiddleware
from tests.httpserver import LogServer, Route, crawl, reply
from tests.utils import get_crawler

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import redis


def robots(body: bytes, status: int = 200) -> Route:
    return reply(body, status, Content_Type="text/plain")


def redirect(to: str) -> Route:
    return reply(b"", 301, Location=to)


def chain(n: int, final: bytes) -> dict[str, Route]:
    """robots.txt redirected ``n`` times, then ``final``."""
    hops = ["/robots.txt"] + [f"/r{i}" for i in range(1, n + 1)]
    routes = {a: redirect(b) for a, b in itertools.pairwise(hops)}
    routes[hops[-1]] = robots(final)
    return routes


DISALLOW = b"User-agent: *\nDisallow: /private\n"
PADDING = b"".join(b"# padding line %06d ..........\n" % i for i in range(20_000))
rng = random.Random(9309)
GARBAGE = bytes(rng.randrange(256) for _ in range(4096))


@pytest.fixture
def servers() -> Iterator[dict[str, LogServer]]:
    kinds: dict[str, dict[str, Route]] = {
        "ok": {
            "/robots.txt": robots(
                DISALLOW + b"Crawl-delay: 120\nSitemap: http://s.test/sitemap.xml\n"
                b"Sitemap: http://elsewhere.test/sitemap.xml\n"  # out of scope
            )
        },
        "notfound": {"/robots.txt": robots(b"Disallow: /", 404)},
        "forbidden": {"/robots.txt": robots(b"Disallow: /", 403)},
        "error": {"/robots.txt": robots(b"", 500)},
        "unavailable": {"/robots.txt": robots(b"", 503)},
        "redirect5": chain(5, DISALLOW),
        "redirect6": chain(6, DISALLOW),
        "big": {"/robots.txt": robots(DISALLOW + PADDING + b"Disallow: /late\n")},
        # Over 8 x ROBOTS_MAX_SIZE (its download used to be cancelled, then
        # the file counted as unreachable and disallowed the whole host).
        "huge": {"/robots.txt": robots(DISALLOW + PADDING * 8)},
        "garbage": {"/robots.txt": robots(GARBAGE)},
        "timeout": {"/robots.txt": reply(b"User-agent: *\nDisallow:\n")},
    }
    slow = {"timeout": {"/robots.txt": 2.0}}
    with ExitStack() as stack:
        found = {}
        for name, routes in kinds.items():
            server = LogServer(routes, delays=slow.get(name))
            found[name] = stack.enter_context(server)
        # A redirect out of the crawl's scope (localhost is not in
        # TEST_ALLOWED_DOMAINS): not followed, the file is unavailable.
        found["offsite"] = stack.enter_context(LogServer())
        found["offsite"].routes["/robots.txt"] = redirect(
            f"http://localhost:{found['ok'].port}/robots.txt"
        )
        yield found


def test_big_body_is_over_500_kib() -> None:
    assert len(DISALLOW + PADDING) > 600_000 > defaults.ROBOTS_MAX_SIZE
    assert len(DISALLOW + PADDING * 8) > 8 * defaults.ROBOTS_MAX_SIZE


def test_refuses_to_run_beside_scrapys_robots() -> None:
    with pytest.raises(NotConfigured, match="ROBOTSTXT_OBEY"):
        SharedRobotsTxtMiddleware.from_crawler(
            get_crawler(settings_dict={"ROBOTSTXT_OBEY": True})
        )
    with pytest.raises(NotConfigured, match="ROBOTS_ENABLED"):
        SharedRobotsTxtMiddleware.from_crawler(
            get_crawler(settings_dict={"ROBOTS_ENABLED": False})
        )


@pytest.mark.slow
def test_status_classes_redirects_size_and_garbage(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    servers: dict[str, LogServer],
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: unreachable
    bases = {name: s.url for name, s in servers.items()} | {"dead": dead}
    urls = [b + p for b in bases.values() for p in ("/page", "/private")]
    urls.append(servers["big"].url + "/late")
    stats = crawl(
        tmp_path,
        redis_url,
        urls,
        ROBOTS_FETCH_TIMEOUT=0.5,
        ROBOTS_CRAWL_DELAY_MAX=0.2,
        RETRY_ENABLED=False,
        TEST_ALLOWED_DOMAINS="127.0.0.1,s.test",
    )
    s = servers

    def fetched(name: str, path: str) -> bool:
        return s[name].count(path) > 0

    # One robots.txt fetch per host, however many requests wait for it.
    for name in ("ok", "notfound", "error", "big", "huge", "garbage"):
        assert s[name].count("/robots.txt") == 1, name
    # 2xx: parsed; /private is never fetched.
    assert fetched("ok", "/page") and not fetched("ok", "/private")
    # 4xx, and a redirect out of scope: allow all.
    for name in ("notfound", "forbidden", "offsite"):
        assert fetched(name, "/page") and fetched(name, "/private"), name
    # 5xx, timeout, unreachable: disallow all for now, host parked.
    for name in ("error", "unavailable", "timeout"):
        assert not fetched(name, "/page") and not fetched(name, "/private"), name
    now = int(redis_client.time()[0]) * 1000
    for name in ("error", "unavailable", "timeout", "dead"):
        hk = bases[name] + ("" if bases[name].count(":") == 2 else ":80")
        park = int(redis_client.hget(keys.FrontierKeys("web").host(hk), "park") or 0)
        assert park > now + 30_000, name
        cached = redis_client.hgetall(keys.robots("web", hk))
        assert int(cached[b"failures"]) == 1, name
    # Five redirects are followed; a sixth is not (then: unavailable, allow).
    assert s["redirect5"].count("/r5") == 1 and not fetched("redirect5", "/private")
    assert s["redirect6"].count("/r5") == 1 and s["redirect6"].count("/r6") == 0
    assert fetched("redirect6", "/private")
    # 600 KB: the first 500 KiB are parsed, a rule beyond them is not.
    assert not fetched("big", "/private") and fetched("big", "/late")
    # 4.9 MB: read up to 500 KiB and parsed, not "unreachable" (disallow all).
    assert fetched("huge", "/page") and not fetched("huge", "/private")
    # Garbage bytes parse to no rules: allow all, no crash.
    assert fetched("garbage", "/page") and fetched("garbage", "/private")
    # Crawl-delay capped, written to the host record; the sitemap in scope is
    # a seed, the one outside allowed_domains is not.
    ok_host = keys.FrontierKeys("web").host(bases["ok"])
    assert redis_client.hget(ok_host, "delay") == b"200"
    assert redis_client.lrange(keys.start_urls("web"), 0, -1) == [
        b"http://s.test/sitemap.xml"
    ]
    cached = redis_client.hgetall(keys.robots("web", bases["ok"]))
    assert int(cached[b"status"]) == 200 and b"Disallow: /private" in cached[b"body"]
    assert stats["robotstxt/sitemaps_out_of_scope"] == 1
    assert stats["robotstxt/forbidden"] == 4
    assert stats["robotstxt/crawl_delay_capped"] == 1
    assert stats["robotstxt/failures"] == 4
    assert stats["robotstxt/unreachable_dropped"] == 8
