"""One line where tracebacks were (issue 21): the operator's commands as real
``scrapy`` subprocesses.

A reader that goes away (``scrapy status | head``) ends the command as it
ends ``yes``: quietly, killed by SIGPIPE. The pipe here has no reader from
the start (its read end is closed before the command runs), so the first
write fails every time, whatever the timing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from pipelines.batching import prepare_page
from pipelines.items import PageItem
from pipelines.stores.sqlite import SQLiteStore
from tests.support.fleet import ROOT, worker_env
from tests.support.tools import run_scrapy

if TYPE_CHECKING:
    from pathlib import Path

    import redis

pytestmark = pytest.mark.slow


def run(
    *args: str, stdout: Any = subprocess.PIPE, stdin: bytes = b"", **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m scrapy ARGS`` in the project, as an operator runs it."""
    if stdout == subprocess.PIPE:
        return run_scrapy(list(args), worker_env(env), stdin=stdin)
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", *args],
        cwd=ROOT,
        env=worker_env(env),
        input=stdin,
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=60,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode() if done.stdout is not None else "",
        done.stderr.decode(),
    )


def into_closed_pipe(command: list[str], **kw: Any) -> Any:
    """Run ``command`` with its stdout a pipe nobody reads."""
    read, write = os.pipe()
    os.close(read)
    try:
        if command[0] == "scrapy":
            return run(*command[1:], stdout=write, **kw)
        return subprocess.run(command, stdout=write, timeout=10, check=False)
    finally:
        os.close(write)


@pytest.fixture(scope="module")
def like_yes() -> int:
    """How ``yes`` ends when its reader has gone (``yes | head``)."""
    yes = shutil.which("yes")
    assert yes is not None
    code = into_closed_pipe([yes]).returncode
    assert code == -signal.SIGPIPE
    return int(code)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A WEBCRAWL_HOME whose page store holds one page."""
    store = SQLiteStore(tmp_path / "pages.sqlite3")
    store.open()
    page = prepare_page(
        PageItem("http://a.test/", "http://a.test/", 200, "fp", body=b"<p>hi")
    )
    store.write_batch([page.metadata], [page.content])
    store.close()
    return tmp_path


def assert_quiet(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert "BrokenPipeError" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "args",
    [["status"], ["status", "--json"]],
    ids=["status", "status --json"],
)
def test_status_into_a_closed_pipe_ends_like_yes(
    args: list[str], redis_url: str, tmp_path: Path, like_yes: int
) -> None:
    done = into_closed_pipe(
        ["scrapy", *args], REDIS_URL=redis_url, WEBCRAWL_HOME=str(tmp_path)
    )
    assert_quiet(done)
    assert done.returncode == like_yes, done.stderr


def test_export_to_stdout_into_a_closed_pipe_ends_like_yes(
    home: Path, like_yes: int
) -> None:
    """The README's ``scrapy export --format jsonl -o - --body | head -1``."""
    done = into_closed_pipe(
        ["scrapy", "export", "--format", "jsonl", "-o", "-", "--body"],
        WEBCRAWL_HOME=str(home),
    )
    assert_quiet(done)
    assert done.returncode == like_yes, done.stderr
    # Read, it writes the page.
    done = run("export", "--format", "jsonl", "-o", "-", WEBCRAWL_HOME=str(home))
    assert done.returncode == 0 and '"url": "http://a.test/"' in done.stdout


def test_seed_of_a_missing_file_says_so_in_one_line(
    redis_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.txt"
    done = run("seed", str(missing), REDIS_URL=redis_url, WEBCRAWL_HOME=str(tmp_path))
    assert_quiet(done)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"scrapy seed: cannot read {missing}: No such file or directory"
    ]


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_seed_refuses_a_line_that_is_not_utf8(
    source: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Before, the bytes were replaced with U+FFFD and the line pushed; the
    seed list refuses such an entry as "not UTF-8"."""
    data = b"http://a.test/caf\xe9\nhttp://b.test/\n"
    path = tmp_path / "seeds.txt"
    path.write_bytes(data)
    env = {"REDIS_URL": redis_url, "WEBCRAWL_HOME": str(tmp_path)}
    if source == "file":
        done = run("seed", str(path), **env)
        name = str(path)
    else:
        done = run("seed", "-", stdin=data, **env)
        name = "-"
    assert_quiet(done)
    assert done.returncode == 1
    assert f"{name}:1: not UTF-8: http://a.test/caf\ufffd" in done.stderr
    assert "Pushed 1 seeds" in done.stdout
    assert redis_client.lrange("web:start_urls", 0, -1) == [b"http://b.test/"]


def test_a_page_store_that_cannot_be_loaded_is_one_line(
    redis_url: str, tmp_path: Path
) -> None:
    """Before: 45 lines of traceback from the worker, and from the reader."""
    env = {"REDIS_URL": redis_url, "WEBCRAWL_HOME": str(tmp_path)}
    done = run("crawl", "web", "-s", "PAGE_STORE=nope.Store", **env)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output, output
    critical = [line for line in output.splitlines() if "CRITICAL" in line]
    assert len(critical) == 1, output
    assert "PAGE_STORE='nope.Store' cannot be loaded" in critical[0]
    done = run("export", "--format", "jsonl", "-o", "-", "-s", "PAGE_STORE=nope.Store",
               **env)  # fmt: skip
    assert_quiet(done)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "PAGE_STORE='nope.Store' cannot be loaded" in done.stderr
