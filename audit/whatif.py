"""``audit replay --policy``: what a candidate policy would have decided on
real history, before anyone deploys it.

The log is verified first and only read. The candidate stands in for the
log's first ``policy`` record: from the same starting state (the genesis and
the candidate), every command of the history is run again through the
service's own behaviour (``agents_runtime.core.behaviour``) at its record's ``ts``, on
a state of its own, and each action's final decision is compared with the
one the log holds. Later ``policy`` records are left out (the report counts
them): the candidate is judged alone.

What the history says about people is replayed as it happened, and only where
it still applies; what it cannot say is not made up (``RULES``, printed with
every report):

- an operator's approval, rejection or cancel of an action is replayed when
  the candidate also holds that action for approval (an approval runs the
  checks again, as in the service); when the candidate decides the action at
  once, the operator's step is dropped;
- an action the candidate holds for approval that nobody decided in this
  history (it was decided at once, or expired, or was still pending) stays
  ``pending_approval``: it is charged nothing and its outcome is dropped.
  Approval timeouts are the candidate's, counted on the recorded times;
- outcomes are replayed for actions the candidate allows (their scars count),
  and dropped for the others; operators' scars and terminations are replayed;
- requests are re-decided at their recorded times, so rate windows see the
  history's timing. An agent told no would have behaved differently after
  it (retried, waited, stopped); replay cannot know how, and does not guess.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from agents_runtime.core.behaviour import expire_due, run, run_steps
from agents_runtime.core.entries import Command, Dropped
from agents_runtime.core.policy import Policy, parse_policy, policy_json
from agents_runtime.core.records import apply, entry_of
from agents_runtime.core.state import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    KEEP_ALL,
    AgentState,
    parse_ts,
)
from agents_runtime.core.vocabulary import ActionStatus, Decision
from agents_runtime.errors import AgentError, CanonicalError, PolicyError
from agents_runtime.log import canonical
from agents_runtime.log.ids import valid_agent_id
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import ZERO_HASH, Head, Sealed
from audit.errors import UnknownFormat, UnreadableFile, UsageError
from audit.replay import Folded, command_for, continues
from audit.source import Source, data_dir_agent_id, read_source, shown
from audit.stored import STORE_KEY, StoreReader, trusted_key
from audit.verification import verify_source, verify_text

RULES = (
    "the candidate stands in for the log's first policy record; later policy records are left out",
    "an operator's approval, rejection or cancel is replayed only where the candidate "
    "also holds the action for approval; an approval runs the checks again",
    "an action the candidate holds for approval that nobody decided in this history "
    "stays pending_approval: charged nothing, its outcome dropped",
    "outcomes are replayed for actions the candidate allows and dropped for the others; "
    "operators' scars and terminations are replayed",
    "requests are re-decided at their recorded times (rate windows and approval "
    "timeouts see the history's timing); how the agent would have behaved after a "
    "different answer is not guessed",
)
SUMMARY_CHARS = 80
DEFAULT_EXAMPLES = 10


@attrs.frozen
class Difference:
    seq: int  # seq of the action's action_requested record in the log
    action_id: str
    tool: str
    input: str  # the input's canonical JSON, cut short
    before: str
    after: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "action_id": self.action_id,
            "tool": self.tool,
            "input": self.input,
            "before": self.before,
            "after": self.after,
        }

    def __str__(self) -> str:
        where = f"seq {self.seq} {self.action_id} {self.tool} {self.input}"
        return f"{where}: {self.before} -> {self.after}"


@attrs.frozen
class WhatIf:
    agent_id: str
    decisions: int  # actions re-decided
    changed: int
    by_change: dict[str, int]
    by_tool: dict[str, int]
    examples: tuple[Difference, ...]
    spent_before: Decimal
    spent_after: Decimal
    policies_left_out: int
    unapproved: int  # held by the candidate, decided by nobody in this history
    approvals_dropped: int  # operators' steps on actions the candidate decided at once
    outcomes_dropped: int

    def to_json(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "decisions": self.decisions,
            "changed": self.changed,
            "by_change": self.by_change,
            "by_tool": self.by_tool,
            "examples": [e.to_json() for e in self.examples],
            "spent_before": self.spent_before,
            "spent_after": self.spent_after,
            "policies_left_out": self.policies_left_out,
            "pending_without_approval": self.unapproved,
            "operator_steps_dropped": self.approvals_dropped,
            "outcomes_dropped": self.outcomes_dropped,
            "rules": list(RULES),
        }


def final_decisions(records: list[dict[str, Any]]) -> dict[str, str]:
    """Each action's final decision in ``records``: ``allowed``,
    ``denied:<code>``, ``pending_approval`` or ``cancelled`` (what each
    record leaves its action with is its kind's ``KindEntry.settles``)."""
    final: dict[str, str] = {}
    for record in records:
        entry = entry_of(record["kind"])
        settled = None if entry is None else entry.settles(record)
        if settled is not None:
            final[record["action_id"]] = settled
    return final


def _summary(value: Any) -> str:
    text = canonical.dumps(value).decode()
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


class _Simulation:
    """The candidate's own agent state, fed the history's commands."""

    def __init__(
        self, genesis: dict[str, Any], candidate: Policy, idempotency_retention: float
    ) -> None:
        # Every action kept in memory: an outcome is replayed or dropped by
        # its action's status under the candidate, which needs no read.
        self.state = AgentState(
            str(genesis.get("log_id", "")),
            idempotency_retention=idempotency_retention,
            recent_actions=KEEP_ALL,
        )
        self.written: list[dict[str, Any]] = []
        self.folded = Folded()
        self.ts = genesis["ts"]
        self._fold(genesis)
        self.write({"kind": Kind.POLICY, "policy": policy_json(candidate)})
        self.dropped: Counter[Dropped] = Counter()

    def _fold(self, record: dict[str, Any]) -> Sealed:
        apply(self.state, record)
        return self.folded.add(record)

    def write(self, fields: dict[str, Any]) -> Sealed:
        head: Head = self.state.head
        record = {**fields, "seq": head.seq + 1, "ts": self.ts, "prev": head.hash}
        record["hash"] = ZERO_HASH
        self.written.append(record)
        return self._fold(record)

    def run(self, record: dict[str, Any]) -> None:
        """Replay the step of the history that ``record`` starts, if any (the
        records a step writes besides are the candidate's to write)."""
        self.ts = record["ts"]
        now = parse_ts(record["ts"])
        state = self.state
        # The candidate's timeouts, on the history's clock.
        run_steps(expire_due(state, now), self.write)
        command = command_for(record)
        entry = entry_of(record["kind"])
        if not isinstance(command, Command) or entry is None:
            return
        dropped = entry.under_candidate(state, record)
        if dropped is not None:
            self.dropped[dropped] += 1
            return
        try:
            self.folded.restore_rate_history(state, now)
            run(state, command, now, self.folded.lines(state, command), self.write)
        except AgentError:
            # A step the candidate's state refuses: it did not happen under the candidate.
            pass


def what_if(
    records: list[dict[str, Any]],
    candidate: Policy,
    *,
    examples: int = DEFAULT_EXAMPLES,
    idempotency_retention: float = DEFAULT_IDEMPOTENCY_RETENTION,
) -> WhatIf:
    """Re-decide a whole, verified log (from seq 0) under ``candidate``,
    Idempotency-Keys kept ``idempotency_retention`` seconds as the guardd
    that wrote it kept them (a key reused later was a new request)."""
    before = AgentState(
        str(records[0].get("log_id", "")), idempotency_retention=idempotency_retention
    )
    for record in records:
        apply(before, record)
    sim = _Simulation(records[0], candidate, idempotency_retention)
    policies = [i for i, r in enumerate(records) if r["kind"] == Kind.POLICY]
    first_policy = policies[0] if policies else len(records)
    previous: dict[str, Any] = {}
    for record in records[first_policy + 1 :]:
        # A record that continues the step before it (a rejection's scar,
        # signed by the operator who rejected) is that step's, which the
        # candidate writes for itself: run on its own it would count twice.
        if record["kind"] != Kind.POLICY and not continues(record, previous):
            sim.run(record)
        previous = record
    if records:
        sim.ts = records[-1]["ts"]
        run_steps(expire_due(sim.state, parse_ts(records[-1]["ts"])), sim.write)
    old = final_decisions(records)
    new = final_decisions(sim.written)
    requests = {r["action_id"]: r for r in records if r["kind"] == Kind.ACTION_REQUESTED}
    by_change: Counter[str] = Counter()
    by_tool: Counter[str] = Counter()
    found: list[Difference] = []
    unapproved = sum(1 for decision in new.values() if decision == Decision.PENDING_APPROVAL)
    for action_id, request in requests.items():
        was = old.get(action_id, ActionStatus.REQUESTED)
        now = new.get(action_id, ActionStatus.REQUESTED)
        if was == now:
            continue
        by_change[f"{was}->{now}"] += 1
        by_tool[request["tool"]] += 1
        if len(found) < examples:
            found.append(
                Difference(
                    request["seq"], action_id, request["tool"], _summary(request["input"]), was, now
                )
            )
    return WhatIf(
        agent_id=before.agent_id,
        decisions=len(requests),
        changed=sum(by_change.values()),
        by_change=dict(sorted(by_change.items())),
        by_tool=dict(sorted(by_tool.items())),
        examples=tuple(found),
        spent_before=before.spent,
        spent_after=sim.state.spent,
        policies_left_out=max(len(policies) - 1, 0),
        unapproved=unapproved,
        approvals_dropped=sim.dropped[Dropped.OPERATOR_STEP],
        outcomes_dropped=sim.dropped[Dropped.OUTCOME],
    )


def _money(value: Decimal) -> str:
    return canonical.dumps(value).decode()


def what_if_text(result: WhatIf, candidate_name: str) -> list[str]:
    """The human report of one agent."""
    lines = [
        f"agent {result.agent_id}: {result.decisions} actions re-decided under "
        f"{candidate_name}; {result.changed} would change"
    ]
    lines.append(
        f"  spent: {_money(result.spent_before)} in the history, "
        f"{_money(result.spent_after)} under the candidate"
    )
    if result.policies_left_out:
        lines.append(
            f"  left out: {result.policies_left_out} later policy record(s) of the history"
        )
    if result.by_change:
        lines.append("  by change:")
        lines.extend(f"    {change}: {count}" for change, count in result.by_change.items())
        lines.append("  by tool:")
        lines.extend(f"    {tool}: {count}" for tool, count in result.by_tool.items())
        lines.append(f"  first {len(result.examples)} differences:")
        lines.extend(f"    {example}" for example in result.examples)
    if result.unapproved:
        lines.append(
            f"  {result.unapproved} action(s) the candidate holds for approval were never "
            "approved in this history: counted as pending_approval, charged nothing"
        )
    if result.approvals_dropped:
        lines.append(
            f"  {result.approvals_dropped} operator step(s) dropped: the candidate decided "
            "those actions at once"
        )
    if result.outcomes_dropped:
        lines.append(
            f"  {result.outcomes_dropped} outcome(s) dropped: their actions are not allowed "
            "under the candidate"
        )
    return lines


def rules_text() -> list[str]:
    return ["rules:", *(f"  - {rule}" for rule in RULES)]


# -- the options of ``audit replay`` that ask what if ------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--policy``, ``--data-dir``, ``--store``, ``--agent``, ``--examples``."""
    parser.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="a candidate policy (JSON, as PUT .../policy takes it): report which decisions "
        "of the history it would change, instead of checking the log against its own",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="with --policy: every agent of a guardd data directory (agents/<id>.jsonl)",
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        help="with --policy: every agent of the postgresql:// store guardd nodes share",
    )
    parser.add_argument(
        "--agent",
        type=_agent_id,
        metavar="ID",
        help="with --data-dir or --store: this agent only",
    )
    parser.add_argument(
        "--examples",
        type=_count,
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help="with --policy: how many differences to list per agent",
    )


def wants_what_if(args: argparse.Namespace) -> bool:
    return any(v is not None for v in (args.policy, args.data_dir, args.store, args.agent))


def _agent_id(text: str) -> str:
    if not valid_agent_id(text):
        raise argparse.ArgumentTypeError(
            f"must be an agent ID (1 to 64 of A-Z a-z 0-9 _ -), not {text!r}"
        )
    return text


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, not {text!r}")
    return int(text)


def read_candidate(path: Path) -> Policy:
    """The candidate policy file, or an AuditError saying what is wrong with it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UnreadableFile(f"cannot read the candidate policy {path}: {exc.strerror}") from None
    try:
        return parse_policy(canonical.loads(data))
    except CanonicalError as exc:
        raise UnknownFormat(f"candidate policy {path}: not valid JSON: {exc}") from None
    except PolicyError as exc:
        raise UnknownFormat(f"candidate policy {path}: not a valid policy: {exc}") from None


def _check_choice(args: argparse.Namespace) -> None:
    if args.policy is None:
        raise UsageError(
            "--data-dir, --store and --agent ask what a candidate would decide: add --policy FILE"
        )
    given = [x for x in (args.file, args.data_dir, args.store) if x is not None]
    if len(given) != 1:
        raise UsageError("give one of a log file, --data-dir DIR or --store URL")
    if args.agent is not None and args.file is not None:
        raise UsageError("--agent picks an agent of --data-dir DIR or --store URL")
    if args.store is not None and not args.store.startswith(("postgresql://", "postgres://")):
        raise UsageError("--store must be a postgresql:// URL")


def _logs(args: argparse.Namespace) -> tuple[list[Path], bytes | None, str | None]:
    """The log files to replay, the key to check them with, and where that
    key came from when it is not --public-key (verify_source's key_origin)."""
    if args.data_dir is None:
        return [Path(args.file)], args.public_key, None
    agents = args.data_dir / "agents"
    if not agents.is_dir():
        raise UnreadableFile(f"{args.data_dir} is not a guardd data directory (no agents/)")
    if args.agent is not None:
        logs = [agents / f"{args.agent}.jsonl"]
        if not logs[0].is_file():
            raise UnreadableFile(f"{args.data_dir} holds no agent {args.agent}")
    else:
        logs = sorted(agents.glob("*.jsonl"))
    key, origin = args.public_key, None
    pub = args.data_dir / "keys" / "audit.pub"
    if key is None and pub.is_file():
        try:
            key = bytes.fromhex(pub.read_text().strip())
        except ValueError:
            raise UnknownFormat(f"{pub} does not hold a public key in hex") from None
        print(
            f"warning: signatures checked against {pub}, the data directory's own key: "
            "give --public-key to check them against one you trust",
            file=sys.stderr,
        )
        origin = f"the data directory's own {pub}"
    return logs, key, origin


def _sources(
    args: argparse.Namespace,
) -> Iterator[tuple[Source, str | None, bytes | None, str | None]]:
    """Each log to replay (with the agent it must belong to, if known), the
    key, and where the key came from when it is not --public-key."""
    _check_choice(args)
    if args.store is not None:
        with StoreReader(args.store) as reader:
            key, warnings = trusted_key(reader, args.public_key)
            origin = None if args.public_key is not None else STORE_KEY
            for warning in warnings:
                print(f"warning: {warning}", file=sys.stderr)
            for agent_id in reader.agent_ids(args.agent):
                yield reader.source(agent_id), agent_id, key, origin
        return
    logs, key, origin = _logs(args)
    for path in logs:
        yield read_source(path), args.log_id, key, origin


def run_what_if(args: argparse.Namespace) -> int:
    _check_choice(args)
    candidate = read_candidate(args.policy)
    status = 0
    for source, log_id, key, origin in _sources(args):
        path = source.path
        outcome = verify_source(source, public_key=key, log_id=log_id, key_origin=origin)
        for warning in outcome.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        agent_id = outcome.report.log_id or data_dir_agent_id(path) or shown(path)
        if not outcome.ok:
            status = 1
            if args.json:
                failed = {"agent_id": agent_id, "ok": False, "verification": outcome.to_json()}
                print(json.dumps(failed))
            else:
                print(f"agent {agent_id}: FAILED: the log does not verify; not replayed")
                print("\n".join(f"  {line}" for line in verify_text(outcome)))
            continue
        if outcome.report.is_slice:
            raise UnknownFormat(
                f"{shown(path)}: the records start at seq {outcome.report.first_seq}, not 0: "
                "replay needs the whole log from its genesis record"
            )
        records = [canonical.loads(item) for item in source.items if item is not None]
        result = what_if(
            records,
            candidate,
            examples=args.examples,
            idempotency_retention=args.idempotency_retention,
        )
        if args.json:
            print(canonical.dumps({"ok": True, **result.to_json()}).decode())
        else:
            print("\n".join(what_if_text(result, shown(args.policy))))
    if not args.json:
        print("\n".join(rules_text()))
    return status
