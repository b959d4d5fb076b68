"""Agent state: the model every record kind folds into, and its queries.

How a reply shows the state on the wire is not here: the HTTP layer renders
it (``guardd.views``), inside the actor's turn.

Only the folds change it: ``apply`` (``agents_runtime.core.records``) runs
the fold of each record's kind, as the entry of that kind declares it in its
concept module. The actor calls it on each record it has just sealed (the
dict whose canonical bytes go to disk), and startup calls it on each
verified record of the file, so the live state and the replayed state are
the same by construction.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import attrs

from agents_runtime.core.answers import Allowed, Decided, Denied, Pending
from agents_runtime.core.idempotency import (
    KeyFilter,
    KeyRun,
    add_run,
    add_to_filters,
    find_in_runs,
    key_digest,
    may_hold,
)
from agents_runtime.core.money import ZERO
from agents_runtime.core.vocabulary import ActionStatus, Outcome, ReasonCode
from agents_runtime.errors import LogReadError, UnknownAction
from agents_runtime.log.canonical import dumps, loads_trusted
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import Head, Sealed

if TYPE_CHECKING:
    from agents_runtime.core.grants import Grant
    from agents_runtime.core.policy import Policy

# Lines of earlier records by seq (canonical bytes, no newline): what a view
# quotes, read from the store by the runtime before the view runs.
Lines = Mapping[int, bytes]
NO_LINES: Lines = {}


def parse_ts(ts: str) -> float:
    """Seconds since the epoch of a record's ``ts``."""
    global _parsed
    # The records of one batch share their ts: parse it once.
    last = _parsed
    if ts == last[0]:
        return last[1]
    value = datetime.fromisoformat(ts).timestamp()
    _parsed = (ts, value)
    return value


_parsed = ("", 0.0)  # the last ts parse_ts read, and its value


def note_ts(ts: str, value: float) -> None:
    """Tell parse_ts that ``ts`` reads as ``value``: the actor, which has just
    made ``ts`` from ``value``, saves the fold parsing it."""
    global _parsed
    _parsed = (ts, value)


# Seconds an Idempotency-Key is kept (guardd's --idempotency-retention), as
# payment APIs keep theirs: a day.
DEFAULT_IDEMPOTENCY_RETENTION = 86_400.0

# How many of an agent's latest actions keep their per-action data as it
# came (guardd's --recent-actions): the keys of older requests still inside
# the retention are kept compactly (agents_runtime/core/idempotency.py).
DEFAULT_RECENT_ACTIONS = 1_000
# recent_actions for an offline replay that keeps every action in memory.
KEEP_ALL = 1 << 60

# Field metadata: the field's values are entries of the named field of the
# same state (the same objects, by key), not objects of their own.
SAME_AS = "same_as"

# Field metadata: the dict's order is part of the state's value (a fold reads
# it: the oldest key first, the earliest grant among equals, the tags and
# tools in first use a rule may list), so a snapshot keeps it
# (agents_runtime/core/snapshot.py).
IN_ORDER = "in_order"

# One byte per action says where it stands; an outcome is kept as its own status.
STATUS_CODES: dict[str, int] = {
    ActionStatus.REQUESTED: 0,
    ActionStatus.PENDING_APPROVAL: 1,
    ActionStatus.ALLOWED: 2,
    ActionStatus.DENIED: 3,
    Outcome.SUCCESS: 4,
    Outcome.FAILURE: 5,
    Outcome.HARMFUL: 6,
    ActionStatus.CANCELLED: 7,
}
STATUS_NAMES = (
    ActionStatus.REQUESTED,
    ActionStatus.PENDING_APPROVAL,
    ActionStatus.ALLOWED,
    ActionStatus.DENIED,
    ActionStatus.COMPLETED,
    ActionStatus.COMPLETED,
    ActionStatus.COMPLETED,
    ActionStatus.CANCELLED,
)
OUTCOMES = (None, None, None, None, Outcome.SUCCESS, Outcome.FAILURE, Outcome.HARMFUL, None)
_PENDING_CODE = STATUS_CODES[ActionStatus.PENDING_APPROVAL]


@attrs.define(slots=True)
class Action:
    """An action held for approval: kept whole while it can still change
    (pending) and once decided, since operators, not agents, set their pace.
    Actions decided at request time keep a status byte and a seq only.

    What was asked is its ``action_requested`` record, kept as folded: an
    approval names its hash and a receipt quotes its line, with no read of
    the log, and the request's fields are read from it."""

    request: dict[str, Any]
    cost: Decimal  # the charge (recomputed when an approval re-runs the checks)
    rule: str | None = None  # the policy rule that held it, if one did
    held_at: float = 0.0  # ts of its approval_required record: expiry counts from it
    reason: dict[str, Any] | None = None  # deny (or cancel) reason object
    approved_by: str | None = None
    note: str | None = None
    decided_at: str | None = None  # ts of the record that took it out of pending
    decided_by_id: str | None = None  # the by_id of the operator who took it out of pending
    # Each approval given, {by, by_id, at}, in order: those an approval_recorded
    # holds, then the one that decided it.
    approvals: list[dict[str, Any]] = attrs.Factory(list)
    # Seq of its action_allowed record when that record names its request
    # (log_id and request_hash): the second line of its receipt.
    receipt_seq: int | None = None
    # Its status code once decided after it left the latest actions, while
    # it is still held (``AgentState.action_status`` no longer has it).
    late_status: int = 0

    @property
    def action_id(self) -> str:
        return self.request["action_id"]  # type: ignore[no-any-return]

    @property
    def seq(self) -> int:
        """The seq of its action_requested record."""
        return self.request["seq"]  # type: ignore[no-any-return]

    @property
    def requested_at(self) -> str:
        return self.request["ts"]  # type: ignore[no-any-return]

    @property
    def tool(self) -> str:
        return self.request["tool"]  # type: ignore[no-any-return]

    @property
    def input(self) -> Any:
        return self.request["input"]

    @property
    def requested_cost(self) -> Decimal | None:
        return self.request["requested_cost"]  # type: ignore[no-any-return]


@attrs.frozen(slots=True)
class Scar:
    # Frozen: copies of the state share scars (runtime/statecopy.py).
    seq: int
    severity: str  # a Severity, as its record has it
    reason: str
    action_id: str | None


class _NoGrants(dict[str, "Grant"]):
    """The grants of an agent that never had one: one empty dict shared by
    all such agents (an empty dict each would cost 64 bytes of every idle
    agent), never written to, and pickled as itself (startup workers send
    states back by pickle)."""

    def __setitem__(self, key: str, value: Grant) -> None:
        raise TypeError("NO_GRANTS is shared: give the agent a dict of its own first")

    def __reduce__(self) -> str:
        return "NO_GRANTS"


NO_GRANTS = _NoGrants()


class _NoTags(dict[str, datetime]):
    """The tags of an agent that never used one, shared as NO_GRANTS is."""

    def __setitem__(self, key: str, value: datetime) -> None:
        raise TypeError("NO_TAGS is shared: give the agent a dict of its own first")

    def __reduce__(self) -> str:
        return "NO_TAGS"


NO_TAGS = _NoTags()

# How many disagreeing action IDs a shadow keeps (its view's recent_disagreements).
RECENT_DISAGREEMENTS = 20


@attrs.define(slots=True)
class Shadow:
    """A candidate policy evaluated beside the one in force and never
    enforced (``shadow``), with the tallies its view shows, folded from the
    decisions recorded since its ``shadow_set``."""

    policy: Policy
    since: str  # ts of its shadow_set record
    policy_ref: str | None = None
    version: int | None = None
    agree: int = 0
    disagree: dict[str, int] = attrs.field(factory=dict)  # "<live>-><shadow>" -> count
    recent: list[str] = attrs.field(factory=list)  # oldest first, at most RECENT_DISAGREEMENTS


@attrs.define(slots=True)
class Evicted:
    """The actions that left memory (``evict``) and where their records are.

    Every field is an array that only grows (appended to, never changed or
    shortened): the copy a rebuild starts from shares them with the live
    state and keeps their lengths (agents_runtime/runtime/statecopy.py)."""

    # One entry per eviction, which lets the actions before ``to[k]`` leave
    # memory: ``at[k]``, the seq of the record whose fold ran it, and
    # ``kept_from[k]``, the seq of the request of the first action it kept.
    # Every record about an action it let go, up to the eviction, lies
    # between the previous one's ``kept_from`` and its ``at``: where a
    # recall looks.
    to: array[int] = attrs.field(factory=lambda: array("q"))
    kept_from: array[int] = attrs.field(factory=lambda: array("q"))
    at: array[int] = attrs.field(factory=lambda: array("q"))
    # Records folded about an action after it left memory (an outcome, the
    # decision or an approval of one still pending), in log order: entry i
    # is the seq ``late_seqs[i]`` about action ``late_actions[i]``.
    late_actions: array[int] = attrs.field(factory=lambda: array("q"))
    late_seqs: array[int] = attrs.field(factory=lambda: array("q"))
    # The seqs of the scars that left memory with them (oldest first): a
    # status reads their records (``scars_gone``).
    scars: array[int] = attrs.field(factory=lambda: array("q"))


@attrs.define(slots=True)
class AgentState:
    agent_id: str
    public_key: str = ""
    policy: Policy | None = None
    head: Head = attrs.field(factory=Head.empty)
    last_ts: str = ""
    last_record: dict[str, Any] | None = None  # the newest record (behaviour.finish_interrupted)
    # budget - spent; spent is derived from it, since every request reads
    # remaining several times and only a status reads spent.
    remaining: Decimal = ZERO
    scars: list[Scar] = attrs.field(factory=list)  # the latest; older ones: scars_gone
    scar_score: int = 0
    # The latest actions (at least ``recent_actions`` of them, at most
    # twice that) keep where they stand: action n (act-n) is at index
    # n - first_action, the seq of its action_requested record and a status
    # code. Older ones left memory (``evict``): their records are read from
    # the log when a request names one (``Recall``).
    first_action: int = 1
    action_seqs: array[int] = attrs.field(factory=lambda: array("I"))  # "q" past 2^32
    action_status: bytearray = attrs.field(factory=bytearray)
    # Where the records of the actions that left memory are: None until the
    # first eviction (most agents never have one, and an idle agent's
    # memory is what thousands of them cost).
    evicted: Evicted | None = None
    # The actions that needed approval among the latest ones, and every
    # pending one however old.
    held: dict[str, Action] = attrs.field(factory=dict)
    # Insertion order = oldest first. The same Action objects as ``held``'s
    # (a decision changes both): a snapshot writes their IDs only
    # (SAME_AS, agents_runtime/core/snapshot.py).
    pending: dict[str, Action] = attrs.field(factory=dict, metadata={SAME_AS: "held"})
    # Idempotency-Key -> (the number of the action it asked for, the ts of
    # that request in seconds), oldest first. A key is kept for
    # ``idempotency_retention`` seconds: reused later it is a new request,
    # and the fold of each request with a key drops the keys past it.
    # Past 2 x ``recent_actions`` keys, the oldest ``recent_actions`` move
    # to ``old_keys`` (runs sorted by digest, oldest first).
    idempotency: dict[str, tuple[int, float]] = attrs.field(factory=dict, metadata={IN_ORDER: True})
    idempotency_retention: float = DEFAULT_IDEMPOTENCY_RETENTION
    # Tuples, () until the first keys move: an idle agent's state holds no
    # empty list of its own.
    old_keys: tuple[KeyRun, ...] = ()
    key_filters: tuple[KeyFilter, ...] = ()  # in front of old_keys
    recent_actions: int = DEFAULT_RECENT_ACTIONS
    # grt-n -> grant, in issue order; NO_GRANTS until the first is issued.
    grants: dict[str, Grant] = attrs.field(default=NO_GRANTS, metadata={IN_ORDER: True})
    # Allowed calls per tool, first call first: a rule's history.calls is
    # this map, and a comprehension over it (.map) lists it in this order.
    tool_calls: dict[str, int] = attrs.field(factory=dict, metadata={IN_ORDER: True})
    # Tag -> the ts (as an instant) of the last allowed call whose tool had
    # that tag under the policy in force then; first use first (what a
    # rule's history.tags_used and history.tag_last_used read).
    # NO_TAGS (shared, never written) until the first tag is remembered.
    tag_last_used: dict[str, datetime] = attrs.field(default=NO_TAGS, metadata={IN_ORDER: True})
    # The ts of the action_allowed records, in order (ts never goes
    # backwards): the rate check counts its tail by bisection. Only those a
    # window in force can reach are kept (``rate_history``): every one after
    # ``rate_known_since`` (None: every one since genesis); those trimmed
    # all lie at ``rate_known_seq`` or before.
    allowed_times: array[float] = attrs.field(factory=lambda: array("d"))
    rate_known_since: float | None = None
    rate_known_seq: int = -1
    # The ID the next action_requested must carry, made once: the request
    # and its fold both read it.
    next_action_id: str = "act-1"
    actions_allowed: int = 0
    actions_denied: int = 0
    alive: bool = True
    termination_reason: str | None = None
    terminated_by: str | None = None
    # The named (fleet) policy the agent follows and the version its newest
    # policy record holds; None for a policy of its own.
    policy_ref: str | None = None
    policy_version: int | None = None
    shadow: Shadow | None = None
    # "<live>-><shadow>" -> disagreements over the agent's whole life, never
    # reset by shadow_cleared (a counter for /metrics); None until the first.
    shadow_disagreements: dict[str, int] | None = None
    # Set by the records that can bring the next approval expiry closer (a new
    # held action, a new policy); the actor recomputes its timer only then.
    expiry_dirty: bool = attrs.field(default=True, eq=False)

    @property
    def budget(self) -> Decimal:
        return self.policy.budget if self.policy is not None else ZERO

    @property
    def spent(self) -> Decimal:
        return self.budget - self.remaining

    @property
    def action_count(self) -> int:
        return self.first_action - 1 + len(self.action_seqs)


def keyed_action(state: AgentState, key: str, now: float) -> int | None:
    """The number of the action Idempotency-Key ``key`` asked for, if it
    was used at most ``idempotency_retention`` seconds before ``now``."""
    entry = state.idempotency.get(key)
    if entry is None and state.old_keys:
        digest = key_digest(key)
        if may_hold(state.key_filters, digest):
            entry = find_in_runs(state.old_keys, digest)
    if entry is None or now - entry[1] > state.idempotency_retention:
        return None
    return entry[0]


def keep_key(state: AgentState, key: str, n: int, at: float) -> None:
    """Record that ``key`` asked for action ``n`` at ``at`` (a request's
    fold), first dropping the keys that are past their retention at ``at``
    (no later request can be a repeat of theirs: ts never goes backwards)."""
    keys = state.idempotency
    keys.pop(key, None)
    retention = state.idempotency_retention
    if keys and at - next(iter(keys.values()))[1] > retention:
        expired = []
        for old, (_, then) in keys.items():
            if not at - then > retention:
                break
            expired.append(old)
        for old in expired:
            del keys[old]
    keys[key] = (n, at)
    recent = state.recent_actions
    if len(keys) > 2 * recent:
        _compact_keys(state, recent, at - retention)


def _compact_keys(state: AgentState, count: int, since: float) -> None:
    """Move the oldest ``count`` keys of the dict into the runs (those past
    ``since`` dropped): once every ``count`` keyed requests, so cheap per
    request, and at the same records live and at replay."""
    keys = state.idempotency
    moved: list[tuple[str, int, float]] = []
    for key, (n, then) in keys.items():
        if len(moved) == count:
            break
        moved.append((key, n, then))
    for key, _, _ in moved:
        del keys[key]
    entries = [(key_digest(key), n, then) for key, n, then in moved]
    state.key_filters = add_to_filters(state.key_filters, entries, since)
    state.old_keys = add_run(state.old_keys, entries, since)


def action_number(state: AgentState, action_id: str) -> int | None:
    """n of ``act-n`` when the agent has that action, else None."""
    if not action_id.startswith("act-"):
        return None
    digits = action_id[4:]
    if not digits.isascii() or not digits.isdigit() or digits[0] == "0" or len(digits) > 18:
        return None
    n = int(digits)
    return n if n <= state.action_count else None


def action_of(state: AgentState, record: dict[str, Any]) -> int:
    """n of the action a record names, for its fold: KeyError when the agent
    has no such action (the record does not apply)."""
    n = action_number(state, record["action_id"])
    if n is None:
        raise KeyError(record["action_id"])
    return n


def known_action(state: AgentState, action_id: str) -> int:
    """The number of the agent's action ``action_id``, or UnknownAction."""
    n = action_number(state, action_id)
    if n is None:
        raise UnknownAction(f"no action {action_id} for agent {state.agent_id}")
    return n


# -- actions that left memory ---------------------------------------------------------


def evict(state: AgentState, keep: int, seq: int) -> None:
    """Let all but the latest ``keep`` actions leave memory, at the record
    ``seq``: their seq and status, the held ones no longer pending, and all
    but the latest ``keep`` scars. Runs
    in the fold of a request once the latest reach twice ``keep`` (and when
    the setting changes at a start), so live and at replay at the same
    records, and costs O(1) per request amortised."""
    scars = state.scars
    if len(scars) > keep:
        # Scars leave with the actions (so at the same records), all but the
        # latest ``keep``: a long history of them is not carried in memory,
        # nor copied whenever the state is.
        leaving = len(scars) - keep
        _evicted(state).scars.extend(s.seq for s in scars[:leaving])
        del scars[:leaving]
    seqs = state.action_seqs
    # The newest action stays: its decision's fold follows its request's.
    count = len(seqs) - max(keep, 1)
    if count <= 0:
        return
    evicted = _evicted(state)
    evicted.kept_from.append(seqs[count])
    evicted.at.append(seq)
    del seqs[:count]
    del state.action_status[:count]
    state.first_action = first = state.first_action + count
    evicted.to.append(first)
    pending = state.pending
    # Held in request order (each is held right after its request).
    gone = []
    for action_id in state.held:
        if int(action_id[4:]) >= first:
            break
        if action_id not in pending:
            gone.append(action_id)
    for action_id in gone:
        del state.held[action_id]


def scars_gone(state: AgentState) -> array[int] | tuple[()]:
    """The seqs of the scars that left memory, oldest first (all before
    ``state.scars``): the lines a status reads."""
    evicted = state.evicted
    return () if evicted is None else evicted.scars


def note_late(state: AgentState, n: int, seq: int) -> None:
    """The record ``seq`` is about action ``n``, which left memory: a recall
    of it reads that record too."""
    evicted = _evicted(state)
    evicted.late_actions.append(n)
    evicted.late_seqs.append(seq)


def _evicted(state: AgentState) -> Evicted:
    evicted = state.evicted
    if evicted is None:
        evicted = state.evicted = Evicted()
    return evicted


def keep_recent(state: AgentState, recent_actions: int) -> None:
    """Keep the per-action data of the latest ``recent_actions`` actions, and
    the keys of their requests as they came (older keys compactly), from now
    on: a state folded under another setting (at startup, before the
    runtime gives it its own) is trimmed at once. Shapes memory only, never
    an answer."""
    state.recent_actions = recent_actions
    keys = state.idempotency
    if len(keys) > 2 * recent_actions:
        newest = next(reversed(keys.values()))[1]
        _compact_keys(state, len(keys) - recent_actions, newest - state.idempotency_retention)
    if len(state.action_seqs) > 2 * recent_actions:
        evict(state, recent_actions, state.head.seq)


def left_memory(state: AgentState, n: int) -> bool:
    """Whether action ``n`` left memory (its records are read from the log):
    older than the latest actions, and not held (pending, or decided since
    the eviction that let it go and until the next)."""
    return n < state.first_action and f"act-{n}" not in state.held


@attrs.frozen
class Recall:
    """What a command about an action that left memory reads (in place of
    seqs, ``READS``): the records that name ``action_id`` among those after
    seq ``after`` up to seq ``upto``, and the records at ``late``; only its
    request and the record after it unless ``whole``. The runtime hands
    them over in ``lines``."""

    action_id: str
    after: int
    upto: int
    late: tuple[int, ...] = ()
    whole: bool = True


def recall(state: AgentState, n: int, *, whole: bool = True) -> Recall:
    """The read of action ``n``'s records: those up to the eviction that let
    it go, from the request of the first action the eviction before kept
    (at most about twice ``recent_actions`` actions' records), and those
    folded since."""
    evicted = state.evicted
    assert evicted is not None  # an action left memory: there was an eviction
    k = bisect_right(evicted.to, n)
    after = evicted.kept_from[k - 1] - 1 if k else -1
    late: list[int] = []
    numbers = evicted.late_actions
    i = _find(numbers, n, 0)
    while i >= 0:
        late.append(evicted.late_seqs[i])
        i = _find(numbers, n, i + 1)
    return Recall(f"act-{n}", after, evicted.at[k], tuple(late), whole)


def _find(values: array[int], value: int, start: int) -> int:
    try:
        return values.index(value, start)  # a scan in C
    except ValueError:
        return -1


@attrs.define(slots=True)
class Recalled:
    """An action that left memory, as its records give it: what the fold
    had kept of it (its request's seq and record, its status code, and for
    one held for approval its Action) had it stayed."""

    seq: int
    request: dict[str, Any]
    status: int = 0
    held: Action | None = None


def recalled(state: AgentState, n: int, lines: Lines) -> Recalled:
    """Action ``n`` rebuilt from ``lines`` (a ``Recall``'s): the same folds
    of the same records, for this one action. LogReadError when its request
    is not among them."""
    action_id = f"act-{n}"
    needle = f'"action_id":"{action_id}"'.encode()
    out: Recalled | None = None
    for seq in sorted(lines):
        if needle not in lines[seq]:
            continue
        record = parse_line(lines, seq)
        if record.get("action_id") != action_id:
            continue  # another record quoting the ID (in a tool's input)
        kind = record["kind"]
        if kind == Kind.ACTION_REQUESTED:
            out = Recalled(seq, record)
            continue
        if out is None:
            raise LogReadError(f"the request of {action_id} is not where its mark says")
        held = out.held
        if kind == Kind.APPROVAL_REQUIRED:
            out.held = hold(out.request, record)
            out.status = STATUS_CODES[ActionStatus.PENDING_APPROVAL]
        elif kind == Kind.APPROVAL_RECORDED:
            if held is not None:
                held.approvals.append(given(record))
        elif kind == Kind.ACTION_ALLOWED:
            if held is not None:
                allow_held(held, record, Decimal(record["cost"]))
            out.status = STATUS_CODES[ActionStatus.ALLOWED]
        elif kind in _DENIALS:
            if held is not None:
                deny_held(held, record, _DENIALS[kind](record))
            out.status = STATUS_CODES[ActionStatus.DENIED]
        elif kind == Kind.ACTION_CANCELLED:
            if held is not None:
                deny_held(held, record, cancelled_reason(record))
            out.status = STATUS_CODES[ActionStatus.CANCELLED]
        elif kind == Kind.OUTCOME:
            out.status = STATUS_CODES[record["outcome"]]
    if out is None:
        raise LogReadError(f"the records of {action_id} were not read")
    return out


# -- what the folds keep of a held action (here, so a recall keeps the same) ----------


def hold(request: dict[str, Any], r: dict[str, Any]) -> Action:
    """The Action an approval_required record ``r`` holds."""
    action = Action(request=request, cost=Decimal(r["cost"]), held_at=parse_ts(r["ts"]))
    action.rule = r.get("rule")
    return action


def given(r: dict[str, Any]) -> dict[str, Any]:
    """An approval, as the views list it."""
    return {
        "by": r["by"] if "by" in r else r.get("approved_by"),
        "by_id": r.get("by_id"),
        "at": r["ts"],
    }


def allow_held(action: Action, r: dict[str, Any], cost: Decimal) -> None:
    action.cost = cost
    action.approved_by = r.get("approved_by")
    action.note = r.get("note")
    action.decided_at = r["ts"]
    action.decided_by_id = r.get("by_id")
    if "approved_by" in r:
        action.approvals.append(given(r))
    if "request_hash" in r:
        action.receipt_seq = r["seq"]


def deny_held(action: Action, r: dict[str, Any], reason: dict[str, Any]) -> None:
    """A held action out of pending by a denial, rejection, expiry or
    cancellation with ``reason``."""
    action.reason = reason
    action.decided_at = r["ts"]
    action.decided_by_id = r.get("by_id")


def rejected_reason(r: dict[str, Any]) -> dict[str, Any]:
    return {"code": ReasonCode.REJECTED, "by": r["by"], "reason": r["reason"]}


def expired_reason(r: dict[str, Any]) -> dict[str, Any]:
    return {"code": ReasonCode.APPROVAL_EXPIRED, "timeout_secs": r["timeout_secs"]}


def cancelled_reason(r: dict[str, Any]) -> dict[str, Any]:
    reason: dict[str, Any] = {"code": ReasonCode.CANCELLED, "by": r["by"]}
    if "reason" in r:
        reason["reason"] = r["reason"]
    return reason


_DENIALS = {
    Kind.ACTION_DENIED: lambda r: r["reason"],
    Kind.ACTION_REJECTED: rejected_reason,
    Kind.APPROVAL_EXPIRED: expired_reason,
}


def status_code(state: AgentState, n: int, lines: Lines = NO_LINES) -> int:
    """Where action ``n`` stands, as a code; ``lines`` holds a ``Recall`` of
    it when it left memory."""
    i = n - state.first_action
    if i >= 0:
        return state.action_status[i]
    action_id = f"act-{n}"
    if action_id in state.pending:
        return _PENDING_CODE
    held = state.held.get(action_id)
    if held is not None:
        return held.late_status
    return recalled(state, n, lines).status


def action_status(state: AgentState, n: int, lines: Lines = NO_LINES) -> ActionStatus:
    """Status of action ``n``: requested, pending_approval, allowed, denied,
    completed or cancelled."""
    return STATUS_NAMES[status_code(state, n, lines)]


def action_outcome(state: AgentState, n: int, lines: Lines = NO_LINES) -> Outcome | None:
    return OUTCOMES[status_code(state, n, lines)]


def approval_deadline(state: AgentState, action: Action) -> float | None:
    """When the held ``action`` expires (seconds since the epoch) under the
    policy in force, counted from its approval_required record; None: never."""
    policy = state.policy
    timeout = policy.approval_timeout(action.tool) if policy is not None else None
    return None if timeout is None else action.held_at + float(timeout)


def next_deadline(state: AgentState) -> float | None:
    """The earliest approval deadline of the pending actions, or None."""
    policy = state.policy
    if policy is None or not state.pending:
        return None
    deadlines = [approval_deadline(state, a) for a in state.pending.values()]
    return min((d for d in deadlines if d is not None), default=None)


def expired_actions(state: AgentState, now: float) -> list[tuple[Action, Decimal]]:
    """The pending actions whose deadline is at or before ``now``, oldest
    first, each with the timeout that applied."""
    policy = state.policy
    if policy is None:
        return []
    due = []
    for action in state.pending.values():
        timeout = policy.approval_timeout(action.tool)
        if timeout is not None and action.held_at + float(timeout) <= now:
            due.append((action, timeout))
    return due


def parse_line(lines: Lines, seq: int) -> dict[str, Any]:
    """The record at ``seq`` of ``lines`` (our own log's: verified when
    loaded, or written by us). LogReadError if it is not that record: the
    log changed under a running guardd, and the verify endpoint says how."""
    try:
        record = loads_trusted(lines[seq].decode())
    except ValueError as exc:
        raise LogReadError(f"the record at seq {seq} does not parse: {exc}") from exc
    if not isinstance(record, dict) or record.get("seq") != seq:
        raise LogReadError(f"the record at seq {seq} is not where it was")
    return record


def request_line(request: Sealed | dict[str, Any]) -> bytes:
    """The line of an action_requested record, as sealed or as folded (a
    record's line is its canonical form)."""
    return request.line[:-1] if isinstance(request, Sealed) else dumps(request)


def first_decision_reads(state: AgentState, n: int) -> tuple[int, ...] | Recall:
    """The seqs ``first_decision`` (and the repeat's body check) reads: none
    for a held action, whose request is in memory; the request and the
    record after it of one that left memory."""
    if f"act-{n}" in state.held:
        return ()
    i = n - state.first_action
    if i < 0:
        return recall(state, n, whole=False)
    seq = state.action_seqs[i]
    return (seq, seq + 1)


def request_of(state: AgentState, n: int, lines: Lines) -> dict[str, Any]:
    """The action_requested record of action ``n`` (``lines`` holds
    ``first_decision_reads``)."""
    held = state.held.get(f"act-{n}")
    if held is not None:
        return held.request
    i = n - state.first_action
    if i < 0:
        return recalled(state, n, lines).request
    return parse_line(lines, state.action_seqs[i])


def first_decision(state: AgentState, n: int, lines: Lines) -> Decided:
    """The decision action ``n`` was first answered with (an Idempotency-Key
    repeat answers with it again); ``lines`` holds ``first_decision_reads``."""
    action_id = f"act-{n}"
    held = state.held.get(action_id)
    if held is not None:
        return Pending(action_id, held.rule)
    i = n - state.first_action
    if i < 0:
        old = recalled(state, n, lines)
        if old.held is not None:
            return Pending(action_id, old.held.rule)
        seq = old.seq
    else:
        seq = state.action_seqs[i]
    # Decided at request time: the decision record follows action_requested.
    record = parse_line(lines, seq + 1)
    if record["kind"] == Kind.ACTION_ALLOWED:
        # Older records name no request, and give no receipt.
        receipt = (lines[seq], lines[seq + 1]) if "request_hash" in record else None
        return Allowed(
            action_id,
            record["cost"],
            record["remaining"],
            receipt,
            record.get("grant_id"),
            record.get("rule"),
        )
    return Denied(action_id, record["reason"], record.get("rule"))


def action_reads(state: AgentState, n: int) -> tuple[int, ...] | Recall:
    """The seqs an action's view reads (``GetAction``): a held action's
    allowance (for its receipt), or an action decided at request time and
    its decision; every record of one that left memory."""
    held = state.held.get(f"act-{n}")
    i = n - state.first_action
    if i < 0 and held is None:
        return recall(state, n)
    if held is not None:
        return () if held.receipt_seq is None else (held.receipt_seq,)
    seq = state.action_seqs[i]
    return (seq,) if state.action_status[i] == 0 else (seq, seq + 1)
