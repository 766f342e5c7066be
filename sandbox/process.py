"""Run the sandbox web as a subprocess, for tests and benchmarks.

>>> from sandbox.site import SiteSpec
>>> with SandboxProcess(SiteSpec(hosts=3, pages_per_host=5)) as web:  # doctest: +SKIP
...     urls = web.seed_urls()
...     ...  # crawl them, with TWISTED_DNS_RESOLVER=sandbox.resolver.SandboxResolver
>>> web.records()  # doctest: +SKIP
[{'host': 'site-000.sandbox.test', 'path': '/robots.txt', 't_ms': ..., ...}, ...]

Reads no settings.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType

    from sandbox.site import SiteSpec

ROOT = Path(__file__).resolve().parent.parent
# Seconds to wait for the server's {"port": N} line.
START_TIMEOUT = 30.0


class SandboxProcess:
    """``python -m sandbox`` for one :class:`SiteSpec`, on a free port.

    ``records()`` is complete once ``stop()`` returned; while the server runs
    it lags the requests by at most the server's flush interval (0.1 s).
    """

    def __init__(
        self,
        spec: SiteSpec,
        directory: str | Path | None = None,
        max_seconds: float = 0.0,
        extra_args: Iterable[str] = (),
    ) -> None:
        self.spec = spec
        self.max_seconds = max_seconds
        self.extra_args = list(extra_args)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="sandbox-")
            directory = self._tmp.name
        self.record_path = Path(directory) / "requests.jsonl"
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def command(self) -> list[str]:
        spec = self.spec
        delays = ",".join(
            f"{i}={d:g}" for i, d in sorted(spec.crawl_delay_hosts.items())
        )
        return [
            sys.executable,
            "-m",
            "sandbox",
            "--seed",
            str(spec.seed),
            "--hosts",
            str(spec.hosts),
            "--pages",
            str(spec.pages_per_host),
            "--shape",
            spec.shape,
            "--crawl-delay-map",
            delays,
            "--features",
            ",".join(sorted(spec.features)),
            "--record",
            str(self.record_path),
            "--max-seconds",
            str(self.max_seconds),
            "--change-period",
            str(spec.change_period),
            "--change-profile",
            spec.change_profile,
            "--address-map",
            ",".join(f"{i}={a}" for i, a in sorted(spec.addresses.items())),
            "--slow-map",
            ",".join(f"{i}={s:g}:{n}" for i, (s, n) in sorted(spec.slow_hosts.items())),
            *self.extra_args,
        ]

    def start(self) -> SandboxProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT), env.get("PYTHONPATH")])
        )
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env
        )
        assert self.proc.stdout is not None
        line = _readline(self.proc.stdout, START_TIMEOUT)
        if not line:
            self.stop()
            raise RuntimeError(f"sandbox did not start: {' '.join(self.command())}")
        self.port = int(json.loads(line)["port"])
        return self

    def stop(self) -> None:
        """Terminate the server and wait: the record file is then complete."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> SandboxProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        # The temporary directory lives until the object goes, so records()
        # still works after the with block.

    def __del__(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    # --- addresses --------------------------------------------------------------
    def url(self, host_index: int, path: str = "/") -> str:
        return self.spec.url(host_index, path, self.port)

    def seed_urls(self) -> list[str]:
        """The root URL of every host."""
        return self.spec.seed_urls(self.port)

    def reachable_urls(self, respect_robots: bool = True) -> set[str]:
        return self.spec.reachable_urls(self.port, respect_robots)

    def records(self) -> list[dict[str, Any]]:
        """Requests served so far: dicts with host, path, t_ms, status, ua,
        method, ip."""
        if not self.record_path.exists():
            return []
        with self.record_path.open(encoding="utf-8") as f:
            # A line being written while we read has no newline yet: skip it.
            return [json.loads(line) for line in f if line.endswith("\n")]


def _readline(stream: IO[str], timeout: float) -> str:
    """One line from a subprocess pipe, or "" after ``timeout`` seconds."""
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
    return stream.readline()


def min_gap_ms_by_host(
    records: Iterable[dict[str, Any]], exclude_paths: Iterable[str] = ("/robots.txt",)
) -> dict[str, float]:
    """Smallest gap (ms) between consecutive request arrivals, per host with
    at least two requests.

    >>> recs = [{"host": "a", "path": "/", "t_ms": 0.0},
    ...         {"host": "a", "path": "/robots.txt", "t_ms": 5.0},
    ...         {"host": "a", "path": "/x", "t_ms": 100.0},
    ...         {"host": "a", "path": "/y", "t_ms": 130.0},
    ...         {"host": "b", "path": "/", "t_ms": 1.0}]
    >>> min_gap_ms_by_host(recs)
    {'a': 30.0}
    """
    excluded = set(exclude_paths)
    times: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r["path"] not in excluded:
            times[r["host"]].append(float(r["t_ms"]))
    gaps = {}
    for host, ts in times.items():
        ts.sort()
        if len(ts) > 1:
            gaps[host] = min(b - a for a, b in itertools.pairwise(ts))
    return gaps
