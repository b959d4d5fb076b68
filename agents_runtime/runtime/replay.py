"""Rebuild an agent's state from its log: verify each record, then fold it.

The same ``apply`` folds records live (the actor) and here, at startup and
when a fenced agent falls back to what its store committed.
"""

from __future__ import annotations

import attrs

from agents_runtime.core.records import apply
from agents_runtime.core.state import AgentState
from agents_runtime.errors import VerificationError
from agents_runtime.log.keys import Signer
from agents_runtime.log.store import LogContents, LogStore
from agents_runtime.log.verify import ChainVerifier, Checkpoint, Failure


@attrs.frozen
class Loaded:
    agent_id: str
    state: AgentState | None  # None when the log failed verification
    failure: Failure | None
    contents: LogContents

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
) -> Loaded:
    """Verify and fold ``contents``. ``signer`` (the key's holder) makes
    checking signatures cheaper; the log must reach ``checkpoint`` unchanged."""
    lines = contents.lines
    verifier = ChainVerifier(
        public_key=public_key, log_id=agent_id, signer=signer, checkpoint=checkpoint
    )
    state = AgentState(agent_id)
    feed = verifier.feed
    try:
        for line in lines:
            apply(state, feed(line))
        if verifier.count:
            verifier.finish()  # the checkpoint reached, a policy record present
    except VerificationError as exc:
        return Loaded(agent_id, None, exc.failure, contents)
    except (KeyError, TypeError, ValueError) as exc:
        # A record that verifies but makes no sense for its kind (e.g. an outcome
        # for an action that never existed) can only come from a foreign writer.
        failure = Failure(verifier.count, state.head.seq + 1, f"record does not apply: {exc}")
        return Loaded(agent_id, None, failure, contents)
    if verifier.count == 0:
        return Loaded(agent_id, None, Failure(1, None, "empty log"), contents)
    return Loaded(agent_id, state, None, contents)


def load(
    store: LogStore,
    agent_id: str,
    public_key: bytes,
    *,
    signer: Signer | None = None,
    checkpoint: Checkpoint | None = None,
) -> Loaded:
    """Read, verify and fold the log of ``agent_id`` (blocking)."""
    return replay(
        agent_id,
        store.read(agent_id),
        public_key,
        signer=signer,
        checkpoint=checkpoint,
    )


def quarantine_message(failure: Failure) -> str:
    if failure.line == 0:  # not about a line of the log (its checkpoint file)
        return failure.reason
    seq = "?" if failure.seq is None else failure.seq
    return f"line {failure.line} (seq {seq}): {failure.reason}"
