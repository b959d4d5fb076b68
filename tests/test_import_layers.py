"""The import rules `make lint` enforces hold: the layers and forbidden imports
of ``[tool.importlinter]`` in pyproject.toml, and no import cycle between
modules (.ci/import_cycles.py). Run as `make lint` runs them, so a failure
here reads the same as there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_layer_contracts_are_kept() -> None:
    result = _run(BIN / "lint-imports", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_module_is_in_an_import_cycle() -> None:
    result = _run(sys.executable, ROOT / ".ci" / "import_cycles.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cycle_checker_counts_imports_in_functions_but_not_type_checking_ones(
    tmp_path: Path,
) -> None:
    package = tmp_path / "tangled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from tangled import b\n"
        "if TYPE_CHECKING:\n"
        "    from tangled import c\n"
    )
    (package / "b.py").write_text("def later():\n    from tangled import a\n")
    (package / "c.py").write_text("from tangled import a\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "import_cycles.py"), "tangled"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    chains = [line for line in result.stdout.splitlines() if " -> " in line]
    assert chains == ["tangled.a -> tangled.b -> tangled.a"]
    assert "tangled.b:2:" in result.stdout  # the import's own line
