"""Workers forked from a process that imported Scrapy and the project once.

A worker the tests start (:func:`start`), or an operator command they run
(:func:`run`), is a real ``scrapy`` process: Scrapy's command line
(``scrapy.__main__``) in a process and a session of its own, with its own
environment, its output in its log file (or captured), killed and reaped
like any. Only its birth differs: multiprocessing's fork server forks it
from a process that has already imported :data:`PRELOAD`, rather than
starting a fresh interpreter. Those imports are about 1 s of the 1.5 s of
CPU a worker takes to start, and the suite starts about two hundred such
processes on two cores.

What a start does that the imports must not have done already: no Twisted
reactor is installed (Scrapy installs the asyncio one in each worker, from
its settings) and no settings module is imported (each worker reads its own
environment); :func:`_run` checks both. ``make demo`` and the benchmarks
start plain subprocesses (:func:`tests.support.fleet.start_worker`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from multiprocessing.context import ForkServerContext

# What every worker imports before its crawl starts (the rest is imported by
# the worker, as at any start).
PRELOAD = [
    "scrapy.cmdline",
    "scrapy.crawler",
    "scrapy.core.downloader.handlers.http11",
    "scrapy.downloadermiddlewares.cookies",
    "webcrawl.addon",
    "webcrawl.commands.crawl",
    "webcrawl.spiders.web",
    "extensions.core.scheduler",
    "pipelines.storage",
    "sandbox.resolver",
]
# Imported by a worker's start from its own environment: never preloaded.
NOT_PRELOADED = ("twisted.internet.reactor", "webcrawl.settings")

_started: list[PreloadedWorker] = []


@atexit.register
def _kill_leftovers() -> None:
    """SIGKILL the sessions of workers a test left running: multiprocessing
    would otherwise wait for them at exit (this runs first: atexit is LIFO)."""
    for worker in _started:
        if worker.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)


@functools.cache
def _fork_server() -> ForkServerContext:
    """The fork server of this test process, started on first use."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _run(
    argv: list[str], env: dict[str, str], cwd: str, out: str, err: str, stdin: str
) -> None:
    """The forked process: what ``python -m scrapy ARGV`` runs, in a new
    session, with ``env`` (its ``PYTHONPATH`` first on ``sys.path``), in
    ``cwd``, reading ``stdin`` and appending to ``out`` and ``err``."""
    os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [cwd, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    for fd, path, flags in (
        (0, stdin, os.O_RDONLY),
        (1, out, os.O_WRONLY | os.O_APPEND | os.O_CREAT),
        (2, err, os.O_WRONLY | os.O_APPEND | os.O_CREAT),
    ):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    # multiprocessing gave the child a stdin of its own (os.devnull).
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.argv = list(argv)
    code = 0
    try:
        early = [name for name in NOT_PRELOADED if name in sys.modules]
        if early:
            raise RuntimeError(f"the fork server imported {early}")
        runpy.run_module("scrapy", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:  # sys.exit("message"), as the interpreter ends it
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        # What the interpreter does at exit, which multiprocessing's child
        # would skip: wait for the threads that are not daemons, then run
        # the exit functions (the embedded Redis's stop, the log's flush).
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


class PreloadedWorker:
    """A forked worker, with the parts of :class:`subprocess.Popen` the
    tests use (its exit status comes from the fork server, its parent)."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        out: Path,
        err: Path | None = None,
        stdin: Path | None = None,
    ) -> None:
        self.args = list(argv)
        streams = (str(out), str(err or out), str(stdin or os.devnull))
        self._process = _fork_server().Process(
            # Not a daemon: a daemon may start no process (the parse pool).
            target=_run,
            args=(self.args, dict(env), str(cwd), *streams),
            daemon=False,
        )
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid
        _started.append(self)

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path
) -> PreloadedWorker:
    """``python -m scrapy ARGV[1:]``, forked (see the module docstring)."""
    log.touch()  # there once this returns, as a subprocess's log file is
    return PreloadedWorker(argv, env, cwd, log)


def run(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    stdin: str | bytes = "",
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, "-m", *ARGV], capture_output=True,
    text=True, ...)``, forked: its output is read once it has exited."""
    with tempfile.TemporaryDirectory(prefix="preload-") as tmp:
        files = [Path(tmp, name) for name in ("stdin", "stdout", "stderr")]
        files[0].write_bytes(stdin if isinstance(stdin, bytes) else stdin.encode())
        worker = PreloadedWorker(argv, env, cwd, files[1], files[2], files[0])
        try:
            code = worker.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
            raise
        out, err = files[1].read_text(), files[2].read_text()
    return subprocess.CompletedProcess(["python", "-m", *argv], code, out, err)
