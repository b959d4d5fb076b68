"""Rebuild an agent's state from its log: verify each record, then fold it.

The same ``apply`` folds records live (the actor) and here, at startup and
when a fenced agent falls back to what its store committed.

A state snapshot (agents_runtime/log/snapshot.py) spares the fold of the
records up to it, never their verification: every line is still verified
from genesis (links and hashes; signatures as the checkpoint allows), and
the snapshot is used only when the log's record at its seq has its hash.
Otherwise, or when it was written for another layout of the state, it is
ignored (``Loaded.snapshot_problem`` says why, for the registry's warning)
and the log folded from genesis.
"""

from __future__ import annotations

import attrs

from agents_runtime.core.records import apply
from agents_runtime.core.snapshot import SCHEMA, state_from_json
from agents_runtime.core.state import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_RECENT_ACTIONS,
    AgentState,
    keep_recent,
)
from agents_runtime.errors import LogReadError, VerificationError
from agents_runtime.log.keys import Signer
from agents_runtime.log.snapshot import Snapshot, SnapshotError, open_snapshot
from agents_runtime.log.store import LogContents, LogStore
from agents_runtime.log.verify import ChainVerifier, Checkpoint, Failure


@attrs.frozen
class Loaded:
    agent_id: str
    state: AgentState | None  # None when the log failed verification
    failure: Failure | None
    contents: LogContents
    # The seq of the snapshot the fold started from (None: from genesis),
    # and why a snapshot the store holds was not used (None: no such).
    snapshot_seq: int | None = None
    snapshot_problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


def replay(
    agent_id: str,
    contents: LogContents,
    public_key: bytes,
    *,
    signer: Signer | None = None,
    checkpoint: Checkpoint | None = None,
    snapshot: Snapshot | None = None,
    idempotency_retention: float = DEFAULT_IDEMPOTENCY_RETENTION,
    recent_actions: int = DEFAULT_RECENT_ACTIONS,
    by_bytes: bool = True,
) -> Loaded:
    """Verify and fold ``contents``. ``signer`` (the key's holder) makes
    checking signatures cheaper; the log must reach ``checkpoint`` unchanged.
    ``snapshot`` (verified for this agent under ``public_key``) spares the
    fold of the records up to it when the log agrees with it.
    ``idempotency_retention``: seconds an Idempotency-Key is kept;
    ``recent_actions``: the latest actions whose keys are kept as they came
    (memory only: the registry gives the state its own setting).
    ``by_bytes``: the records before the snapshot that a signed checkpoint
    vouches for may be checked from their bytes alone
    (``ChainVerifier.feed_folded``); when the log then fails, it is verified
    again without that, so that the failure named is the reference's."""
    start: AgentState | None = None
    problem = None
    if snapshot is not None:
        start, problem = snapshot_state(agent_id, snapshot, idempotency_retention)
    lines = contents.lines
    verifier = ChainVerifier(
        public_key=public_key, log_id=agent_id, signer=signer, checkpoint=checkpoint
    )
    state = AgentState(
        agent_id, idempotency_retention=idempotency_retention, recent_actions=recent_actions
    )
    feed = verifier.feed

    def again() -> Loaded:  # the log verified without trusting bytes alone
        return replay(
            agent_id,
            contents,
            public_key,
            signer=signer,
            checkpoint=checkpoint,
            snapshot=snapshot,
            idempotency_retention=idempotency_retention,
            recent_actions=recent_actions,
            by_bytes=False,
        )

    try:
        if start is not None:
            at = start.head.seq
            # Verified, not folded: the snapshot holds their fold.
            if by_bytes:
                verifier.feed_folded(lines, at + 1)
            else:
                for line in lines[: at + 1]:
                    feed(line)
            if verifier.head != start.head:
                if verifier.provisional:
                    return again()
                # The log ends before the snapshot's seq, or holds another
                # record there: verified and folded whole instead.
                shown = "ends before it" if verifier.count <= at else "has another record there"
                loaded = replay(
                    agent_id,
                    contents,
                    public_key,
                    signer=signer,
                    checkpoint=checkpoint,
                    idempotency_retention=idempotency_retention,
                    recent_actions=recent_actions,
                )
                problem = f"it is of seq {at}, and the log {shown}"
                return attrs.evolve(loaded, snapshot_problem=problem)
            state = start
            keep_recent(state, recent_actions)
            lines = lines[at + 1 :]
        for line in lines:
            apply(state, feed(line))
        if verifier.count:
            verifier.finish()  # the checkpoint reached, a policy record present
    except VerificationError as exc:
        if verifier.provisional:
            return again()
        return Loaded(agent_id, None, exc.failure, contents, None, problem)
    except (KeyError, TypeError, ValueError) as exc:
        if verifier.provisional:
            return again()
        # A record that verifies but makes no sense for its kind (e.g. an outcome
        # for an action that never existed) can only come from a foreign writer.
        failure = Failure(verifier.count, state.head.seq + 1, f"record does not apply: {exc}")
        return Loaded(agent_id, None, failure, contents, None, problem)
    if verifier.count == 0:
        return Loaded(agent_id, None, Failure(1, None, "empty log"), contents, None, problem)
    seq = snapshot.head.seq if start is not None and snapshot is not None else None
    return Loaded(agent_id, state, None, contents, seq, problem)


def snapshot_state(
    agent_id: str, snapshot: Snapshot, idempotency_retention: float
) -> tuple[AgentState | None, str | None]:
    """The state a verified snapshot holds, or why it cannot be used (the
    fold that goes on from it keeps keys ``idempotency_retention`` s)."""
    if snapshot.log_id != agent_id:
        return None, f"it is the snapshot of {snapshot.log_id!r}"
    if snapshot.schema != SCHEMA:
        return None, "it was written for another layout of the state (another version)"
    try:
        state = state_from_json(snapshot.state)
    except ValueError as exc:
        return None, f"its state does not read: {exc}"
    if state.agent_id != agent_id or state.head != snapshot.head:
        return None, "its state is not that of its agent and seq"
    if state.idempotency_retention != idempotency_retention:
        # Its keys were dropped by another retention than the fold's.
        seconds = state.idempotency_retention
        return None, f"it was written under another idempotency retention ({seconds:g} s)"
    return state, None


def read_snapshot(
    store: LogStore, agent_id: str, public_key: bytes
) -> tuple[Snapshot | None, str | None]:
    """The agent's snapshot in ``store``, verified; or None and why it
    cannot be used (None, None: it has none). Blocking."""
    try:
        data = store.read_snapshot(agent_id)
    except LogReadError as exc:
        return None, str(exc)
    if data is None:
        return None, None
    try:
        return open_snapshot(data, public_key, agent_id), None
    except SnapshotError as exc:
        return None, str(exc)


def load(
    store: LogStore,
    agent_id: str,
    public_key: bytes,
    *,
    signer: Signer | None = None,
    checkpoint: Checkpoint | None = None,
    idempotency_retention: float = DEFAULT_IDEMPOTENCY_RETENTION,
    recent_actions: int = DEFAULT_RECENT_ACTIONS,
) -> Loaded:
    """Read, verify and fold the log of ``agent_id``, from its snapshot when
    it has one that can be used (blocking)."""
    snapshot, problem = read_snapshot(store, agent_id, public_key)
    loaded = replay(
        agent_id,
        store.read(agent_id),
        public_key,
        signer=signer,
        checkpoint=checkpoint,
        snapshot=snapshot,
        idempotency_retention=idempotency_retention,
        recent_actions=recent_actions,
    )
    if problem is not None and loaded.snapshot_problem is None:
        loaded = attrs.evolve(loaded, snapshot_problem=problem)
    return loaded


def quarantine_message(failure: Failure) -> str:
    if failure.line == 0:  # not about a line of the log (its checkpoint file)
        return failure.reason
    seq = "?" if failure.seq is None else failure.seq
    return f"line {failure.line} (seq {seq}): {failure.reason}"
