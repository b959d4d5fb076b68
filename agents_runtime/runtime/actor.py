"""The agent actor: one asyncio task per agent, owning its state, its log file
and its signer. Callers hold an ``AgentRef`` and ``ask`` it; commands go
through a bounded mailbox, so all changes to one agent are serialized with no
lock, and agents never wait for each other.

The behaviour (``agents_runtime.core.behaviour``) decides; the actor does
what it asks: it seals each record a handler yields, folds it, and sends it
back to the handler; it reads from the store, off the event loop, the earlier
lines a reply quotes (``READS``) before the handler runs.

Group commit: the actor takes every command waiting in its mailbox and hands
them to its log as one batch (``AgentLog.run_batch``), being the log's
``BatchHost``: the store's strategy has it run the commands in order (each
one's records folded as they are yielded, so the next command sees them),
appends all their records as one batch, and only once the store has made it
durable has the actor answer every caller. How often a batch is decided and
what a failed write means are the store's (the file store fences the agent;
a store other nodes write too reads their records first and decides again
after a collision); the actor does what needs the state, the key or the
fold. The clock is read once a batch: every record of a batch carries the
same ts, the moment the actor started on it.

Replies: the core answers each command with a value of the domain (the
state, an action's number, a grant, a decision); the actor hands it at once
to the renderer of its command (``render``, given by whoever builds the
registry: guardd's ``app.BY_COMMAND``), so that the caller gets the reply
as it goes out, made from the state as that command left it, inside this
agent's serialized turn. The runtime never imports the HTTP layer; with no
renderer a caller gets the core's value.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import time
from array import array
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from agents_runtime.core import commands as c
from agents_runtime.core.behaviour import (
    NO_LINES,
    READS,
    REPLIES_STATUS,
    VIEWS,
    WRITERS,
    expire_due,
    finish_interrupted,
    run_steps,
)
from agents_runtime.core.rate_history import (
    RateGap,
    allowed_time,
    rate_gap,
    restore_allowed_times,
)
from agents_runtime.core.records import apply
from agents_runtime.core.state import (
    AgentState,
    Lines,
    Recall,
    action_number,
    keep_recent,
    left_memory,
    next_deadline,
    note_ts,
    parse_ts,
    recall,
    recalled,
    scars_gone,
)
from agents_runtime.errors import (
    AgentError,
    AgentUnavailable,
    Failure,
    LogReadError,
    LogWriteError,
    ReadOnly,
    ShuttingDown,
    UnknownAction,
    VerificationError,
)
from agents_runtime.log.canonical import loads_trusted
from agents_runtime.log.keys import Signer
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import Head, Sealed, seal, timestamp_micros
from agents_runtime.log.snapshot import SnapshotError, open_snapshot
from agents_runtime.log.store import AgentLog, Answers, Batch, Committed, Errors
from agents_runtime.log.verify import ChainVerifier, Checkpoint
from agents_runtime.runtime.mailbox import Mailbox
from agents_runtime.runtime.replay import Loaded, quarantine_message, replay, snapshot_state
from agents_runtime.runtime.statecopy import StateCopy, copy_state, restore

log = logging.getLogger("agents_runtime.runtime.actor")


READ_ONLY = "guardd has no signing key (keys/audit.key): logs are read-only"
MAILBOX_SIZE = 1024
MAX_BATCH = 256
# Lines a recall of an action that left memory reads from the store at once.
RECALL_PAGE = 4096
# Rows after the last rebuilt state beyond which a rebuild starts from the
# store's snapshot instead (a newer one may be there; either is verified).
REBUILT_REACH = 10_000
_PICKLE = pickle.HIGHEST_PROTOCOL

Clock = Callable[[], float]

_ALLOWED_NEEDLE = b'"kind":"action_allowed"'


# A command's reply as it goes out, from the core's value: called with the
# state right after the command (a later command of the batch changes it),
# the value, the batch's ``now`` and the lines the command read.
Render = Callable[[AgentState, Any, float, Lines], Any]
Renders = Mapping[type, Render]  # by command class; a command without one: its value as is
UNRENDERED: Renders = MappingProxyType({})


def wall_clock() -> float:
    return time.time()


def _verified(upto: Committed) -> Checkpoint:
    """The committed head as a checkpoint a rebuild must reach, vouching for
    the records up to it: this node verified each of them (signature
    included) before it folded or committed it, so a chain of hashes that
    reaches the head's hash holds those same records, and their signatures
    need no check again (the rule a signed checkpoint follows at a start).
    A lost race then costs the hashes of the rows it reads, not their
    Ed25519 checks."""
    return Checkpoint(upto.head.seq, upto.head.hash, signed=True)


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
        return _when_room(actor, item, future)


async def _when_room(
    actor: AgentActor, item: tuple[Any, asyncio.Future[Any]], future: asyncio.Future[Any]
) -> Any:
    await actor.mailbox.put(item)
    task = actor.task
    if task is not None and task.done() and not future.done():
        # The actor ended while this waited for room: the room was made by
        # its last act (failing what its mailbox held), and nobody takes
        # this command now.
        future.set_exception(ShuttingDown("guardd is shutting down"))
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
        render: Renders = UNRENDERED,
    ) -> None:
        self.state = state
        self.render = render
        self.log = log
        self.signer = signer
        # What of the log is known durable (state.head runs ahead of it
        # while a batch is written). Each batch committed puts the agent's
        # ID in ``moved``, the registry's set of heads to checkpoint.
        self.committed = Committed(state.head, log.size)
        # The head the actor started at (loaded from its log, or created).
        self.loaded_seq = state.head.seq
        self.moved = moved if moved is not None else set()
        self.public_key = public_key
        self.clock = clock
        self.mailbox: Mailbox[tuple[Any, asyncio.Future[Any] | None]] = Mailbox(MAILBOX_SIZE)
        self.stopping = False
        self.fenced: str | None = None
        # Told when a record in the store fails verification while serving.
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
        # A state snapshot is wanted (the registry's rounds ask): taken at
        # the first moment the state is that of the committed head, and
        # handed to ``on_snapshot`` (the registry writes it off the loop).
        self.snapshot_wanted = False
        self.on_snapshot: Callable[[str, Head, bytes], None] | None = None
        # The store's read of an agent's snapshot (LogStore.read_snapshot):
        # a rebuild starts from it. The seq it started from, last time.
        self.read_snapshot: Callable[[str], bytes | None] | None = None
        self.rebuilt_from: int | None = None
        # The state the last rebuild reached, at its committed head: the next
        # lost race starts from this copy and folds only the rows written
        # since, instead of reading the snapshot again (megabytes on a long
        # history), checking its signature and converting its JSON, then
        # folding every row after it.
        self._rebuilt: StateCopy | None = None

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
        """Run ``command``: its reply, rendered."""
        kind = type(command)
        state = self.state
        writer = WRITERS.get(kind)
        if writer is not None:
            if self.signer is None:
                if kind is c.RequestAction and command.idempotency_key is not None:
                    # A retry of a request already decided is answered from
                    # the log, which needs no key; anything else would write.
                    reply = run_steps(writer(state, command, now, lines), _refuse_write)
                else:
                    raise ReadOnly(READ_ONLY)
            elif self.fenced is not None:
                raise AgentUnavailable(self.fenced)
            else:
                reply = run_steps(writer(state, command, now, lines), self._write)
        else:
            view = VIEWS.get(kind)
            if view is None:
                return self._answer_itself(kind, command)
            reply = view(state, command, now, lines)
        render = self.render.get(kind)
        return reply if render is None else render(state, reply, now, lines)

    def _answer_itself(self, kind: type, command: Any) -> Any:
        """The commands the core has no handler for."""
        if kind is c.WatchAction:
            return self._watch(command.action_id)
        if kind is c.GetLogView:
            # The committed head: records of this batch are not durable yet.
            return LogView(self.log, self.committed, self.fenced is not None)
        raise TypeError(f"not a command: {command!r}")

    async def _lines(self, seqs: Sequence[int] | Recall) -> Lines:
        """The lines at ``seqs``: those of this batch from memory, the
        committed ones from the store (off the event loop)."""
        if isinstance(seqs, Recall):
            return await self._recall(seqs)
        committed = self.committed.head.seq
        lines: dict[int, bytes] = {}
        old = [seq for seq in seqs if seq <= committed]
        if old:
            lines.update(await self.log.lines(old, self.committed))
        for seq in seqs:
            if seq > committed:
                lines[seq] = self._buffer[seq - committed - 1][:-1]
        return lines

    async def _recall(self, recall: Recall, *, committed_only: bool = False) -> Lines:
        """The lines of the records that name an action that left memory:
        those of its stretch of the log (``Recall``) that name it, then its
        late records."""
        needle = b'"action_id":"' + recall.action_id.encode() + b'"'

        def naming(line: bytes) -> bytes | None:
            return line.rstrip(b"\n") if needle in line else None

        enough = None if recall.whole else 2  # its request and the record after it
        found: dict[int, bytes] = await self._scan(
            recall.after, recall.upto, naming, committed_only=committed_only, enough=enough
        )
        if recall.late and recall.whole:
            found.update(await self._lines(recall.late))
        return found

    async def _scan(
        self,
        after: int,
        upto: int,
        pick: Callable[[bytes], Any],
        *,
        committed_only: bool = False,
        enough: int | None = None,
    ) -> dict[int, Any]:
        """What ``pick`` makes of each line after seq ``after`` up to seq
        ``upto`` (None: nothing), by seq, at most ``enough``: the committed
        lines read from the store a page at a time and picked off the event
        loop (one page held at once), then those of this batch."""
        found: dict[int, Any] = {}
        committed = self.committed
        read = self.log.read_after

        def page(after: int) -> tuple[int, list[tuple[int, Any]]]:
            lines = read(after, committed, RECALL_PAGE)
            picked = []
            for seq, line in enumerate(lines, after + 1):
                if seq > upto:
                    break
                value = pick(line)
                if value is not None:
                    picked.append((seq, value))
            return len(lines), picked

        while after < min(upto, committed.head.seq):
            count, picked = await asyncio.to_thread(page, after)
            if not count:
                break
            after += count
            for seq, value in picked:
                found[seq] = value
                if len(found) == enough:
                    return found
        if not committed_only:
            for seq, line in enumerate(self._buffer, committed.head.seq + 1):
                if seq > upto:
                    break
                value = pick(line)
                if value is not None:
                    found[seq] = value
                    if len(found) == enough:
                        return found
        return found

    async def _restore_rate_history(self, gap: RateGap) -> None:
        """Before a command runs: the allowed times a rate check in force
        counts that memory no longer holds (a policy that counts further
        back was set since they were trimmed), read back from the log
        (``rate_history``)."""
        times = array("d")  # 8 bytes a time, not a parsed record: a day may be read

        def keep(line: bytes) -> None:
            # The bytes first: only a line holding them is parsed (an input
            # may hold them too, so the parsed kind decides).
            if _ALLOWED_NEEDLE in line:
                at = allowed_time(loads_trusted(line.decode()), gap)
                if at is not None:
                    times.append(at)

        start = await self._first_after(gap.since, gap.upto_seq)
        await self._scan(start - 1, gap.upto_seq, keep)
        restore_allowed_times(self.state, gap, times)

    async def _first_after(self, since: float, upto: int) -> int:
        """The first seq up to ``upto`` whose record's ts is after ``since``
        (``upto`` + 1: none), by bisection: ts never goes backwards."""
        low, high = 0, upto + 1
        while low < high:
            mid = (low + high) // 2
            line = (await self._lines([mid]))[mid]
            if parse_ts(loads_trusted(line.decode())["ts"]) > since:
                high = mid
            else:
                low = mid + 1
        return low

    async def old_request(self, action_id: str) -> dict[str, Any] | None:
        """The action_requested record of an action that left memory, read
        from the store (off the event loop); None for any other action. For
        a reader of the log outside the actor's turn (the webhooks, which
        may lag behind it): it reads only committed lines of the store."""
        state = self.state
        n = action_number(state, action_id)
        if n is None or not left_memory(state, n):
            return None
        lines = await self._recall(recall(state, n, whole=False), committed_only=True)
        return recalled(state, n, lines).request

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
        run_batch = self.log.run_batch  # the store's commit strategy (bound once)
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
                    if await run_batch(self, batch):
                        break
                    if self.snapshot_wanted:
                        self.take_snapshot()
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
        last = self.state.last_record
        try:
            # Only a request left undecided is decided here, and its rate check
            # counts the calls before it; otherwise a gap waits for the first
            # command, where a read that fails fails that command alone.
            if last is not None and last["kind"] == Kind.ACTION_REQUESTED:
                gap = rate_gap(self.state, parse_ts(self._ts))
                if gap is not None:
                    await self._restore_rate_history(gap)
            run_steps(finish_interrupted(self.state), self._write)
        except Exception as exc:  # a signed last record no command of ours writes
            self._buffer.clear()
            self.fence(LogWriteError(f"cannot finish its last command: {exc!r}"))
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
        await self.log.finish(self, data)

    # -- the log's BatchHost (agents_runtime.log.store) ------------------------

    async def decide(self, batch: Batch) -> tuple[Answers, Errors, bool, bytes]:
        """Run the batch's commands in order, each seeing the records of those
        before it: their answers, their errors, whether to stop, and the
        lines of their records for the store to append."""
        # One clock reading a batch: its records are committed together, and
        # formatting a ts per command cost ~3 us of the actor's ~20.
        now = self._tick()
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
                if self.state.rate_known_since is not None:  # the fold has trimmed
                    gap = rate_gap(self.state, now)
                    if gap is not None:
                        await self._restore_rate_history(gap)
                lines = NO_LINES
                kind = type(command)
                reads = READS.get(kind)
                if reads is not None:
                    seqs = reads(self.state, command)
                    if seqs:
                        lines = await self._lines(seqs)
                if kind in REPLIES_STATUS:
                    gone = scars_gone(self.state)
                    if gone:
                        lines = {**lines, **(await self._lines(gone))}
                answers.append((future, self._handle(command, now, lines)))
            except AgentError as exc:
                errors.append((future, exc))
            except Exception as exc:
                log.exception("agent %s: command %r failed", self.state.agent_id, command)
                errors.append((future, exc))
        buffer = self._buffer
        if not buffer:
            return answers, errors, stop, b""
        data = b"".join(buffer)
        buffer.clear()
        return answers, errors, stop, data

    def answer(self, answers: Answers, errors: Errors) -> None:
        for future, result in answers:
            if not future.done():  # done: its caller was cancelled
                future.set_result(result)
        for future, error in errors:
            if not future.done():
                future.set_exception(error)
        self._wake_watchers()

    def fail(self, batch: Batch, error: BaseException) -> bool:
        # No watcher is woken: the state may be ahead of the store.
        stop = False
        for command, future in batch:
            if command is _STOP:
                stop = True
            elif future is not None and not future.done():
                future.set_exception(error)
        return stop

    def advance(self, size: int) -> None:
        """A batch of ``size`` bytes is durable: its last record is the
        committed head (no record is sealed between the write's end and this)."""
        self.committed = Committed(self.state.head, self.committed.size + size)
        self.moved.add(self.state.agent_id)

    def fence(self, error: LogWriteError) -> str:
        log.error("agent %s: %s; refusing writes until restart", self.state.agent_id, error)
        self.fenced = (
            f"writing the log of agent {self.state.agent_id} failed; "
            "it accepts no writes until guardd is restarted"
        )
        # The state ran ahead of the store: rebuild it from what was committed.
        loaded = self._reload(self.committed)
        if loaded.state is not None:
            self.state = loaded.state
        return self.fenced

    def fold(self, lines: list[bytes]) -> Failure | None:
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
            return exc.failure
        except (KeyError, TypeError, ValueError) as exc:
            seq = state.head.seq + 1
            return Failure(seq + 1, seq, f"record does not apply: {exc}")
        size = sum(len(line) + 1 for line in lines)
        self.committed = Committed(state.head, self.committed.size + size)
        if state.expiry_dirty:
            state.expiry_dirty = False
            self._deadline = next_deadline(state)
        return None

    async def rebuild(self, upto: Committed) -> Failure | None:
        # Read and fold off the event loop: the other agents' batches go on
        # meanwhile. From the last rebuilt state or the agent's snapshot and
        # the rows after it when they reach ``upto``; else the whole log,
        # which must still reach ``upto`` unchanged (and says how it does not).
        rebuilt = await asyncio.to_thread(self._from_snapshot, upto)
        if rebuilt is not None:
            state, self.committed = rebuilt
            self.state = state
            self._deadline = next_deadline(state)
            return None
        loaded = await asyncio.to_thread(self._reload, upto)
        contents = loaded.contents
        if loaded.state is None:
            assert loaded.failure is not None
            return loaded.failure
        self.state = loaded.state
        self.committed = Committed(loaded.state.head, contents.valid_length)
        self._deadline = next_deadline(self.state)
        self.rebuilt_from = None
        return None

    def _from_snapshot(self, upto: Committed) -> tuple[AgentState, Committed] | None:
        """The state at ``upto`` from the last rebuilt state or the agent's
        snapshot and the records after it, each verified (chain from the
        start's head, key), with ``upto``; or, when the snapshot is ahead of
        ``upto`` (another node wrote it), the snapshot's state and head once
        the rows from ``upto`` to it are verified (new here: signatures
        included). None when neither is usable or the rows do not reach
        ``upto`` (or the snapshot's head) exactly: the whole log then
        decides. The state reached is kept (``copy_state``) for the next. Blocking."""
        rebuilt = self._rebuilt
        found = None
        if rebuilt is not None and 0 <= upto.head.seq - rebuilt.head.seq <= REBUILT_REACH:
            found = self._fold_after(rebuilt.head, restore(rebuilt), upto)
        if found is None:
            found = self._from_stored_snapshot(upto)
        if found is not None:
            self._rebuilt = copy_state(found[0])
        return found

    def _from_stored_snapshot(self, upto: Committed) -> tuple[AgentState, Committed] | None:
        agent_id = self.state.agent_id
        try:
            data = None if self.read_snapshot is None else self.read_snapshot(agent_id)
            if data is None:
                return None
            snapshot = open_snapshot(data, self.public_key, agent_id)
            state, _ = snapshot_state(agent_id, snapshot, self.state.idempotency_retention)
            if state is None:
                return None
            keep_recent(state, self.state.recent_actions)  # before the fold, as replay does
            head = snapshot.head
            if head.seq > upto.head.seq:
                ahead = Committed(head, upto.size)
                lines = self.log.read_after(upto.head.seq, ahead)
                verifier = ChainVerifier.following(
                    upto.head,
                    public_key=self.public_key,
                    log_id=agent_id,
                    signer=self.signer,
                    checkpoint=Checkpoint(head.seq, head.hash),
                )
                for line in lines:
                    verifier.feed(line)  # the snapshot holds their fold
                if verifier.head != head:
                    return None
                self.rebuilt_from = head.seq
                return state, Committed(head, upto.size + sum(len(x) + 1 for x in lines))
        except (LogReadError, SnapshotError, VerificationError, KeyError, TypeError, ValueError):
            return None
        return self._fold_after(head, state, upto)

    def _fold_after(
        self, head: Head, state: AgentState, upto: Committed
    ) -> tuple[AgentState, Committed] | None:
        """``state`` (verified, at ``head``) brought to ``upto`` by the rows
        after ``head``, each verified; None when they do not reach it."""
        try:
            lines = self.log.read_after(head.seq, upto)
            verifier = ChainVerifier.following(
                head,
                public_key=self.public_key,
                log_id=state.agent_id,
                signer=self.signer,
                checkpoint=_verified(upto),
            )
            for line in lines:
                apply(state, verifier.feed(line))
        except (LogReadError, VerificationError, KeyError, TypeError, ValueError):
            return None
        if state.head != upto.head:
            return None
        self.rebuilt_from = head.seq
        return state, upto

    def _reload(self, upto: Committed) -> Loaded:
        """The whole log verified and folded (its state trimmed to this
        actor's setting), the state kept for the next rebuild. Blocking."""
        contents = self.log.read(upto)
        agent_id = self.state.agent_id
        loaded = replay(
            agent_id,
            contents,
            self.public_key,
            signer=self.signer,
            checkpoint=_verified(upto),
            idempotency_retention=self.state.idempotency_retention,
            recent_actions=self.state.recent_actions,
        )
        if loaded.state is not None:
            keep_recent(loaded.state, self.state.recent_actions)
            self._rebuilt = copy_state(loaded.state)
        return loaded

    def quarantine(self, failure: Failure) -> str:
        """This agent serves no more (the registry lists it as quarantined,
        as at startup)."""
        self._deadline = None
        if self.on_quarantine is not None:
            self.on_quarantine(self.state.agent_id, failure)
        return (
            f"agent {self.state.agent_id} is quarantined: a record in the store failed "
            f"verification ({quarantine_message(failure)})"
        )

    def postpone_expiry(self, seconds: float) -> None:
        if self._deadline is not None:
            self._deadline = max(self._deadline, self.clock() + seconds)

    def take_snapshot(self) -> bool:
        """Hand a copy of the state to ``on_snapshot`` now if it is the
        fold of the committed records (no batch under way, not fenced),
        else as soon as a batch leaves it so; whether it was taken now.
        The copy is a pickle: one C pass, the rest is done off the loop."""
        self.snapshot_wanted = True
        state = self.state
        if state.head != self.committed.head or self.fenced is not None:
            return False
        self.snapshot_wanted = False
        if self.on_snapshot is not None:
            self.on_snapshot(state.agent_id, state.head, pickle.dumps(state, _PICKLE))
        return True

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
