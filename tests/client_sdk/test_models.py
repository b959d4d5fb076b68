"""``client_sdk/_models.py`` and ``_parsers.py`` are generated from the
service's OpenAPI document (``docs/openapi.json``) by ``sdk/models.py``: the
files in the repository are current, the check catches a stale one, and a
shape the service changes cannot pass unnoticed."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path("sdk") / "models.py"
# The generator, what it writes, and what ruff reads to format it the same
# way (its settings, and the package whose imports it sorts).
FILES = [
    SCRIPT,
    Path("sdk") / "unasync.py",
    Path("docs") / "openapi.json",
    Path("pyproject.toml"),
    *(path.relative_to(ROOT) for path in (ROOT / "client_sdk").glob("*.py")),
]


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / SCRIPT), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    sys.path.insert(0, str(ROOT / "sdk"))
    try:
        spec = importlib.util.spec_from_file_location("sdk_models", ROOT / SCRIPT)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "sdk"))


@pytest.fixture
def document() -> dict[str, Any]:
    return json.loads((ROOT / "docs" / "openapi.json").read_text())


def test_the_document_and_the_client_classes_are_current() -> None:
    result = _run(ROOT, "--check")
    assert result.returncode == 0, result.stderr
    for name in ("_models.py", "_parsers.py"):
        assert (
            (ROOT / "client_sdk" / name)
            .read_text()
            .startswith("# Generated from docs/openapi.json by sdk/models.py: do not edit.\n")
        )


def test_the_checked_in_document_is_the_one_the_service_serves() -> None:
    from guardd.app import document

    assert json.loads((ROOT / "docs" / "openapi.json").read_text()) == json.loads(
        json.dumps(document())
    )


def test_the_check_fails_on_a_stale_file_and_regenerating_mends_it(tmp_path: Path) -> None:
    for path in FILES:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    models = tmp_path / "client_sdk" / "_models.py"
    models.write_text(models.read_text().replace("    hash: str\n", "    hash: bytes\n", 1))
    (tmp_path / "docs" / "openapi.json").write_text("{}\n")

    stale = _run(tmp_path, "--check")
    assert stale.returncode == 1
    assert stale.stderr == (
        "docs/openapi.json, client_sdk/_models.py: not what sdk/models.py makes: "
        "run python sdk/models.py\n"
    )
    assert (tmp_path / "docs" / "openapi.json").read_text() == "{}\n"  # --check writes nothing

    assert _run(tmp_path).returncode == 0
    for path in FILES:
        assert (tmp_path / path).read_text() == (ROOT / path).read_text(), path
    assert _run(tmp_path, "--check").returncode == 0


def test_a_property_the_service_adds_becomes_an_attribute_and_is_parsed(
    generator: ModuleType, document: dict[str, Any]
) -> None:
    changed = copy.deepcopy(document)
    changed["components"]["schemas"]["Head"]["properties"]["color"] = {"type": "string"}
    generated = generator.generate(changed)
    head = generated[generator.MODELS].split("class Head:")[1].split("@attrs.frozen")[0]
    assert head.endswith("    seq: int\n    hash: str\n    color: str | None = None\n\n\n")
    assert 'color=opt(obj, "color", str),' in generated[generator.PARSERS]


@pytest.mark.parametrize(
    ("schema", "key", "message"),
    [
        pytest.param(
            "AllowedDecision",
            "receipt",
            r"^Decision: the document's Decision has no \['receipt'\]$",
            id="named",
        ),
        pytest.param(
            "Action",
            "decided_at",
            r"^Action: the document's Action has no \['decided_at'\]$",
            id="left-out",
        ),
    ],
)
def test_a_property_the_client_names_must_be_in_the_document(
    generator: ModuleType, document: dict[str, Any], schema: str, key: str, message: str
) -> None:
    changed = copy.deepcopy(document)
    del changed["components"]["schemas"][schema]["properties"][key]
    with pytest.raises(generator.Stop, match=message):
        generator.generate(changed)


def test_a_word_the_service_adds_is_a_word_the_client_knows(
    generator: ModuleType, document: dict[str, Any]
) -> None:
    changed = copy.deepcopy(document)
    schemas = changed["components"]["schemas"]
    deferred = copy.deepcopy(schemas["PendingDecision"])
    deferred["properties"]["decision"]["const"] = "deferred"
    schemas["DeferredDecision"] = deferred
    schemas["Decision"]["oneOf"].append({"$ref": "#/components/schemas/DeferredDecision"})
    generated = generator.generate(changed)
    assert (
        '    PENDING_APPROVAL = "pending_approval"\n    DEFERRED = "deferred"\n'
        in (generated[generator.MODELS])
    )
    assert 'word(obj, "decision", _DECISION_KIND)' in generated[generator.PARSERS]


def test_a_word_the_client_tests_cannot_go_unnoticed(
    generator: ModuleType, document: dict[str, Any]
) -> None:
    changed = copy.deepcopy(document)
    decision = changed["components"]["schemas"]["PendingDecision"]["properties"]["decision"]
    decision["const"] = "deferred"
    with pytest.raises(
        generator.Stop,
        match=r"^Decision.pending tests PENDING_APPROVAL, which DecisionKind no longer has$",
    ):
        generator.generate(changed)
