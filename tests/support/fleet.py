"""Run a local fleet of ``scrapy crawl web`` workers (tests, demo, benchmarks).

This is plain process management: each worker is a real ``scrapy crawl web``
subprocess, exactly as an operator would start it, with settings passed as
``-s NAME=value``. Seeds are pushed with the real ``redis-cli``. Every worker
started here resolves the sandbox web's names (``-s TWISTED_DNS_RESOLVER=``
:data:`sandbox.resolver.SANDBOX_RESOLVER`): the production settings leave
Scrapy's resolver in place.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from extensions.connection.embedded import find_redis_binary
from sandbox.resolver import SANDBOX_RESOLVER

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

# The repository: tests/support/fleet.py is two levels below it.
ROOT = Path(__file__).resolve().parents[2]


def push_seeds(
    redis_url: str, urls: Iterable[str], key: str = "web:start_urls"
) -> None:
    """``redis-cli -c -u URL lpush web:start_urls ...``, as the README says
    (``-c`` follows a cluster's ``MOVED`` to the master of the key)."""
    urls = list(urls)
    cli = find_redis_binary("redis-cli")
    for i in range(0, len(urls), 500):
        subprocess.run(
            [cli, "-c", "-u", redis_url, "lpush", key, *urls[i : i + 500]],
            check=True,
            stdout=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )


class Launch:
    """How :func:`start_worker` starts a worker: forked from a preloaded
    process (:mod:`tests.support.preload`; the tests' conftest turns it on),
    or as a plain subprocess (the demo, the benchmarks)."""

    preloaded = False


def worker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["SCRAPY_SETTINGS_MODULE"] = "webcrawl.settings"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


def worker_command(
    settings: Mapping[str, object], spider_args: Mapping[str, object] | None = None
) -> list[str]:
    cmd = [sys.executable, "-m", "scrapy", "crawl", "web"]
    for name, value in {"TWISTED_DNS_RESOLVER": SANDBOX_RESOLVER, **settings}.items():
        cmd += ["-s", f"{name}={value}"]
    for name, value in (spider_args or {}).items():
        cmd += ["-a", f"{name}={value}"]
    return cmd


def start_worker(
    settings: Mapping[str, object],
    log_path: Path,
    spider_args: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if Launch.preloaded:
        from tests.support import preload

        return preload.start(  # type: ignore[return-value]
            worker_command(settings, spider_args)[2:],
            worker_env(env),
            ROOT,
            log_path,
        )
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            worker_command(settings, spider_args),
            cwd=ROOT,
            env=worker_env(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> list[int]:
    """Wait for every worker; kill those still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            stop(proc)
            codes.append(-9)
    return codes


def stop_all(procs: Sequence[subprocess.Popen[bytes]], grace: float = 20.0) -> None:
    """SIGTERM every worker still running (Scrapy's graceful stop: leases and
    seeds handed back, buffered pages written), wait up to ``grace`` seconds
    for all of them, then SIGKILL the process group of any left (each worker
    leads its own: ``start_new_session``), its parse child included."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
