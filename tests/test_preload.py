"""The tests' workers, forked from a preloaded process (tests.support.preload),
start, log, exit and die as ``scrapy crawl web`` subprocesses do."""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

import pytest

from tests.support.fleet import Launch, start_worker, stop, worker_command
from tests.support.polling import wait_until
from tests.support.preload import PreloadedWorker

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def test_the_tests_fork_their_workers() -> None:
    assert Launch.preloaded
    assert worker_command({})[1:5] == ["-m", "scrapy", "crawl", "web"]


def test_a_refused_setting_exits_2_with_its_line_in_the_log(
    redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(
        {"REDIS_URL": redis_url, "SCHEDULER": "scrapy.core.scheduler.Scheduler"}, log
    )
    assert isinstance(worker, PreloadedWorker)
    assert worker.wait(60) == 2
    assert "SCHEDULER" in log.read_text()


def test_a_worker_leads_its_session_and_dies_of_sigkill(
    redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(
        {"REDIS_URL": redis_url, "WEBCRAWL_HOME": str(tmp_path), "LOG_LEVEL": "INFO"},
        log,
    )
    try:
        assert wait_until(lambda: "Spider opened" in log.read_text(), 60), (
            log.read_text()[-2000:]
        )
        assert os.getpgid(worker.pid) == worker.pid  # start_new_session's
        assert worker.poll() is None  # a service: it waits for seeds
    finally:
        stop(worker)
    assert worker.returncode == -signal.SIGKILL
