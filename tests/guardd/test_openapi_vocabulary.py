"""The OpenAPI document's lists of words are the core's StrEnums, member for
member: a word added to the core is documented by itself, and the document
holds no second copy that could drift."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import orjson
import pytest

from agents_runtime.core.vocabulary import (
    ActionStatus,
    Decision,
    GrantStatus,
    Outcome,
    ReasonCode,
    Severity,
)
from agents_runtime.log.kinds import Kind
from guardd.app import document


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    # As served: the bytes a client reads, parsed back.
    served: dict[str, Any] = orjson.loads(orjson.dumps(document()))
    return served["components"]["schemas"]


def _values(enum: type[StrEnum]) -> list[str]:
    return [member.value for member in enum]


def _enum(schema: dict[str, Any]) -> list[str]:
    for variant in schema.get("anyOf", [schema]):
        if "enum" in variant:
            return list(variant["enum"])
    raise AssertionError(f"no enum in {schema}")


def _consts(schemas: dict[str, Any], name: str, key: str) -> list[str]:
    variants = schemas[name]["oneOf"]
    resolved = [schemas[v["$ref"].rsplit("/", 1)[1]] if "$ref" in v else v for v in variants]
    return [v["properties"][key]["const"] for v in resolved]


def test_record_kinds(schemas: dict[str, Any]) -> None:
    assert _enum(schemas["LogRecord"]["properties"]["kind"]) == _values(Kind)


def test_decisions(schemas: dict[str, Any]) -> None:
    assert _consts(schemas, "Decision", "decision") == _values(Decision)


def test_reason_codes(schemas: dict[str, Any]) -> None:
    assert _consts(schemas, "DenyReason", "code") == _values(ReasonCode)


def test_action_statuses_and_outcomes(schemas: dict[str, Any]) -> None:
    action = schemas["Action"]["properties"]
    assert _enum(action["status"]) == _values(ActionStatus)
    assert _enum(action["outcome"]) == _values(Outcome)
    assert _enum(schemas["OutcomeReport"]["properties"]["status"]) == _values(Outcome)


def test_severities(schemas: dict[str, Any]) -> None:
    assert _enum(schemas["Scar"]["properties"]["severity"]) == _values(Severity)
    assert _enum(schemas["AddScar"]["properties"]["severity"]) == _values(Severity)
    assert _enum(schemas["Reject"]["properties"]["scar"]) == _values(Severity)


def test_grant_statuses(schemas: dict[str, Any]) -> None:
    assert _enum(schemas["Grant"]["properties"]["status"]) == _values(GrantStatus)


def test_the_document_holds_plain_strings_only() -> None:
    """Members are written as their values, but the document itself is kept
    free of them, for any tool that walks it as Python objects."""

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                assert type(key) is str
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            assert type(value) is str, repr(value)

    walk(document())
