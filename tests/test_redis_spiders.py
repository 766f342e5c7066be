"""scrapy-redis's spiders under webcrawl: their own destructive seed reading
is switched off, their ``make_request_from_data`` makes their seed requests
through the reliable take, and a project laid out as scrapy-redis documents
it runs under webcrawl after the migration page's steps.

Real scrapy-redis spiders (``scrapy_redis.spiders.RedisSpider``), a real
redis-server; the project test runs real ``scrapy crawl`` workers of the
project in ``tests/scrapy_redis_project`` on the sandbox web.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider
from scrapy_redis.spiders import RedisCrawlSpider, RedisSpider

from extensions.core.seeds import SeedList, SeedSource, Taken
from extensions.extensions.redismixin import RedisMixinSeeds, request_maker
from extensions.keys import FrontierKeys, seed_taken
from extensions.meta import SEED_TAKEN
from sandbox.process import SandboxProcess
from sandbox.resolver import SANDBOX_RESOLVER
from sandbox.site import SiteSpec
from tests.support.fleet import push_seeds, stop_all, wait_all
from tests.utils import get_crawler, run_redis

if TYPE_CHECKING:
    import redis.asyncio as aredis
    from scrapy.crawler import Crawler

ROOT = Path(__file__).resolve().parent.parent
PROJECT = Path(__file__).resolve().parent / "scrapy_redis_project"


class ShopSpider(RedisSpider):
    name = "shop"
    redis_key = "shop:urls"


class ShopCrawler(RedisCrawlSpider):
    name = "shopcrawl"
    redis_key = "%(name)s:urls"


class IdSpider(RedisSpider):
    """Its seeds are product ids: its make_request_from_data builds the URLs
    (the usual reason to override it)."""

    name = "ids"

    def make_request_from_data(self, data: bytes) -> Any:
        product = int(data)  # a ValueError for anything else
        if product == 0:
            return None
        return [
            Request(f"http://shop.test/p/{product}", meta={"product": product}),
            Request(f"http://shop.test/p/{product}/reviews"),
        ]


def built(spidercls: type, redis_url: str) -> Crawler:
    """A crawler with its spider made, as ``Crawler.crawl`` makes it first
    (RedisMixin.setup_redis connects its idle handler there)."""
    crawler = get_crawler(spidercls, {"REDIS_URL": redis_url})
    crawler.spider = crawler._create_spider()
    return crawler


@pytest.mark.parametrize("spidercls", [ShopSpider, ShopCrawler])
def test_a_redis_spiders_own_destructive_read_is_switched_off(
    redis_client: redis.Redis, redis_url: str, spidercls: type
) -> None:
    """Without the extension, an idle signal pops the seeds (scrapy-redis's
    read: gone from Redis); with it, they stay for the reliable take."""
    key = spidercls.redis_key % {"name": spidercls.name}
    urls = [f"http://a.test/{i}" for i in range(3)]

    bare = built(spidercls, redis_url)
    redis_client.lpush(key, *urls)
    bare.signals.send_catch_log(signals.spider_idle, dont_log=DontCloseSpider)
    assert redis_client.llen(key) == 0  # the test sees scrapy-redis's read

    served = built(spidercls, redis_url)
    RedisMixinSeeds.from_crawler(served)
    redis_client.lpush(key, *urls)
    served.signals.send_catch_log(signals.spider_idle, dont_log=DontCloseSpider)
    assert redis_client.lrange(key, 0, -1) == [u.encode() for u in reversed(urls)]


def test_another_spider_is_left_alone(redis_url: str) -> None:
    crawler = built(type("Plain", (Spider,), {"name": "plain"}), redis_url)
    assert not RedisMixinSeeds.from_crawler(crawler).served


def test_make_request_from_data_makes_the_seed_requests_through_the_take(
    redis_client: redis.Redis, redis_url: str
) -> None:
    """The spider's own function gets each entry's bytes; its requests carry
    the entry on the last one only (the entry leaves the taken list once all
    are queued); an entry it fails on, or makes nothing of, is recorded as
    invalid with why; the others are not affected."""
    crawler = built(IdSpider, redis_url)
    assert crawler.spider is not None
    maker = request_maker(crawler.spider)
    assert maker is not None
    assert request_maker(built(ShopSpider, redis_url).spider) is None  # not its own
    redis_client.lpush("ids:start_urls", b"7", b"not-an-id", b"0", b"9")

    async def body(client: aredis.Redis) -> Taken:
        seeds = SeedList(
            client,
            "ids",
            taker="w1",
            dead_after_ms=30_000,
            source=SeedSource(("ids:start_urls",)),
            maker=maker,
        )
        return await seeds.take(10)

    taken = run_redis(redis_url, body)
    assert [r.url for r in taken.made] == [
        "http://shop.test/p/7",
        "http://shop.test/p/7/reviews",
        "http://shop.test/p/9",
        "http://shop.test/p/9/reviews",
    ]
    assert [r.meta.get(SEED_TAKEN) for r in taken.made] == [None, "7", None, "9"]
    assert taken.made[0].meta["product"] == 7
    assert taken.invalid == [
        (
            b"not-an-id",
            "ValueError: invalid literal for int() with base 10: b'not-an-id'",
        ),
        (b"0", "make_request_from_data made no request"),
    ]
    held = redis_client.lrange(seed_taken("ids", "w1", "ids:start_urls"), 0, -1)
    assert sorted(held) == [b"0", b"7", b"9", b"not-an-id"]
    records = [
        json.loads(r) for r in redis_client.lrange("ids:start_urls:invalid", 0, -1)
    ]
    assert [r["entry"] for r in records] == ["not-an-id", "0"]


# -- a scrapy-redis project under webcrawl ---------------------------------------


def migrated_project(project: Path) -> None:
    """The migration page's settings step, applied to ``project``:
    scrapy-redis's SCHEDULER, DUPEFILTER_CLASS and STATS_CLASS removed, the
    add-on and the commands added (its queue settings stay: the migration
    command reads them, the workers warn about them)."""
    settings = project / "example" / "settings.py"
    text = settings.read_text()
    for name in ("SCHEDULER", "DUPEFILTER_CLASS", "STATS_CLASS"):
        text, n = re.subn(rf"(?m)^{name} = .*\n", "", text)
        assert n == 1, name
    text += (
        '\nADDONS = {"webcrawl.addon.Webcrawl": 0}\n'
        'COMMANDS_MODULE = "webcrawl.commands"\n'
    )
    settings.write_text(text)


def scrapy(project: Path, *args: str, **popen: Any) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)]),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    return subprocess.Popen(
        [sys.executable, "-m", "scrapy", *args],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        **popen,
    )


def run_to_end(project: Path, log: Path, *args: str, timeout: float = 240) -> int:
    with open(log, "ab") as out:
        proc = scrapy(project, *args, stdout=out, stderr=subprocess.STDOUT)
        try:
            return wait_all([proc], timeout)[0]
        finally:
            stop_all([proc])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spider", "key"),
    [
        ("myspider_redis", "myspider:start_urls"),
        ("mycrawler_redis", "mycrawler:start_urls"),
    ],
)
def test_a_scrapy_redis_project_runs_under_webcrawl_after_the_migration_steps(
    tmp_path: Path, redis_url: str, spider: str, key: str
) -> None:
    """The project crawls on scrapy-redis first, until it stops with work
    queued (``CLOSESPIDER_PAGECOUNT``; it persists its queue); then the
    migration page's steps: its settings edited, the dry run, the move of
    what scrapy-redis queued, and two webcrawl workers, which finish the
    crawl: every reachable page fetched, an item for each in the project's
    own pipelines, no lease left, the fleet closed by itself."""
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    spec = SiteSpec(seed=41, hosts=3, pages_per_host=6)
    common = {
        "REDIS_URL": redis_url,
        "TWISTED_DNS_RESOLVER": SANDBOX_RESOLVER,
        "DOWNLOAD_DELAY": 0.2,
    }
    webcrawl = {
        **common,
        "WEBCRAWL_HOME": str(tmp_path / "home"),
        "ALLOW_PRIVATE_ADDRESSES": True,  # the sandbox web is on loopback
        "MAX_IDLE_TIME_BEFORE_CLOSE": 3,
    }

    def options(settings: dict[str, Any]) -> list[str]:
        return [a for k, v in settings.items() for a in ("-s", f"{k}={v}")]

    client = redis.Redis.from_url(redis_url)
    with SandboxProcess(spec, directory=tmp_path, max_seconds=400) as web:
        push_seeds(redis_url, web.seed_urls(), key=key)
        # On scrapy-redis, as the project ran before (its stats collector
        # may fail on close, rmax/scrapy-redis#303: its exit status is not
        # what this checks).
        run_to_end(
            project,
            tmp_path / "scrapy-redis.log",
            "crawl",
            spider,
            "-a",
            "domain=sandbox.test",
            *options({**common, "CLOSESPIDER_PAGECOUNT": 4}),
        )
        queued = client.zcard(f"{spider}:requests")
        assert queued, (tmp_path / "scrapy-redis.log").read_text()[-3000:]
        migrated_project(project)
        for extra in (["--dry-run"], ["--trust-pickle"]):
            move = scrapy(
                project,
                "migrate_from_scrapy_redis",
                spider,
                *extra,
                *options(webcrawl),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            out, _ = move.communicate(timeout=120)
            assert move.returncode == 0, out.decode()
        assert f"{queued} queued in the frontier" in out.decode()
        logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
        outs = [open(log, "wb") for log in logs]  # noqa: SIM115
        workers = [
            scrapy(
                project,
                "crawl",
                spider,
                "-a",
                "domain=sandbox.test",
                *options(webcrawl),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            for out in outs
        ]
        try:
            codes = wait_all(workers, 240)
        finally:
            stop_all(workers)
            for out in outs:
                out.close()
        web.stop()
        fetched = {f"http://{r['host']}:{web.port}{r['path']}" for r in web.records()}
        reachable = web.reachable_urls()
    try:
        items = [json.loads(i) for i in client.lrange(f"{spider}:items", 0, -1)]
        leases = client.zcard(FrontierKeys(spider).leases)
    finally:
        client.close()
    output = "".join(log.read_text() for log in logs)
    assert codes == [0, 0], output[-3000:]  # the fleet closed by itself
    assert leases == 0
    assert not reachable - fetched, sorted(reachable - fetched)[:5]  # complete
    assert {i["url"] for i in items} >= reachable - set(web.seed_urls())
    assert all(i["spider"] == spider for i in items)  # the project's pipeline ran
    assert "is scrapy-redis's and is ignored here" in output  # SCHEDULER_QUEUE_CLASS
