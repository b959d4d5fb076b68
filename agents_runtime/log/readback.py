"""Reading a served log back: its committed records, and its verification.

Both are blocking reads of the store; guardd calls them on worker threads.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from agents_runtime.errors import VerificationError
from agents_runtime.log.canonical import loads
from agents_runtime.log.store import AgentLog, Committed
from agents_runtime.log.verify import AFTER_HEAD, ChainVerifier, Checkpoint, Failure, Report

# Rereads of a log that ends in bytes without a newline after the committed
# head, which may be a write of the agent still under way, before they count
# as bytes that are not its own.
AFTER_HEAD_READS = 3
AFTER_HEAD_PAUSE = 0.02  # seconds


def read_records(log: AgentLog, committed: Committed, after: int, limit: int) -> list[Any]:
    """Up to ``limit`` committed records after seq ``after``."""
    lines = log.read(committed).lines
    # seq n is line n: seqs start at 0 and are contiguous in a verified log.
    return [loads(line) for line in lines[after + 1 : after + 1 + limit]]


def verify_committed(
    log: AgentLog, committed: Committed, public_key: bytes, *, fenced: bool = False
) -> Report:
    """Verify the committed records against the committed head, and that
    whatever the store holds after them is the agent's own."""
    # The head this process committed is a checkpoint: a log cut short or
    # rewritten since startup fails, not just one whose chain breaks.
    head = committed.head
    checkpoint = Checkpoint(head.seq, head.hash) if head.seq >= 0 else None
    lines = log.read(committed).lines
    verifier = ChainVerifier(public_key=public_key, log_id=log.agent_id, checkpoint=checkpoint)
    report = verifier.feed_all(lines)
    if not report.ok:
        return report
    failure = _after_head(log, committed, verifier, len(lines) + 1, fenced)
    if failure is None:
        return report
    return attrs.evolve(
        report, ok=False, failure=failure, key_trusted=False, checkpoint_checked=False
    )


def _after_head(
    log: AgentLog, committed: Committed, verifier: ChainVerifier, line: int, fenced: bool
) -> Failure | None:
    """The first line after the committed head that is not the agent's own.

    The agent may have committed more records since its head was taken:
    whole lines that go on with the chain are those. A final line without
    its newline may be a write still under way, or, once the agent is
    fenced, what its failed write left, which the next start moves aside
    as a torn tail. Anything else was added by someone else (reason
    AFTER_HEAD, at its line); the report's head stays the committed one."""
    data = log.read_beyond(committed)
    pos = 0
    for attempt in range(AFTER_HEAD_READS):
        while (end := data.find(b"\n", pos)) >= 0:
            try:
                verifier.feed(data[pos:end])
            except VerificationError:
                return Failure(line, None, AFTER_HEAD)
            pos, line = end + 1, line + 1
        if pos == len(data) or fenced:
            return None
        if attempt + 1 < AFTER_HEAD_READS:
            time.sleep(AFTER_HEAD_PAUSE)  # on a worker thread, never the loop
            data = log.read_beyond(committed)
    return Failure(line, None, AFTER_HEAD)
