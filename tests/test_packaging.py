"""scrapyd-deploy builds an egg holding the application and its libraries.

The egg must hold every module the crawl can import (issue 17: a package
listed by hand, ``pipelines.stores``, was missing and every scrapyd job died
at start) and nothing else: no sandbox, demo, tests or benchmarks.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.packaging import SHIPPED, clean_copy, dev_tool

ROOT = Path(__file__).resolve().parent.parent


def source_modules() -> set[str]:
    """Every module and data file of the shipped packages, as egg paths."""
    return {
        path.relative_to(ROOT).as_posix()
        for top in SHIPPED
        for path in (ROOT / top).rglob("*")
        if path.suffix in (".py", ".typed") and "__pycache__" not in path.parts
    }


def build_egg(tmp_path: Path) -> Path:
    copy = clean_copy(tmp_path / "src")
    egg = tmp_path / "webcrawl.egg"
    subprocess.run(
        [dev_tool("scrapyd-deploy"), "--build-egg", str(egg)],
        cwd=copy,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return egg


# pkg/__pycache__/mod.cpython-311.pyc (or pkg/mod.pyc): groups pkg/ and mod.
BYTECODE = re.compile(r"((?:[^/]+/)*?)(?:__pycache__/)?([^/.]+)(?:\.[\w-]+)?\.pyc")


def compiled_source(name: str) -> str:
    """The module a bytecode file of an egg was compiled from; other names
    as they are.

    >>> compiled_source("webcrawl/__pycache__/addon.cpython-311.pyc")
    'webcrawl/addon.py'
    >>> compiled_source("webcrawl/addon.pyc"), compiled_source("webcrawl/py.typed")
    ('webcrawl/addon.py', 'webcrawl/py.typed')
    """
    match = BYTECODE.fullmatch(name)
    if match is None:
        return name
    return f"{match.group(1)}{match.group(2)}.py"


@pytest.mark.slow
def test_scrapyd_egg_holds_exactly_the_shipped_packages(tmp_path: Path) -> None:
    with zipfile.ZipFile(build_egg(tmp_path)) as z:
        names = set(z.namelist())
        entry_points = z.read("EGG-INFO/entry_points.txt").decode()
    # bdist_egg byte-compiles the modules unless PYTHONDONTWRITEBYTECODE is
    # set (make test unsets it): a module's bytecode ships as that module.
    shipped = {compiled_source(n) for n in names if not n.startswith("EGG-INFO/")}
    expected = source_modules()
    assert "pipelines/stores/sqlite.py" in expected  # the module issue 17 lost
    assert "webcrawl/commands/crawl.py" in expected  # COMMANDS_MODULE: scrapyd runs it
    assert not expected - shipped, f"missing from the egg: {sorted(expected - shipped)}"
    assert not shipped - expected, f"not ours to ship: {sorted(shipped - expected)}"
    assert {n.split("/")[0] for n in shipped} == set(SHIPPED)
    assert "settings = webcrawl.settings" in entry_points


# Code that exists for the demo, the tests and the benchmarks.
NOT_PRODUCTION = ("sandbox", "demo", "tests", "bench")


def imported_packages(path: Path) -> set[str]:
    """Top-level names ``path`` imports, lazy imports inside functions included,
    optional ones (``try: import x`` / ``except ImportError``) left out."""
    tree = ast.parse(path.read_text(), str(path))
    optional = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Try)
        and any(
            isinstance(h.type, ast.Name)
            and h.type.id in ("ImportError", "ModuleNotFoundError")
            for h in node.handlers
        )
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    names = set()
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_production_never_imports_test_or_demo_code() -> None:
    offenders = {
        module: sorted(imported_packages(ROOT / module) & set(NOT_PRODUCTION))
        for module in source_modules()
        if module.endswith(".py")
    }
    assert not {m: names for m, names in offenders.items() if names}


def imported_modules(path: Path) -> set[str]:
    """Full dotted names ``path`` imports, lazy imports inside functions included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_no_test_module_imports_another() -> None:
    """What tests share lives in tests/support/ (or tests/utils.py), never
    in a test module; and the fleet harness left demo/."""
    users = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    users += (ROOT / "demo").rglob("*.py")
    offenders = {
        path.relative_to(ROOT).as_posix(): sorted(
            name
            for name in imported_modules(path)
            if name.startswith("tests.test_")
            or name in ("demo.fleet", "demo.localcrawl", "demo.cluster")
        )
        for path in users
    }
    assert not {m: names for m, names in offenders.items() if names}
    assert (ROOT / "tests" / "support" / "localcrawl.py").is_file()


def test_production_settings_name_no_sandbox_code() -> None:
    from scrapy.settings import Settings

    settings = Settings()
    settings.setmodule("webcrawl.settings")
    named = {
        name: value
        for name, value in settings.copy_to_dict().items()
        if isinstance(value, str) and value.split(".")[0] in NOT_PRODUCTION
    }
    assert not named
    assert settings["TWISTED_DNS_RESOLVER"] == "scrapy.resolver.CachingThreadedResolver"


FIRST_PARTY = {*SHIPPED, *NOT_PRODUCTION}


def requirements(name: str) -> dict[str, str]:
    """``{normalized distribution name: specifier}`` of one requirements file,
    without the files it includes."""
    listed = {}
    for raw in (ROOT / name).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            match = re.match(r"[A-Za-z0-9._-]+", line)
            assert match, line
            listed[normalize(match.group())] = line[match.end() :].strip()
    return listed


def normalize(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def third_party_imports(tops: tuple[str, ...]) -> dict[str, set[str]]:
    """``{distribution: modules importing it}`` for the code under ``tops``."""
    owners = importlib.metadata.packages_distributions()
    found: dict[str, set[str]] = {}
    for top in tops:
        for path in (ROOT / top).rglob("*.py"):
            for name in imported_packages(path):
                if name in FIRST_PARTY or name in sys.stdlib_module_names:
                    continue
                for dist in owners.get(name, [name]):
                    found.setdefault(normalize(dist), set()).add(top)
    return found


def test_every_directly_imported_package_is_listed() -> None:
    runtime = requirements("requirements.txt")
    dev = requirements("requirements-dev.txt")
    unlisted = set(third_party_imports(SHIPPED)) - set(runtime)
    assert not unlisted, f"imported by the crawler, not in requirements.txt: {unlisted}"
    elsewhere = set(third_party_imports(NOT_PRODUCTION)) - set(runtime) - set(dev)
    assert not elsewhere, f"imported, not in requirements-dev.txt: {elsewhere}"


def test_installs_are_reproducible() -> None:
    # Runtime: a tested range, so a new major release cannot break a deploy.
    unbounded = {
        n: s for n, s in requirements("requirements.txt").items() if "<" not in s
    }
    assert not unbounded
    # Tools: exact versions, so a new linter release cannot fail `make test`.
    unpinned = {
        n: s for n, s in requirements("requirements-dev.txt").items() if "==" not in s
    }
    assert not unpinned
