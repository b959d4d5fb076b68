"""The SDK's own list of decisions is the one the service documents: the SDK
does not import the server, so this test is what keeps the two equal."""

from __future__ import annotations

import pytest

from client_sdk._core import parse_decision
from client_sdk._models import DecisionKind
from client_sdk.errors import InvalidResponse
from guardd.app import document


def test_decision_kinds_are_the_documented_decisions() -> None:
    schemas = document()["components"]["schemas"]
    refs = [v["$ref"].rsplit("/", 1)[1] for v in schemas["Decision"]["oneOf"]]
    documented = [schemas[name]["properties"]["decision"]["const"] for name in refs]
    assert documented == [kind.value for kind in DecisionKind]


@pytest.mark.parametrize("kind", list(DecisionKind))
def test_each_decision_parses_and_answers_its_property(kind: DecisionKind) -> None:
    decision = parse_decision({"decision": kind.value, "action_id": "act-1"})
    assert decision.decision == kind
    assert type(decision.decision) is str
    flags = (decision.allowed, decision.denied, decision.pending)
    assert flags == tuple(kind is k for k in DecisionKind)


def test_an_unknown_decision_is_refused() -> None:
    with pytest.raises(InvalidResponse, match="unknown decision 'maybe'"):
        parse_decision({"decision": "maybe", "action_id": "act-1"})
