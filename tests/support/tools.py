"""The project's command-line tools run as a user runs them."""

from __future__ import annotations

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
