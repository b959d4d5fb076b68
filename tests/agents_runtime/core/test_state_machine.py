"""Random command sequences against one agent (hypothesis stateful testing).

After every step the state rebuilt from the file on disk (``load_log``, which
verifies every record) must equal the live state. At the end of each example
``audit replay`` must find every record of the log to be what the log's own
policies would have written: policies generated with rules (reading input,
history, tags, the agent and now), tags and ``cost_from``, set as the agent's
own or as versions of a named (fleet) policy, and shadow policies set and
cleared. The what-if mode must find a log re-decided under the one policy it
was written under unchanged, and re-decide any log under any generated
candidate. A restart rule reloads the whole registry from disk mid-sequence.

Each machine owns its event loop (``asyncio.new_event_loop``) and runs every
step to completion on it; the loop is closed in ``teardown``.
"""

from __future__ import annotations

import asyncio
import pickle
import shutil
import tempfile
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agents_runtime.core import commands as c
from agents_runtime.core.policy import Policy, parse_policy
from agents_runtime.core.records import apply
from agents_runtime.core.snapshot import SCHEMA, state_json
from agents_runtime.core.state import IN_ORDER, AgentState, expired_actions, parse_ts
from agents_runtime.core.vocabulary import Severity
from agents_runtime.errors import AgentError, IdempotencyConflict, InvalidState, NotFound
from agents_runtime.log import canonical
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.logfile import read_log
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.snapshot import open_snapshot, seal_snapshot
from agents_runtime.log.store import LogContents
from agents_runtime.log.verify import ChainVerifier
from agents_runtime.runtime.registry import Registry
from agents_runtime.runtime.replay import replay
from agents_runtime.runtime.statecopy import copy_state, restore
from audit.replay import replay_records
from audit.whatif import final_decisions, what_if
from guardd import views
from guardd.app import BY_COMMAND
from tests.agents_runtime.support import (
    AGENT,
    FakeClock,
    allowed_ids,
    live_state,
    log_lines,
    policy,
    replayed_state,
    snapshot,
    write_test_keys,
)

# listed (tagged), approval (with rules), capped, unlisted, charged from its input,
# held for two approvals
TOOLS = ("read", "send", "capped", "nope", "pay", "quorum")
# Operators who approve, with their identities: two of them make a quorum.
APPROVERS = (("alice", "token:tok-alice"), ("bob", "token:tok-bob"))
COSTS = (None, "0", "0.1", "0.5", "1", "2.5", "7")
# Seconds an Idempotency-Key is kept: short, so that advance_time outlives it.
RETENTION = 30.0
# Keys of the latest action only stay as they came: the others go to runs
# (agents_runtime/core/idempotency.py), and every example moves some.
RECENT = 1
# The state's dicts whose order a fold reads (a snapshot keeps it).
IN_ORDER_FIELDS = [f.name for f in attrs.fields(AgentState) if f.metadata.get(IN_ORDER)]
SEVERITIES = tuple(severity.value for severity in Severity)
# Mostly light scars, so that agents live long enough to do interesting things.
SCARS = ("minor", "minor", "minor", "moderate", "moderate", "severe", "fatal")


def assert_same_state(state: AgentState, expected: AgentState, lines: dict[int, bytes]) -> None:
    assert state == expected
    # == on dicts ignores their order, which a fold reads in these.
    for name in IN_ORDER_FIELDS:
        assert list(getattr(state, name)) == list(getattr(expected, name))
    assert snapshot(state, lines) == snapshot(expected, lines)


def fold_on(state: AgentState, lines: Sequence[bytes], public_key: bytes) -> None:
    """Fold the records after ``state``'s head into it, as a live actor does."""
    verifier = ChainVerifier.following(state.head, public_key=public_key, log_id=AGENT)
    for line in lines:
        apply(state, verifier.feed(line))


# Rules of every effect, reading input, history (tags, their times, calls),
# the agent and now; some fail to evaluate on some inputs (policy_error).
SEND_RULES = [
    {
        "name": "recent",
        "when": "'r' in history.tag_last_used && now - history.tag_last_used['r'] < duration('5s')",
        "effect": "require_approval",
    },
    {"name": "rich", "when": "agent.remaining > 3.0 && 'read' in history.calls", "effect": "allow"},
    {
        "name": "after-read",
        "when": "'r' in history.tags_used && has(input.b) && input.b == 1",
        "effect": "allow",
    },
    {"name": "big-a", "when": "has(input.a) && input.a >= 3", "effect": "deny", "scar": "minor"},
    {"name": "fails", "when": "has(input.a) && input.a == 2 && input.zz == 1", "effect": "deny"},
]


# What a generated rule's ``when`` may be: each variable a rule reads, a
# macro, and some that fail to evaluate on some inputs (policy_error).
CONDITIONS = (
    "true",
    "false",
    "has(input.a) && input.a >= 2",
    "has(input.b) && input.b == 1",
    "input.a == 3",
    "'r' in history.tags_used",
    "'s' in history.tags_used && !('r' in history.tags_used)",
    "'s' in history.tag_last_used && now - history.tag_last_used['s'] < duration('10s')",
    "'read' in history.calls && history.calls['read'] >= 2",
    "agent.remaining > 3.0",
    "agent.spent >= 1.0 && agent.scar_score >= 2",
    "agent.actions_allowed > 3 && agent.budget < 5.0",
    "tool == 'send' && has(input.b)",
    "has(input.a) && [1, 2].exists(x, x == input.a)",
    "size(history.tags_used) > 1 || history.tags_used.exists(t, t == 's')",
)
EFFECTS = ("allow", "deny", "require_approval")


def _rule(name: str, when: str, effect: str, scar: str | None) -> dict[str, Any]:
    rule: dict[str, Any] = {"name": name, "when": when, "effect": effect}
    if effect == "deny" and scar is not None:
        rule |= {"message": f"{name} says no", "scar": scar}
    return rule


rule_lists = st.lists(
    st.tuples(
        st.sampled_from(CONDITIONS),
        st.sampled_from(EFFECTS),
        st.one_of(st.none(), st.sampled_from(SCARS[:4])),
    ),
    max_size=4,
).map(lambda drawn: [_rule(f"g{i}", *rule) for i, rule in enumerate(drawn)])
tag_sets = st.lists(st.sampled_from(["r", "s"]), unique=True, max_size=2)


def machine_policy(
    budget: str,
    scar_limit: int,
    rate: tuple[int, int] | None,
    timeout: int | None = None,
    tagged: bool = True,
    send_rules: list[dict[str, Any]] | None = None,
    pay_rules: list[dict[str, Any]] | None = None,
    send_tags: list[str] | None = None,
    pay_from: bool = True,
) -> Policy:
    pay: dict[str, Any] = {"cost_from": "a"} if pay_from else {"cost": 1}
    if pay_rules:
        pay["rules"] = pay_rules
    send: dict[str, Any] = {
        "cost": 2,
        "requires_approval": True,
        "rules": SEND_RULES if send_rules is None else send_rules,
    }
    if send_tags:
        send["tags"] = send_tags
    return policy(
        budget=Decimal(budget),
        scar_limit=scar_limit,
        tools={
            "read": {"cost": Decimal("0.5"), "tags": ["r"] if tagged else []},
            "send": send,
            "capped": {"max_calls": 2},
            "pay": pay,
            "quorum": {"cost": 1, "requires_approval": True, "approvals_required": 2},
        },
        rate_limit=None if rate is None else {"max_actions": rate[0], "window_secs": rate[1]},
        approval_timeout_secs=timeout,
    )


policies = st.builds(
    machine_policy,
    budget=st.sampled_from(["0", "1", "3.5", "4", "6"]),
    scar_limit=st.integers(4, 30),
    rate=st.one_of(st.none(), st.tuples(st.integers(1, 4), st.sampled_from([1, 10, 60]))),
    # Held actions expire after this long (fake seconds), or never.
    timeout=st.sampled_from([None, None, 5, 30, 60]),
    tagged=st.booleans(),
    send_rules=st.one_of(st.none(), rule_lists),
    pay_rules=rule_lists,
    send_tags=tag_sets,
    pay_from=st.booleans(),
)


class AgentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="guard-machine-"))
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.data_dir = DataDir(self.root)
        write_test_keys(self.root)
        self.ring = self.data_dir.prepare()
        self.registry = self._open()
        self.run(self.registry.create(AGENT, machine_policy("4", 20, (4, 10), 30)))
        self.requests = 0  # action IDs handed out
        self.keys: dict[str, tuple[c.RequestAction, float]] = {}  # and the ts of its request
        self.fleet = 0  # the newest version of the named policy "fleet" sent to the agent
        self.candidate: Policy | None = None  # what the what-if check tries at the end

    # -- plumbing ------------------------------------------------------------

    def run(self, awaitable: Any) -> Any:
        return self.loop.run_until_complete(awaitable)

    def _open(self) -> Registry:
        # A snapshot every few records: a restart starts from the live
        # state's snapshot and folds what follows it.
        registry = Registry(
            FileStore(self.data_dir),
            self.ring,
            clock=self.clock,
            render=BY_COMMAND,
            snapshot_records=3,
            idempotency_retention=RETENTION,
            recent_actions=RECENT,
        )
        summary = registry.load()
        assert not summary.quarantined
        self.run(registry.start())
        if AGENT in registry.actors:
            # The actor's first batch (which expires what fell due while it
            # was stopped) is over before the machine looks at the state.
            async def first() -> Any:
                return await registry.ref(AGENT).ask(c.GetStatus())

            self.run(first())
        return registry

    def ask(self, command: Any) -> Any:
        async def send() -> Any:  # ask sends at once, so on the running loop
            return await self.registry.ref(AGENT).ask(command)

        return self.run(send())

    def try_ask(self, command: Any) -> Any:
        try:
            return self.ask(command)
        except AgentError as exc:
            return exc

    def log_lines(self) -> dict[int, bytes]:
        return log_lines(self.data_dir.log_path(AGENT))

    def action_id(self, pick: int) -> str:
        # 0 is one past the last: an unknown action
        return f"act-{pick % (self.requests + 1) + 1}" if self.requests else "act-1"

    def teardown(self) -> None:
        try:
            self.check_audit_replay()
            self.check_what_if()
            self.check_snapshot_then_fold()
        finally:
            try:
                self.run(self.registry.stop())
            finally:
                self.loop.close()
                shutil.rmtree(self.root, ignore_errors=True)

    def check_snapshot_then_fold(self) -> None:
        """At every cut point of the log this example produced: a snapshot
        of the state folded up to it, then the fold of the records after
        it, equals the fold from genesis."""
        path = self.data_dir.log_path(AGENT)
        contents = read_log(path)
        lines = log_lines(path)
        public_key = self.ring.public_key
        whole = replay(
            AGENT, contents, public_key, idempotency_retention=RETENTION, recent_actions=RECENT
        )
        assert whole.state is not None
        for cut in range(1, len(contents.lines)):
            prefix = replay(
                AGENT,
                LogContents.of_lines(contents.lines[: cut + 1]),
                public_key,
                idempotency_retention=RETENTION,
                recent_actions=RECENT,
            )
            assert prefix.state is not None
            data = seal_snapshot(
                AGENT, prefix.state.head, SCHEMA, state_json(prefix.state), self.ring.signer
            )
            snap = open_snapshot(data, public_key, AGENT)
            loaded = replay(
                AGENT,
                contents,
                public_key,
                snapshot=snap,
                idempotency_retention=RETENTION,
                recent_actions=RECENT,
            )
            assert (loaded.snapshot_seq, loaded.snapshot_problem) == (cut, None)
            assert_same_state(loaded.state, whole.state, lines)
            # The copy a lost race's rebuild starts from: taken here, while
            # the state it shares parts with folds on to the end (as the
            # live one runs ahead), it restores what a whole copy taken here
            # holds, and folds on to the end as the state did.
            whole_copy = pickle.loads(pickle.dumps(prefix.state))  # noqa: S301 (our own)
            copy = copy_state(prefix.state)
            fold_on(prefix.state, contents.lines[cut + 1 :], public_key)
            assert_same_state(prefix.state, whole.state, lines)
            restored = restore(copy)
            assert_same_state(restored, whole_copy, lines)
            fold_on(restored, contents.lines[cut + 1 :], public_key)
            assert_same_state(restored, whole.state, lines)

    def check_audit_replay(self) -> None:
        """audit replay on the log this example produced: every record is what
        the log's own policy would have written; its state is the live one."""
        path = self.data_dir.log_path(AGENT)
        records = [canonical.loads(line) for line in path.read_bytes().splitlines()]
        result = replay_records(records, RETENTION)
        assert result.ok, [str(p) for p in result.problems]
        assert result.state is not None
        lines = dict(enumerate(path.read_bytes().splitlines()))
        assert snapshot(result.state, lines) == snapshot(live_state(self.registry), lines)
        stamps = [r["ts"] for r in records]
        assert stamps == sorted(stamps)

    def check_what_if(self) -> None:
        """The what-if mode on the log this example produced: up to its
        second policy, under the policy it was written under, no decision
        changes; under a generated candidate, every request is re-decided
        and each change counted."""
        path = self.data_dir.log_path(AGENT)
        records = [canonical.loads(line) for line in path.read_bytes().splitlines()]
        policies = [i for i, r in enumerate(records) if r["kind"] == "policy"]
        # A policy record starts a step of its own: the log up to the next
        # one is a whole log, written under the first policy alone.
        cut = policies[1] if len(policies) > 1 else len(records)
        first = records[:cut]
        own = what_if(
            first,
            parse_policy(records[policies[0]]["policy"]),
            idempotency_retention=RETENTION,
        )
        requests = sum(1 for r in first if r["kind"] == "action_requested")
        assert (own.decisions, own.changed, own.by_change) == (requests, 0, {}), own
        assert own.spent_after == own.spent_before
        if self.candidate is not None:
            requests = sum(1 for r in records if r["kind"] == "action_requested")
            other = what_if(
                records, self.candidate, examples=requests, idempotency_retention=RETENTION
            )
            assert other.decisions == requests
            assert other.changed == sum(other.by_change.values()) == len(other.examples)
            before = final_decisions(records)
            for example in other.examples:
                assert before.get(example.action_id, "requested") == example.before
                assert example.before != example.after
            assert other.spent_after <= max(self.candidate.budget, Decimal(0))

    # -- rules ------------------------------------------------------------------

    @rule(
        tool=st.sampled_from(TOOLS),
        cost=st.sampled_from(COSTS),
        key=st.one_of(st.none(), st.sampled_from(["k1", "k2", "k3", "k4", "k5"])),
        data=st.dictionaries(st.sampled_from("ab"), st.integers(0, 3), max_size=2),
    )
    def request(self, tool: str, cost: str | None, key: str | None, data: dict[str, int]) -> None:
        command = c.RequestAction(tool, data or None, None if cost is None else Decimal(cost), key)
        before = live_state(self.registry)
        # The batch's ts, as the actor makes it: never before the last one.
        now = max(round(self.clock() * 1_000_000) / 1_000_000, parse_ts(before.last_ts))
        reply = self.try_ask(command)
        first = self.keys.get(key) if key is not None else None
        # A key reused more than RETENTION seconds after its request is a new one.
        earlier = first[0] if first is not None and now - first[1] <= RETENTION else None
        if earlier is not None:
            if (earlier.tool, earlier.input, earlier.cost) == (tool, command.input, command.cost):
                assert isinstance(reply, dict)
                assert int(reply["action_id"].removeprefix("act-")) <= self.requests
            else:
                assert isinstance(reply, IdempotencyConflict)
            return
        assert isinstance(reply, dict), reply
        self.requests += 1
        assert reply["action_id"] == f"act-{self.requests}"
        state = live_state(self.registry)
        if key is not None:
            self.keys[key] = (command, parse_ts(state.last_ts))
        if reply["decision"] == "allowed":
            assert reply["remaining"] == state.remaining or not state.alive

    @rule(tool=st.sampled_from(TOOLS[:3]), cost=st.sampled_from(COSTS[:5]))
    def request_listed_tool(self, tool: str, cost: str | None) -> None:
        self.request(tool, cost, None, {})

    @rule(
        tool=st.sampled_from(["send", "pay"]),
        data=st.dictionaries(st.sampled_from("ab"), st.integers(0, 3), max_size=2),
    )
    def request_with_rules(self, tool: str, data: dict[str, int]) -> None:
        self.request(tool, None, None, data)

    @rule(tool=st.sampled_from(TOOLS[:3]), cost=st.sampled_from(COSTS[:5]))
    def request_listed_tool_again(self, tool: str, cost: str | None) -> None:
        self.request(tool, cost, None, {})

    @precondition(lambda self: bool(allowed_ids(live_state(self.registry), self.log_lines())))
    @rule(
        pick=st.integers(0, 40),
        outcome=st.sampled_from(["success", "success", "failure", "harmful"]),
        role=st.sampled_from([c.AGENT, c.ADMIN]),
    )
    def report_outcome_of_allowed(self, pick: int, outcome: str, role: str) -> None:
        allowed = allowed_ids(live_state(self.registry), self.log_lines())
        self.try_ask(c.ReportOutcome(allowed[pick % len(allowed)], outcome, role, None))

    @rule(pick=st.integers(0, 40), note=st.one_of(st.none(), st.just("fine")))
    def approve(self, pick: int, note: str | None) -> None:
        self.try_ask(c.Approve(self.action_id(pick), "alice", note))

    def pending_pick(self, pick: int) -> tuple[str, bool]:
        """A held action, and whether its approval deadline has passed: the
        actor expires what is due before it runs the next command, so a
        step on it then finds it no longer pending."""
        state = live_state(self.registry)
        action_id = list(state.pending)[pick % len(state.pending)]
        now = max(self.clock(), parse_ts(state.last_ts))
        due = {action.action_id for action, _ in expired_actions(state, now)}
        return action_id, action_id in due

    @precondition(lambda self: bool(live_state(self.registry).pending))
    @rule(
        pick=st.integers(0, 40),
        note=st.one_of(st.none(), st.just("ok")),
        approver=st.sampled_from(APPROVERS),
    )
    def approve_pending(self, pick: int, note: str | None, approver: tuple[str, str]) -> None:
        action_id, due = self.pending_pick(pick)
        held = live_state(self.registry).pending[action_id]
        name, by_id = approver
        again = any(given["by_id"] == by_id for given in held.approvals)
        first_of_two = held.tool == "quorum" and not held.approvals
        reply = self.try_ask(c.Approve(action_id, name, note, by_id))
        if due or again:
            assert isinstance(reply, InvalidState), reply
            return
        if first_of_two:
            # The first of two: recorded, and the action stays pending.
            assert reply["decision"] == "pending_approval", reply
            assert [a["by_id"] for a in reply["approvals"]] == [by_id]
            assert reply["approvals_required"] == 2
            return
        assert reply["decision"] in ("allowed", "denied")

    @precondition(lambda self: bool(live_state(self.registry).pending))
    @rule(pick=st.integers(0, 40), approver=st.sampled_from(APPROVERS))
    def approve_pending_again(self, pick: int, approver: tuple[str, str]) -> None:
        self.approve_pending(pick, None, approver)

    @precondition(lambda self: bool(live_state(self.registry).pending))
    @rule(pick=st.integers(0, 40), scar=st.one_of(st.none(), st.sampled_from(SCARS)))
    def reject_pending(self, pick: int, scar: str | None) -> None:
        action_id, due = self.pending_pick(pick)
        reply = self.try_ask(c.Reject(action_id, "bob", "no", scar))
        if due:
            assert isinstance(reply, InvalidState), reply
            return
        assert reply["reason"]["code"] == "rejected"

    @rule(pick=st.integers(0, 40), scar=st.one_of(st.none(), st.sampled_from(SEVERITIES)))
    def reject(self, pick: int, scar: str | None) -> None:
        self.try_ask(c.Reject(self.action_id(pick), "bob", "no", scar))

    @precondition(lambda self: bool(live_state(self.registry).pending))
    @rule(
        pick=st.integers(0, 40),
        role=st.sampled_from([c.AGENT, c.ADMIN]),
        reason=st.one_of(st.none(), st.just("gave up")),
    )
    def cancel_pending(self, pick: int, role: str, reason: str | None) -> None:
        action_id, due = self.pending_pick(pick)
        state = live_state(self.registry)
        before = (state.remaining, state.actions_allowed, state.actions_denied, state.scar_score)
        reply = self.try_ask(c.Cancel(action_id, role, reason))
        if due:
            assert isinstance(reply, InvalidState), reply
            return
        assert reply["status"] == "cancelled"
        state = live_state(self.registry)
        after = (state.remaining, state.actions_allowed, state.actions_denied, state.scar_score)
        assert after == before

    @rule(pick=st.integers(0, 40))
    def cancel(self, pick: int) -> None:
        self.try_ask(c.Cancel(self.action_id(pick), c.AGENT, None))

    @rule(
        pick=st.integers(0, 40),
        outcome=st.sampled_from(["success", "failure", "harmful"]),
        role=st.sampled_from([c.AGENT, c.ADMIN]),
    )
    def report_outcome(self, pick: int, outcome: str, role: str) -> None:
        self.try_ask(c.ReportOutcome(self.action_id(pick), outcome, role, "detail"))

    @rule(severity=st.sampled_from(SCARS), pick=st.one_of(st.none(), st.integers(0, 40)))
    def add_scar(self, severity: str, pick: int | None) -> None:
        action_id = None if pick is None else self.action_id(pick)
        self.try_ask(c.AddScar(severity, "operator saw something", action_id))

    @precondition(lambda self: self.requests >= 6)  # late, so there is a life before it
    @rule()
    def terminate(self) -> None:
        alive = live_state(self.registry).alive
        reply = self.try_ask(c.Terminate("operator stop", "carol"))
        assert isinstance(reply, dict) == alive

    @rule(new_policy=policies)
    def set_policy(self, new_policy: Policy) -> None:
        alive = live_state(self.registry).alive
        reply = self.try_ask(c.SetPolicy(new_policy))
        assert isinstance(reply, dict) == alive

    @rule(new_policy=policies, again=st.booleans())
    def follow_fleet_version(self, new_policy: Policy, again: bool) -> None:
        """A version of the named policy "fleet", as a fan-out writes it; or
        (``again``) the one already sent, as a fan-out run again after a
        crash sends it: then nothing is written."""
        state = live_state(self.registry)
        alive, following = state.alive, state.policy_ref == "fleet"
        length = len(self.data_dir.log_path(AGENT).read_bytes().splitlines())
        repeat = again and following and self.fleet > 0
        version = self.fleet if repeat else self.fleet + 1
        reply = self.try_ask(c.SetPolicy(new_policy, policy_ref="fleet", version=version))
        assert isinstance(reply, dict) == alive
        if not alive:
            return
        self.fleet = version
        state = live_state(self.registry)
        assert (state.policy_ref, state.policy_version) == ("fleet", version)
        lines = self.data_dir.log_path(AGENT).read_bytes().splitlines()[length:]
        if repeat:
            assert lines == []
        else:
            newest = canonical.loads(lines[0])
            assert (newest["kind"], newest["policy_ref"], newest["version"]) == (
                "policy",
                "fleet",
                version,
            )

    @rule(new_policy=policies, named=st.booleans())
    def set_shadow(self, new_policy: Policy, named: bool) -> None:
        alive = live_state(self.registry).alive
        ref = {"policy_ref": "candidate", "version": 1} if named else {}
        reply = self.try_ask(c.SetShadow(new_policy, **ref))
        assert isinstance(reply, dict) == alive, reply
        if alive:
            assert (reply["agree"], reply["disagree"]) == (0, {})

    @rule()
    def clear_shadow(self) -> None:
        had = live_state(self.registry).shadow is not None
        reply = self.try_ask(c.ClearShadow())
        assert isinstance(reply, NotFound) != had, reply
        assert live_state(self.registry).shadow is None

    @rule(candidate=policies)
    def pick_what_if_candidate(self, candidate: Policy) -> None:
        self.candidate = candidate

    @rule(seconds=st.sampled_from([0.25, 1, 5, 10, 61]))
    def advance_time(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(backwards=st.sampled_from([1, 30]))
    def clock_goes_backwards(self, backwards: float) -> None:
        self.clock.advance(-backwards)  # ts must still never go backwards

    @rule()
    def restart(self) -> None:
        state = live_state(self.registry)
        before = snapshot(state, log_lines(self.data_dir.log_path(AGENT)))
        now = max(self.clock(), parse_ts(state.last_ts))
        due = [action.action_id for action, _ in expired_actions(state, now)]
        length = len(self.data_dir.log_path(AGENT).read_bytes().splitlines())
        self.run(self.registry.save_checkpoints())
        self.run(self.registry.save_snapshots())  # of the live state, when due
        self.run(self.registry.stop())
        self.registry = self._open()
        if not due:
            after = snapshot(live_state(self.registry), log_lines(self.data_dir.log_path(AGENT)))
            assert after == before
            return
        # What fell due while stopped is expired first, and nothing else written.
        lines = self.data_dir.log_path(AGENT).read_bytes().splitlines()[length:]
        written = [canonical.loads(line) for line in lines]
        assert [(r["kind"], r["action_id"]) for r in written] == [
            ("approval_expired", action_id) for action_id in due
        ]

    # -- invariants --------------------------------------------------------------

    @invariant()
    def replayed_state_equals_live_state(self) -> None:
        lines = log_lines(self.data_dir.log_path(AGENT))
        live, replayed = live_state(self.registry), replayed_state(self.registry)
        assert snapshot(replayed, lines) == snapshot(live, lines)
        assert (replayed.policy, replayed.policy_ref, replayed.policy_version) == (
            live.policy,
            live.policy_ref,
            live.policy_version,
        )
        shown = [None if s is None else views.shadow(s) for s in (replayed.shadow, live.shadow)]
        assert shown[0] == shown[1]


AgentMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestAgentMachine = AgentMachine.TestCase
