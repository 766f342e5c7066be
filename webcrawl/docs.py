"""Generate the README's settings table from the defaults modules.

:mod:`webcrawl.defaults` and :mod:`extensions.defaults`, in that order.

``python -m webcrawl.docs`` prints the table, ``python -m webcrawl.docs
--write README.md`` puts it between the README's markers; a test checks that
the README holds it, so the documented defaults cannot drift from the real
ones.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

from extensions import defaults as extensions_defaults
from webcrawl import defaults

DEFAULTS_MODULES = (defaults, extensions_defaults)

SECTION_PREFIX = "# ---"


def settings_rows() -> list[tuple[str, str, str, str]]:
    """(section, name, default, description) for every setting, in file order."""
    rows = []
    for module in DEFAULTS_MODULES:
        rows += _module_rows(module)
    return rows


def _module_rows(defaults: Any) -> list[tuple[str, str, str, str]]:
    source = Path(defaults.__file__).read_text().splitlines()
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
        value = getattr(defaults, target.id)
        rows.append((section, target.id, repr(value), " ".join(comments)))
    return rows


def settings_table() -> str:
    lines = ["| Setting | Default | Meaning |", "| --- | --- | --- |"]
    current = None
    for section, name, default, text in settings_rows():
        if section != current:
            lines.append(f"| **{section}** | | |")
            current = section
        escaped = text.replace("|", "\\|")
        lines.append(f"| `{name}` | `{default}` | {escaped} |")
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
