"""Rebuild an agent's state from its log file: verify each record, then fold it."""

from __future__ import annotations

from pathlib import Path

import attrs

from agents_runtime.core.state import AgentState, apply
from agents_runtime.errors import VerificationError
from agents_runtime.log.files.logfile import LogContents, read_log, split_log
from agents_runtime.log.keys import Signer
from agents_runtime.log.recordstore import FileRecords, MemoryRecords, RecordStore
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


def replay_lines(
    agent_id: str,
    lines: list[bytes],
    public_key: bytes,
    *,
    path: Path | None = None,
    signer: Signer | None = None,
) -> Loaded:
    """Verify and fold ``lines``; the state reads records back from the file
    at ``path`` (which holds these lines first), or from memory without one."""
    contents = LogContents(lines, None, False, sum(len(x) + 1 for x in lines))
    return _replay(agent_id, contents, public_key, path, signer, None)


def _replay(
    agent_id: str,
    contents: LogContents,
    public_key: bytes,
    path: Path | None,
    signer: Signer | None,
    checkpoint: Checkpoint | None,
) -> Loaded:
    lines = contents.lines
    verifier = ChainVerifier(
        public_key=public_key, log_id=agent_id, signer=signer, checkpoint=checkpoint
    )
    records: RecordStore = MemoryRecords() if path is None else FileRecords(path)
    state = AgentState(agent_id, records=records)
    feed, add = verifier.feed, records.add
    try:
        for line in lines:
            record = feed(line)
            apply(state, record)
            add(record, line + b"\n")
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


def load_log(
    path: Path,
    agent_id: str,
    public_key: bytes,
    *,
    length: int | None = None,
    signer: Signer | None = None,
    checkpoint: Checkpoint | None = None,
) -> Loaded:
    """Verify and fold a log file. ``length`` limits it to its committed bytes;
    ``signer`` (the key's holder) makes checking signatures cheaper; the log
    must reach ``checkpoint`` unchanged."""
    if length is None:
        contents = read_log(path)
    else:
        with path.open("rb") as fh:
            contents = split_log(fh.read(length))
    return _replay(agent_id, contents, public_key, path, signer, checkpoint)
