"""The project's command-line tools run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import preload
from tests.support.fleet import ROOT, Launch, worker_env

# warcio's command line, installed next to this Python.
WARCIO = str(Path(sys.executable).with_name("warcio"))


def run_tool(*args: str, env: dict[str, str] | None = None, cwd: Any = ROOT) -> Any:
    """``python ARGS`` (or ``warcio ARGS``) as a user would run it."""
    cmd = list(args) if args[0] == WARCIO else [sys.executable, *args]
    return subprocess.run(
        cmd, cwd=cwd, env=worker_env(env), capture_output=True,
        timeout=120, check=False,
    )  # fmt: skip


def run_scrapy(
    args: list[str],
    env: dict[str, str],
    cwd: Path = ROOT,
    stdin: str | bytes = "",
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """``python -m scrapy ARGS`` with ``env`` (the whole environment), its
    output captured as text: forked from the preloaded process when the
    tests' workers are (:mod:`tests.support.preload`)."""
    if Launch.preloaded:
        return preload.run(["scrapy", *args], env, cwd, stdin, timeout)
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", *args],
        check=False,
        cwd=cwd,
        env=env,
        input=stdin if isinstance(stdin, bytes) else stdin.encode(),
        capture_output=True,
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def scrapy(
    *args: str,
    settings: dict[str, object] | None = None,
    stdin: str = "",
    env: Any = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``scrapy <args>`` in the project directory, as an operator would."""
    cmd = list(args)
    for name, value in (settings or {}).items():
        cmd += ["-s", f"{name}={value}"]
    return run_scrapy(cmd, worker_env(env), stdin=stdin)


def status(settings: dict[str, object]) -> dict[str, Any]:
    done = scrapy("status", "--json", settings=settings)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
