"""``audit replay``: re-decide every step of a log from its own policy records.

A verified log proves who wrote it, not that the writer followed its policy.
Replay checks that: it folds the records into agent state with the service's
own ``apply`` and, at each record that starts a command (a request, an
approval, a rejection, an outcome, an operator scar, a terminate, a policy
change), rebuilds that command from the record and runs the service's own
behaviour (``agents_runtime.core.behaviour``, which calls ``checks.decide``) on the
state before it, with the record's ``ts`` as the clock. An ``approval_expired``
record is re-run as the actor's timer runs it: ``expire_due`` at its
``ts`` must write exactly the expiries the log has there (none before an
action's timeout), and an action still pending after its deadline when a
later command is run is reported too. Every record the
behaviour writes is compared, field by field, with the next record of the log.
Any difference is a record the policy would not have made: an
``action_allowed`` where the checks say ``insufficient_budget``, a wrong charge
or ``remaining``, a missing automatic termination, anything allowed or charged
after ``terminated``, a repeated Idempotency-Key that created an action.

The chain is verified first; a log that fails verification is not replayed.
Records are compared by content; ``seq``, ``ts``, ``prev``, ``hash`` and
``sig`` are the verifier's business.

What replay knows of each kind is in that kind's entry
(``agents_runtime.core.records.KINDS``): the command it starts (``starts``),
whether it follows the record before it within one command (``continues``),
its description in a report, and how older logs wrote it (``as_written``).

This module is the replay alone, which ``audit.whatif`` builds on; the
subcommand (its options and its output) is ``audit.cli``'s, so that neither
module needs the other.
"""

from __future__ import annotations

from typing import Any

import attrs

from agents_runtime.core.behaviour import READS, expire_due, run, run_steps
from agents_runtime.core.entries import BY_TIMER, ByTimer, Command
from agents_runtime.core.policy import parse_policy
from agents_runtime.core.rate_history import allowed_times_in, rate_gap, restore_allowed_times
from agents_runtime.core.records import apply, entry_of
from agents_runtime.core.state import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    AgentState,
    Recall,
    expired_actions,
    parse_ts,
)
from agents_runtime.errors import AgentError
from agents_runtime.log import canonical
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import SEALED_FIELDS, ZERO_HASH, Sealed

CHAIN_FIELDS = frozenset({"seq", "ts", "prev"}) | SEALED_FIELDS


@attrs.frozen
class Problem:
    """A record the policy would not have made (or one it would have made
    that is missing); ``seq`` is where the log departs from the policy."""

    seq: int
    action_id: str | None
    message: str

    def __str__(self) -> str:
        where = f"seq {self.seq}" + (f" ({self.action_id})" if self.action_id else "")
        return f"{where}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "action_id": self.action_id, "message": self.message}


@attrs.frozen
class Replay:
    records: int  # records replayed
    commands: int  # commands re-run
    actions: int  # actions the log holds
    problems: tuple[Problem, ...]
    state: AgentState | None = attrs.field(eq=False, repr=False)  # the folded state

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records": self.records,
            "commands": self.commands,
            "actions": self.actions,
            "problems": [p.to_json() for p in self.problems],
        }


def fields_of(record: dict[str, Any]) -> dict[str, Any]:
    """A record without the fields that chain and seal it."""
    return {k: v for k, v in record.items() if k not in CHAIN_FIELDS}


def _text(value: Any) -> str:
    return canonical.dumps(value).decode()


def describe(fields: dict[str, Any]) -> str:
    """A record in a few words: ``action_denied act-3 (insufficient_budget)``;
    the words in brackets are its kind's (``KindEntry.describe``)."""
    kind = fields.get("kind")
    parts = [str(kind)]
    if fields.get("action_id") is not None:
        parts.append(str(fields["action_id"]))
    entry = entry_of(kind)
    detail = "" if entry is None else entry.describe(fields)
    return " ".join(parts) + (f" ({detail})" if detail else "")


def _difference(expected: dict[str, Any], actual: dict[str, Any]) -> str:
    entry = entry_of(actual.get("kind"))
    if expected.get("kind") != actual.get("kind") or (
        entry is not None
        and entry.told_apart_by_description
        and describe(expected) != describe(actual)
    ):
        return f"log has {describe(actual)}; the policy would have written {describe(expected)}"
    kind = actual.get("kind")
    diffs = []
    for key in sorted(set(expected) | set(actual)):
        if key not in actual:
            diffs.append(f"{key} is missing, the policy gives {_text(expected[key])}")
        elif key not in expected:
            diffs.append(f"{key} is {_text(actual[key])}, the policy writes no {key}")
        elif _text(expected[key]) != _text(actual[key]):
            diffs.append(f"{key} is {_text(actual[key])}, the policy gives {_text(expected[key])}")
    return f"{kind}: " + "; ".join(diffs)


def _as_written_then(expected: dict[str, Any], actual: dict[str, Any]) -> dict[str, Any]:
    """``expected`` as the service wrote it when ``actual`` was written
    (``KindEntry.as_written``)."""
    entry = entry_of(expected.get("kind"))
    return expected if entry is None else entry.as_written(expected, actual)


def command_for(record: dict[str, Any]) -> Command | ByTimer | str:
    """The command whose handling starts with ``record`` (``BY_TIMER`` for
    what the actor's timer writes), or why none does."""
    entry = entry_of(record["kind"])
    command = None if entry is None else entry.starts(record)
    if command is None:
        return f"unexpected {describe(record)}: no command starts with this record"
    return command


def continues(record: dict[str, Any], previous: dict[str, Any]) -> bool:
    """Whether ``record`` looks like a later record of the command that wrote
    ``previous`` (every record but the first of each command does). Used to
    find where a command the policy departs from ends."""
    entry = entry_of(record.get("kind"))
    return entry is not None and entry.continues(record, previous)


class Folded:
    """The records folded so far, by seq: the lines the behaviour reads back
    (``behaviour.READS``) come from here, in their canonical form."""

    def __init__(self) -> None:
        self.by_seq: dict[int, dict[str, Any]] = {}

    def add(self, record: dict[str, Any]) -> Sealed:
        self.by_seq[record["seq"]] = record
        return Sealed(record, canonical.dumps(record) + b"\n")

    def lines(self, state: AgentState, command: Any) -> dict[int, bytes]:
        reads = READS.get(type(command))
        seqs = () if reads is None else reads(state, command)
        if isinstance(seqs, Recall):
            # An action that left memory: the records that name it.
            return {
                seq: canonical.dumps(record)
                for seq, record in self.by_seq.items()
                if (seqs.after < seq <= seqs.upto or seq in seqs.late)
                and record.get("action_id") == seqs.action_id
            }
        return {seq: canonical.dumps(self.by_seq[seq]) for seq in seqs}

    def restore_rate_history(self, state: AgentState, now: float) -> None:
        """Put back the allowed times a rate check at ``now`` counts that the
        fold trimmed (``rate_history``), from the records folded, as the
        actor reads them back from the log."""
        gap = rate_gap(state, now)
        if gap is not None:
            older = (r for seq, r in self.by_seq.items() if seq <= gap.upto_seq)
            restore_allowed_times(state, gap, allowed_times_in(older, gap))


class _Replayer:
    """Walks the log keeping the state on the policy's path: where the log
    departs from what the behaviour writes, the departure is reported and the
    behaviour's record is folded instead, so one forged record is reported
    once rather than in every record whose numbers it shifts."""

    def __init__(self, records: list[dict[str, Any]], idempotency_retention: float) -> None:
        self.records = records
        self.state = AgentState(
            str(records[0].get("log_id", "")) if records else "",
            idempotency_retention=idempotency_retention,
        )
        self.problems: list[Problem] = []
        self.commands = 0
        self.index = 0  # next record of the log to compare or fold
        self.start = 0  # the record that started the current command
        self.overdue: set[str] = set()  # actions reported pending past their deadline
        self.folded = Folded()

    def problem(self, record: dict[str, Any] | None, message: str) -> None:
        seq = record["seq"] if record is not None else self.records[-1]["seq"] + 1
        action_id = record.get("action_id") if record is not None else None
        self.problems.append(Problem(seq, action_id, message))

    def fold(self) -> Sealed:
        """Apply the next record of the log as it is."""
        record = self.records[self.index]
        apply(self.state, record)
        self.index += 1
        return self.folded.add(record)

    def fold_expected(self, expected: dict[str, Any], seq: int) -> Sealed:
        """Apply the record the behaviour would have written in place of the log's."""
        ts = self.records[self.start]["ts"]
        record = {**expected, "seq": seq, "ts": ts, "prev": ZERO_HASH, "hash": ZERO_HASH}
        apply(self.state, record)
        return self.folded.add(record)

    def continuing(self) -> bool:
        """Whether the log's next record belongs to the command before it."""
        index = self.index
        return 0 < index < len(self.records) and continues(
            self.records[index], self.records[index - 1]
        )

    def run(self) -> Replay:
        try:
            self._first_two()
            while self.index < len(self.records):
                self._command()
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # A record the state cannot even fold: nothing after it can be judged.
            record = self.records[self.index] if self.index < len(self.records) else None
            self.problem(record, f"record does not apply to the agent's state: {exc!r}")
            return self._result(None)
        return self._result(self.state)

    def _result(self, state: AgentState | None) -> Replay:
        return Replay(
            records=len(self.records),
            commands=self.commands,
            actions=self.state.action_count,
            problems=tuple(self.problems),
            state=state,
        )

    def _first_two(self) -> None:
        # Creating an agent writes genesis and its first policy together.
        if not self.records:
            return
        self.fold()
        if self.index < len(self.records):
            policy = self.records[self.index]
            if policy["kind"] != Kind.POLICY:
                self.problem(policy, f"log has {describe(policy)} where the first policy belongs")
                return
            parse_policy(policy["policy"])
            self.fold()

    def _command(self) -> None:
        record = self.records[self.index]
        if record["ts"] < self.records[self.index - 1]["ts"]:
            self.problem(record, f"ts {record['ts']} is before the previous record's")
        self.start = self.index
        now = parse_ts(record["ts"])
        # What is overdue is reported before the command is rebuilt, so that
        # a record that cannot be (it raises) still has them reported first.
        command: Command | ByTimer | str | None = None
        try:
            command = command_for(record)
        finally:
            if command is not BY_TIMER:
                self._check_overdue(record, now)
        if command is BY_TIMER:
            self._expiry(record, now)
            return
        if isinstance(command, str):
            self.problem(record, command)
            self._skip_command()
            return
        self.commands += 1
        try:
            self.folded.restore_rate_history(self.state, now)
            lines = self.folded.lines(self.state, command)
            run(self.state, command, now, lines, self._write)
        except AgentError as exc:
            # The behaviour refuses this command, before writing anything.
            self.problem(record, f"{describe(record)} would have been refused: {exc}")
            self._skip_command()
            return
        if self.index == self.start:
            self.problem(
                record,
                f"{describe(record)}: the policy writes nothing here "
                "(a repeated Idempotency-Key answers with the first decision)",
            )
            self._skip_command()
            return
        self._unexpected_rest()

    def _expiry(self, record: dict[str, Any], now: float) -> None:
        """The actor's timer at ``now``: expire_due must write these records."""
        self.commands += 1
        run_steps(expire_due(self.state, now), self._write)
        if self.index == self.start:
            self.problem(
                record,
                f"{describe(record)} at {record['ts']}: the action is not pending, or its "
                "approval timeout under the policy in force has not run out",
            )
            self._skip_command()
            return
        self._unexpected_rest()

    def _check_overdue(self, record: dict[str, Any], now: float) -> None:
        """The actor expires what is due before it runs any command of a batch."""
        for action, _ in expired_actions(self.state, now):
            if action.action_id not in self.overdue:
                self.overdue.add(action.action_id)
                self.problem(
                    record,
                    f"{action.action_id} is still pending at {record['ts']}, past its approval "
                    "timeout: the policy would have written approval_expired before this",
                )

    def _unexpected_rest(self) -> None:
        """Report each further record of this command: the behaviour wrote
        no more."""
        while self.continuing():
            extra = self.records[self.index]
            self.problem(extra, f"unexpected {describe(extra)}: the policy writes no such record")
            self.index += 1

    def _skip_command(self) -> None:
        """Pass over a command the policy would not have run. A request is
        folded as it is all the same, so that later action IDs still line up."""
        entry = entry_of(self.records[self.index]["kind"])
        keep = entry is not None and entry.folded_when_refused
        while True:
            if keep:
                self.fold()
            else:
                self.index += 1
            if not self.continuing():
                return

    def _write(self, expected: dict[str, Any]) -> Sealed:
        index = self.index
        if index >= len(self.records):
            last = self.records[-1]["seq"]
            self.problem(
                None,
                f"the log ends after seq {last}; the policy would have written "
                f"{describe(expected)} (the command was cut short, e.g. by a crash)",
            )
            return self.fold_expected(expected, last + 1)
        actual = self.records[index]
        expected = _as_written_then(expected, actual)
        if _text(fields_of(actual)) == _text(expected):
            return self.fold()
        if index > self.start and actual["kind"] != expected["kind"] and not self.continuing():
            # The log goes on with the next command: the expected record is missing.
            self.problems.append(
                Problem(
                    actual["seq"],
                    expected.get("action_id"),
                    f"missing {describe(expected)} after seq {self.records[index - 1]['seq']}; "
                    f"the log goes on with {describe(actual)}",
                )
            )
            return self.fold_expected(expected, actual["seq"])
        self.problem(actual, _difference(expected, fields_of(actual)))
        self.index += 1
        return self.fold_expected(expected, actual["seq"])


def replay_records(
    records: list[dict[str, Any]], idempotency_retention: float = DEFAULT_IDEMPOTENCY_RETENTION
) -> Replay:
    """Re-decide a whole, verified log (records from seq 0, in order), with
    Idempotency-Keys kept ``idempotency_retention`` seconds, as the guardd
    that wrote it kept them (its --idempotency-retention)."""
    return _Replayer(records, idempotency_retention).run()


def replay_text(result: Replay) -> list[str]:
    """The human report of ``audit replay``."""
    summary = (
        f"{result.records} records, {result.commands} commands re-run, {result.actions} actions"
    )
    if result.ok:
        return [f"OK: every record is what the log's own policy would have written ({summary})"]
    count = len(result.problems)
    noun = "record departs" if count == 1 else "records depart"
    lines = [f"FAILED: {count} {noun} from what the log's own policy would have written"]
    lines.extend(f"  {problem}" for problem in result.problems)
    lines.append(f"replayed:   {summary}")
    return lines


__all__ = [
    "Problem",
    "Replay",
    "describe",
    "fields_of",
    "replay_records",
    "replay_text",
]
