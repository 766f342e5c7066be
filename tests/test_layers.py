"""The shape of the code, read from its AST: dependencies point one way
(webcrawl -> pipelines -> extensions, and inside ``extensions`` from the
components down to the pure helpers), no import circle, no package that is a
drawer, no class bigger than Scrapy's scheduler, one home for each shared
piece of the Redis layer, and the old flat module paths still importable
(with a warning) for one release."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest
from scrapy.utils.misc import load_object

import extensions

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("extensions", "pipelines", "webcrawl")
# What each package may import of the project's own packages.
ALLOWED = {
    "extensions": {"extensions"},
    "pipelines": {"pipelines", "extensions"},
    "webcrawl": {"webcrawl", "pipelines", "extensions"},
}
# The layers of the extensions package, lowest first: a module may import its
# own layer and the ones below, never one above (the first matching prefix
# names a module's layer).
LAYERS: list[tuple[str, int]] = [
    ("extensions.utils", 0),
    ("extensions.keys", 0),
    ("extensions.meta", 0),
    ("extensions.signals", 0),
    ("extensions.settings", 1),
    ("extensions.connection", 2),
    ("extensions.core.frontier", 3),
    ("extensions.core.bloom", 3),
    ("extensions.core.seeds", 3),
    ("extensions.core.scheduler", 4),
    ("extensions.core.migration", 4),
    ("extensions.dupefilters", 4),
    ("extensions.downloadermiddlewares", 5),
    ("extensions.spidermiddlewares", 5),
    ("extensions.extensions", 5),
    # The package itself: only its deprecation table, importing nothing.
    ("extensions", 0),
]
MAX_MODULES = 12


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[ast.AST]:
    skip: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                skip.update(ast.walk(sub))
    return skip


def imports_of(name: str) -> set[str]:
    """The project modules ``name`` imports, deferred imports in functions
    included (a circle dodged at import time is still a circle in the
    design); imports only for type checking left out."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets.add(base)
            targets |= {f"{base}.{alias.name}" for alias in node.names}
    found = set()
    for target in targets:
        module = target
        while module and module not in MODULES:
            module = module.rpartition(".")[0]
        if module and module != name:
            found.add(module)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def layer(name: str) -> int:
    return next(rank for prefix, rank in LAYERS if name.startswith(prefix))


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


def test_no_import_circles() -> None:
    """Tarjan's strongly connected components of the import graph: every
    one must be a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert circles == []


def test_no_upward_arrow_inside_extensions() -> None:
    upward = sorted(
        f"{name} (layer {layer(name)}) -> {target} (layer {layer(target)})"
        for name, targets in GRAPH.items()
        if name.startswith("extensions")
        for target in targets
        if target.startswith("extensions") and layer(target) > layer(name)
    )
    assert upward == []


def test_no_package_is_a_drawer() -> None:
    wide = {
        str(folder.relative_to(ROOT)): n
        for package in PACKAGES
        for folder in [ROOT / package, *(ROOT / package).rglob("*/")]
        if folder.is_dir()
        and (n := sum(1 for p in folder.glob("*.py") if p.name != "__init__.py"))
        > MAX_MODULES
    }
    assert wide == {}


# Scrapy's own Scheduler is ~370 lines: a class past this holds several jobs.
MAX_CLASS_LINES = 400


def class_sizes() -> dict[str, int]:
    """Lines of each class (``end_lineno - lineno + 1``), by dotted name."""
    return {
        f"{name}.{node.name}": node.end_lineno - node.lineno + 1
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }


def test_no_class_is_bigger_than_scrapys_scheduler() -> None:
    big = {name: n for name, n in class_sizes().items() if n > MAX_CLASS_LINES}
    assert big == {}


def test_the_class_sizes_are_read() -> None:
    """The check reads real classes: the scheduler's parts are all there,
    each under the bound (a check that read nothing would pass any size)."""
    sizes = class_sizes()
    parts = [
        "extensions.core.scheduler.RedisScheduler",
        "extensions.core.scheduler.outbox.Outbox",
        "extensions.core.scheduler.buffer.LeaseBuffer",
        "extensions.core.scheduler.handoff.DeadLetterHandoff",
        "extensions.core.scheduler.task.BackgroundTask",
        "extensions.core.scheduler.dedup.Dedup",
        "extensions.core.scheduler.leases.LeaseBook",
        # Split after the scheduler: the robots.txt middleware and its cache,
        # each page store and its side stores (the spill, the schedule).
        "extensions.downloadermiddlewares.robotstxt.SharedRobotsTxtMiddleware",
        "extensions.downloadermiddlewares.robotstxt.RobotsCache",
        "pipelines.stores.mongo.MongoStore",
        "pipelines.stores.mongo.MongoSideStores",
        "pipelines.stores.sqlite.SQLiteStore",
        "pipelines.stores.sqlite.SQLiteSideStores",
    ]
    assert all(100 < sizes[name] <= MAX_CLASS_LINES for name in parts[:3])
    assert all(0 < sizes[name] <= MAX_CLASS_LINES for name in parts)


def test_the_checks_see_a_circle_and_an_upward_arrow() -> None:
    """The graph the tests walk is the real one: a known downward arrow is
    in it (a test that reads no edge would pass any shape)."""
    assert "extensions.core.frontier.frontier" in GRAPH["extensions.core.scheduler"]
    assert layer("extensions.core.scheduler") > layer("extensions.connection")
    assert "extensions.connection.scripts" in GRAPH["extensions.core.frontier.lua"]


# Each shared piece of the Redis layer is written in one module: a second
# copy is how the spacing rule and the clock drifted apart before.
SCRIPTS = "extensions/connection/scripts.py"
ONE_HOME = {
    "register_script(": SCRIPTS,  # the script registry
    "redis.call('TIME')": SCRIPTS,  # the Redis clock (Lua)
    "await client.time()": SCRIPTS,  # the Redis clock (Python)
    # reading the host record
    "'HMGET', hkey, unpack(RECORD_FIELDS)": "extensions/core/frontier/lua.py",
    "'NX', 'PX'": "extensions/connection/locks.py",  # taking a token lock
    "== ARGV[1] then": "extensions/connection/locks.py",  # compare-on-token scripts
}


@pytest.mark.parametrize("snippet", sorted(ONE_HOME))
def test_one_home_for_each_shared_piece(snippet: str) -> None:
    homes = sorted(
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if snippet in path.read_text()
    )
    assert homes == [ONE_HOME[snippet]]


@pytest.mark.parametrize("old", sorted(extensions.MOVED))
def test_an_old_module_path_still_imports_with_a_warning(old: str) -> None:
    new = importlib.import_module(extensions.MOVED[old])
    public = [n for n in vars(new) if not n.startswith("_")]
    sys.modules.pop(old, None)  # imported by an earlier test: import afresh
    with pytest.warns(DeprecationWarning, match=extensions.MOVED[old]):
        module = importlib.import_module(old)
    assert public
    for name in public:
        assert getattr(module, name) is getattr(new, name)


@pytest.mark.parametrize(
    ("old", "name"), sorted(extensions.MOVED_NAMES), ids="{0[0]}.{0[1]}".format
)
def test_a_name_that_left_its_module_is_found_at_the_old_path(
    old: str, name: str
) -> None:
    """A setting naming a component by its old dotted path (e.g.
    ``extensions.failures.FailurePolicyMiddleware``) loads the same object."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        found = load_object(f"{old}.{name}")
    home = importlib.import_module(extensions.MOVED_NAMES[(old, name)])
    assert found is getattr(home, name)
