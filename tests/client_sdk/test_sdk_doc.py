"""docs/sdk.md lists every public method of every client with its return type,
and every value class with every attribute."""

from __future__ import annotations

import inspect
from pathlib import Path

import attrs
import pytest

import client_sdk

DOC = (Path(__file__).resolve().parents[2] / "docs" / "sdk.md").read_text()
CLIENTS = [
    client_sdk.GuardClient,
    client_sdk.AsyncGuardClient,
    client_sdk.AdminClient,
    client_sdk.AsyncAdminClient,
]
VALUES = [
    value
    for name in client_sdk.__all__
    if inspect.isclass(value := getattr(client_sdk, name))
    and attrs.has(value)
    and value.__module__ == "client_sdk._models"
]


def _section(name: str) -> str:
    """The ``## `` section whose heading is ``name`` or names it in backticks."""
    for part in DOC.split("\n## ")[1:]:
        heading = part.split("\n", 1)[0]
        if heading == name or f"`{name}`" in heading:
            return part
    raise AssertionError(f"docs/sdk.md has no section whose heading names `{name}`")


def _rows(section: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]


def _methods(cls: type) -> list[tuple[str, str]]:
    return [
        (name, inspect.signature(fn).return_annotation)
        for name, fn in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    ]


@pytest.mark.parametrize("cls", CLIENTS, ids=lambda c: c.__name__)
def test_every_public_method_is_listed_with_its_return_type(cls: type) -> None:
    rows = _rows(_section(cls.__name__))
    for name, returns in _methods(cls):
        matching = [row for row in rows if f"`{name}(" in row[0]]
        assert matching, f"{cls.__name__}.{name} is not in docs/sdk.md"
        assert any(f"`{returns}`" in row[1] for row in matching), (
            f"{cls.__name__}.{name} returns {returns}; docs/sdk.md says {matching[0][1]}"
        )


@pytest.mark.parametrize("cls", VALUES, ids=lambda c: c.__name__)
def test_every_value_class_is_listed_with_every_attribute(cls: type) -> None:
    rows = {row[0]: row[1] for row in _rows(_section("Values"))}
    listed = rows.get(f"`{cls.__name__}`")
    assert listed is not None, f"{cls.__name__} is not in the Values table"
    for field in attrs.fields_dict(cls):
        assert f"`{field}`" in listed, f"{cls.__name__}.{field} is not listed"
