"""A project's scrapy-redis settings under the add-on: refused in one line
(exit 2), ignored with a warning naming what replaces them, or understood
(REDIS_HOST/PORT/DB/PARAMS build the connection).

Real ``scrapy crawl web`` subprocesses, with the settings in a project
settings module (priority ``project``, which beats the add-on's, as in a
scrapy-redis project) and a real redis-server, one that asks for a password.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
from scrapy.settings import Settings

from extensions.connection import resolve_redis_url
from extensions.connection.embedded import RedisProcess, embedded_unless_configured
from extensions.dupefilters import BloomDupeFilter
from extensions.keys import FrontierKeys
from tests.support.tools import run_scrapy
from webcrawl import scrapyredis
from webcrawl.addon import DUPEFILTER, SCHEDULER, setting_typos

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "pw-of-the/scrapy@redis"


def crawl(
    tmp_path: Path,
    project: str,
    *args: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``scrapy crawl web ARGS`` with ``project`` appended to the webcrawl
    project's settings module (as a scrapy-redis project's settings.py)."""
    package = tmp_path / "srproject"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(
        "from webcrawl.settings import *  # noqa: F403\n" + project
    )
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
        "SCRAPY_SETTINGS_MODULE": "srproject.settings",
        "WEBCRAWL_HOME": str(tmp_path / "home"),
        **(env or {}),
    }
    environ.pop("REDIS_URL", None)
    environ.update(env or {})
    return run_scrapy(
        ["crawl", "web", "-s", "CLOSESPIDER_TIMEOUT=1", "-s", "LOG_LEVEL=INFO", *args],
        environ,
    )


def one_critical_line(result: subprocess.CompletedProcess[str]) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "CRITICAL" in line]
    assert len(lines) == 1, output
    return lines[0]


# -- refused: one line, exit 2 ---------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "words"),
    [
        (
            "SCHEDULER",
            "scrapy_redis.scheduler.Scheduler",
            ["is scrapy-redis's", "remove it", "extensions.core.scheduler"],
        ),
        (
            "DUPEFILTER_CLASS",
            "scrapy_redis.dupefilter.RFPDupeFilter",
            ["is scrapy-redis's", "remove it", "BloomDupeFilter"],
        ),
        (
            "STATS_CLASS",
            "scrapy_redis.stats.RedisStatsCollector",
            ["is scrapy-redis's", "remove it", "#303"],
        ),
        (
            "SCHEDULER",
            "scrapy.core.scheduler.Scheduler",
            ["is another", "remove it"],
        ),
    ],
)
def test_a_setting_that_would_replace_webcrawl_stops_the_worker(
    tmp_path: Path, redis_url: str, setting: str, value: str, words: list[str]
) -> None:
    result = crawl(tmp_path, f"{setting} = {value!r}\n", env={"REDIS_URL": redis_url})
    line = one_critical_line(result)
    assert f"{setting}={value!r} (the project settings)" in line, line
    for word in words:
        assert word in line, line


def test_the_same_setting_on_the_command_line_is_named_as_such(
    tmp_path: Path, redis_url: str
) -> None:
    result = crawl(
        tmp_path,
        "",
        "-s",
        "SCHEDULER=scrapy_redis.scheduler.Scheduler",
        env={"REDIS_URL": redis_url},
    )
    assert "(-s) is scrapy-redis's" in one_critical_line(result)


def test_set_and_zset_seed_keys_at_once_are_refused(
    tmp_path: Path, redis_url: str
) -> None:
    result = crawl(
        tmp_path,
        "REDIS_START_URLS_AS_SET = True\nREDIS_START_URLS_AS_ZSET = True\n",
        env={"REDIS_URL": redis_url},
    )
    assert "are both True" in one_critical_line(result)


def test_webcrawls_own_components_or_subclasses_set_by_the_project_pass() -> None:
    s = Settings()
    s.setdict(
        {
            "SCHEDULER": "extensions.core.scheduler.RedisScheduler",
            "DUPEFILTER_CLASS": "tests.test_scrapy_redis_settings.MyBloom",
        },
        priority="project",
    )
    assert scrapyredis.refusals(s, SCHEDULER, DUPEFILTER) == []
    # The add-on's own priority or lower is not the user's choice: it wins.
    s.set("SCHEDULER", "scrapy_redis.scheduler.Scheduler", priority="default")
    assert scrapyredis.refusals(s, SCHEDULER, DUPEFILTER) == []


class MyBloom(BloomDupeFilter):
    """A project's own subclass of webcrawl's dupefilter."""


# -- replaced: one warning each --------------------------------------------------

REPLACED_VALUES = {
    "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue",
    "SCHEDULER_QUEUE_KEY": "%(spider)s:queue",
    "SCHEDULER_SERIALIZER": "scrapy_redis.picklecompat",
    "SCHEDULER_IDLE_BEFORE_CLOSE": 10,
    "SCHEDULER_DUPEFILTER_KEY": "%(spider)s:df",
    "SCHEDULER_DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "DUPEFILTER_KEY": "dupefilter:%(timestamp)s",
    "STATS_KEY": "%(spider)s:stats",
    "REDIS_ENCODING": "latin1",
    "REDIS_DECODE_RESPONSES": False,
    "REDIS_START_URLS_BATCH_SIZE": 16,
    "REDIS_KEY_CHECK_INTERVAL": 5,
}


def test_every_replaced_setting_has_a_value_in_this_test() -> None:
    replaced = {f.name for f in scrapyredis.SETTINGS if f.fate == scrapyredis.REPLACED}
    assert replaced == set(REPLACED_VALUES)


def test_each_replaced_setting_gets_one_warning_naming_what_replaces_it(
    tmp_path: Path, redis_url: str
) -> None:
    project = "".join(f"{k} = {v!r}\n" for k, v in REPLACED_VALUES.items())
    result = crawl(tmp_path, project, env={"REDIS_URL": redis_url})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Spider closed (closespider_timeout)" in output, output
    for name in REPLACED_VALUES:
        lines = [
            line
            for line in output.splitlines()
            if f"WARNING: {name} is scrapy-redis's and is ignored here" in line
        ]
        assert len(lines) == 1, (name, output)
        assert scrapyredis.FATES[name].note in lines[0]
    # None of them is taken for a typo of a webcrawl setting.
    assert "Unknown settings" not in output


def test_utf8_encoding_and_kept_settings_give_no_warning() -> None:
    s = Settings()
    s.setdict(
        {
            "REDIS_ENCODING": "UTF-8",
            "SCHEDULER_PERSIST": True,
            "REDIS_START_URLS_KEY": "%(name)s:urls",
            "REDIS_ITEMS_KEY": "%(spider)s:items",
        },
        priority="project",
    )
    assert scrapyredis.warnings(s) == []


def test_scrapy_redis_names_given_on_the_command_line_are_no_typos() -> None:
    s = Settings()
    s.setdict({"SCHEDULER_QUEUE_KEY": "x", "REDIS_HOST": "h"}, priority="cmdline")
    assert setting_typos(s) == {}


# -- mapped: the connection ------------------------------------------------------


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """A real redis-server that asks for a password."""
    server = RedisProcess(tmp_path_factory.mktemp("locked"), appendonly=False)
    server.start()
    redis.Redis.from_url(server.url).config_set("requirepass", PASSWORD)
    yield server
    server.stop()


def test_redis_host_port_db_params_connect_the_worker_there(
    tmp_path: Path, locked_redis: RedisProcess
) -> None:
    project = (
        "REDIS_HOST = '127.0.0.1'\n"
        f"REDIS_PORT = {locked_redis.port}\n"
        "REDIS_DB = 3\n"
        f"REDIS_PARAMS = {{'password': {PASSWORD!r}, 'socket_timeout': 10,"
        " 'encoding': 'utf-8', 'retry_on_timeout': True}\n"
    )
    result = crawl(tmp_path, project)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    client = redis.Redis(port=locked_redis.port, db=3, password=PASSWORD)
    try:
        # The crawl's frontier is in database 3 of that server...
        assert client.exists(FrontierKeys("web").partitions)
    finally:
        client.flushdb()
        client.close()
    # ... and no embedded Redis was started.
    assert not (tmp_path / "home" / "redis").exists()
    assert PASSWORD not in output
    assert re.search(r"Connecting to Redis at redis://:\*\*\*@127\.0\.0\.1", output)
    assert "REDIS_PARAMS 'encoding' ignored" in output


def test_a_wrong_password_in_redis_params_is_one_line_without_it(
    tmp_path: Path, locked_redis: RedisProcess
) -> None:
    project = (
        f"REDIS_PORT = {locked_redis.port}\n"
        f"REDIS_PARAMS = {{'password': 'not-' + {PASSWORD!r}}}\n"
    )
    line = one_critical_line(crawl(tmp_path, project))
    assert "refused the credentials" in line
    assert "redis://:***@localhost:" in line
    assert PASSWORD not in line


def test_a_redis_params_key_webcrawl_cannot_honour_is_refused(tmp_path: Path) -> None:
    result = crawl(tmp_path, "REDIS_PARAMS = {'connection_pool': 'mine'}\n")
    line = one_critical_line(result)
    assert "REDIS_PARAMS key 'connection_pool' is not understood" in line


def test_redis_url_wins_over_the_parts_with_a_warning(redis_url: str) -> None:
    s = Settings()
    s.setdict({"REDIS_URL": redis_url, "REDIS_HOST": "elsewhere"}, priority="project")
    assert resolve_redis_url(s) == redis_url
    assert scrapyredis.warnings(s) == [
        "REDIS_HOST ignored: REDIS_URL names the Redis (put its options in the URL)"
    ]


def test_no_part_set_still_means_the_embedded_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    s = Settings()
    s.set("REDIS_PORT", 6379, priority="default")  # the defaults module's
    with pytest.raises(Exception, match="REDIS_URL is not set"):
        resolve_redis_url(s)
    s.set("REDIS_PORT", 6390, priority="project")
    assert not embedded_unless_configured(s, "addon")
    assert resolve_redis_url(s) == "redis://localhost:6390/0"


# -- the migration page's table --------------------------------------------------


def test_the_migration_pages_table_is_the_one_the_add_on_uses() -> None:
    page = (ROOT / scrapyredis.MIGRATION_PAGE).read_text()
    table = page.split("| setting, attribute or key | webcrawl |", 1)[1]
    rows = {}
    for row in table.split("\n\n", 1)[0].strip().splitlines()[1:]:
        name, fate, note = (c.strip() for c in row.strip("|").split("|"))
        if re.fullmatch(r"`[A-Z_]+`", name):
            rows[name.strip("`")] = (fate, note)
    assert rows == {f.name: (f.fate, f.note) for f in scrapyredis.SETTINGS}
