"""The README's documented ways to point a worker at its databases.

``export REDIS_URL=... MONGO_URI=...`` then ``scrapy crawl web`` (the MONGO_URI
path crashed the worker: the store wrote to the frozen crawler settings), and
the ``*_FILE`` variants a container secret gives (``REDIS_URL_FILE``,
``MONGO_URI_FILE``). A real worker against the real redis-server and the real
pymongo driver talking to mockupdb, storing one page it fetched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from scrapy.settings import Settings

import extensions.settings.defaults
from extensions.settings import config
from extensions.settings.config import SettingsError, setting_or_env
from tests.httpserver import LogServer, reply
from tests.support.mongo import FakeMongo

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis

ROOT = Path(__file__).resolve().parent.parent
# Close after 1 idle second, the page written within 0.2 s (not the 5 s
# batch timer); no politeness wait for the one page.
QUICK = ["-s", "MAX_IDLE_TIME_BEFORE_CLOSE=1", "-s", "DOWNLOAD_DELAY=0",
         "-s", "PIPELINE_FLUSH_INTERVAL=0.2"]  # fmt: skip


@pytest.fixture
def mongo() -> Iterator[FakeMongo]:
    fake = FakeMongo([])
    fake.server.run()
    yield fake
    fake.server.stop()


@pytest.fixture
def site() -> Iterator[LogServer]:
    page = reply(b"<html><body><p>one page</p></body></html>", Content_Type="text/html")
    with LogServer(
        {"/robots.txt": reply(b"User-agent: *\nAllow: /\n")}, default=page
    ) as s:
        yield s


@pytest.mark.slow
@pytest.mark.parametrize("how", ["variables", "secret files"])
def test_worker_takes_redis_url_and_mongo_uri_from_the_environment(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    mongo: FakeMongo,
    site: LogServer,
    how: str,
) -> None:
    mongo_uri = f"mongodb://127.0.0.1:{mongo.server.port}/?directConnection=true"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WEBCRAWL_HOME": str(tmp_path)}
    env.pop("REDIS_URL", None)
    env.pop("MONGO_URI", None)
    if how == "variables":
        env |= {"REDIS_URL": redis_url, "MONGO_URI": mongo_uri}
    else:
        (tmp_path / "redis_url").write_text(redis_url + "\n")
        (tmp_path / "mongo_uri").write_text(mongo_uri + "\n")
        env |= {
            "REDIS_URL_FILE": str(tmp_path / "redis_url"),
            "MONGO_URI_FILE": str(tmp_path / "mongo_uri"),
        }
    redis_client.lpush("web:start_urls", f"{site.url}/page")
    result = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "web", *QUICK],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Traceback" not in output, output
    assert "MongoStore" in output or mongo.updates, output
    stored = [doc["url"] for doc in mongo.docs["pages_metadata"].values()]
    assert stored == [f"{site.url}/page"], output
    # Nothing went to the SQLite store the worker would use without MONGO_URI.
    assert not (tmp_path / "pages.sqlite3").exists()


def test_setting_wins_over_environment_which_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("redis://from-file/0\n")
    monkeypatch.setenv("REDIS_URL_FILE", str(secret))
    monkeypatch.delenv("REDIS_URL", raising=False)
    settings = Settings()
    config.install(settings, extensions.settings.defaults)
    assert setting_or_env(settings, "REDIS_URL") == "redis://from-file/0"
    monkeypatch.setenv("REDIS_URL", "redis://from-env/0")
    assert setting_or_env(settings, "REDIS_URL") == "redis://from-env/0"
    settings.set("REDIS_URL", "redis://from-setting/0", priority="cmdline")
    assert setting_or_env(settings, "REDIS_URL") == "redis://from-setting/0"


def test_an_unreadable_secret_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MONGO_URI", raising=False)
    monkeypatch.setenv("MONGO_URI_FILE", str(tmp_path / "missing"))
    with pytest.raises(SettingsError, match=r"MONGO_URI_FILE=.*missing cannot be read"):
        setting_or_env(Settings(), "MONGO_URI")
