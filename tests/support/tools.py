"""The project's command-line tools run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.fleet import ROOT, worker_env

# warcio's command line, installed next to this Python.
WARCIO = str(Path(sys.executable).with_name("warcio"))


def run_tool(*args: str, env: dict[str, str] | None = None, cwd: Any = ROOT) -> Any:
    """``python ARGS`` (or ``warcio ARGS``) as a user would run it."""
    cmd = list(args) if args[0] == WARCIO else [sys.executable, *args]
    return subprocess.run(
        cmd, cwd=cwd, env=worker_env(env), capture_output=True,
        timeout=120, check=False,
    )  # fmt: skip


def scrapy(
    *args: str,
    settings: dict[str, object] | None = None,
    stdin: str = "",
    env: Any = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``scrapy <args>`` in the project directory, as an operator would."""
    cmd = [sys.executable, "-m", "scrapy", *args]
    for name, value in (settings or {}).items():
        cmd += ["-s", f"{name}={value}"]
    return subprocess.run(
        cmd,
        check=False,
        cwd=ROOT,
        env=worker_env(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def status(settings: dict[str, object]) -> dict[str, Any]:
    done = scrapy("status", "--json", settings=settings)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
