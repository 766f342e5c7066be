"""scrapyd-deploy builds an egg holding the project and its extensions."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_scrapyd_egg_holds_all_packages(tmp_path: Path) -> None:
    deploy = shutil.which("scrapyd-deploy", path=str(Path(sys.executable).parent))
    if deploy is None:
        pytest.skip("scrapyd-client is not installed")
    egg = tmp_path / "webcrawl.egg"
    subprocess.run(
        [deploy, "--build-egg", str(egg)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    with zipfile.ZipFile(egg) as z:
        names = set(z.namelist())
        entry_points = z.read("EGG-INFO/entry_points.txt").decode()
    for module in [
        "webcrawl/settings.py",
        "webcrawl/spiders/web.py",
        "webcrawl/commands/crawl.py",  # COMMANDS_MODULE: scrapyd runs it
        "extensions/scheduler.py",
        "extensions/frontier.py",
        "pipelines/storage.py",
        "sandbox/resolver.py",
    ]:
        assert module in names, module
    assert "settings = webcrawl.settings" in entry_points
    assert not any(n.startswith("tests/") for n in names)
