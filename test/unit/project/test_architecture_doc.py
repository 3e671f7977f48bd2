"""docs/architecture.md lists exactly the Python packages and modules of the tree.

Its "Modules" section has one table row per package (`dir/`, standing for its
`__init__.py`) and per module (`dir/name.py`) under embodied_r_ros/, training/ and
bench/, so a module added, moved or removed without a line in the page fails here.
"""

from __future__ import annotations

import re

from helpers.env import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"
ROOTS = ("embodied_r_ros", "training", "bench")
ROW = re.compile(r"^\| `([^`]+)` \| (.+) \|$")


def _documented() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Modules\n", 1)
    assert len(section) == 2, "docs/architecture.md has no '## Modules' section"
    body = section[1].split("\n## ", 1)[0]
    return [m.group(1) for line in body.splitlines() if (m := ROW.match(line))]


def _tree() -> set[str]:
    found: set[str] = set()
    for root in ROOTS:
        for path in (REPO_ROOT / root).rglob("*.py"):
            rel = path.relative_to(REPO_ROOT)
            if "__pycache__" in rel.parts:
                continue
            found.add(f"{rel.parent.as_posix()}/" if rel.name == "__init__.py" else rel.as_posix())
    return found


def test_module_list_parses() -> None:
    rows = _documented()
    assert len(rows) > 50, "the Modules tables were not found or not parsed"
    assert len(rows) == len(set(rows)), sorted({r for r in rows if rows.count(r) > 1})
    assert all(r.startswith(tuple(f"{root}/" for root in ROOTS)) for r in rows), rows


def test_module_list_matches_the_tree() -> None:
    documented, tree = set(_documented()), _tree()
    missing = sorted(tree - documented)
    absent = sorted(documented - tree)
    assert not missing, ("modules not listed in docs/architecture.md (add a row "
                         "'| `path` | one line |' under ## Modules): " + ", ".join(missing))
    assert not absent, "docs/architecture.md lists modules that do not exist: " + ", ".join(absent)


def test_every_row_says_what_it_is() -> None:
    text = DOC.read_text(encoding="utf-8").split("\n## Modules\n", 1)[1]
    for line in text.splitlines():
        if m := ROW.match(line):
            assert len(m.group(2).strip()) > 10, m.group(1)
