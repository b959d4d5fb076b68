"""guardd.views renders each reply shape of guardd.replies: for an agent
driven through every kind of action, grant and scar, each reply the actor
answers with (rendered by ``BY_COMMAND`` in its turn) and each
rendering fits its shape in the OpenAPI document; every command has a
renderer or is answered as it is."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import jsonschema_rs
import orjson
import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.answers import Allowed, Denied, Pending
from agents_runtime.core.behaviour import COMMANDS
from agents_runtime.core.state import AgentState, action_reads, parse_line
from agents_runtime.log.readback import verify_committed
from agents_runtime.log.record import Head
from agents_runtime.log.verify import Failure, Report
from guardd import replies, views
from guardd.app import BY_COMMAND, document
from guardd.endpoints import OPERATOR, Endpoint, Reply
from guardd.jsonio import dumps
from tests.agents_runtime.support import T0, log_lines, policy, running_agent

POLICY = policy(
    budget=50,
    tools={
        "read": {"cost": 1, "max_calls": 30},
        "mail": {"cost": 2, "requires_approval": True, "approval_timeout_secs": 30},
        "wire": {"cost": 1, "requires_approval": True},
    },
    default={"cost": 0.5},
    rate_limit={"max_actions": 100, "window_secs": 60},
    approval_timeout_secs=600,
)


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    return document()["components"]


def fits(components: dict[str, Any], shape: type, value: Any) -> None:
    """``value``, as it goes out, is valid under ``shape``'s schema."""
    schema = {"$ref": f"#/components/schemas/{shape.__name__}", "components": components}
    validator = jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
    errors = [str(e) for e in validator.iter_errors(orjson.loads(dumps(value)))]
    assert errors == [], (shape.__name__, value)


def same(rendered: Any, answered: Any) -> None:
    """Equal as the client reads them: the same bytes out."""
    assert dumps(rendered) == dumps(answered)


def test_every_command_has_a_renderer_or_is_answered_as_it_is() -> None:
    assert set(BY_COMMAND).isdisjoint(views.AS_IS)
    assert set(BY_COMMAND) | views.AS_IS == set(COMMANDS)


async def _route() -> None:
    pass


def _sending(command: type, shape: Any) -> Endpoint:
    return Endpoint(
        method="POST",
        rule="/v1/agents/<agent_id>/example",
        summary="An example",
        caller=OPERATOR,
        reply=Reply(shape, "An example."),
        view=_route,
        tag="agents",
        sends=command,
    )


def test_a_command_is_rendered_with_the_view_of_the_shape_its_endpoint_declares() -> None:
    renders = views.in_turn([_sending(c.SetShadow, replies.Shadow)])
    assert dict(renders) == {c.SetShadow: views.IN_TURN[replies.Shadow]}


def test_an_endpoint_sending_a_command_with_a_shape_no_view_renders_in_turn_is_refused() -> None:
    with pytest.raises(TypeError, match="no view renders"):
        views.in_turn([_sending(c.GetStatus, replies.Token)])


def test_two_endpoints_rendering_one_command_differently_are_refused() -> None:
    with pytest.raises(TypeError, match="GetStatus: endpoints render it differently"):
        views.in_turn(
            [_sending(c.GetStatus, replies.AgentStatus), _sending(c.GetStatus, replies.Grant)]
        )


async def test_every_reply_and_rendering_fits_its_shape(
    tmp_path: Path, schemas: dict[str, Any]
) -> None:
    seen: set[Any] = set()

    def check(shape: type, rendered: Any, answered: Any = None) -> None:
        fits(schemas, shape, rendered)
        if answered is not None:
            same(rendered, answered)
        seen.add(shape)

    async with running_agent(tmp_path, POLICY) as agent:
        ask = agent.ask
        decisions = [
            await ask(c.RequestAction("read", {"q": 1}, None, "key-1")),  # allowed
            await ask(c.RequestAction("read", {"q": 1}, None, "key-1")),  # its repeat
            await ask(c.RequestAction("nope", None)),  # default rule: allowed
            await ask(c.RequestAction("read", None, Decimal(1000))),  # denied: budget
            await ask(c.RequestAction("mail", {"to": "a"})),  # pending: approved below
            await ask(c.RequestAction("mail", {"to": "b"})),  # pending: rejected below
            await ask(c.RequestAction("wire", None)),  # pending: cancelled below
            await ask(c.RequestAction("mail", {"to": "c"})),  # pending: expires below
            await ask(c.RequestAction("wire", None)),  # stays pending
        ]
        decisions.append(await ask(c.Approve("act-5", "ann", "fine")))
        decisions.append(await ask(c.Reject("act-6", "ann", "no", "minor")))
        cancelled = await ask(c.Cancel("act-7", "agent", "gave up"))
        grant = await ask(c.IssueGrant("wire", "ann", max_calls=2, ttl_secs=60, note="ok"))
        decisions.append(await ask(c.RequestAction("wire", {"n": 1})))  # drawn on the grant
        revoked = await ask(c.RevokeGrant("grt-1", "ann", "done"))
        await ask(c.IssueGrant("read", "bob", max_cost=5, expires_at="2027-01-01T00:00:00Z"))
        outcome = await ask(c.ReportOutcome("act-1", "failure", "agent", "boom"))
        scarred = await ask(c.AddScar("moderate", "rude", "act-3", "ann"))
        agent.clock.advance(31)
        await ask(c.GetStatus())  # a batch at the new time: act-8 expires
        decisions.append(await ask(c.RequestAction("read", {"q": 2})))

        state: AgentState = agent.state
        lines = log_lines(agent.path)
        now = T0 + 31

        for decision in decisions:
            shape = {
                "allowed": replies.AllowedDecision,
                "denied": replies.DeniedDecision,
                "pending_approval": replies.PendingDecision,
            }[decision["decision"]]
            check(shape, decision)
            check(shape, _rendered_decision(state, decision, lines), decision)
        assert {d["decision"] for d in decisions} == {"allowed", "denied", "pending_approval"}

        statuses = set()
        for n in range(1, state.action_count + 1):
            action_lines = {seq: lines[seq] for seq in action_reads(state, n)}
            answered = await ask(c.GetAction(f"act-{n}"))
            check(replies.Action, views.action(state, n, action_lines), answered)
            statuses.add(answered["status"])
        check(replies.Action, cancelled)
        assert statuses == {"allowed", "denied", "completed", "cancelled", "pending_approval"}

        for held in state.pending.values():
            check(replies.PendingEntry, views.pending_entry(held, state))
        check(replies.PendingList, views.pending_list(state), await ask(c.ListPending()))

        check(replies.Grant, views.grant(state.grants["grt-2"], now))
        check(replies.Grant, grant)
        check(replies.Grant, revoked)
        check(replies.GrantList, views.grant_list(state, now), await ask(c.ListGrants()))

        for scar in state.scars:
            check(replies.Scar, views.scar(scar))
        check(replies.AgentStatus, views.status(state, lines), await ask(c.GetStatus()))
        check(replies.AgentStatus, outcome)
        check(replies.AgentStatus, scarred)
        assert state.policy is not None
        check(replies.PolicyInForce, views.policy(state.policy), await ask(c.GetPolicy()))
        check(replies.Head, views.head(state.head))

        check(replies.AgentList, views.listed_agents(await agent.registry.list()))
        log = await ask(c.GetLogView())
        records = [orjson.loads(line) for line in lines.values()]
        check(replies.LogPage, views.log_page(records, log.head))
        report = verify_committed(log.log, log.committed, agent.registry.ring.public_key)
        check(replies.VerifyReport, views.verify_report(report))
        failure = Failure(3, 2, "hash does not match content")
        check(replies.VerifyFailure, views.verify_failure(failure))
        check(replies.VerifyReport, {"ok": False, "records": 2, "failure": failure.to_json()})
        failed = views.verify_report(_failed(report, failure))
        check(replies.VerifyReport, failed)

    status = views.status(state, lines)
    check(replies.CreatedAgent, views.created_agent(status, "agt_agent-1." + "A" * 43))
    check(replies.Token, views.token("agt_agent-1." + "A" * 43))
    active = views.active_agent("agent-1", status)
    quarantined = views.quarantined_agent("bad", "line 3: hash does not match content", failure)
    check(replies.ActiveAgent, active)
    check(replies.QuarantinedAgent, quarantined)
    check(replies.AgentList, views.agent_list([active, quarantined]))
    check(replies.PublicKey, views.public_key("ab" * 32))
    check(replies.Ok, views.OK)
    check(replies.PreToolUseOutput, views.allow_tool_use())
    check(replies.PreToolUseOutput, views.deny_tool_use("tool_not_allowed: ..."))
    check(replies.HookAck, views.hook_ack())

    assert seen >= set(views.RENDERS), sorted(s.__name__ for s in set(views.RENDERS) - seen)


def _rendered_decision(state: AgentState, decision: dict[str, Any], lines: Any) -> Any:
    """The decision rendered by guardd.views from the records it wrote."""
    action_id = decision["action_id"]
    if decision["decision"] == "pending_approval":
        return views.pending_decision(Pending(action_id))
    if decision["decision"] == "denied":
        return views.denied(Denied(action_id, decision["reason"]))
    n = int(action_id.removeprefix("act-"))
    requested = state.action_seqs[n - 1]
    held = state.held.get(action_id)
    allowed = held.receipt_seq if held is not None else requested + 1
    assert allowed is not None
    record = parse_line(lines, allowed)
    return views.allowed(
        Allowed(
            action_id,
            record["cost"],
            record["remaining"],
            (lines[requested], lines[allowed]),
            record.get("grant_id"),
        )
    )


def _failed(report: Report, failure: Failure) -> Report:
    return attrs.evolve(report, ok=False, head=None, failure=failure)


def test_a_rendering_that_is_not_its_shape_does_not_fit(schemas: dict[str, Any]) -> None:
    head = views.head(Head(3, "ab" * 32))
    fits(schemas, replies.Head, head)
    with pytest.raises(AssertionError):
        fits(schemas, replies.Head, {**head, "extra": 1})
    with pytest.raises(AssertionError):
        fits(schemas, replies.Head, {"seq": 3})
