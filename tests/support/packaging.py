"""What a fresh clone holds and what the egg ships."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fleet import ROOT

# What scrapyd runs: the application and the two libraries it wires together.
SHIPPED = ("webcrawl", "extensions", "pipelines")


def clean_copy(dest: Path) -> Path:
    """Copy what a fresh clone holds (plus files not yet committed, minus
    ignored ones) to ``dest``: no build/, *.egg-info or editable install of
    the checkout can add or hide anything."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def dev_tool(name: str) -> str:
    """A console script of the development environment (requirements-dev.txt)."""
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed (pip install -r requirements-dev.txt)")
    return found
