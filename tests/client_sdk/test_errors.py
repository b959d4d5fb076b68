"""Mapping the service's error answers to the exception tree (no server)."""

from __future__ import annotations

import json
import pickle
from decimal import Decimal

import pytest

from client_sdk import (
    ActionDenied,
    AgentExists,
    AlreadyTerminated,
    APIError,
    ApprovalTimeout,
    BadRequest,
    Conflict,
    Forbidden,
    GuardError,
    GuardSetupError,
    IdempotencyConflict,
    InternalError,
    InvalidState,
    MethodNotAllowed,
    NotFound,
    Quarantined,
    ReadOnly,
    ServiceUnavailable,
    TooLarge,
    TransportError,
    Unauthorized,
    UnknownAction,
)
from client_sdk._core import error_from_response

DOCUMENTED = [
    (400, "bad_request", BadRequest),
    (401, "unauthorized", Unauthorized),
    (403, "forbidden", Forbidden),
    (404, "not_found", NotFound),
    (404, "unknown_action", UnknownAction),
    (409, "agent_exists", AgentExists),
    (409, "invalid_state", InvalidState),
    (409, "already_terminated", AlreadyTerminated),
    (409, "idempotency_conflict", IdempotencyConflict),
    (413, "too_large", TooLarge),
    (405, "method_not_allowed", MethodNotAllowed),
    (503, "quarantined", Quarantined),
    (503, "read_only", ReadOnly),
    (500, "internal", InternalError),
]


def _body(code: str, message: str = "something went wrong") -> bytes:
    return json.dumps({"error": message, "code": code}).encode()


@pytest.mark.parametrize(
    ("status", "code", "cls"), [pytest.param(*row, id=row[1]) for row in DOCUMENTED]
)
def test_every_documented_code_maps_to_its_exception(status, code, cls):
    error = error_from_response(status, _body(code, "agent 'x' does not exist"))
    assert type(error) is cls
    assert (error.status, error.code, error.message) == (status, code, "agent 'x' does not exist")
    assert str(error) == f"{status} {code}: agent 'x' does not exist"
    assert isinstance(error, APIError)
    assert error.resent is False


def test_conflicts_share_a_base_class_and_unknown_action_is_a_not_found():
    assert issubclass(UnknownAction, NotFound)
    for cls in (AgentExists, InvalidState, AlreadyTerminated, IdempotencyConflict):
        assert issubclass(cls, Conflict)
    assert issubclass(Quarantined, ServiceUnavailable)
    assert issubclass(ReadOnly, ServiceUnavailable)


def test_unknown_code_falls_back_to_the_class_for_its_status_and_keeps_the_code():
    error = error_from_response(409, _body("brand_new_conflict", "new"))
    assert type(error) is Conflict
    assert (error.status, error.code, error.message) == (409, "brand_new_conflict", "new")


def test_unknown_code_with_unknown_status_is_a_plain_api_error():
    error = error_from_response(418, _body("teapot", "short and stout"))
    assert type(error) is APIError
    assert (error.status, error.code) == (418, "teapot")


def test_answer_without_error_body_is_mapped_by_status():
    error = error_from_response(503, b"<html>upstream down</html>")
    assert type(error) is ServiceUnavailable
    assert error.code == "unavailable"
    assert error.message == "HTTP 503 without an error body: <html>upstream down</html>"


def test_answer_without_error_body_and_unknown_status_gets_an_http_code():
    error = error_from_response(502, b"")
    assert type(error) is APIError
    assert (error.status, error.code, error.message) == (
        502,
        "http_502",
        "HTTP 502 without an error body",
    )


def test_resent_flag_is_carried():
    assert error_from_response(409, _body("invalid_state"), resent=True).resent is True


def test_action_denied_keeps_code_reason_and_action_id():
    reason = {"code": "insufficient_budget", "cost": 5, "remaining": 1}
    error = ActionDenied("act-7", reason)
    assert (error.code, error.reason, error.action_id, error.status) == (
        "insufficient_budget",
        reason,
        "act-7",
        None,
    )
    assert error.message == "action act-7 denied: insufficient_budget (cost=5, remaining=1)"


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        pytest.param(
            {"code": "tool_not_allowed", "tool": "delete_database"},
            "action act-3 denied: tool_not_allowed (tool='delete_database')",
            id="tool",
        ),
        pytest.param(
            {"code": "insufficient_budget", "cost": Decimal("2.5"), "remaining": Decimal(1)},
            "action act-3 denied: insufficient_budget (cost=2.5, remaining=1)",
            id="money-as-parsed",
        ),
        pytest.param(
            {"code": "rejected", "by": "alice", "reason": "no"},
            "action act-3 denied: rejected (by='alice', reason='no')",
            id="rejected",
        ),
    ],
)
def test_action_denied_says_its_code_once(reason, message):
    error = ActionDenied("act-3", reason)
    assert str(error) == message
    assert str(error).count(reason["code"]) == 1


def test_every_client_error_is_a_guard_error_with_status_code_and_message():
    for error in (
        GuardSetupError("no admin token found"),
        TransportError("connection refused"),
        ApprovalTimeout("act-1", 2.5),
        ActionDenied("act-1", {"code": "terminated", "reason": "scar_limit"}),
    ):
        assert isinstance(error, GuardError)
        assert error.status is None
        assert error.code
        assert error.message == str(error)
    assert ApprovalTimeout("act-1", 2.5).code == "approval_timeout"
    assert ApprovalTimeout("act-1", 2.5).message == (
        "action act-1 is still pending approval after 2.5s; it stays pending on the service"
    )


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(
            ActionDenied("act-2", {"code": "rejected", "by": "a", "reason": "no"}), id="denied"
        ),
        pytest.param(ApprovalTimeout("act-1", 3), id="timeout"),
        pytest.param(error_from_response(409, _body("invalid_state"), resent=True), id="api"),
        pytest.param(GuardSetupError("no admin token", looked_at=["x"]), id="setup"),
        pytest.param(TransportError("cannot reach", url="http://127.0.0.1:1"), id="transport"),
    ],
)
def test_errors_survive_pickling_with_their_fields(error):
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert type(copy) is type(error)
    assert copy.__dict__ == error.__dict__
    assert str(copy) == str(error)
