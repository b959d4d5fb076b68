"""An agent: its genesis, the policy in force, and its status.

Creating an agent writes ``genesis`` (its log's identity and key) and its
first ``policy`` together (the registry does, outside any command). A new
policy (``SetPolicy``) takes effect at once: the charges of held actions
follow it, a scar limit it lowers to the score terminates the agent, and a
shorter approval timeout expires what it makes due in the same write.
``GetLogView`` (the log's committed head and handle) is answered by the
actor itself.
"""

from __future__ import annotations

from decimal import Decimal

import attrs

from agents_runtime.core.decisions import expire_due
from agents_runtime.core.entries import (
    Command,
    CommandEntry,
    KindEntry,
    Record,
    Steps,
    announces_nothing,
    left_out,
    never_continues,
    no_command,
    no_description,
    nothing_follows,
    settles_nothing,
    signed_by,
)
from agents_runtime.core.policy import Policy, charge_for, parse_policy, policy_json
from agents_runtime.core.state import AgentState, Lines, parse_ts
from agents_runtime.core.termination import terminate_if_due
from agents_runtime.errors import InvalidState, PolicyError
from agents_runtime.log.kinds import Kind


@attrs.frozen
class GetStatus(Command):
    pass


@attrs.frozen
class GetPolicy(Command):
    """Reply: the policy in force, defaults filled in, as its ``policy`` record has it."""


@attrs.frozen
class SetPolicy(Command):
    """A new policy: the agent's own, or (``policy_ref``) ``version`` of a
    named fleet policy, which the agent then follows."""

    policy: Policy
    policy_ref: str | None = None
    version: int | None = None
    by: str | None = None  # the operator who sets it (entries.signed_by)
    by_id: str | None = None


@attrs.frozen
class GetLogView(Command):
    """Reply: what a reader needs to read committed records off disk."""


def set_policy(state: AgentState, cmd: SetPolicy, now: float, lines: Lines) -> Steps:
    if not state.alive:
        raise InvalidState(f"agent {state.agent_id} is terminated; its policy cannot change")
    ref = cmd.policy_ref
    fields = signed_by({"kind": Kind.POLICY, "policy": policy_json(cmd.policy)}, cmd.by, cmd.by_id)
    if ref is not None:
        version = state.policy_version
        if state.policy_ref == ref and version is not None and cmd.version is not None:
            if version >= cmd.version:
                # A fan-out run again after a crash, or one that raced a
                # newer version: the log holds this version or a later one.
                return state
        fields["policy_ref"] = ref
        fields["version"] = cmd.version
    yield fields
    yield from terminate_if_due(state)
    # A shorter timeout applies at once: what it makes due expires now, in
    # the same write, not in a batch of its own at the same ts.
    yield from expire_due(state, now)
    return state


def get_status(state: AgentState, cmd: GetStatus, now: float, lines: Lines) -> AgentState:
    return state


def get_policy(state: AgentState, cmd: GetPolicy, now: float, lines: Lines) -> Policy:
    # Every loaded agent has one: a log without its policy record is quarantined.
    assert state.policy is not None
    return state.policy


def _fold_genesis(state: AgentState, r: Record) -> None:
    state.public_key = r["public_key"]


def _fold_policy(state: AgentState, r: Record) -> None:
    spent = state.spent
    policy = state.policy = parse_policy(r["policy"], recorded=True)
    # A policy of the agent's own (no policy_ref) ends its following.
    state.policy_ref = r.get("policy_ref")
    state.policy_version = r.get("version")
    state.remaining = policy.budget - spent
    # A held action is charged under the policy in force when it is approved.
    for action in state.pending.values():
        charge, _ = charge_for(policy.rule_for(action.tool), action.requested_cost, action.input)
        action.cost = Decimal(charge)
    state.expiry_dirty = True


def _finish_policy(state: AgentState, last: Record) -> Steps:
    yield from terminate_if_due(state)
    yield from expire_due(state, parse_ts(last["ts"]))


def _policy_of(record: Record) -> SetPolicy | str:
    try:
        return SetPolicy(
            parse_policy(record["policy"], recorded=True),
            record.get("policy_ref"),
            record.get("version"),
            record.get("by"),
            record.get("by_id"),
        )
    except PolicyError as exc:
        return f"policy record is not a valid policy: {exc}"


KIND_ENTRIES = (
    KindEntry(
        kind=Kind.GENESIS,
        fold=_fold_genesis,
        finish=nothing_follows,
        continues=never_continues,
        describe=no_description,
        # Written when the agent is created, with its first policy, by no command.
        starts=no_command,
        announces=announces_nothing,
        settles=settles_nothing,
        under_candidate=left_out,
    ),
    KindEntry(
        kind=Kind.POLICY,
        fold=_fold_policy,
        finish=_finish_policy,
        continues=never_continues,
        describe=no_description,
        starts=_policy_of,
        announces=announces_nothing,
        settles=settles_nothing,
        # The candidate stands in for the history's policies.
        under_candidate=left_out,
    ),
)

COMMAND_ENTRIES = (
    CommandEntry(command=SetPolicy, writes=set_policy, view=None, reads=None, replies_status=True),
    CommandEntry(command=GetStatus, writes=None, view=get_status, reads=None, replies_status=True),
    CommandEntry(command=GetPolicy, writes=None, view=get_policy, reads=None),
    # The log's handle and committed head: the actor answers it itself.
    CommandEntry(command=GetLogView, writes=None, view=None, reads=None),
)
