"""Generate the README's settings table from every package's defaults module.

The modules are the add-on's :data:`webcrawl.addon.DEFAULTS`
(:mod:`extensions.settings.defaults`, :mod:`pipelines.defaults`,
:mod:`webcrawl.defaults`).

``python -m webcrawl.docs`` prints the table, ``python -m webcrawl.docs
--write README.md`` puts it between the README's markers; a test checks that
the README holds it, so the documented defaults cannot drift from the real
ones.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from extensions.settings import config
from webcrawl.addon import DEFAULTS

if TYPE_CHECKING:
    from types import ModuleType

SECTION_PREFIX = "# ---"


def settings_rows() -> list[tuple[str, str, str, str, str]]:
    """(section, name, default, allowed, description) for every setting."""
    return [row for module in DEFAULTS for row in module_rows(module)]


def module_rows(module: ModuleType) -> list[tuple[str, str, str, str, str]]:
    """(section, name, default, allowed, description) for ``module``'s settings."""
    specs = {spec.name: spec for spec in config.specs(module)}
    source = Path(str(module.__file__)).read_text().splitlines()
    rows = []
    section = ""
    tree = ast.parse("\n".join(source))
    for node in tree.body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign):
            target = node.target
        if not isinstance(target, ast.Name) or not target.id.isupper():
            continue
        comments: list[str] = []
        line = node.lineno - 2
        while line >= 0 and source[line].startswith("#"):
            if source[line].startswith(SECTION_PREFIX):
                break
            comments.insert(0, source[line].lstrip("# ").rstrip())
            line -= 1
        for back in range(node.lineno - 2, -1, -1):
            if source[back].startswith(SECTION_PREFIX):
                section = source[back].strip("#- ").strip()
                break
        value = getattr(module, target.id)
        spec = specs[target.id]
        allowed = spec.rule.describe() if spec.rule else spec.type_name()
        rows.append((section, target.id, repr(value), allowed, " ".join(comments)))
    return rows


def settings_table() -> str:
    lines = [
        "| Setting | Default | Allowed | Meaning |",
        "| --- | --- | --- | --- |",
    ]
    current = None
    for section, name, default, allowed, text in settings_rows():
        if section != current:
            lines.append(f"| **{section}** | | | |")
            current = section
        escaped = text.replace("|", "\\|")
        lines.append(f"| `{name}` | `{default}` | {allowed} | {escaped} |")
    return "\n".join(lines)


START = "<!-- settings-table:start -->"
END = "<!-- settings-table:end -->"


def readme_with_table(readme: str) -> str:
    """``readme`` with the text between the settings-table markers replaced."""
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{settings_table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write"]:
        path = Path(argv[1] if len(argv) > 1 else "README.md")
        path.write_text(readme_with_table(path.read_text()))
        return 0
    print(settings_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
