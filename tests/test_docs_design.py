"""docs/design.md's "Where a change goes" table stays true: every file or
folder it names exists, so a reader sent there finds the place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN_MD = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
# A path in the table is written from the repository's root, or from the
# agents_runtime package (``log/store.py``) as the rest of the page does.
BASES = (ROOT, ROOT / "agents_runtime")
SUFFIXES = (".py", ".md", ".toml", ".js", ".html")


def _table() -> str:
    """The rows of the table: the lines that start with ``|`` right after
    the heading (and the blank line under it)."""
    section = DESIGN_MD.split("### Where a change goes\n")[1].lstrip("\n")
    rows = []
    for line in section.splitlines():
        if not line.startswith("|"):
            break
        rows.append(line)
    return "\n".join(rows)


def _paths(table: str) -> list[str]:
    """The backquoted names in the table that are paths: with a slash, or a
    file name with a suffix."""
    names = re.findall(r"`([^`\s]+)`", table)
    return sorted({n for n in names if "/" in n or n.endswith(SUFFIXES)})


def _exists(path: str) -> bool:
    return any((base / path).exists() for base in BASES)


def test_the_table_is_there_and_names_paths() -> None:
    table = _table()
    assert table.count("\n") >= 5
    paths = _paths(table)
    assert "agents_runtime/core/records.py" in paths
    assert "agents_runtime/log/kinds.py" in paths


@pytest.mark.parametrize("path", _paths(_table()))
def test_every_path_the_table_names_exists(path: str) -> None:
    assert _exists(path), f"docs/design.md names {path}, which is not in the repository"


def test_a_path_that_does_not_exist_is_caught() -> None:
    assert _paths("| a | `core/nowhere.py`, `LogStore`, `--store` |") == ["core/nowhere.py"]
    assert not _exists("core/nowhere.py")
