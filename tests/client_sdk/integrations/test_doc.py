"""docs/integrations.md and the packaging agree with the adapters: every
example's imports resolve against the pinned frameworks, every adapter has
its extra in both pyproject files and its framework pinned for the tests, and
the docs show how to install each."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "integrations.md").read_text()
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC, re.DOTALL)
ADAPTERS = sorted(
    p.stem
    for p in (ROOT / "client_sdk" / "integrations").glob("*.py")
    if not p.stem.startswith("_")
)
PINNED = {
    re.split(r"[=<>]", line)[0].strip()
    for line in (ROOT / "requirements-integrations.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}


def _extras(path: Path) -> dict[str, list[str]]:
    return tomllib.loads(path.read_text())["project"]["optional-dependencies"]


def _name(requirement: str) -> str:
    return re.split(r"[=<>\[ ;]", requirement)[0]


def test_every_example_compiles_and_its_imports_resolve() -> None:
    assert len(EXAMPLES) >= len(ADAPTERS)
    for example in EXAMPLES:
        tree = ast.parse(example)
        imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        exec(compile(ast.Module(imports, type_ignores=[]), "<docs>", "exec"), {})  # noqa: S102


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_adapter_has_an_extra_in_both_projects_pinned_for_the_tests_and_documented(
    adapter: str,
) -> None:
    extra = adapter.replace("_", "-")
    sdk = _extras(ROOT / "sdk" / "pyproject.toml")
    root = _extras(ROOT / "pyproject.toml")
    assert sdk[extra] == root[extra]
    assert {_name(r) for r in sdk[extra]} <= PINNED
    assert f"pip install './sdk[{extra}]'" in DOC
    assert f"client_sdk.integrations.{adapter}" in DOC
