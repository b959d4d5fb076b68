"""How an actor's batches are committed on a log that other guardd nodes
append to as well: the PostgreSQL store's strategy (``PgAgentLog.run_batch``).

- **Catch up first.** Before a batch is decided, the rows other nodes
  appended after the committed head are read (``newer``) and the host
  verifies and folds them: no answer, a read's included, comes from a state
  older than a write another node acknowledged.
- **Decide again when another node wrote first.** The store refuses a batch
  whole (``HeadMoved``) when another node appended meanwhile. Nothing was
  answered yet, so the state is rebuilt from the store and the same commands
  are decided again, after a pause of random length that doubles with each
  try (nodes that keep colliding on one agent draw apart), ``MAX_TRIES``
  times at most; then 503 ``unavailable``.
- **A failed write fences nothing.** A transaction committed or did not, so
  nothing is half-written: the rows are read back, and unless they are there
  the callers get 503 and the state is rebuilt before the next batch.
- **Quarantine.** A record another node appended that fails verification,
  or a gap where the committed head was (``HeadGone``: rows deleted under
  running nodes, found by the append, the read of newer rows, or a rebuilt
  log that no longer reaches the committed head; each says ``GAP``) ends
  the agent on this node: 503 ``quarantined``, listed as quarantined.

The host (the actor) does what needs the agent's state, key or fold; this
module decides when and how often. It is the PostgreSQL store's alone: the
file store has one writer and a strategy of a few lines (files/store.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Protocol

import attrs

from agents_runtime.errors import (
    AgentError,
    Failure,
    LogReadError,
    LogWriteError,
    Quarantined,
    StoreUnavailable,
)
from agents_runtime.log.store import (
    GAP,
    UNREACHABLE,
    Batch,
    BatchHost,
    Committed,
    HeadGone,
    HeadMoved,
)
from agents_runtime.log.verify import CHECKPOINT_MISMATCH, CHECKPOINT_OUTSIDE, TRUNCATED

# What a rebuild that does not reach the committed head fails with: the
# rows of that head are gone or replaced, the gap ``HeadGone`` names.
_HEAD_MISSED = frozenset({TRUNCATED, CHECKPOINT_MISMATCH, CHECKPOINT_OUTSIDE})

log = logging.getLogger("agents_runtime.log.postgres")

CONTENDED = "other guardd nodes kept writing to this agent's log; nothing was written: try again"
MAX_TRIES = 8  # decisions of one batch before it gives up (503)
CONFLICT_PAUSE = 0.001  # seconds: the first pause after a conflict is up to twice this
STORE_RETRY = 1.0  # seconds before a due expiry is tried again on an unreachable store


class SharedLog(Protocol):
    """What this strategy needs of the log it commits to."""

    agent_id: str

    async def append(self, data: bytes, after: Committed) -> None: ...

    async def newer(self, after: Committed) -> list[bytes]: ...


class SharedCommit:
    """The strategy of one agent's log; ``conflict`` counts a batch decided
    again (the store's metric)."""

    __slots__ = ("_conflict", "_log", "quarantined", "stale")

    def __init__(self, log: SharedLog, conflict: Callable[[], None]) -> None:
        self._log = log
        self._conflict = conflict
        # The state may be ahead of the store (a write that failed or was
        # refused): it is rebuilt before the next batch.
        self.stale = False
        self.quarantined: str | None = None  # why this agent serves no more

    async def run(self, host: BatchHost, batch: Batch) -> bool:
        for tries in range(MAX_TRIES):
            if tries:
                # A pause of random length, doubling with each try (2 ms, 4 ms, ...).
                await asyncio.sleep(random.uniform(0, CONFLICT_PAUSE * 2**tries))  # noqa: S311
            try:
                await self._catch_up(host)
            except StoreUnavailable as exc:
                stop = self._fail(host, batch, exc)
                if self.quarantined is not None:
                    return True  # this actor serves no more
                host.postpone_expiry(STORE_RETRY)  # a due expiry: not again at once
                return stop
            answers, errors, stop, data = await host.decide(batch)
            if not data:
                break
            try:
                await self._log.append(data, host.committed)
            except HeadMoved:
                self.stale = True  # decide again on what the other writer wrote
                self._conflict()
                continue
            except HeadGone as exc:
                self._fail(host, batch, self._gone(host, exc))
                return True
            except Exception as exc:
                # LogWriteError, or a store's bug: nothing is answered as
                # written unless the rows are read back.
                if isinstance(exc, LogWriteError):
                    log.error("agent %s: %s", self._log.agent_id, exc)
                else:
                    log.exception("agent %s: appending failed", self._log.agent_id)
                if await self._written_after_all(host, data):
                    host.advance(len(data))
                    break
                self.stale = True
                return self._fail(host, batch, StoreUnavailable(UNREACHABLE))
            host.advance(len(data))
            break
        else:
            return self._fail(host, batch, StoreUnavailable(CONTENDED))
        host.answer(answers, errors)
        return stop

    async def finish(self, host: BatchHost, data: bytes) -> None:
        try:
            await self._log.append(data, host.committed)
        except (HeadMoved, HeadGone, LogWriteError):
            # Another node finished it or wrote on, or the write failed:
            # nothing is half-written; the first batch reads the store again.
            self.stale = True
        else:
            host.advance(len(data))

    async def _catch_up(self, host: BatchHost) -> None:
        """Rebuild the state if a write left it ahead of the store, then have
        the host verify and fold the records other writers appended after
        the committed head. StoreUnavailable when the store cannot be read,
        or (with ``quarantined`` set) when a record fails."""
        if self.quarantined is not None:
            raise StoreUnavailable(self.quarantined)
        agent_id = self._log.agent_id
        try:
            if self.stale:
                # The whole log, read and verified off the event loop; it
                # must still reach the committed head.
                failure = await host.rebuild(host.committed)
                if failure is not None:
                    if failure.reason in _HEAD_MISSED:
                        failure = attrs.evolve(failure, reason=GAP)
                    raise StoreUnavailable(self._quarantine(host, failure))
                self.stale = False
            lines = await self._log.newer(host.committed)
        except LogReadError as exc:
            log.error("agent %s: %s", agent_id, exc)
            raise StoreUnavailable(UNREACHABLE) from None
        except HeadGone as exc:
            raise self._gone(host, exc) from None
        except StoreUnavailable:
            raise
        except Exception:
            log.exception("agent %s: reading the store failed", agent_id)
            raise StoreUnavailable(UNREACHABLE) from None
        if lines:
            failure = host.fold(lines)
            if failure is not None:
                raise StoreUnavailable(self._quarantine(host, failure))

    def _gone(self, host: BatchHost, exc: HeadGone) -> StoreUnavailable:
        log.error("agent %s: %s", self._log.agent_id, exc)
        return StoreUnavailable(self._quarantine(host, Failure(exc.seq + 1, exc.seq, GAP)))

    def _quarantine(self, host: BatchHost, failure: Failure) -> str:
        self.quarantined = host.quarantine(failure)
        return self.quarantined

    def _fail(self, host: BatchHost, batch: Batch, error: AgentError) -> bool:
        if self.quarantined is not None:
            error = Quarantined(self.quarantined)
        return host.fail(batch, error)

    async def _written_after_all(self, host: BatchHost, data: bytes) -> bool:
        """Whether a batch whose write failed is in the store all the same
        (the connection was lost during its commit)."""
        try:
            lines = await self._log.newer(host.committed)
        except Exception:  # unknown: the callers get 503, the next batch reads it back
            return False
        ours = data.split(b"\n")[:-1]
        return lines[: len(ours)] == ours
