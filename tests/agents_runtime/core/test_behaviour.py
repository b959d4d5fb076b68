"""The behaviour on its own: handlers yield records and change nothing
themselves; whoever runs them seals and folds. No actor, no log file."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from agents_runtime.core import behaviour as b
from agents_runtime.core import commands as c
from agents_runtime.core.actions import request_action
from agents_runtime.core.answers import Allowed
from agents_runtime.core.entries import every_command
from agents_runtime.core.policy import policy_json
from agents_runtime.core.records import apply
from agents_runtime.core.state import AgentState, first_decision
from agents_runtime.errors import IdempotencyConflict, UnknownAction
from agents_runtime.log.canonical import dumps
from agents_runtime.log.record import Head, Sealed, genesis_fields, seal
from tests.agents_runtime.support import AGENT, TEST_SIGNER, policy

TS = "2026-01-05T10:00:00.000000Z"
NOW = 1767607200.0
TOOLS = {"read": {"cost": 1}, "send": {"cost": 2, "requires_approval": True}}


class Driver:
    """Seals and folds what a handler yields, as the actor does, and keeps
    every line by seq (what ``READS`` is served from)."""

    def __init__(self, budget: int = 10) -> None:
        self.state = AgentState(AGENT)
        self.lines: dict[int, bytes] = {}
        self.write(genesis_fields(AGENT, TEST_SIGNER.public_key_hex))
        agent_policy = policy(budget=budget, tools=TOOLS)
        self.write({"kind": "policy", "policy": policy_json(agent_policy)})

    def write(self, fields: dict[str, Any]) -> Sealed:
        sealed = seal(fields, prev=self.state.head, ts=TS, signer=TEST_SIGNER)
        apply(self.state, sealed.record)
        self.lines[sealed.record["seq"]] = sealed.line[:-1]
        return sealed

    def run(self, command: Any) -> Any:
        reads = b.READS.get(type(command))
        seqs = () if reads is None else reads(self.state, command)
        lines = {seq: self.lines[seq] for seq in seqs}
        return b.run(self.state, command, NOW, lines, self.write)


def test_a_handler_yields_its_records_and_the_state_changes_only_by_their_fold() -> None:
    driver = Driver()
    state = driver.state
    head, remaining = state.head, state.remaining
    steps = request_action(state, c.RequestAction("read", {"q": 1}), NOW, b.NO_LINES)
    requested = next(steps)
    assert requested["kind"] == "action_requested"
    assert (state.head, state.remaining) == (head, remaining)  # nothing sealed or folded yet
    allowed = steps.send(driver.write(requested))
    assert allowed["kind"] == "action_allowed"
    assert allowed["remaining"] == remaining - 1
    assert state.remaining == remaining  # the allowance is not folded until it is sent back
    with pytest.raises(StopIteration) as done:
        steps.send(driver.write(allowed))
    reply = done.value.value
    assert reply == Allowed(
        "act-1", Decimal(1), remaining - 1, (driver.lines[2], driver.lines[3]), None
    )


def test_the_receipt_quotes_the_lines_the_handler_got_back_not_a_read_of_the_log() -> None:
    driver = Driver()
    reply = driver.run(c.RequestAction("read", {"q": 1}))
    assert reply.receipt_lines == (driver.lines[2], driver.lines[3])


def test_an_approval_reads_nothing_its_held_action_keeps_its_request() -> None:
    driver = Driver()
    driver.run(c.RequestAction("send", {"to": "ops"}))
    assert b.READS[c.Approve](driver.state, c.Approve("act-1", "alice")) == ()
    held = driver.state.held["act-1"]
    assert dumps(held.request) == driver.lines[held.seq]
    reply = driver.run(c.Approve("act-1", "alice"))
    allowed_seq = driver.state.head.seq
    assert reply.receipt_lines == (driver.lines[2], driver.lines[allowed_seq])


def test_an_idempotency_key_repeat_reads_the_request_and_its_decision() -> None:
    driver = Driver()
    first = driver.run(c.RequestAction("read", {"q": 1}, idempotency_key="k"))
    again = c.RequestAction("read", {"q": 1}, idempotency_key="k")
    assert b.READS[c.RequestAction](driver.state, again) == (2, 3)
    head = driver.state.head
    assert driver.run(again) == first
    assert driver.state.head == head  # a repeat writes nothing
    other = c.RequestAction("read", {"q": 2}, idempotency_key="k")
    with pytest.raises(IdempotencyConflict):
        driver.run(other)


def test_a_new_request_reads_nothing() -> None:
    driver = Driver()
    assert b.READS[c.RequestAction](driver.state, c.RequestAction("read", {"q": 1})) == ()
    command = c.RequestAction("read", {"q": 1}, idempotency_key="new")
    assert b.READS[c.RequestAction](driver.state, command) == ()


def test_a_finished_action_s_view_names_the_lines_it_quotes() -> None:
    driver = Driver()
    driver.run(c.RequestAction("read", {"q": 1}))
    assert b.READS[c.GetAction](driver.state, c.GetAction("act-1")) == (2, 3)
    assert b.READS[c.GetAction](driver.state, c.GetAction("act-9")) == ()
    assert driver.run(c.GetAction("act-1")) == 1  # the action's number: guardd renders it
    assert first_decision(driver.state, 1, driver.lines).cost == 1


def test_an_allowance_that_spends_the_budget_terminates_in_the_same_command() -> None:
    driver = Driver(budget=1)
    reply = driver.run(c.RequestAction("read", {"q": 1}))
    assert reply.remaining == Decimal(0)
    assert driver.state.last_record is not None
    assert driver.state.last_record["kind"] == "terminated"
    assert driver.state.termination_reason == "budget_exhausted"


def test_every_command_of_the_domain_has_exactly_one_handler() -> None:
    # The actor answers the other two itself: a long-poll and its log handle.
    domain = set(every_command()) - {c.WatchAction, c.GetLogView}
    assert set(b.WRITERS) | set(b.VIEWS) == domain
    assert not set(b.WRITERS) & set(b.VIEWS)
    assert set(b.READS) <= set(b.WRITERS) | set(b.VIEWS)


def test_a_refused_command_yields_nothing() -> None:
    driver = Driver()
    head = driver.state.head
    with pytest.raises(UnknownAction):
        driver.run(c.Approve("act-1", "alice"))
    assert driver.state.head == head
    assert isinstance(head, Head)


def test_an_idempotency_key_repeat_of_a_held_request_reads_nothing() -> None:
    driver = Driver()
    first = driver.run(c.RequestAction("send", {"to": "ops"}, idempotency_key="k"))
    again = c.RequestAction("send", {"to": "ops"}, idempotency_key="k")
    assert b.READS[c.RequestAction](driver.state, again) == ()
    assert b.run(driver.state, again, NOW, b.NO_LINES, driver.write) == first
    other = c.RequestAction("send", {"to": "dev"}, idempotency_key="k")
    with pytest.raises(IdempotencyConflict):
        b.run(driver.state, other, NOW, b.NO_LINES, driver.write)
