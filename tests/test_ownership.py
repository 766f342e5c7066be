"""One owner for each Redis structure, in fact: read from the code's AST.

Every structure of the key layout has the modules that may write it
(:data:`OWNERS`, the README's "Who writes what" table): a Python write
command (``hset``, ``zadd``, ``lpush``, ...) whose key is named through
:mod:`extensions.keys` must stand in one of them; Lua may stand only in an
owner's module; and the host record's fields are written by the frontier's
Lua (``extensions/core/frontier/lua.py``) and nowhere else.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from extensions.core.frontier import lua

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FRONTIER = "extensions/core/frontier/"
LUA = FRONTIER + "lua.py"

# Structure -> the modules that write it (a folder: every module in it).
OWNERS: dict[str, set[str]] = {
    "frontier": {FRONTIER},
    "host record": {LUA},
    "download lock": {
        "extensions/downloadermiddlewares/politeness.py",
        "extensions/connection/locks.py",
    },
    "spill refill lock": {FRONTIER + "spill.py", "extensions/connection/locks.py"},
    "host overrides": {LUA},
    "seed list": {"extensions/core/seeds.py"},
    "robots.txt cache": {
        "extensions/downloadermiddlewares/robotstxt.py",
        "extensions/connection/locks.py",
    },
    "Bloom filter": {"extensions/core/bloom.py"},
    "trap counters": {"extensions/spidermiddlewares/traps.py"},
    "recrawl schedule": {"extensions/extensions/recrawl.py"},
    "fleet statistics": {"extensions/extensions/fleetstats.py"},
    "near-duplicate index": {"pipelines/dedup.py"},
}
# How code names a structure's keys: extensions.keys functions, and the
# attributes and methods of FrontierKeys and StatsKeys.
NAMES: dict[str, str] = {
    **dict.fromkeys(
        [
            "queue",
            "queue_prefix",
            "host",
            "host_prefix",
            "ready",
            "leases",
            "lease_data",
            "seq",
            "workers",
            "wal",
            "wal_prefix",
            "delayed",
            "paused",
            "poison",
            "dlq",
            "dlq_reasons",
            "dlq_unrecorded",
            "refill",
            "partitions",
            "ip_schedule",
        ],
        "frontier",
    ),
    "overrides": "host overrides",
    "lock": "download lock",
    "host_lock": "download lock",
    "inflight": "download lock",
    "host_inflight": "download lock",
    "spill_lock": "spill refill lock",
    **dict.fromkeys(
        [
            "start_urls",
            "invalid_start_urls",
            "invalid_seeds",
            "seed_taken",
            "seed_takers",
        ],
        "seed list",
    ),
    "robots": "robots.txt cache",
    "robots_fetch_lock": "robots.txt cache",
    "bloom_shard": "Bloom filter",
    "bloom_meta": "Bloom filter",
    "trap_pages": "trap counters",
    "trap_variants": "trap counters",
    "recrawl": "recrawl schedule",
    "recrawl_data": "recrawl schedule",
    "fleet": "fleet statistics",
    "minute": "fleet statistics",
    **dict.fromkeys(
        ["simhash_bands", "simhash_pages", "content_hashes", "simhash_order"],
        "near-duplicate index",
    ),
}
WRITES = {
    "hset", "hsetnx", "hdel", "hincrby", "hincrbyfloat", "hmset", "zadd", "zrem",
    "zincrby", "zpopmin", "zpopmax", "zremrangebyscore", "rpush", "lpush", "lpop",
    "rpop", "ltrim", "lrem", "rpoplpush", "lmove", "set", "setnx", "setex",
    "psetex", "delete", "unlink", "incr", "incrby", "decr", "expire", "pexpire",
    "sadd", "srem", "spop", "rename", "pfadd", "pfmerge", "setbit", "append",
}  # fmt: skip


def production_modules() -> list[Path]:
    return [
        path
        for package in ("extensions", "pipelines", "webcrawl")
        for path in sorted((ROOT / package).rglob("*.py"))
    ]


def owns(module: str, structure: str) -> bool:
    return any(
        module == owner or (owner.endswith("/") and module.startswith(owner))
        for owner in OWNERS[structure]
    )


def _key_names(node: ast.AST) -> set[str]:
    """Structures whose keys an expression names (``k.ready``,
    ``self.keys.wal(w)``, ``keys.robots(p, h)``, ``start_urls(p)``)."""
    found = set()
    for sub in ast.walk(node):
        name = None
        if isinstance(sub, ast.Attribute):
            owner = ast.unparse(sub.value)
            if "keys" in owner or owner in {"k", "f"}:
                name = sub.attr
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            name = sub.func.id
        if name in NAMES:
            found.add(NAMES[name])
    return found


def python_writes(path: Path) -> list[tuple[int, str, str]]:
    """(line, command, structure) of each write command on a named key."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in WRITES
            and node.args
        ):
            for structure in _key_names(node.args[0]):
                out.append((node.lineno, node.func.attr, structure))
    return out


def test_python_writes_stay_with_their_owners() -> None:
    wrong = [
        f"{rel}:{line} {command} on the {structure}"
        for path in production_modules()
        for line, command, structure in python_writes(path)
        if not owns(rel := str(path.relative_to(ROOT)), structure)
    ]
    assert wrong == []


def test_the_check_sees_writes() -> None:
    """The scan finds the writes it must allow (else it would pass anything)."""
    frontier = python_writes(ROOT / FRONTIER / "frontier.py")
    assert {(c, s) for _, c, s in frontier} >= {
        ("hset", "frontier"),
        ("rpush", "frontier"),
    }
    seeds = python_writes(ROOT / "extensions/core/seeds.py")
    assert ("rpush", "seed list") in {(c, s) for _, c, s in seeds}


def _lua_sources(path: Path) -> list[str]:
    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "redis.call(" in node.value
    ]


LUA_HOMES = {
    path
    for owners in OWNERS.values()
    for owner in owners
    for path in ([owner] if not owner.endswith("/") else [LUA])
} | {"extensions/connection/scripts.py"}  # the clock: TIME, read only


def test_lua_stands_only_in_an_owner_module() -> None:
    with_lua = {
        str(path.relative_to(ROOT))
        for path in production_modules()
        if _lua_sources(path)
    }
    assert with_lua - LUA_HOMES == set()
    assert LUA in with_lua


HOST_FIELDS = "|".join(lua.FIELDS)
FIELD_WRITE = re.compile(
    r"'(HSET|HSETNX|HINCRBY|HDEL|HMSET)',\s*[\w.\[\]]+,\s*'(" + HOST_FIELDS + r")'"
)


def test_the_host_record_is_written_by_the_frontier_lua_only() -> None:
    writers = {
        str(path.relative_to(ROOT))
        for path in production_modules()
        if any(FIELD_WRITE.search(text) for text in _lua_sources(path))
    }
    assert writers == {LUA}


def test_the_score_encoding_is_written_once() -> None:
    spans = ("68719476736", "2**36", "2 ** 36")
    homes = {
        str(path.relative_to(ROOT))
        for path in production_modules()
        if any(span in path.read_text() for span in spans)
    }
    assert homes == {LUA}


def _readme_owners() -> dict[str, set[str]]:
    text = README.read_text()
    table = text.split("| structure | written by |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for row in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        rows[cells[0]] = set(re.findall(r"`([^`]*/[^`]*)`", cells[1]))
    return rows


def test_the_readme_ownership_table_is_the_one_checked_here() -> None:
    assert _readme_owners() == OWNERS


@pytest.mark.parametrize("structure", sorted(OWNERS))
def test_every_owner_exists(structure: str) -> None:
    for owner in OWNERS[structure]:
        assert (ROOT / owner).exists(), owner
