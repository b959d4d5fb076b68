"""The agent actor: one asyncio task per agent, owning its state, its log file
and its signer. Callers hold an ``AgentRef`` and ``ask`` it; commands go
through a bounded mailbox, so all changes to one agent are serialized with no
lock, and agents never wait for each other.

The behaviour (``agents_runtime.core.behaviour``) decides; the actor does
what it asks: it seals each record a handler yields, folds it, and sends it
back to the handler; it reads from the store, off the event loop, the earlier
lines a reply quotes (``READS``) before the handler runs.

Group commit: the actor takes every command waiting in its mailbox, runs them
in order (each one's records folded as they are yielded, so the next command
sees them), appends all their records to its log in the store as one batch,
and only once the store has made it durable answers every caller (the file
store's committer makes the batches of every agent waiting at that moment
durable with one flush). The clock is read once a batch: every record of
a batch carries the same ts, the moment the actor started on it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

import attrs

from agents_runtime.core import commands as c
from agents_runtime.core.behaviour import (
    NO_LINES,
    READS,
    VIEWS,
    WRITERS,
    expire_due,
    finish_interrupted,
    run_steps,
)
from agents_runtime.core.records import apply
from agents_runtime.core.state import (
    AgentState,
    Lines,
    action_number,
    next_deadline,
    note_ts,
    parse_ts,
)
from agents_runtime.errors import (
    AgentError,
    AgentUnavailable,
    LogReadError,
    LogWriteError,
    Quarantined,
    ReadOnly,
    ShuttingDown,
    StoreUnavailable,
    UnknownAction,
    VerificationError,
)
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head, Sealed, seal, timestamp_micros
from agents_runtime.log.store import AgentLog, Committed, HeadMoved, LogContents
from agents_runtime.log.verify import ChainVerifier, Failure
from agents_runtime.runtime.mailbox import Mailbox
from agents_runtime.runtime.replay import Loaded, quarantine_message, replay

log = logging.getLogger("agents_runtime.runtime.actor")


READ_ONLY = "guardd has no signing key (keys/audit.key): logs are read-only"
UNREACHABLE = "the store cannot be reached just now; nothing was written: try again"
CONTENDED = "other guardd nodes kept writing to this agent's log; nothing was written: try again"
MAX_TRIES = 8  # decisions of one batch on a shared store before it gives up (503)
CONFLICT_PAUSE = 0.001  # seconds: the first pause after a conflict is up to twice this
STORE_RETRY = 1.0  # seconds before a due expiry is tried again on an unreachable store
MAILBOX_SIZE = 1024
MAX_BATCH = 256

Clock = Callable[[], float]


def wall_clock() -> float:
    return time.time()


def _refuse_write(fields: dict[str, Any]) -> Sealed:
    raise ReadOnly(READ_ONLY)


@attrs.frozen
class LogView:
    """What of an agent's log is committed, and the handle to read it with;
    the store beyond that may hold a write in progress, or when ``fenced``
    what a failed write left (a start sorts it out)."""

    log: AgentLog
    committed: Committed
    fenced: bool = False

    @property
    def head(self) -> Head:
        return self.committed.head


class _Stop:
    pass


_STOP = _Stop()  # finish the mailbox, then end
_POKE = _Stop()  # a batch with no command: read what other writers appended

Batch = list[tuple[Any, asyncio.Future[Any] | None]]
Answers = list[tuple[asyncio.Future[Any], Any]]
Errors = list[tuple[asyncio.Future[Any], BaseException]]


class AgentRef:
    """The handle routes hold. ``await ref.ask(command)`` gives the reply."""

    __slots__ = ("_actor", "agent_id")

    def __init__(self, actor: AgentActor) -> None:
        self._actor = actor
        self.agent_id = actor.state.agent_id

    def ask(self, command: c.Command) -> Awaitable[Any]:
        """Send ``command`` now and return the future of its reply (as
        pykka's ``ask`` does). A plain function, not a coroutine: one
        coroutine less per command, ~1 % of the actor path's instructions."""
        actor = self._actor
        if actor.stopping or (actor.task is not None and actor.task.done()):
            raise ShuttingDown("guardd is shutting down")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        item = (command, future)
        if actor.mailbox.offer(item):
            return future
        return _when_room(actor.mailbox, item, future)


async def _when_room(
    mailbox: Mailbox[tuple[Any, asyncio.Future[Any] | None]],
    item: tuple[Any, asyncio.Future[Any]],
    future: asyncio.Future[Any],
) -> Any:
    await mailbox.put(item)
    return await future


class AgentActor:
    def __init__(
        self,
        state: AgentState,
        *,
        log: AgentLog,
        signer: Signer | None,
        public_key: bytes,
        clock: Clock = wall_clock,
        moved: set[str] | None = None,
    ) -> None:
        self.state = state
        self.log = log
        self.signer = signer
        # What of the log is known durable (state.head runs ahead of it
        # while a batch is written). Each batch committed puts the agent's
        # ID in ``moved``, the registry's set of heads to checkpoint.
        self.committed = Committed(state.head, log.size)
        self.moved = moved if moved is not None else set()
        self.public_key = public_key
        self.clock = clock
        self.mailbox: Mailbox[tuple[Any, asyncio.Future[Any] | None]] = Mailbox(MAILBOX_SIZE)
        self.stopping = False
        self.fenced: str | None = None
        # A shared store: the state may be ahead of the store (a write that
        # failed or was refused) and is rebuilt before the next batch; a
        # record another writer appended that fails verification quarantines.
        self.stale = False
        self.quarantine: str | None = None
        self.conflicts = 0  # batches decided again after another writer's (metrics)
        # Told when a record another writer appended fails verification.
        self.on_quarantine: Callable[[str, Failure], None] | None = None
        self._buffer: list[bytes] = []
        self._ts = ""
        self._watchers: dict[str, list[asyncio.Future[None]]] = {}
        # The earliest approval deadline of the pending actions (seconds
        # since the epoch), recomputed only after a batch that held a new
        # action or changed the policy (state.expiry_dirty): nothing per
        # command while no policy sets approval_timeout_secs.
        self._deadline: float | None = None
        self.task: asyncio.Task[None] | None = None
        self.ref = AgentRef(self)

    # -- records -------------------------------------------------------------

    def _write(self, fields: dict[str, Any]) -> Sealed:
        """Seal a record a handler yields, fold it, queue its line for the
        batch's commit."""
        assert self.signer is not None
        sealed = seal(fields, prev=self.state.head, ts=self._ts, signer=self.signer)
        # The record as sealed, not parsed back from its line: the same values
        # (money survives the canonical form exactly, see money.py), perhaps
        # another Decimal exponent or int for Decimal, which neither the fold
        # nor any answer can tell apart. Parsing back cost ~5 us a record.
        state = self.state
        record = sealed.record
        apply(state, record)
        self._buffer.append(sealed.line)
        return sealed

    def _tick(self) -> float:
        """Read the clock for a batch: set ``_ts`` and return its value."""
        now = self.clock()
        last = self.state.last_ts
        if last:
            then = parse_ts(last)  # at most one parse a batch
            if now <= then:  # ts never goes backwards
                self._ts = last
                return then
        micros = round(now * 1_000_000)
        self._ts = timestamp_micros(micros)
        now = micros / 1_000_000  # == parse_ts(self._ts), as the fold reads it
        note_ts(self._ts, now)
        return now

    # -- commands ------------------------------------------------------------

    def _handle(self, command: Any, now: float, lines: Lines) -> Any:
        kind = type(command)
        writer = WRITERS.get(kind)
        if writer is not None:
            if self.signer is None:
                if kind is c.RequestAction and command.idempotency_key is not None:
                    # A retry of a request already decided is answered from
                    # the log, which needs no key; anything else would write.
                    return run_steps(writer(self.state, command, now, lines), _refuse_write)
                raise ReadOnly(READ_ONLY)
            if self.fenced is not None:
                raise AgentUnavailable(self.fenced)
            return run_steps(writer(self.state, command, now, lines), self._write)
        view = VIEWS.get(kind)
        if view is not None:
            return view(self.state, command, now, lines)
        if kind is c.WatchAction:
            return self._watch(command.action_id)
        if kind is c.GetLogView:
            # The committed head: records of this batch are not durable yet.
            return LogView(self.log, self.committed, self.fenced is not None)
        raise TypeError(f"not a command: {command!r}")

    async def _lines(self, seqs: Sequence[int]) -> Lines:
        """The lines at ``seqs``: those of this batch from memory, the
        committed ones from the store (off the event loop)."""
        committed = self.committed.head.seq
        lines: dict[int, bytes] = {}
        old = [seq for seq in seqs if seq <= committed]
        if old:
            lines.update(await self.log.lines(old, self.committed))
        for seq in seqs:
            if seq > committed:
                lines[seq] = self._buffer[seq - committed - 1][:-1]
        return lines

    @property
    def watching(self) -> bool:
        """Whether a long-poll waits on one of this agent's actions."""
        return bool(self._watchers)

    @property
    def committed_head(self) -> Head:
        return self.committed.head

    def _watch(self, action_id: str) -> asyncio.Future[None]:
        if action_number(self.state, action_id) is None:
            raise UnknownAction(f"no action {action_id} for agent {self.state.agent_id}")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if action_id not in self.state.pending:
            future.set_result(None)
            return future
        waiting = [f for f in self._watchers.get(action_id, []) if not f.done()]
        waiting.append(future)
        self._watchers[action_id] = waiting
        return future

    def _wake_watchers(self) -> None:
        pending = self.state.pending
        done = [a for a in self._watchers if a not in pending]
        for action_id in done:
            for future in self._watchers.pop(action_id):
                if not future.done():
                    future.set_result(None)

    # -- the loop ------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._finish_interrupted()
            while True:
                state = self.state
                if state.expiry_dirty:
                    state.expiry_dirty = False
                    self._deadline = next_deadline(state)
                deadline = self._deadline
                # An approval deadline is a timer: the mailbox is waited on
                # until then at most, and an empty batch expires what is due.
                # One already past (guardd was down) gives an empty wait, so
                # it is expired before the first command is run.
                timeout = None if deadline is None else deadline - self.clock()
                batch = await self.mailbox.take(MAX_BATCH, timeout)
                try:
                    if await self._run_batch(batch):
                        break
                except BaseException:
                    for _, future in batch:
                        if future is not None and not future.done():
                            future.set_exception(AgentUnavailable("agent stopped unexpectedly"))
                    raise
        finally:
            # The log stays open: a writer thread may still be writing this
            # actor's last batch (the task is cancelled at the end of the stop
            # grace), and a closed descriptor number can be reused by another
            # file at once. The registry closes the logs once the committer's
            # writers have finished.
            self._fail_waiting(ShuttingDown("guardd is shutting down"))

    async def _finish_interrupted(self) -> None:
        """Before the first command: finish the last command of the log if a
        crash cut its records short (agent.finish_interrupted), with the ts
        of its records."""
        if self.signer is None or self.fenced is not None or not self.state.last_ts:
            return
        self._ts = self.state.last_ts
        try:
            run_steps(finish_interrupted(self.state), self._write)
        except Exception as exc:  # a signed last record no command of ours writes
            self._buffer.clear()
            self._fence(LogWriteError(f"cannot finish its last command: {exc!r}"))
            return
        if not self._buffer:
            return
        data = b"".join(self._buffer)
        self._buffer.clear()
        log.warning(
            "agent %s: finishing its last command, which a crash cut short (%d records)",
            self.state.agent_id,
            data.count(b"\n"),
        )
        try:
            await self.log.append(data, self.committed)
        except HeadMoved:
            self.stale = True  # another node finished it, or wrote on
        except LogWriteError as exc:
            if self.log.shared:
                self.stale = True  # nothing half-written: the next batch reads back
            else:
                self._fence(exc)
        else:
            self._committed(len(data))

    async def _run_batch(self, batch: list[tuple[Any, asyncio.Future[Any] | None]]) -> bool:
        if self.log.shared:
            return await self._run_shared_batch(batch)
        # One clock reading a batch: its records are committed together, and
        # formatting a ts per command cost ~3 us of the actor's ~20.
        answers, errors, stop = await self._decide(batch, self._tick())
        if self._buffer:
            data = b"".join(self._buffer)
            self._buffer.clear()
            try:
                await self.log.append(data, self.committed)
            except LogWriteError as exc:
                self._fence(exc)
                failure = AgentUnavailable(self.fenced or "log write failed")
                errors = [(f, failure) for f, _ in answers + errors]
                answers = []
            else:
                self._committed(len(data))
        self._answer(answers, errors)
        return stop

    async def _decide(self, batch: Batch, now: float) -> tuple[Answers, Errors, bool]:
        """Run the batch's commands in order, each seeing the records of those
        before it; their records wait in ``_buffer`` for the commit."""
        answers: Answers = []
        errors: Errors = []
        stop = False
        deadline = self._deadline
        if deadline is not None and now >= deadline:
            self._expire(now)
        for command, future in batch:
            if command is _STOP:
                stop = True
                continue
            if command is _POKE:
                continue
            assert future is not None
            try:
                lines = NO_LINES
                reads = READS.get(type(command))
                if reads is not None:
                    seqs = reads(self.state, command)
                    if seqs:
                        lines = await self._lines(seqs)
                answers.append((future, self._handle(command, now, lines)))
            except AgentError as exc:
                errors.append((future, exc))
            except Exception as exc:
                log.exception("agent %s: command %r failed", self.state.agent_id, command)
                errors.append((future, exc))
        return answers, errors, stop

    def _answer(self, answers: Answers, errors: Errors) -> None:
        for future, result in answers:
            if not future.done():  # done: its caller was cancelled
                future.set_result(result)
        for future, error in errors:
            if not future.done():
                future.set_exception(error)
        self._wake_watchers()

    # -- a shared store ------------------------------------------------------

    async def _run_shared_batch(self, batch: Batch) -> bool:
        """A batch on a log other writers (guardd nodes) append to as well.

        First what they appended is verified and folded, so that no answer
        comes from a state older than a write another node acknowledged.
        The store refuses the batch whole (HeadMoved) when another writer
        appended meanwhile: nothing was answered yet, so the state is rebuilt
        from the store and the commands are decided again. A failed write
        leaves nothing half-written; the callers get 503 and may retry."""
        stop = any(command is _STOP for command, _ in batch)
        for tries in range(MAX_TRIES):
            if tries:
                # Nodes that keep colliding on one agent draw apart: a pause
                # of random length, doubling with each try (2 ms, 4 ms, ...).
                await asyncio.sleep(random.uniform(0, CONFLICT_PAUSE * 2**tries))  # noqa: S311
            try:
                await self._catch_up()
            except StoreUnavailable as exc:
                self._fail_batch(batch, exc)
                if self.quarantine is not None:
                    return True  # this actor serves no more
                if self._deadline is not None:  # a due expiry: not again at once
                    self._deadline = max(self._deadline, self.clock() + STORE_RETRY)
                return stop
            answers, errors, stop = await self._decide(batch, self._tick())
            if not self._buffer:
                break
            data = b"".join(self._buffer)
            self._buffer.clear()
            try:
                await self.log.append(data, self.committed)
            except HeadMoved:
                self.stale = True  # decide again on what the other writer wrote
                self.conflicts += 1
                continue
            except Exception as exc:
                # LogWriteError, or a store's bug: nothing is answered as
                # written unless the rows are read back.
                if isinstance(exc, LogWriteError):
                    log.error("agent %s: %s", self.state.agent_id, exc)
                else:
                    log.exception("agent %s: appending failed", self.state.agent_id)
                if await self._written_after_all(data):
                    self._committed(len(data))
                    break
                self.stale = True
                self._fail_batch(batch, StoreUnavailable(UNREACHABLE))
                return stop
            self._committed(len(data))
            break
        else:
            self._fail_batch(batch, StoreUnavailable(CONTENDED))
            return stop
        self._answer(answers, errors)
        return stop

    async def _catch_up(self) -> None:
        """Rebuild the state if a write left it ahead of the store, then fold
        the records other writers appended after the committed head, each
        verified first. StoreUnavailable when the store cannot be read."""
        if self.quarantine is not None:
            raise StoreUnavailable(self.quarantine)
        try:
            if self.stale:
                # Read and fold the whole log off the event loop: the other
                # agents' batches go on meanwhile.
                contents, loaded = await asyncio.to_thread(self._reload)
                self._adopt(loaded, contents)
                self.stale = False
            lines = await self.log.newer(self.committed)
        except LogReadError as exc:
            log.error("agent %s: %s", self.state.agent_id, exc)
            raise StoreUnavailable(UNREACHABLE) from None
        except StoreUnavailable:
            raise
        except Exception:
            log.exception("agent %s: reading the store failed", self.state.agent_id)
            raise StoreUnavailable(UNREACHABLE) from None
        if not lines:
            return
        state = self.state
        verifier = ChainVerifier.following(
            self.committed.head,
            public_key=self.public_key,
            log_id=state.agent_id,
            signer=self.signer,
        )
        try:
            for line in lines:
                apply(state, verifier.feed(line))
        except VerificationError as exc:
            self._quarantine(exc.failure)
        except (KeyError, TypeError, ValueError) as exc:
            seq = state.head.seq + 1
            self._quarantine(Failure(seq + 1, seq, f"record does not apply: {exc}"))
        size = sum(len(line) + 1 for line in lines)
        self.committed = Committed(state.head, self.committed.size + size)
        if state.expiry_dirty:
            state.expiry_dirty = False
            self._deadline = next_deadline(state)

    def _reload(self) -> tuple[LogContents, Loaded]:
        contents = self.log.read(self.committed)
        return contents, replay(self.state.agent_id, contents, self.public_key, signer=self.signer)

    def _adopt(self, loaded: Loaded, contents: LogContents) -> None:
        if loaded.state is None:
            assert loaded.failure is not None
            self._quarantine(loaded.failure)
        assert loaded.state is not None
        self.state = loaded.state
        self.committed = Committed(loaded.state.head, contents.valid_length)
        self._deadline = next_deadline(self.state)

    def _quarantine(self, failure: Failure) -> NoReturn:
        """A record in the store fails verification: this agent serves no
        more (the registry lists it as quarantined, as at startup)."""
        self.quarantine = (
            f"agent {self.state.agent_id} is quarantined: a record in the store failed "
            f"verification ({quarantine_message(failure)})"
        )
        self._deadline = None
        if self.on_quarantine is not None:
            self.on_quarantine(self.state.agent_id, failure)
        raise StoreUnavailable(self.quarantine)

    async def _written_after_all(self, data: bytes) -> bool:
        """Whether a batch whose write failed is in the store all the same
        (the connection was lost during its commit)."""
        try:
            lines = await self.log.newer(self.committed)
        except Exception:  # unknown: the callers get 503, the next batch reads it back
            return False
        ours = data.split(b"\n")[:-1]
        return lines[: len(ours)] == ours

    def _fail_batch(self, batch: Batch, error: AgentError) -> None:
        # No watcher is woken: the state may be ahead of the store.
        self._buffer.clear()
        if isinstance(error, StoreUnavailable) and self.quarantine is not None:
            error = Quarantined(self.quarantine)
        for _, future in batch:
            if future is not None and not future.done():
                future.set_exception(error)

    def poke(self) -> None:
        """Have the actor read what other writers appended (a notification
        from the store): a long-poll on this node then sees their decision."""
        self.mailbox.offer((_POKE, None))

    def _expire(self, now: float) -> None:
        """Write approval_expired for what is due at ``now``, first in the batch."""
        self.state.expiry_dirty = True  # the next deadline is a later one
        if self.signer is None or self.fenced is not None:
            # Nothing can be written: no timer until a restart sorts it out.
            self._deadline = None
            self.state.expiry_dirty = False
            return
        run_steps(expire_due(self.state, now), self._write)

    def _committed(self, size: int) -> None:
        """A batch of ``size`` bytes is durable: its last record is the
        committed head (no record is sealed between the write's end and this)."""
        self.committed = Committed(self.state.head, self.committed.size + size)
        self.moved.add(self.state.agent_id)

    def _fence(self, exc: LogWriteError) -> None:
        log.error("agent %s: %s; refusing writes until restart", self.state.agent_id, exc)
        self.fenced = (
            f"writing the log of agent {self.state.agent_id} failed; "
            "it accepts no writes until guardd is restarted"
        )
        # The state ran ahead of the store: rebuild it from what was committed.
        loaded = replay(self.state.agent_id, self.log.read(self.committed), self.public_key)
        if loaded.state is not None:
            self.state = loaded.state

    def release_watchers(self) -> None:
        """Wake every long-poll now (at shutdown): each answers with the
        action as it stands instead of holding the server until its timeout."""
        for waiting in self._watchers.values():
            for future in waiting:
                if not future.done():
                    future.set_result(None)
        self._watchers.clear()

    def _fail_waiting(self, error: AgentError) -> None:
        self.stopping = True
        for _, future in self.mailbox.take_nowait():
            if future is not None and not future.done():
                future.set_exception(error)
        for waiting in self._watchers.values():
            for future in waiting:
                if not future.done():
                    future.cancel()
        self._watchers.clear()

    async def stop(self) -> None:
        """Finish what is in the mailbox, then end the task."""
        self.stopping = True
        await self.mailbox.put((_STOP, None))
