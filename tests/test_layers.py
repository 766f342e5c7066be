"""Dependencies point one way: webcrawl -> pipelines -> extensions, and no
production package imports the sandbox, the tests, the benchmarks or the
demo scripts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What each package may import of the project's own packages.
ALLOWED = {
    "extensions": {"extensions"},
    "pipelines": {"pipelines", "extensions"},
    "webcrawl": {"webcrawl", "pipelines", "extensions"},
}


def imported_packages(path: Path) -> set[str]:
    """Top-level package names ``path`` imports (typing-only imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_library_imports_point_one_way(package: str) -> None:
    own = {"webcrawl", "extensions", "pipelines", "sandbox", "tests", "bench", "demo"}
    wrong = {
        str(path.relative_to(ROOT)): sorted(imports - ALLOWED[package])
        for path in sorted((ROOT / package).rglob("*.py"))
        if (imports := imported_packages(path) & own) - ALLOWED[package]
    }
    assert wrong == {}


# Each shared piece of the Redis layer is written in one module: a second
# copy is how the spacing rule and the clock drifted apart before.
ONE_HOME = {
    "register_script(": "extensions/scripts.py",  # the script registry
    "redis.call('TIME')": "extensions/scripts.py",  # the Redis clock (Lua)
    "await client.time()": "extensions/scripts.py",  # the Redis clock (Python)
    "'HMGET', hkey, 'next'": "extensions/hosts.py",  # reading the host record
    "'NX', 'PX'": "extensions/locks.py",  # taking a token lock
    "== ARGV[1] then": "extensions/locks.py",  # compare-on-token scripts
}


@pytest.mark.parametrize("snippet", sorted(ONE_HOME))
def test_one_home_for_each_shared_piece(snippet: str) -> None:
    homes = sorted(
        str(path.relative_to(ROOT))
        for package in ("extensions", "pipelines", "webcrawl")
        for path in (ROOT / package).rglob("*.py")
        if snippet in path.read_text()
    )
    assert homes == [ONE_HOME[snippet]]
