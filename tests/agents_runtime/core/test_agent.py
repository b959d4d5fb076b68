"""The state tables of docs/records.md and the agent lifecycle, each driven
through a real registry and actor (no HTTP), with a clock the test moves.
Every test ends by checking that the state rebuilt from the file on disk
equals the live state (``running_agent`` does it on exit)."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.policy import Policy
from agents_runtime.errors import (
    AlreadyTerminated,
    Forbidden,
    IdempotencyConflict,
    InvalidState,
    UnknownAction,
)
from tests.agents_runtime.support import (
    AGENT,
    D,
    FakeClock,
    Harness,
    policy,
    running_agent,
    running_registry,
)

TOOLS = {
    "read": {"cost": 1},
    "send": {"cost": 5, "requires_approval": True},
    "capped": {"cost": 1, "max_calls": 1},
}
RATE = {"max_actions": 2, "window_secs": 60}


def standard(**overrides: Any) -> Policy:
    keys: dict[str, Any] = {"budget": 100, "scar_limit": 10, "tools": TOOLS}
    keys.update(overrides)
    return policy(**keys)


def exact(error: str) -> str:
    return f"^{re.escape(error)}$"


async def written_by(agent: Harness, command: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Ask ``command``; return its reply without its receipt and the records
    it wrote without seal fields or request_hash (which, like prev, names
    another record's hash; its own tests check it)."""
    before = len(agent.records())
    reply = await agent.ask(command)
    records = agent.records()[before:]
    if isinstance(reply, dict):
        reply = {k: v for k, v in reply.items() if k != "receipt"}
    return reply, [
        {
            k: v
            for k, v in r.items()
            if k not in ("seq", "ts", "prev", "hash", "sig", "request_hash")
        }
        for r in records
    ]


def log_lines(agent: Harness) -> list[str]:
    """The agent's log, one string per line, newline left out."""
    return agent.path.read_bytes().decode().splitlines()


async def refused_without_writing(agent: Harness, command: Any, error: type, message: str) -> None:
    before = agent.path.read_bytes()
    with pytest.raises(error, match=exact(message)):
        await agent.ask(command)
    assert agent.path.read_bytes() == before


async def scar_score(agent: Harness) -> int:
    return (await agent.ask(c.GetStatus()))["scar_score"]


# -- Action transitions ---------------------------------------------------------


async def test_request_passing_all_checks_is_allowed_and_charged(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        reply, records = await written_by(agent, c.RequestAction("read", {"q": "x"}))
        assert reply == {"decision": "allowed", "action_id": "act-1", "cost": 1, "remaining": 99}
        assert records == [
            {
                "kind": "action_requested",
                "action_id": "act-1",
                "tool": "read",
                "input": {"q": "x"},
                "requested_cost": None,
                "cost": 1,
            },
            {
                "kind": "action_allowed",
                "action_id": "act-1",
                "cost": 1,
                "remaining": 99,
                "log_id": AGENT,
            },
        ]
        action = await agent.ask(c.GetAction("act-1"))
        assert action["status"] == "allowed"
        assert action["outcome"] is None
        assert action["input"] == {"q": "x"}
        status = await agent.ask(c.GetStatus())
        assert (status["spent"], status["remaining"], status["actions_allowed"]) == (1, 99, 1)


async def test_request_for_a_tool_requiring_approval_is_pending_and_charges_nothing(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        reply, records = await written_by(agent, c.RequestAction("send", cost=D(7)))
        assert reply == {"decision": "pending_approval", "action_id": "act-1"}
        assert [r["kind"] for r in records] == ["action_requested", "approval_required"]
        assert records[1] == {"kind": "approval_required", "action_id": "act-1", "cost": 7}
        status = await agent.ask(c.GetStatus())
        assert (status["spent"], status["actions_pending"]) == (0, 1)
        assert (await agent.ask(c.GetAction("act-1")))["status"] == "pending_approval"


@pytest.mark.parametrize(
    ("setup", "command", "reason", "scar"),
    [
        pytest.param(
            [],
            c.RequestAction("unknown"),
            {"code": "tool_not_allowed", "tool": "unknown"},
            "moderate",
            id="tool_not_allowed-moderate",
        ),
        pytest.param(
            [c.RequestAction("capped")],
            c.RequestAction("capped"),
            {"code": "tool_call_limit", "tool": "capped", "max_calls": 1},
            "minor",
            id="tool_call_limit-minor",
        ),
        pytest.param(
            [c.RequestAction("read"), c.RequestAction("read")],
            c.RequestAction("read"),
            {"code": "rate_limited", "max_actions": 2, "window_secs": 60},
            "minor",
            id="rate_limited-minor",
        ),
        pytest.param(
            [],
            c.RequestAction("read", cost=D("100.5")),
            {"code": "insufficient_budget", "cost": D("100.5"), "remaining": 100},
            None,
            id="insufficient_budget-no-scar",
        ),
    ],
)
async def test_request_failing_a_check_is_denied_with_the_scar_of_its_reason(
    tmp_path: Path, setup: list[Any], command: Any, reason: dict[str, Any], scar: str | None
) -> None:
    async with running_agent(tmp_path, standard(rate_limit=RATE)) as agent:
        for earlier in setup:
            await agent.ask(earlier)
        action_id = f"act-{len(setup) + 1}"
        reply, records = await written_by(agent, command)
        assert reply == {"decision": "denied", "action_id": action_id, "reason": reason}
        expected = [
            {"kind": "action_denied", "action_id": action_id, "reason": reason},
        ]
        if scar is not None:
            expected.append(
                {
                    "kind": "scar",
                    "severity": scar,
                    "reason": f"denied: {reason['code']}",
                    "by": "system",
                    "action_id": action_id,
                }
            )
        assert records[1:] == expected
        status = await agent.ask(c.GetStatus())
        assert status["actions_denied"] == 1
        assert status["spent"] == len(setup)
        assert status["scar_score"] == {None: 0, "minor": 1, "moderate": 3}[scar]
        assert (await agent.ask(c.GetAction(action_id)))["status"] == "denied"


async def test_approve_passing_checks_is_allowed_charged_and_signs_approver_and_note(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send"))
        reply, records = await written_by(agent, c.Approve("act-1", "alice", "looks fine"))
        assert reply == {"decision": "allowed", "action_id": "act-1", "cost": 5, "remaining": 95}
        assert records == [
            {
                "kind": "action_allowed",
                "action_id": "act-1",
                "cost": 5,
                "remaining": 95,
                "log_id": AGENT,
                "approved_by": "alice",
                "note": "looks fine",
            }
        ]
        action = await agent.ask(c.GetAction("act-1"))
        assert (action["status"], action["approved_by"], action["note"]) == (
            "allowed",
            "alice",
            "looks fine",
        )
        status = await agent.ask(c.GetStatus())
        assert (status["spent"], status["actions_pending"], status["actions_allowed"]) == (5, 0, 1)


async def test_approve_without_note_writes_no_note(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send"))
        _, records = await written_by(agent, c.Approve("act-1", "alice"))
        assert "note" not in records[0]
        assert records[0]["approved_by"] == "alice"


async def test_approve_when_budget_is_now_too_low_is_denied_insufficient_budget(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard(budget=10)) as agent:
        await agent.ask(c.RequestAction("send"))  # held, charge 5
        await agent.ask(c.RequestAction("read", cost=D(6)))  # remaining 4
        reply, records = await written_by(agent, c.Approve("act-1", "alice"))
        reason = {"code": "insufficient_budget", "cost": 5, "remaining": 4}
        assert reply == {"decision": "denied", "action_id": "act-1", "reason": reason}
        assert records == [
            {"kind": "action_denied", "action_id": "act-1", "reason": reason, "by": "alice"}
        ]
        status = await agent.ask(c.GetStatus())
        assert (status["spent"], status["actions_pending"], status["actions_denied"]) == (6, 0, 1)


async def test_approve_when_the_call_cap_is_now_reached_is_denied_with_a_minor_scar(
    tmp_path: Path,
) -> None:
    tools = {"send": {"requires_approval": True, "max_calls": 1}}
    async with running_agent(tmp_path, standard(tools=tools)) as agent:
        await agent.ask(c.RequestAction("send"))
        await agent.ask(c.RequestAction("send"))
        assert (await agent.ask(c.Approve("act-1", "alice")))["decision"] == "allowed"
        reply, records = await written_by(agent, c.Approve("act-2", "alice"))
        assert reply["reason"] == {"code": "tool_call_limit", "tool": "send", "max_calls": 1}
        assert [r["kind"] for r in records] == ["action_denied", "scar"]
        assert records[1]["severity"] == "minor"
        assert await scar_score(agent) == 1


async def test_approve_when_the_rate_limit_is_now_reached_is_denied_rate_limited(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard(rate_limit=RATE)) as agent:
        await agent.ask(c.RequestAction("send"))
        await agent.ask(c.RequestAction("read"))
        await agent.ask(c.RequestAction("read"))
        reply = await agent.ask(c.Approve("act-1", "alice"))
        assert reply["reason"] == {"code": "rate_limited", "max_actions": 2, "window_secs": 60}


async def test_approve_when_the_policy_no_longer_lists_the_tool_is_denied_with_a_moderate_scar(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send"))
        await agent.ask(c.SetPolicy(standard(tools={"read": {}})))
        reply = await agent.ask(c.Approve("act-1", "alice"))
        assert reply["reason"] == {"code": "tool_not_allowed", "tool": "send"}
        assert await scar_score(agent) == 3


async def test_approve_charges_what_the_current_policy_says(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send"))
        await agent.ask(
            c.SetPolicy(standard(tools={"send": {"cost": 8, "requires_approval": True}}))
        )
        reply = await agent.ask(c.Approve("act-1", "alice"))
        assert (reply["cost"], reply["remaining"]) == (8, 92)


async def test_reject_is_denied_rejected_without_a_scar(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send"))
        reply, records = await written_by(agent, c.Reject("act-1", "bob", "not today"))
        reason = {"code": "rejected", "by": "bob", "reason": "not today"}
        assert reply == {"decision": "denied", "action_id": "act-1", "reason": reason}
        assert records == [
            {
                "kind": "action_rejected",
                "action_id": "act-1",
                "by": "bob",
                "reason": "not today",
                "scar": None,
            }
        ]
        action = await agent.ask(c.GetAction("act-1"))
        assert (action["status"], action["reason"]) == ("denied", reason)
        status = await agent.ask(c.GetStatus())
        assert (status["scar_score"], status["actions_denied"], status["spent"]) == (0, 1, 0)


@pytest.mark.parametrize(
    ("severity", "weight"),
    [
        pytest.param("minor", 1, id="minor"),
        pytest.param("moderate", 3, id="moderate"),
        pytest.param("severe", 10, id="severe"),
    ],
)
async def test_reject_with_a_scar_adds_it(tmp_path: Path, severity: str, weight: int) -> None:
    async with running_agent(tmp_path, standard(scar_limit=100)) as agent:
        await agent.ask(c.RequestAction("send"))
        _, records = await written_by(agent, c.Reject("act-1", "bob", "bad idea", severity))
        assert records[1] == {
            "kind": "scar",
            "severity": severity,
            "reason": "bad idea",
            "by": "bob",
            "action_id": "act-1",
        }
        assert await scar_score(agent) == weight


async def test_reject_with_a_fatal_scar_terminates(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send"))
        _, records = await written_by(agent, c.Reject("act-1", "bob", "dangerous", "fatal"))
        assert [r["kind"] for r in records] == ["action_rejected", "scar", "terminated"]
        status = await agent.ask(c.GetStatus())
        assert (status["alive"], status["termination_reason"]) == (False, "fatal_scar")


# -- Outcomes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "role", "scar", "weight"),
    [
        pytest.param("success", c.AGENT, None, 0, id="success-by-agent"),
        pytest.param("success", c.ADMIN, None, 0, id="success-by-admin"),
        pytest.param("failure", c.AGENT, "minor", 1, id="failure-by-agent"),
        pytest.param("failure", c.ADMIN, "minor", 1, id="failure-by-admin"),
        pytest.param("harmful", c.ADMIN, "severe", 10, id="harmful-by-admin"),
    ],
)
async def test_outcome_sets_outcome_completes_the_action_and_scars_per_table(
    tmp_path: Path, outcome: str, role: str, scar: str | None, weight: int
) -> None:
    async with running_agent(tmp_path, standard(scar_limit=100)) as agent:
        await agent.ask(c.RequestAction("read"))
        status, records = await written_by(agent, c.ReportOutcome("act-1", outcome, role, "it ran"))
        assert records[0] == {
            "kind": "outcome",
            "action_id": "act-1",
            "outcome": outcome,
            "by": role,
            "detail": "it ran",
        }
        if scar is None:
            assert len(records) == 1
        else:
            assert records[1] == {
                "kind": "scar",
                "severity": scar,
                "reason": f"outcome: {outcome}: it ran",
                "by": "system",
                "action_id": "act-1",
            }
        assert status["scar_score"] == weight
        action = await agent.ask(c.GetAction("act-1"))
        assert (action["status"], action["outcome"]) == ("completed", outcome)


async def test_harmful_outcome_reported_by_the_agent_is_forbidden(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("read"))
        await refused_without_writing(
            agent,
            c.ReportOutcome("act-1", "harmful", c.AGENT),
            Forbidden,
            "only the admin token may report a harmful outcome",
        )


async def test_second_outcome_is_invalid_state(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("read"))
        await agent.ask(c.ReportOutcome("act-1", "success", c.AGENT))
        await refused_without_writing(
            agent,
            c.ReportOutcome("act-1", "failure", c.ADMIN),
            InvalidState,
            "action act-1 already has outcome success",
        )


@pytest.mark.parametrize(
    ("setup", "status"),
    [
        pytest.param([c.RequestAction("send")], "pending_approval", id="pending"),
        pytest.param([c.RequestAction("nope")], "denied", id="denied"),
        pytest.param(
            [c.RequestAction("send"), c.Reject("act-1", "bob", "no")], "denied", id="rejected"
        ),
    ],
)
async def test_outcome_on_an_action_that_is_not_allowed_is_invalid_state(
    tmp_path: Path, setup: list[Any], status: str
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        for command in setup:
            await agent.ask(command)
        await refused_without_writing(
            agent,
            c.ReportOutcome("act-1", "success", c.AGENT),
            InvalidState,
            f"action act-1 is {status}, not allowed",
        )


async def test_outcome_on_an_unknown_action_is_unknown_action(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await refused_without_writing(
            agent,
            c.ReportOutcome("act-9", "success", c.AGENT),
            UnknownAction,
            f"no action act-9 for agent {AGENT}",
        )


# -- Scars ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("severity", "weight"),
    [
        pytest.param("minor", 1, id="minor-1"),
        pytest.param("moderate", 3, id="moderate-3"),
        pytest.param("severe", 10, id="severe-10"),
    ],
)
async def test_scar_weights_add_up(tmp_path: Path, severity: str, weight: int) -> None:
    async with running_agent(tmp_path, standard(scar_limit=100)) as agent:
        status, records = await written_by(agent, c.AddScar(severity, "noticed"))
        assert records == [
            {"kind": "scar", "severity": severity, "reason": "noticed", "by": "operator"}
        ]
        assert status["scar_score"] == weight
        status = await agent.ask(c.AddScar(severity, "again"))
        assert status["scar_score"] == 2 * weight
        assert [s["severity"] for s in status["scars"]] == [severity, severity]
        assert status["alive"] is True


async def test_scar_on_an_action_names_it(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("read"))
        status = await agent.ask(c.AddScar("minor", "sloppy", "act-1"))
        [scar] = status["scars"]
        assert scar == {"seq": 4, "severity": "minor", "reason": "sloppy", "action_id": "act-1"}


async def test_scar_with_an_unknown_action_id_is_unknown_action(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await refused_without_writing(
            agent,
            c.AddScar("minor", "x", "act-1"),
            UnknownAction,
            f"no action act-1 for agent {AGENT}",
        )


async def test_fatal_scar_terminates_at_once(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        status, records = await written_by(agent, c.AddScar("fatal", "exfiltration"))
        assert records == [
            {"kind": "scar", "severity": "fatal", "reason": "exfiltration", "by": "operator"},
            {"kind": "terminated", "reason": "fatal_scar", "by": "system"},
        ]
        assert (status["alive"], status["termination_reason"], status["scar_score"]) == (
            False,
            "fatal_scar",
            0,
        )


# -- Agent lifecycle ---------------------------------------------------------------


async def test_scar_score_reaching_the_limit_terminates(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(scar_limit=4)) as agent:
        status = await agent.ask(c.AddScar("moderate", "one"))
        assert status["alive"] is True
        status, records = await written_by(agent, c.AddScar("minor", "two"))
        assert records[-1] == {"kind": "terminated", "reason": "scar_limit", "by": "system"}
        assert (status["alive"], status["termination_reason"], status["scar_score"]) == (
            False,
            "scar_limit",
            4,
        )


async def test_scar_score_passing_the_limit_terminates(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(scar_limit=4)) as agent:
        status = await agent.ask(c.AddScar("severe", "big"))
        assert (status["alive"], status["termination_reason"]) == (False, "scar_limit")


async def test_denial_scars_can_reach_the_limit(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(scar_limit=6)) as agent:
        await agent.ask(c.RequestAction("nope"))
        _, records = await written_by(agent, c.RequestAction("nope"))
        assert [r["kind"] for r in records] == [
            "action_requested",
            "action_denied",
            "scar",
            "terminated",
        ]
        assert (await agent.ask(c.GetStatus()))["termination_reason"] == "scar_limit"


async def test_failure_outcome_scar_can_reach_the_limit(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(scar_limit=1)) as agent:
        await agent.ask(c.RequestAction("read"))
        status = await agent.ask(c.ReportOutcome("act-1", "failure", c.AGENT))
        assert (status["alive"], status["termination_reason"]) == (False, "scar_limit")


async def test_allowed_action_bringing_remaining_to_exactly_zero_is_allowed_then_terminates(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard(budget=3)) as agent:
        await agent.ask(c.RequestAction("read"))
        reply, records = await written_by(agent, c.RequestAction("read", cost=D(2)))
        assert reply == {"decision": "allowed", "action_id": "act-2", "cost": 2, "remaining": 0}
        assert records[-2:] == [
            {
                "kind": "action_allowed",
                "action_id": "act-2",
                "cost": 2,
                "remaining": 0,
                "log_id": AGENT,
            },
            {"kind": "terminated", "reason": "budget_exhausted", "by": "system"},
        ]
        status = await agent.ask(c.GetStatus())
        assert (status["alive"], status["termination_reason"], status["remaining"]) == (
            False,
            "budget_exhausted",
            0,
        )


async def test_approval_bringing_remaining_to_exactly_zero_terminates(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(budget=5)) as agent:
        await agent.ask(c.RequestAction("send"))
        reply = await agent.ask(c.Approve("act-1", "alice"))
        assert (reply["decision"], reply["remaining"]) == ("allowed", 0)
        assert (await agent.ask(c.GetStatus()))["termination_reason"] == "budget_exhausted"


async def test_operator_terminate_records_reason_and_actor(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        status, records = await written_by(agent, c.Terminate("misbehaving", "carol"))
        assert records == [{"kind": "terminated", "reason": "misbehaving", "by": "carol"}]
        assert (status["alive"], status["termination_reason"]) == (False, "misbehaving")
        assert agent.state.terminated_by == "carol"


async def test_requests_after_termination_are_denied_terminated_and_still_logged(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("read"))
        await agent.ask(c.Terminate("done", "carol"))
        for number, tool in enumerate(["read", "nope", "send", "capped"], start=2):
            reply, records = await written_by(agent, c.RequestAction(tool, cost=D(1000)))
            reason = {"code": "terminated", "reason": "done"}
            assert reply == {"decision": "denied", "action_id": f"act-{number}", "reason": reason}
            assert [r["kind"] for r in records] == ["action_requested", "action_denied"]
        status = await agent.ask(c.GetStatus())
        assert (status["alive"], status["spent"], status["actions_allowed"]) == (False, 1, 1)
        assert (status["actions_denied"], status["scar_score"]) == (4, 0)


async def test_terminate_again_is_already_terminated(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.Terminate("first", "carol"))
        await refused_without_writing(
            agent,
            c.Terminate("second", "dave"),
            AlreadyTerminated,
            f"agent {AGENT} is already terminated (first)",
        )
        assert (await agent.ask(c.GetStatus()))["termination_reason"] == "first"


async def test_terminate_after_automatic_termination_is_already_terminated(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.AddScar("fatal", "x"))
        with pytest.raises(AlreadyTerminated):
            await agent.ask(c.Terminate("again", "carol"))


async def test_pending_actions_stay_pending_after_termination(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send"))
        await agent.ask(c.Terminate("stop", "carol"))
        pending = (await agent.ask(c.ListPending()))["pending"]
        assert [p["action"]["action_id"] for p in pending] == ["act-1"]
        assert (await agent.ask(c.GetAction("act-1")))["status"] == "pending_approval"


async def test_pending_approved_after_termination_is_denied_terminated(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send"))
        await agent.ask(c.Terminate("stop", "carol"))
        reply, records = await written_by(agent, c.Approve("act-1", "alice", "too late"))
        reason = {"code": "terminated", "reason": "stop"}
        assert reply == {"decision": "denied", "action_id": "act-1", "reason": reason}
        assert records == [
            {"kind": "action_denied", "action_id": "act-1", "reason": reason, "by": "alice"}
        ]
        status = await agent.ask(c.GetStatus())
        assert (status["spent"], status["actions_pending"], status["scar_score"]) == (0, 0, 0)


async def test_rejecting_after_termination_still_works(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send"))
        await agent.ask(c.Terminate("stop", "carol"))
        reply, records = await written_by(agent, c.Reject("act-1", "bob", "no", "severe"))
        assert reply["reason"] == {"code": "rejected", "by": "bob", "reason": "no"}
        assert [r["kind"] for r in records] == ["action_rejected", "scar"]
        status = await agent.ask(c.GetStatus())
        assert (status["alive"], status["termination_reason"], status["scar_score"]) == (
            False,
            "stop",
            10,
        )


async def test_outcome_of_an_action_allowed_before_termination_is_recorded(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard(scar_limit=1)) as agent:
        await agent.ask(c.RequestAction("read"))
        await agent.ask(c.Terminate("stop", "carol"))
        status, records = await written_by(agent, c.ReportOutcome("act-1", "failure", c.AGENT))
        assert [r["kind"] for r in records] == ["outcome", "scar"]  # no second terminated
        assert status["termination_reason"] == "stop"


async def test_operator_scars_after_termination_are_recorded_without_effect(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard(scar_limit=1)) as agent:
        await agent.ask(c.Terminate("stop", "carol"))
        status, records = await written_by(agent, c.AddScar("fatal", "late"))
        assert [r["kind"] for r in records] == ["scar"]
        assert status["termination_reason"] == "stop"


# -- The agent lifecycle ---------------------------------------------------------------


async def test_status_requested_is_never_seen_after_the_decision(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(budget=11)) as agent:
        for tool, cost in [("read", 5), ("send", None), ("nope", None), ("read", 7)]:
            await agent.ask(c.RequestAction(tool, cost=None if cost is None else D(cost)))
        statuses = [(await agent.ask(c.GetAction(f"act-{n}")))["status"] for n in range(1, 5)]
        assert statuses == ["allowed", "pending_approval", "denied", "denied"]


async def test_status_is_completed_once_an_outcome_is_reported(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("read"))
        await agent.ask(c.ReportOutcome("act-1", "success", c.AGENT))
        action = await agent.ask(c.GetAction("act-1"))
        assert (action["status"], action["outcome"]) == ("completed", "success")


@pytest.mark.parametrize(
    ("setup", "status"),
    [
        pytest.param([c.RequestAction("read")], "allowed", id="allowed"),
        pytest.param([c.RequestAction("nope")], "denied", id="denied"),
        pytest.param(
            [c.RequestAction("read"), c.ReportOutcome("act-1", "success", c.AGENT)],
            "completed",
            id="completed",
        ),
        # A held action says who decided what, and when (T0 here).
        pytest.param(
            [c.RequestAction("send"), c.Approve("act-1", "alice")],
            "was approved by alice at 2026-01-01T00:00:00.000000Z; it is no longer pending",
            id="approved",
        ),
        pytest.param(
            [c.RequestAction("send"), c.Reject("act-1", "bob", "no")],
            "was rejected by bob at 2026-01-01T00:00:00.000000Z: no; it is no longer pending",
            id="rejected",
        ),
        pytest.param(
            [c.RequestAction("send"), c.Cancel("act-1", c.AGENT, "gave up")],
            "was cancelled by agent at 2026-01-01T00:00:00.000000Z: gave up; "
            "it is no longer pending",
            id="cancelled",
        ),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(c.Approve("act-1", "alice"), id="approve"),
        pytest.param(c.Reject("act-1", "bob", "no", "minor"), id="reject"),
    ],
)
async def test_approve_or_reject_of_a_non_pending_action_is_invalid_state(
    tmp_path: Path, setup: list[Any], status: str, command: Any
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        for earlier in setup:
            await agent.ask(earlier)
        if status.startswith("was "):
            message = f"action act-1 {status}"
        else:
            message = f"action act-1 is {status}, not pending_approval"
        await refused_without_writing(agent, command, InvalidState, message)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(c.Approve("act-1", "alice"), id="approve"),
        pytest.param(c.Reject("act-1", "bob", "no"), id="reject"),
        pytest.param(c.GetAction("act-1"), id="get"),
    ],
)
async def test_approve_reject_or_get_of_an_unknown_action_is_unknown_action(
    tmp_path: Path, command: Any
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await refused_without_writing(
            agent, command, UnknownAction, f"no action act-1 for agent {AGENT}"
        )


async def test_free_action_at_remaining_zero_does_not_terminate(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(budget=0, tools={"free": {}})) as agent:
        reply, records = await written_by(agent, c.RequestAction("free"))
        assert reply == {"decision": "allowed", "action_id": "act-1", "cost": 0, "remaining": 0}
        assert [r["kind"] for r in records] == ["action_requested", "action_allowed"]
        assert (await agent.ask(c.GetStatus()))["alive"] is True


async def test_free_action_after_budget_lowered_to_spent_does_not_terminate(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("read", cost=D(4)))
        await agent.ask(c.SetPolicy(standard(budget=4, tools={"free": {}})))
        reply = await agent.ask(c.RequestAction("free"))
        assert (reply["decision"], reply["remaining"]) == ("allowed", 0)
        assert (await agent.ask(c.GetStatus()))["alive"] is True


async def test_idempotency_key_repeat_returns_the_first_decision_and_creates_nothing(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        first = await agent.ask(c.RequestAction("read", {"a": 1}, D(2), idempotency_key="k1"))
        before = agent.path.read_bytes()
        again = await agent.ask(c.RequestAction("read", {"a": 1}, D(2), idempotency_key="k1"))
        assert (
            again
            == first
            == {
                "decision": "allowed",
                "action_id": "act-1",
                "cost": 2,
                "remaining": 98,
                "receipt": log_lines(agent)[2:4],
            }
        )
        assert agent.path.read_bytes() == before
        assert (await agent.ask(c.RequestAction("read")))["action_id"] == "act-2"
        assert (await agent.ask(c.GetStatus()))["spent"] == 3


@pytest.mark.parametrize(
    ("setup", "first"),
    [
        pytest.param(
            [],
            {"decision": "pending_approval", "action_id": "act-1"},
            id="pending-stays-pending",
        ),
        pytest.param(
            [c.Approve("act-1", "alice")],
            {"decision": "pending_approval", "action_id": "act-1"},
            id="approved-later-still-answers-pending",
        ),
    ],
)
async def test_idempotency_key_repeat_of_a_held_request_returns_the_first_decision(
    tmp_path: Path, setup: list[Any], first: dict[str, Any]
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send", idempotency_key="k"))
        for command in setup:
            await agent.ask(command)
        assert await agent.ask(c.RequestAction("send", idempotency_key="k")) == first


async def test_idempotency_key_repeat_of_a_denial_returns_the_denial(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        first = await agent.ask(c.RequestAction("nope", idempotency_key="k"))
        assert await agent.ask(c.RequestAction("nope", idempotency_key="k")) == first
        assert await scar_score(agent) == 3  # the repeat added no second scar


async def test_idempotency_key_survives_a_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    async with running_agent(tmp_path, standard(), clock=clock) as agent:
        first = await agent.ask(c.RequestAction("read", idempotency_key="k"))
    async with running_registry(tmp_path, clock=clock) as registry:
        ref = registry.ref(AGENT)
        assert await ref.ask(c.RequestAction("read", idempotency_key="k")) == first
        assert (await ref.ask(c.GetStatus()))["actions_allowed"] == 1


@pytest.mark.parametrize(
    "again",
    [
        pytest.param(c.RequestAction("send", {"a": 1}, D(2), "k"), id="other-tool"),
        pytest.param(c.RequestAction("read", {"a": 2}, D(2), "k"), id="other-input"),
        pytest.param(c.RequestAction("read", {"a": 1}, D(3), "k"), id="other-cost"),
        pytest.param(c.RequestAction("read", {"a": 1}, None, "k"), id="cost-left-out"),
    ],
)
async def test_idempotency_key_with_a_different_body_is_a_conflict(
    tmp_path: Path, again: Any
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("read", {"a": 1}, D(2), "k"))
        await refused_without_writing(
            agent,
            again,
            IdempotencyConflict,
            "Idempotency-Key was first used for act-1 with a different body",
        )


async def test_idempotency_key_is_the_same_body_when_cost_is_written_differently(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        first = await agent.ask(c.RequestAction("read", None, D("2"), "k"))
        assert await agent.ask(c.RequestAction("read", None, D("2.00"), "k")) == first


async def test_set_policy_writes_a_policy_record_and_applies(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        status, records = await written_by(agent, c.SetPolicy(standard(budget=50)))
        assert [r["kind"] for r in records] == ["policy"]
        assert records[0]["policy"]["budget"] == 50
        assert (status["budget"], status["remaining"]) == (50, 50)


async def test_set_policy_never_revives_a_terminated_agent(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(budget=1, tools={"read": {"cost": 1}})) as agent:
        await agent.ask(c.RequestAction("read"))  # budget exhausted
        await refused_without_writing(
            agent,
            c.SetPolicy(standard(budget=1000)),
            InvalidState,
            f"agent {AGENT} is terminated; its policy cannot change",
        )
        status = await agent.ask(c.GetStatus())
        assert (status["alive"], status["budget"]) == (False, 1)
        reply = await agent.ask(c.RequestAction("read"))
        assert reply["reason"] == {"code": "terminated", "reason": "budget_exhausted"}


async def test_set_policy_lowering_the_scar_limit_to_the_score_terminates(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.AddScar("moderate", "x"))
        status, records = await written_by(agent, c.SetPolicy(standard(scar_limit=3)))
        assert [r["kind"] for r in records] == ["policy", "terminated"]
        assert status["termination_reason"] == "scar_limit"


# -- Call cap and rate limit counting ---------------------------------------------------


async def test_call_cap_counts_allowed_calls_only(tmp_path: Path) -> None:
    tools = {"capped": {"cost": 5, "max_calls": 1}}
    async with running_agent(tmp_path, standard(budget=7, tools=tools)) as agent:
        await agent.ask(c.RequestAction("read"))  # unknown here: denied, moderate scar
        denied = await agent.ask(c.RequestAction("capped", cost=D(50)))
        assert denied["reason"]["code"] == "insufficient_budget"
        assert (await agent.ask(c.RequestAction("capped")))["decision"] == "allowed"
        again = await agent.ask(c.RequestAction("capped"))
        assert again["reason"] == {"code": "tool_call_limit", "tool": "capped", "max_calls": 1}


async def test_call_cap_under_default_counts_per_tool_name(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(tools={}, default={"max_calls": 1})) as agent:
        assert (await agent.ask(c.RequestAction("a")))["decision"] == "allowed"
        assert (await agent.ask(c.RequestAction("b")))["decision"] == "allowed"
        assert (await agent.ask(c.RequestAction("a")))["reason"]["code"] == "tool_call_limit"


async def test_approved_actions_count_against_the_call_cap_when_approved(tmp_path: Path) -> None:
    tools = {"send": {"requires_approval": True, "max_calls": 1}}
    async with running_agent(tmp_path, standard(tools=tools)) as agent:
        await agent.ask(c.RequestAction("send"))
        second = await agent.ask(c.RequestAction("send"))
        assert second["decision"] == "pending_approval"  # pending ones do not count
        await agent.ask(c.Approve("act-1", "alice"))
        third = await agent.ask(c.RequestAction("send"))
        assert third["reason"]["code"] == "tool_call_limit"


async def test_rate_limit_frees_up_after_the_window(tmp_path: Path) -> None:
    clock = FakeClock()
    async with running_agent(tmp_path, standard(rate_limit=RATE), clock=clock) as agent:
        await agent.ask(c.RequestAction("read"))
        clock.advance(30)
        await agent.ask(c.RequestAction("read"))
        clock.advance(29.999)
        assert (await agent.ask(c.RequestAction("read")))["reason"]["code"] == "rate_limited"
        clock.advance(0.001)  # the first action is exactly 60 s old: it has left the window
        assert (await agent.ask(c.RequestAction("read")))["decision"] == "allowed"
        assert (await agent.ask(c.RequestAction("read")))["reason"]["code"] == "rate_limited"
        clock.advance(30)
        assert (await agent.ask(c.RequestAction("read")))["decision"] == "allowed"


async def test_denied_and_pending_actions_do_not_count_against_the_rate_limit(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard(rate_limit=RATE)) as agent:
        await agent.ask(c.RequestAction("nope"))
        await agent.ask(c.RequestAction("read", cost=D(1000)))
        await agent.ask(c.RequestAction("send"))
        assert (await agent.ask(c.RequestAction("read")))["decision"] == "allowed"
        assert (await agent.ask(c.RequestAction("read")))["decision"] == "allowed"


async def test_approved_actions_count_against_the_rate_limit_at_approval_time(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    async with running_agent(tmp_path, standard(rate_limit=RATE), clock=clock) as agent:
        await agent.ask(c.RequestAction("send"))
        await agent.ask(c.RequestAction("read"))
        clock.advance(50)
        await agent.ask(c.Approve("act-1", "alice"))
        clock.advance(20)  # act-2 left the window; act-1 (approved at +50) has not
        assert (await agent.ask(c.RequestAction("read")))["decision"] == "allowed"
        assert (await agent.ask(c.RequestAction("read")))["reason"]["code"] == "rate_limited"


async def test_rate_limit_survives_a_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    async with running_agent(tmp_path, standard(rate_limit=RATE), clock=clock) as agent:
        await agent.ask(c.RequestAction("read"))
        await agent.ask(c.RequestAction("read"))
    clock.advance(10)
    async with running_registry(tmp_path, clock=clock) as registry:
        reply = await registry.ref(AGENT).ask(c.RequestAction("read"))
        assert reply["reason"]["code"] == "rate_limited"


async def test_pending_list_shows_charge_and_request_seq(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("read"))
        await agent.ask(c.RequestAction("send", {"to": "x"}, D(9)))
        pending = (await agent.ask(c.ListPending()))["pending"]
        requested = next(
            r
            for r in agent.records()
            if r.get("action_id") == "act-2" and r["kind"] == "action_requested"
        )
        assert pending == [
            {
                "requested_at": requested["ts"],
                "seq": requested["seq"],
                "action": {"action_id": "act-2", "tool": "send", "input": {"to": "x"}, "cost": 9},
            }
        ]


async def test_action_ids_are_sequential_including_denials(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        ids = [
            (await agent.ask(c.RequestAction(tool)))["action_id"]
            for tool in ["read", "nope", "send", "read"]
        ]
        assert ids == ["act-1", "act-2", "act-3", "act-4"]


async def test_request_cost_is_recorded_as_requested(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        _, records = await written_by(agent, c.RequestAction("read", cost=D("0.5")))
        assert (records[0]["requested_cost"], records[0]["cost"]) == (D("0.5"), 1)


async def test_every_record_of_one_command_shares_one_timestamp(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard(budget=1)) as agent:
        before = len(agent.records())
        await agent.ask(c.RequestAction("read"))
        stamps = {r["ts"] for r in agent.records()[before:]}
        assert len(stamps) == 1


def test_policy_helper_keeps_decimals_exact() -> None:
    assert standard(budget=Decimal("0.3")).budget == Decimal("0.3")


# -- receipts --------------------------------------------------------------------


async def test_an_allowance_names_its_agent_and_request_and_the_decision_quotes_both_lines(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        reply = await agent.ask(c.RequestAction("read", {"q": "é"}))
        lines = log_lines(agent)
        requested, allowed = agent.records()[2:4]
        assert (allowed["log_id"], allowed["request_hash"]) == (AGENT, requested["hash"])
        assert reply["receipt"] == lines[2:4]
        # and the action view quotes the same two lines, before and after its outcome
        assert (await agent.ask(c.GetAction("act-1")))["receipt"] == lines[2:4]
        await agent.ask(c.ReportOutcome("act-1", "success", c.AGENT))
        assert (await agent.ask(c.GetAction("act-1")))["receipt"] == lines[2:4]


async def test_an_approval_receipt_pairs_the_original_request_with_the_approval(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        await agent.ask(c.RequestAction("send", {"to": "ops"}))  # seq 2, held at seq 3
        await agent.ask(c.RequestAction("read"))  # seq 4, 5
        reply = await agent.ask(c.Approve("act-1", "alice"))
        lines = log_lines(agent)
        records = agent.records()
        assert records[6]["request_hash"] == records[2]["hash"]
        assert records[6]["log_id"] == AGENT
        assert reply["receipt"] == [lines[2], lines[6]]
        assert (await agent.ask(c.GetAction("act-1")))["receipt"] == [lines[2], lines[6]]


async def test_denied_and_pending_actions_carry_no_receipt(tmp_path: Path) -> None:
    async with running_agent(tmp_path, standard()) as agent:
        pending = await agent.ask(c.RequestAction("send"))
        denied = await agent.ask(c.RequestAction("nope"))
        assert "receipt" not in pending
        assert "receipt" not in denied
        for action_id in ("act-1", "act-2"):
            assert "receipt" not in await agent.ask(c.GetAction(action_id))
        await agent.ask(c.Reject("act-1", "alice", "no"))
        assert "receipt" not in await agent.ask(c.GetAction("act-1"))
