"""The README stays true to the code."""

from __future__ import annotations

import posixpath
import re
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
        keys.seed_takers("web"),
        keys.FrontierKeys("web").ready,
        keys.FrontierKeys("web").leases,
        keys.FrontierKeys("web").delayed,
        keys.FrontierKeys("web").dlq,
        keys.FrontierKeys("web").dlq_reasons,
        keys.bloom_meta("web"),
        keys.simhash_pages("web"),
        keys.content_hashes("web"),
        keys.FrontierKeys("web").paused,
        keys.StatsKeys("web").fleet,
    ]:
        assert f"`{example}`" in text, example


def _module_table() -> list[str]:
    """The paths the README's module table names: a bare name in a cell
    (`` `connection.py` ``) is in the directory of the cell's first path."""
    text = README.read_text()
    table = text.split("| module | concern |", 1)[1].split("\n\n", 1)[0]
    paths = []
    for row in table.splitlines()[2:]:
        cell = row.split("|")[1]
        names = [n for n in cell.split("`") if n.strip(" ,/")]
        folder = posixpath.dirname(names[0].rstrip("/"))
        for name in names:
            inner = "/" in name.rstrip("/")
            paths.append(name if inner else posixpath.join(folder, name))
    return paths


def test_readme_module_table_is_true_and_complete() -> None:
    root = README.parent
    named = _module_table()
    assert [p for p in named if not (root / p).exists()] == []
    covered = {p.rstrip("/") for p in named}
    missing = [
        str(path.relative_to(root))
        for package in ("extensions", "pipelines", "webcrawl")
        for path in sorted((root / package).rglob("*.py"))
        if path.name != "__init__.py"
        and str(path.relative_to(root)) not in covered
        and str(path.parent.relative_to(root)) not in covered
    ]
    assert missing == []


def test_every_key_of_the_readme_key_table_is_named_in_keys() -> None:
    f, s = keys.FrontierKeys("web"), keys.StatsKeys("web")
    made = [
        keys.start_urls("web"), keys.invalid_start_urls("web"),
        keys.seed_taken("web", "W"), keys.seed_takers("web"),
        f.queue("H"), f.ready, f.host("H"), f.leases, f.lease_data, f.seq,
        f.workers, f.wal("W"), f.paused, f.poison, f.poison + ":K",
        f.recrawl, f.recrawl_data, f.recrawl_stats, f.recrawl_window(7),
        f.recrawl_claimed,
        f.delayed, f.dlq, f.dlq_reasons, f.partitions,
        f.dlq_unrecorded,
        f.refill, f.spill_lock("H"),
        keys.host_lock("web", "H"), keys.host_inflight("web", "H"), f.overrides,
        f.ip_schedule, keys.robots("web", "H"),
        keys.robots_fetch_lock("web", "H"), keys.bloom_shard("web", 0, 1),
        keys.bloom_meta("web"), keys.simhash_bands("web"), keys.simhash_order("web"),
        keys.simhash_pages("web"), keys.content_hashes("web"),
        keys.trap_pages("web", "H"), keys.trap_variants("web", "H", "/p"),
        s.fleet, s.worker("W"), s.minute(1),
    ]  # fmt: skip
    text = README.read_text()
    table = text.split("## Redis key layout", 1)[1].split("\n\n")[2]
    rows = [r.split("|")[1].strip().strip("`") for r in table.splitlines()[2:]]
    assert len(rows) > 20
    for row in rows:
        pattern = re.escape(row)
        pattern = re.sub(
            r"<[a-z]+>", ".+", pattern.replace(r"\<", "<").replace(r"\>", ">")
        )
        assert any(re.fullmatch(pattern, key) for key in made), row
