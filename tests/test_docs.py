"""The README stays true to the code."""

from __future__ import annotations

from pathlib import Path

from extensions import keys
from webcrawl.addon import DEFAULTS
from webcrawl.docs import readme_with_table, settings_rows

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_settings_table_is_current() -> None:
    text = README.read_text()
    assert readme_with_table(text) == text, "run: python -m webcrawl.docs --write"


def test_every_setting_is_documented() -> None:
    names = {name for module in DEFAULTS for name in vars(module) if name.isupper()}
    rows = settings_rows()
    assert {r[1] for r in rows} == names
    assert all(r[4] for r in rows), [r[1] for r in rows if not r[4]]


def test_readme_names_every_key_family() -> None:
    text = README.read_text()
    for example in [
        keys.start_urls("web"),
        keys.invalid_start_urls("web"),
        keys.FrontierKeys("web").ready,
        keys.FrontierKeys("web").leases,
        keys.bloom_meta("web"),
        keys.simhash_pages("web"),
        keys.content_hashes("web"),
        keys.FrontierKeys("web").paused,
        keys.StatsKeys("web").fleet,
    ]:
        assert f"`{example}`" in text, example
