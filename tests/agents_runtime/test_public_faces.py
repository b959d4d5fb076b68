"""Each package of agents_runtime names its public modules in ``__all__``:
every name there is one of its modules, every module that code outside the
package imports is named there, and the ``__init__`` imports nothing, so
importing one module of a layer loads no other layer."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACES = (
    "agents_runtime",
    "agents_runtime.log",
    "agents_runtime.log.files",
    "agents_runtime.core",
    "agents_runtime.runtime",
)
# Where the code that imports agents_runtime lives.
IMPORTERS = ("guardd", "audit", "bench", "tests", "agents_runtime", "client_sdk", "guard_mcp")


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[:2] == ["tests", "agents_runtime"] and len(parts) > 3:
        # tests/agents_runtime/<layer>/ holds the layer's own tests: they
        # count as inside it, and may reach its private modules.
        return ".".join(["agents_runtime", *parts[2:-1], "tests"])
    return ".".join(parts)


def _imports() -> Iterator[tuple[str, str, str | None]]:
    """(importer, imported module, name taken from it) for every absolute
    import in the tree, functions and TYPE_CHECKING blocks included."""
    for top in IMPORTERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            importer = _module_name(path)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    for alias in node.names:
                        yield importer, node.module, alias.name
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        yield importer, alias.name, None


def used_from_outside(face: str) -> dict[str, set[str]]:
    """The face's modules that code outside it imports, with who imports each."""
    used: dict[str, set[str]] = {}
    for importer, module, name in _imports():
        if not _inside(module, face) or _inside(importer, face):
            continue
        child = module[len(face) + 1 :].split(".")[0] if module != face else name
        if child:
            used.setdefault(child, set()).add(importer)
    return used


@pytest.mark.parametrize("face", FACES)
def test_all_is_sorted_and_names_only_modules_of_the_package(face: str) -> None:
    package = importlib.import_module(face)
    assert package.__all__ == sorted(package.__all__)
    for name in package.__all__:
        assert not name.startswith("_"), f"{face}.{name} is private"
        importlib.import_module(f"{face}.{name}")  # raises if it is not a module of face


@pytest.mark.parametrize("face", FACES)
def test_every_module_used_from_outside_is_in_all(face: str) -> None:
    package = importlib.import_module(face)
    missing = {
        f"{face}.{child}": sorted(importers)
        for child, importers in used_from_outside(face).items()
        if child not in package.__all__
    }
    assert not missing, f"imported from outside {face} but not in its __all__: {missing}"


@pytest.mark.parametrize("face", FACES)
def test_the_init_imports_nothing(face: str) -> None:
    path = ROOT.joinpath(*face.split("."), "__init__.py")
    imports = [
        ast.unparse(node)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    ]
    assert imports == []


def _ours_after_importing(module: str) -> set[str]:
    probe = (
        f"import sys, {module}\n"
        "print('\\n'.join(m for m in sys.modules if m.split('.')[0] == 'agents_runtime'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(result.stdout.split())


def test_importing_the_errors_loads_nothing_else_of_ours() -> None:
    assert _ours_after_importing("agents_runtime.errors") == {
        "agents_runtime",
        "agents_runtime.errors",
    }


def test_importing_the_log_loads_neither_the_file_store_nor_a_layer_above() -> None:
    # What its modules may import is the import contracts' business (make lint).
    assert _ours_after_importing("agents_runtime.log") == {"agents_runtime", "agents_runtime.log"}
