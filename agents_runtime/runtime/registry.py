"""The registry: loads every agent, starts and finds actors, creates
agents, and stops them all cleanly.

When agents are loaded (``Loading``): by default (``AT_START``) the start
loads every agent before anything is served. With ``ON_FIRST_USE``, and
always on a store other nodes create agents in (PostgreSQL), the start only
lists the agents: each is loaded, as below, on its first use
(``discover``; the requests that arrive meanwhile wait for the one load),
and until then is listed as not loaded (``unloaded``). Either way no agent
answers anything before its log has been verified. Where this process is
the only writer (the file store), a background sweep then loads every
agent nobody has asked for yet, one after another, so that a tampered log
is quarantined without anyone asking for it; a store shared by nodes has
none (each node would verify the whole store).

Loading verifies each log, against its checkpoint when it has one, and
folds it into state; a signed checkpoint that verifies spares the Ed25519
checks of the records it commits to (agents_runtime/log/checkpoint.py).
A final line cut by a crash (a torn tail) is moved aside to
``<id>.jsonl.torn``; any other failure quarantines the agent for the life
of the process, leaving its file as it is. Odd entries of ``agents/`` are
reported and skipped.

While serving, a background task writes the checkpoint of each agent whose
committed head moved, at most once every CHECKPOINT_EVERY seconds and once
more at a graceful stop (agents_runtime/log/checkpoint.py). The same rounds
write state snapshots (agents_runtime/log/snapshot.py): one of an agent
once ``snapshot_records`` records follow its last, or ``snapshot_secs``
seconds after the first record that followed it, whichever comes first.
The actor hands over a copy of its state at a committed head (a pickle, the
only work on the loop); a thread turns it into JSON, signs it and has the
store replace the agent's snapshot. A start then folds only the records
after an agent's snapshot.

Every task the registry starts (one per actor, the checkpoints, the store's
notices of other writers' appends, the loading of an agent another node
created) is owned by its ``Tasks`` (tasks.py) from ``start`` to ``stop``,
and ``stop`` ends each by cancellation within a bounded time, once the
actors have had their grace to finish their mailboxes.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import gc
import logging
import multiprocessing
import os
import pickle
import threading
import time
from collections.abc import Awaitable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import attrs

from agents_runtime.core.behaviour import NO_LINES
from agents_runtime.core.commands import GetStatus
from agents_runtime.core.entries import signed_by
from agents_runtime.core.policy import Policy, policy_json
from agents_runtime.core.records import apply
from agents_runtime.core.snapshot import SCHEMA, prepare_reading, state_json
from agents_runtime.core.state import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_RECENT_ACTIONS,
    AgentState,
    keep_recent,
)
from agents_runtime.errors import (
    AgentExists,
    AgentUnavailable,
    GuardError,
    LogReadError,
    LogWriteError,
    NotFound,
    Quarantined,
    ReadOnly,
    ShuttingDown,
    StoreUnavailable,
)
from agents_runtime.log import canonical
from agents_runtime.log.checkpoint import CheckpointDir, CheckpointFile, CheckpointFileError
from agents_runtime.log.keys import KeyRing, Signer
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import Head, genesis_fields, seal, timestamp_micros
from agents_runtime.log.snapshot import seal_snapshot
from agents_runtime.log.store import UNREACHABLE, AgentLog, LogContents, LogStore
from agents_runtime.log.verify import CHECKPOINT_UNREADABLE, TRUNCATED, Checkpoint, Failure
from agents_runtime.runtime.actor import (
    UNRENDERED,
    AgentActor,
    AgentRef,
    Clock,
    Renders,
    wall_clock,
)
from agents_runtime.runtime.fleet import Fleet
from agents_runtime.runtime.heap import give_back
from agents_runtime.runtime.replay import (
    Loaded,
    load,
    quarantine_message,
    read_snapshot,
    replay,
)
from agents_runtime.runtime.tasks import Tasks

log = logging.getLogger("agents_runtime.runtime.registry")

# How often the heads that moved are written to their checkpoint files: the
# most a checkpoint trails its log's committed head while guardd runs.
CHECKPOINT_EVERY = 1.0
# Seconds a task of the registry gets to end once cancelled at the stop
# (the actors have their grace before that).
CANCEL_TIMEOUT = 1.0
# A state snapshot of an agent once this many records follow its last, or
# this many seconds after the first of them (guardd's --snapshot-records
# and --snapshot-secs).
SNAPSHOT_RECORDS = 10_000
SNAPSHOT_SECS = 300.0
# Snapshots asked for in one round at most: each copy of a state is made on
# the event loop, so a start that finds many agents due spreads them out.
SNAPSHOTS_PER_ROUND = 32


class Loading(enum.StrEnum):
    """When the registry loads (verifies and folds) each agent's log."""

    AT_START = "at-start"  # all of them before serving
    ON_FIRST_USE = "on-first-use"  # each before its first answer; a sweep loads the rest


@attrs.frozen
class Listed:
    """An agent as ``Registry.list`` finds it: active, with its status as
    ``GetStatus`` answers it; quarantined, with the failure; or (``unloaded``)
    in the store but not yet loaded by this node (a shared store loads an
    agent on its first use)."""

    agent_id: str
    status: Any = None
    failure: Failure | None = None
    unloaded: bool = False


@attrs.frozen
class LoadSummary:
    loaded: int
    quarantined: dict[str, Failure]
    torn: list[str]  # agents whose torn tail was moved aside
    removed: int  # unfinished creations cleaned up
    odd: list[str] = attrs.field(factory=list)  # one line per odd entry of agents/, skipped
    unloaded: int = 0  # agents listed, each loaded on its first use (or by the sweep)


class Registry:
    def __init__(
        self,
        store: LogStore,
        ring: KeyRing,
        *,
        clock: Clock = wall_clock,
        checkpoint_dir: Path | None = None,
        snapshot_records: int = SNAPSHOT_RECORDS,
        snapshot_secs: float = SNAPSHOT_SECS,
        idempotency_retention: float = DEFAULT_IDEMPOTENCY_RETENTION,
        recent_actions: int = DEFAULT_RECENT_ACTIONS,
        render: Renders = UNRENDERED,
        loading: Loading = Loading.AT_START,
    ) -> None:
        self.store = store
        # Agents listed at the start and each loaded on its first use: as
        # asked, and always where other processes create agents (a node
        # cannot load what another creates after its start).
        self.on_first_use = loading is Loading.ON_FIRST_USE or store.others_create_agents
        # Then a background sweep loads every agent nobody asked for, where
        # this process is the only writer: on a shared store every node
        # would read and verify the whole store.
        self.sweeps = self.on_first_use and not store.others_create_agents
        # Seconds an Idempotency-Key is kept (agents_runtime/core/state.py).
        self.idempotency_retention = idempotency_retention
        # How many latest actions of an agent keep their keys as they came
        # (agents_runtime/core/idempotency.py): set on each state an actor
        # takes; it shapes memory only, never an answer.
        self.recent_actions = recent_actions
        self.snapshot_records = snapshot_records
        self.snapshot_secs = snapshot_secs
        # Each command's renderer, handed to every actor (actor.py): guardd
        # gives its views, so that replies come out of the actor rendered.
        self.render = render
        self.checkpoints = CheckpointDir(checkpoint_dir or store.default_checkpoint_dir())
        self.ring = ring
        self.clock = clock
        self.actors: dict[str, AgentActor] = {}
        self.quarantined: dict[str, Failure] = {}
        # Bytes of each quarantined log, as the store held it when the agent
        # was quarantined: the metrics read this, never the store.
        self.quarantined_bytes: dict[str, int] = {}
        self._creating: set[str] = set()
        # Agents listed but not loaded yet (each loaded, its checkpoint file
        # read, on first use or by the sweep).
        self.unloaded: set[str] = set()
        self._discovering: dict[str, asyncio.Task[AgentActor]] = {}
        self._found_serving: set[str] = set()  # quarantined after startup
        self._found_loading: set[str] = set()  # quarantined when first used
        self._found_swept: set[str] = set()  # quarantined by the background sweep
        self._tasks = Tasks()
        self._running = False
        # Checkpoints: the seq each file holds (as read or last written: a
        # seq is enough, since a head only moves forward and the hash at the
        # checkpoint's seq was verified at load; a Head per agent would cost
        # ~0.2 KiB of each idle agent), the agents whose committed head moved
        # since the last round, and the loaded logs to fsync before a
        # checkpoint first names their records.
        self._saved_seq: dict[str, int] = {}
        self._moved: set[str] = set()
        self._unsynced: set[str] = set()
        # Agents whose checkpoint file, read at startup, is an older unsigned
        # one, or a signed one that did not verify: both are replaced.
        self._unsigned: set[str] = set()
        self._forged: set[str] = set()
        self._checkpointer: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._sweep_pool: ProcessPoolExecutor | None = None  # while the sweep loads elsewhere
        # Set once the sweep has ended, or at the start when there is none.
        self._swept = asyncio.Event()
        # One writer of checkpoint files at a time, never one going backwards:
        # a round still on its thread when stop() gives up waiting for it
        # must not overwrite the final round's newer heads.
        self._write_lock = threading.Lock()
        self.fleet = Fleet(self)
        # Snapshots: the seq of each agent's snapshot in the store (when it
        # has one), when (self.clock) the first record after it was seen, for
        # the agents that have records after it, and the states handed over
        # by actors, waiting to be written.
        self._snap_seq: dict[str, int] = {}
        self._snap_since: dict[str, float] = {}
        self._snap_taken: dict[str, tuple[Head, bytes]] = {}
        self._snap_writing: asyncio.Task[set[str]] | None = None
        self.snapshots_written = 0

    # -- startup -------------------------------------------------------------

    def load(self, *, workers: int | None = None) -> LoadSummary:
        """Verify and fold every log on disk (before serving).

        With enough logs to pay for it, worker processes (``workers``, default
        one per usable CPU) verify and fold whole files in parallel; this
        process adopts each result in agent order, so torn tails are moved and
        quarantines decided exactly as when it does it all by itself.

        When agents load on first use (``Loading.ON_FIRST_USE``, and always
        on a store other nodes write too), no log is read: the agents are
        listed (one directory listing, or one query) and each is loaded on
        its first use (``discover``), verified and folded as here."""
        removed = self.store.remove_unfinished()
        torn: list[str] = []
        scan = self.store.scan()
        for line in scan.odd:
            log.warning("%s", line)
        lazy = self.on_first_use
        checkpoints = self._read_checkpoints(scan.agent_ids, each=not lazy)
        ids = [agent_id for agent_id in scan.agent_ids if agent_id not in self.quarantined]
        if lazy:
            self.unloaded = set(ids)
            ids = []
        logs = _load_logs(
            self.store,
            ids,
            [checkpoints.get(agent_id) for agent_id in ids],
            self.ring.public_key,
            self.ring.signer,
            workers,
            self.idempotency_retention,
            self.recent_actions,
        )
        for loaded in logs:
            if self._adopt(loaded):
                if loaded.contents.torn_tail is not None:
                    torn.append(loaded.agent_id)
        self.fleet.load()
        if self.quarantined:  # one request to the store, before serving
            self.quarantined_bytes.update(self.store.sizes(sorted(self.quarantined)))
        return LoadSummary(
            len(self.actors), dict(self.quarantined), torn, removed, scan.odd, len(self.unloaded)
        )

    def _read_checkpoints(self, ids: list[str], *, each: bool = True) -> dict[str, Checkpoint]:
        """Each agent's checkpoint (``_checkpoint``; not read when ``each``
        is false: an agent loaded on first use has its own read then);
        and a checkpoint whose log is gone quarantines its agent, the whole
        log being the furthest a log can be cut."""
        if not self.ring.read_only:
            self.checkpoints.prepare()
        found: dict[str, Checkpoint] = {}
        for agent_id in ids if each else ():
            checkpoint = self._checkpoint(agent_id, self._checkpoint_file(agent_id))
            if checkpoint is not None:
                found[agent_id] = checkpoint
        known = set(ids)
        for agent_id in self.checkpoints.agent_ids():
            if agent_id in known:
                continue
            try:
                stored = self.checkpoints.read(agent_id)
            except CheckpointFileError:
                stored = None
            seq = stored.checkpoint.seq if stored is not None else None
            self._quarantine(
                agent_id,
                Failure(1, seq, TRUNCATED),
                f"it has a checkpoint ({self.checkpoints.path(agent_id)}) but no log",
            )
        return found

    def _checkpoint_file(
        self, agent_id: str
    ) -> tuple[CheckpointFile | CheckpointFileError | None, str | None]:
        """The agent's checkpoint file as read (None: it has none; the error
        when it cannot be read), and when it is a signed note, why it cannot
        be trusted (None: it can). Touches nothing of the registry: a first
        use runs it on a thread."""
        try:
            stored = self.checkpoints.read(agent_id)
        except CheckpointFileError as exc:
            return exc, None
        if stored is None or not stored.is_signed_note:
            return stored, None
        return stored, stored.problem(self.ring.public_key, agent_id)

    def _checkpoint(
        self, agent_id: str, read: tuple[CheckpointFile | CheckpointFileError | None, str | None]
    ) -> Checkpoint | None:
        """The checkpoint the agent's log is held to: a signed one that
        verifies under the audit key for this agent (marked signed: the
        records up to it need no signature check), or an older unsigned one
        (held against the log as before); a signed one that does not verify
        is ignored. One that cannot be read quarantines the agent."""
        stored, problem = read
        if isinstance(stored, CheckpointFileError):
            self._quarantine(agent_id, Failure(0, None, CHECKPOINT_UNREADABLE), str(stored))
            return None
        if stored is None:
            return None
        if not stored.is_signed_note:
            # An older version's one-line file: held against the log as
            # before, vouching for no signature; not in _saved_seq, so the
            # next round replaces it with a signed one.
            self._unsigned.add(agent_id)
            return stored.checkpoint
        if problem is not None:
            # Never trusted, not even for its seq: one copied from another
            # agent would quarantine a sound log. The log is verified whole,
            # and a signed checkpoint written from it.
            log.warning(
                "agent %s: ignoring its checkpoint %s: %s; verifying every signature",
                agent_id,
                self.checkpoints.path(agent_id),
                problem,
            )
            self._forged.add(agent_id)
            return None
        checkpoint = attrs.evolve(stored.checkpoint, signed=True)
        self._saved_seq[agent_id] = checkpoint.seq
        return checkpoint

    def _quarantine(self, agent_id: str, failure: Failure, detail: str | None = None) -> None:
        self.quarantined[agent_id] = failure
        more = f" ({detail})" if detail else ""
        log.error("agent %s quarantined: %s%s", agent_id, quarantine_message(failure), more)

    def _adopt(self, loaded: Loaded) -> bool:
        agent_id = loaded.agent_id
        if loaded.state is None:
            assert loaded.failure is not None
            self._quarantine(agent_id, loaded.failure)
            return False
        contents = loaded.contents
        if loaded.snapshot_problem is not None:
            log.warning(
                "agent %s: ignoring its state snapshot: %s; folded from genesis",
                agent_id,
                loaded.snapshot_problem,
            )
        if loaded.snapshot_seq is not None:
            self._snap_seq[agent_id] = loaded.snapshot_seq
        if (
            loaded.state.head.seq - (-1 if loaded.snapshot_seq is None else loaded.snapshot_seq)
            >= self.snapshot_records
        ):
            self._snap_since[agent_id] = float("-inf")  # due at the first round
        if contents.torn_tail is not None:
            log.warning(
                "agent %s: set aside a torn final line (%d bytes, never acknowledged)",
                agent_id,
                len(contents.torn_tail),
            )
        agent_log = self.store.open(agent_id, contents, writable=not self.ring.read_only)
        self.actors[agent_id] = self._actor(loaded.state, agent_log)
        head = loaded.state.head
        saved = self._saved_seq.get(agent_id)
        if agent_id in self._unsigned:
            log.info(
                "agent %s: its checkpoint is unsigned (an older version); %s",
                agent_id,
                "kept (read-only)" if self.ring.read_only else "a signed one replaces it",
            )
        elif saved is None and agent_id not in self._forged:
            log.warning(
                "agent %s: no checkpoint; %s from its verified log (%s)",
                agent_id,
                "not written (read-only)" if self.ring.read_only else "one is written",
                head.checkpoint(),
            )
        if saved != head.seq:
            # Records this process has not fsynced itself: the log is fsynced
            # before a checkpoint names them (kill -9 keeps them in the page
            # cache, a power loss might not).
            self._moved.add(agent_id)
            self._unsynced.add(agent_id)
        return True

    def _actor(self, state: AgentState, agent_log: AgentLog) -> AgentActor:
        keep_recent(state, self.recent_actions)
        actor = AgentActor(
            state,
            log=agent_log,
            signer=self.ring.signer,
            public_key=self.ring.public_key,
            clock=self.clock,
            moved=self._moved,
            render=self.render,
        )
        actor.on_quarantine = self._quarantined_while_serving
        actor.on_snapshot = self._snapshot_taken
        actor.read_snapshot = self.store.read_snapshot
        if self._running:
            self._start(actor)
        return actor

    def _quarantined_while_serving(self, agent_id: str, failure: Failure) -> None:
        """A record another node appended failed verification, or the store
        no longer holds the committed head (a gap): the agent is quarantined
        here as if it had failed at startup (its actor ends)."""
        actor = self.actors.pop(agent_id, None)
        if actor is not None:
            self.quarantined_bytes[agent_id] = actor.committed.size
        self._found_serving.add(agent_id)
        self._quarantine(agent_id, failure, "found while serving")

    def _start(self, actor: AgentActor) -> None:
        actor.task = self._tasks.start(actor.run(), name=f"agent:{actor.state.agent_id}")

    async def start(self) -> None:
        if self._follower is None:
            # Notices of other writers' appends (a store with one writer has none).
            self._follower = self._tasks.start(self.store.follow(self._appended), name="follow")
        self._running = True
        for actor in self.actors.values():
            if actor.task is None:
                self._start(actor)
        if not self.ring.read_only and self._checkpointer is None:
            self._checkpointer = self._tasks.start(self._checkpoint_rounds(), name="checkpoints")
        # A fan-out of a named policy that a crash cut short ends before serving.
        await self.fleet.catch_up()
        if self.sweeps and self.unloaded and self._sweeper is None:
            self._sweeper = self._tasks.start(self._sweep(), name="sweep")
        elif self._sweeper is None:
            self._swept.set()  # nothing to sweep

    # -- checkpoints ---------------------------------------------------------

    async def _checkpoint_rounds(self) -> None:
        """Write the heads that moved, every CHECKPOINT_EVERY seconds, until
        cancelled by stop() (which then writes the final round)."""
        while True:
            await asyncio.sleep(CHECKPOINT_EVERY)
            await self.save_checkpoints()
            await self.save_snapshots()

    async def save_checkpoints(self) -> None:
        """Write the checkpoint of every agent whose committed head moved
        since it was last written, on a thread: never on the decision path.
        A failed write is logged and tried again next round."""
        moved = [a for a in self._moved if a in self.actors]
        self._moved.clear()
        now = self.clock()
        since = self._snap_since
        for agent_id in moved:
            if agent_id not in since:
                since[agent_id] = now
        heads = {}
        for agent_id in moved:
            head = self.actors[agent_id].committed_head
            if head.seq != self._saved_seq.get(agent_id):
                heads[agent_id] = head
        if not heads:
            return
        sync = [a for a in heads if a in self._unsynced]
        try:
            await asyncio.to_thread(self._write_checkpoints, heads, sync)
        except asyncio.CancelledError:
            # Stopped while the thread writes: the final round writes these
            # heads too, after it (the write lock), unless it did already.
            self._moved.update(heads)
            raise
        except OSError as exc:
            log.error(
                "writing checkpoints to %s failed: %s; trying again",
                self.checkpoints.root,
                exc.strerror or exc,
            )
            self._moved.update(heads)
            return
        self._unsynced.difference_update(heads)

    def _write_checkpoints(self, heads: dict[str, Head], sync: list[str]) -> None:
        with self._write_lock:
            saved = self._saved_seq
            newer = {a: h for a, h in heads.items() if h.seq > saved.get(a, -1)}
            signer = self.ring.signer
            assert signer is not None  # no rounds in read-only mode
            self.store.make_durable(a for a in sync if a in newer)
            self.checkpoints.write(newer, signer)
            saved.update((a, h.seq) for a, h in newer.items())

    # -- snapshots -----------------------------------------------------------

    async def save_snapshots(self) -> None:
        """Ask the actor of each agent whose snapshot is due for a copy of
        its state, and write the copies handed over on a thread. A failed
        write is logged; the agent is due again at the next round."""
        now = self.clock()
        asked = 0
        for agent_id, since in list(self._snap_since.items()):
            actor = self.actors.get(agent_id)
            if actor is None:
                del self._snap_since[agent_id]
                continue
            behind = actor.committed_head.seq - self._snap_seq.get(agent_id, -1)
            if behind >= self.snapshot_records or now - since >= self.snapshot_secs:
                actor.take_snapshot()
                asked += 1
                if asked == SNAPSHOTS_PER_ROUND:
                    break  # the others at the next round
        if not self._snap_taken:
            return
        taken, self._snap_taken = self._snap_taken, {}
        # A thread goes on when its round is cancelled: stop() waits for it
        # (``_snap_writing``), so that no snapshot is written after a stop.
        writing = self._tasks.start(
            asyncio.to_thread(self._write_snapshots, taken), name="snapshots", report=False
        )
        self._snap_writing = writing
        written = await asyncio.shield(writing)
        self.snapshots_written += len(written)
        for agent_id in taken:
            if agent_id in written:
                self._snap_seq[agent_id] = taken[agent_id][0].seq
            else:
                self._snap_since.setdefault(agent_id, now)

    def _snapshot_taken(self, agent_id: str, head: Head, state: bytes) -> None:
        """An actor handed over its state at ``head`` (a pickle)."""
        self._snap_taken[agent_id] = (head, state)
        self._snap_since.pop(agent_id, None)

    def _write_snapshots(self, taken: dict[str, tuple[Head, bytes]]) -> set[str]:
        """On a thread: seal each state as a snapshot and store it; the
        agents whose snapshot was written."""
        signer = self.ring.signer
        assert signer is not None  # no rounds in read-only mode
        written = set()
        for agent_id in list(taken):
            head, blob = taken[agent_id]
            taken[agent_id] = (head, b"")  # the copy is freed once written
            if self._write_snapshot(agent_id, head, blob, signer):
                written.add(agent_id)
            del blob
        give_back()  # the copies just freed (agents_runtime/runtime/heap.py)
        return written

    def _write_snapshot(self, agent_id: str, head: Head, blob: bytes, signer: Signer) -> bool:
        try:
            state = state_json(pickle.loads(blob))  # noqa: S301 (our own actor's copy)
            data = seal_snapshot(agent_id, head, SCHEMA, state, signer)
            self.store.write_snapshot(agent_id, head.seq, data)
        except (OSError, GuardError, ValueError, TypeError) as exc:
            log.error("agent %s: writing its state snapshot failed: %s", agent_id, exc)
            return False
        return True

    # -- lookup --------------------------------------------------------------

    def ref(self, agent_id: str) -> AgentRef:
        actor = self.actors.get(agent_id)
        if actor is not None:
            return actor.ref
        failure = self.quarantined.get(agent_id)
        if failure is not None:
            when = (
                "while serving"
                if agent_id in self._found_serving
                else "when it was first used"
                if agent_id in self._found_loading
                else "when it was loaded in the background"
                if agent_id in self._found_swept
                else "at startup"
            )
            raise Quarantined(
                f"agent {agent_id} is quarantined: its log failed verification {when} "
                f"({quarantine_message(failure)})"
            )
        if agent_id in self.unloaded or self.store.others_create_agents:
            return LateRef(self, agent_id)  # not loaded, or perhaps created by another node
        raise NotFound(f"no agent {agent_id}")

    async def discover(self, agent_id: str, *, swept: bool = False) -> AgentActor:
        """The actor of an agent not loaded yet (listed at the start, or
        created by another node since): its log read from the store,
        verified and folded as at startup. NotFound when the store has no
        such agent. ``swept``: asked by the background sweep, not a request
        (said in its log line and in a quarantine's message)."""
        actor = self.actors.get(agent_id)
        if actor is not None:
            return actor
        self.ref(agent_id)  # Quarantined, or NotFound on a store of our own
        loading = self._discovering.get(agent_id)
        if loading is None:
            # Its error (NotFound, Quarantined, ...) is the askers' answer.
            loading = self._tasks.start(
                self._discover(agent_id, swept), name=f"discover:{agent_id}", report=False
            )
            self._discovering[agent_id] = loading
            loading.add_done_callback(lambda _: self._discovering.pop(agent_id, None))
        return await asyncio.shield(loading)

    async def _discover(self, agent_id: str, swept: bool = False) -> AgentActor:
        # The sweep's agents are listed: only a request's needs reading first
        # (an ID nobody created is NotFound), and the sweep's worker process
        # reads its own (``_load_elsewhere``).
        pool = self._sweep_pool if swept else None
        if pool is None:
            contents = await self._read(agent_id)
            actor = self.actors.get(agent_id)
            if actor is not None:  # created here meanwhile
                return actor
            if not contents.lines and agent_id not in self.unloaded:
                # Merely asked for by its ID: no such agent. One listed at the
                # start goes on, and its empty log is quarantined as at a start.
                raise NotFound(f"no agent {agent_id}")
        ring = self.ring
        read = await asyncio.to_thread(self._checkpoint_file, agent_id)
        actor = self.actors.get(agent_id)
        if actor is not None:  # created here meanwhile
            return actor
        checkpoint = self._checkpoint(agent_id, read)
        if agent_id in self.quarantined:  # its checkpoint cannot be read
            self.unloaded.discard(agent_id)
            (self._found_swept if swept else self._found_loading).add(agent_id)
            self.ref(agent_id)  # raises Quarantined
        loaded = None if pool is None else await self._load_elsewhere(pool, agent_id, checkpoint)
        if loaded is None:
            if pool is not None:  # the worker process is gone: here, then
                contents = await self._read(agent_id)
            snapshot, problem = await asyncio.to_thread(
                read_snapshot, self.store, agent_id, ring.public_key
            )
            loaded = await asyncio.to_thread(
                replay,
                agent_id,
                contents,
                ring.public_key,
                signer=ring.signer,
                checkpoint=checkpoint,
                snapshot=snapshot,
                idempotency_retention=self.idempotency_retention,
                recent_actions=self.recent_actions,
            )
            if problem is not None and loaded.snapshot_problem is None:
                loaded = attrs.evolve(loaded, snapshot_problem=problem)
        actor = self.actors.get(agent_id)
        if actor is not None:  # created here meanwhile
            return actor
        self.unloaded.discard(agent_id)
        if not self._adopt(loaded):
            self.quarantined_bytes[agent_id] = loaded.contents.valid_length
            (self._found_swept if swept else self._found_loading).add(agent_id)
            self.ref(agent_id)  # raises Quarantined
        actor = self.actors[agent_id]
        since = loaded.snapshot_seq
        # One line per agent a request loads; those of the sweep (every
        # agent of a big data dir) only when debugging.
        log.log(
            logging.DEBUG if swept else logging.INFO,
            "agent %s: loaded %s (head seq %d, folded from %s)",
            agent_id,
            "in the background" if swept else "on first use",
            actor.committed_head.seq,
            "genesis" if since is None else f"its snapshot at seq {since}",
        )
        # A fan-out of a named policy that a crash cut short, for this agent.
        await self.fleet.catch_up([actor])
        return actor

    async def _read(self, agent_id: str) -> LogContents:
        try:
            return await asyncio.to_thread(self.store.read, agent_id)
        except (LogReadError, OSError) as exc:  # a file store's read raises OSError
            raise _read_failed(agent_id, exc) from None

    async def _load_elsewhere(
        self, pool: ProcessPoolExecutor, agent_id: str, checkpoint: Checkpoint | None
    ) -> Loaded | None:
        """``load`` of one agent in the sweep's worker process, as the
        start's workers load (``_load_task``: the state comes back, not the
        lines); None when that process is gone (the sweep goes on here)."""
        ring = self.ring
        call = functools.partial(
            _load_task,
            self.store,
            [(agent_id, checkpoint)],
            ring.public_key,
            ring.signer,
            self.idempotency_retention,
            self.recent_actions,
        )
        try:
            [loaded] = await asyncio.get_running_loop().run_in_executor(pool, call)
        except BrokenProcessPool as exc:
            log.warning("loading in a worker process failed (%s); going on here", exc)
            self._end_sweep_pool()
            return None
        except (LogReadError, OSError) as exc:  # a file store's read raises OSError
            raise _read_failed(agent_id, exc) from None
        return loaded

    def _end_sweep_pool(self) -> None:
        pool, self._sweep_pool = self._sweep_pool, None
        if pool is not None:
            # Without waiting: a load under way ends in the worker, which exits.
            pool.shutdown(wait=False, cancel_futures=True)

    def _appended(self, agent_id: str, seq: int) -> None:
        """Another node committed records of ``agent_id`` up to ``seq``. An
        actor with a long-poll waiting reads them now, so that the long-poll
        wakes at once; any other reads them before its next batch anyway."""
        actor = self.actors.get(agent_id)
        if actor is not None and actor.watching and actor.committed_head.seq < seq:
            actor.poke()

    def exists(self, agent_id: str) -> bool:
        return agent_id in self.actors or agent_id in self.quarantined or agent_id in self.unloaded

    async def list(self) -> list[Listed]:
        """Every agent, active, quarantined or not yet loaded, by ID; on a
        shared store, those other nodes created since are listed (one query),
        none of them loaded."""
        if self.store.others_create_agents:
            await self._rescan()
        entries: list[Listed] = []
        for agent_id in sorted(set(self.actors) | set(self.quarantined) | set(self.unloaded)):
            failure = self.quarantined.get(agent_id)
            if failure is not None:
                entries.append(Listed(agent_id, failure=failure))
                continue
            if agent_id in self.unloaded:
                entries.append(Listed(agent_id, unloaded=True))
                continue
            actor = self.actors.get(agent_id)
            if actor is None:  # quarantined while this list was made
                continue
            try:
                status = await actor.ref.ask(GetStatus())
            except (AgentUnavailable, StoreUnavailable, Quarantined, ShuttingDown):
                continue
            entries.append(Listed(agent_id, status=status))
        return entries

    async def discover_all(self) -> None:
        """Load every agent of the store not loaded yet (what follows a named
        policy is known only from each agent's log); on a store other nodes
        write too, those they created since included."""
        if self.store.others_create_agents:
            await self._rescan()
        for agent_id in sorted(self.unloaded):
            with contextlib.suppress(NotFound, Quarantined):
                await self.discover(agent_id)

    async def swept(self) -> None:
        """Wait until the background sweep has ended: every agent is then
        loaded, quarantined, or could not be read. Called before ``start``,
        it waits for the sweep that ``start`` begins; where there is none it
        returns once the registry has started (or stopped)."""
        await self._swept.wait()

    async def _sweep(self) -> None:
        """Load every agent still not loaded, one after another, from the
        start until none is left (or the stop cancels it): the verifying and
        folding on threads, the loop free for requests between and during
        each. An agent a request loads meanwhile is skipped; one that cannot
        be read is left for its first use."""
        try:
            await self._sweep_all()
        finally:
            self._swept.set()

    async def _sweep_all(self) -> None:
        started = time.perf_counter()
        loaded = quarantined = unreadable = 0
        ids = sorted(self.unloaded)
        # Verifying and folding on a thread of this process holds its GIL
        # for most of each load, and the event loop waits for it at every
        # switch: requests served during a long sweep were several times
        # slower (bench/sweep_bench.py). With logs enough to pay for a
        # process of its own, the sweep loads in one.
        sizes = await asyncio.to_thread(self.store.sizes, ids)
        elsewhere = sum(sizes.values()) >= PARALLEL_LOAD_BYTES and load_workers() > 1
        if elsewhere:
            # Spawned: this process has threads by now, so fork is not safe.
            context = multiprocessing.get_context("spawn")
            self._sweep_pool = ProcessPoolExecutor(1, mp_context=context)
        try:
            for agent_id in ids:
                await asyncio.sleep(0)  # requests waiting go first
                if agent_id not in self.unloaded:
                    continue  # a request loaded it meanwhile
                try:
                    await self.discover(agent_id, swept=True)
                except Quarantined:
                    quarantined += 1
                except StoreUnavailable:
                    unreadable += 1
                except NotFound:
                    continue  # removed meanwhile
                else:
                    loaded += 1
        finally:
            self._end_sweep_pool()
        log.info(
            "background loading done in %.2f s%s: %d agents loaded, %d quarantined%s",
            time.perf_counter() - started,
            " (in a worker process)" if elsewhere else "",
            loaded,
            quarantined,
            f", {unreadable} could not be read (each is tried again at its first use)"
            if unreadable
            else "",
        )

    async def _rescan(self) -> None:
        """List the agents other nodes created since this one started, as
        not yet loaded (one query, off the event loop)."""
        try:
            scan = await asyncio.to_thread(self.store.scan)
        except LogReadError as exc:
            log.error("listing the store's agents failed: %s", exc)
            raise StoreUnavailable(UNREACHABLE) from None
        for agent_id in scan.agent_ids:
            if not self.exists(agent_id) and agent_id not in self._creating:
                self.unloaded.add(agent_id)

    # -- creation ------------------------------------------------------------

    def timestamp(self) -> str:
        return timestamp_now(self.clock)

    async def create(
        self,
        agent_id: str,
        policy: Policy,
        policy_ref: str | None = None,
        version: int | None = None,
        *,
        by: str | None = None,
        by_id: str | None = None,
    ) -> Any:
        """Write a new log (genesis and policy) durably, start its actor.
        ``policy_ref``: the named policy whose ``version`` it follows (an
        agent created with a policy ref is created through ``fleet``); both
        records name the operator who creates it (``by``, ``by_id``); the new
        agent's status, as ``GetStatus`` answers it."""
        if self.exists(agent_id) or agent_id in self._creating:
            raise AgentExists(f"agent {agent_id} already exists")
        signer = self.ring.signer
        if signer is None:
            raise ReadOnly("guardd has no signing key (keys/audit.key): cannot create agents")
        self._creating.add(agent_id)
        try:
            state = AgentState(agent_id, idempotency_retention=self.idempotency_retention)
            ts = timestamp_now(self.clock)
            lines = []
            first = signed_by({"kind": Kind.POLICY, "policy": policy_json(policy)}, by, by_id)
            if policy_ref is not None:
                first |= {"policy_ref": policy_ref, "version": version}
            genesis = signed_by(genesis_fields(agent_id, signer.public_key_hex), by, by_id)
            for fields in (genesis, first):
                sealed = seal(fields, prev=state.head, ts=ts, signer=signer)
                record = canonical.loads(sealed.line[:-1])
                apply(state, record)
                lines.append(sealed.line)
            data = b"".join(lines)
            try:
                agent_log = await self.store.create(agent_id, data)
            except LogWriteError as exc:
                log.error("creating agent %s failed: %s", agent_id, exc)
                raise
            if agent_id in self.actors:  # discovered meanwhile (a shared store)
                agent_log.close()
                return await self.actors[agent_id].ref.ask(GetStatus())
            self.actors[agent_id] = self._actor(state, agent_log)
            self._moved.add(agent_id)  # created durably: its first checkpoint is due
            # Rendered here, before the actor runs a command: nothing else
            # has the state yet.
            render = self.render.get(GetStatus)
            return state if render is None else render(state, state, 0.0, NO_LINES)
        finally:
            self._creating.discard(agent_id)

    # -- shutdown ------------------------------------------------------------

    def release_watchers(self) -> None:
        for actor in self.actors.values():
            actor.release_watchers()

    async def stop(self, grace: float = 4.0) -> None:
        """Let every actor finish its mailbox and fsync, then end every task
        of the registry by cancellation, and write the final checkpoints.

        Hypercorn's own grace (5 s) comes first; with this 4 s the process
        exits within the 10 s an orchestrator gives after SIGTERM."""
        self._running = False
        self._swept.set()  # whoever waits for the sweep waits no more
        # Nobody waits on these any more (Hypercorn has answered every
        # request): notices of other writers, agents being loaded, the sweep.
        loading: list[asyncio.Task[Any]] = list(self._discovering.values())
        if self._sweeper is not None:
            loading.append(self._sweeper)
            self._sweeper = None
        if self._follower is not None:
            loading.append(self._follower)
            self._follower = None
        await self._tasks.cancel(loading, within=CANCEL_TIMEOUT)
        # Each actor finishes what its mailbox holds; one that has not within
        # the grace is cancelled.
        actors = [a for a in self.actors.values() if a.task is not None and not a.task.done()]
        await asyncio.gather(*(a.stop() for a in actors), return_exceptions=True)
        late = await self._tasks.wait([a.task for a in actors if a.task is not None], grace)
        await self._tasks.cancel(late, within=CANCEL_TIMEOUT)
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            await self._tasks.cancel([checkpointer], within=grace)
        if self._snap_writing is not None:  # a round's snapshots, on their thread
            await self._tasks.wait([self._snap_writing], grace)
        # The store finishes what is queued (a cancelled actor's batch
        # included) before any log is closed.
        await self.store.aclose()
        if checkpointer is not None:
            # Every head is final now: the checkpoints end where the logs do.
            await self.save_checkpoints()
        await self._tasks.cancel(within=CANCEL_TIMEOUT)  # none should be left
        for actor in self.actors.values():
            actor.log.close()


class LateRef(AgentRef):
    """The handle of an agent this node has not loaded: listed at the start,
    or, on a shared store, perhaps created by another node since this one
    started. Its first command loads it (``Registry.discover``)."""

    __slots__ = ("_registry",)

    def __init__(self, registry: Registry, agent_id: str) -> None:
        self._registry = registry
        self.agent_id = agent_id

    def ask(self, command: Any) -> Awaitable[Any]:
        return self._ask(command)

    async def _ask(self, command: Any) -> Any:
        actor = await self._registry.discover(self.agent_id)
        return await actor.ref.ask(command)


# Startup verifies in worker processes only when there is this much log to
# verify: below it, starting them costs more than they save.
PARALLEL_LOAD_BYTES = 4 * 1024 * 1024
LOAD_TASK_BYTES = 1024 * 1024  # logs per worker task, to amortise the hand-offs


def _read_failed(agent_id: str, exc: Exception) -> StoreUnavailable:
    """A store's read of one agent failed: logged with its cause, which the
    client's 503 does not carry."""
    log.error("reading agent %s from the store failed: %s", agent_id, exc)
    return StoreUnavailable(UNREACHABLE)


def load_workers() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _load_logs(
    store: LogStore,
    ids: list[str],
    checkpoints: list[Checkpoint | None],
    public_key: bytes,
    signer: Signer | None,
    workers: int | None,
    retention: float = DEFAULT_IDEMPOTENCY_RETENTION,
    recent_actions: int = DEFAULT_RECENT_ACTIONS,
) -> Iterator[Loaded]:
    """``load`` of each agent, in order; whole logs in worker processes
    when it pays. Lines are dropped from what workers send back: adopting a
    log needs only its state, failure and tail. The signer goes to the
    workers (our own children, over the pool's pipe) so that they check
    signatures as cheaply as this process does."""
    workers = load_workers() if workers is None else workers
    by_id = store.sizes(ids)
    sizes = [by_id[agent_id] for agent_id in ids]
    done = 0
    if workers > 1 and sum(sizes) >= PARALLEL_LOAD_BYTES:
        tasks: list[list[tuple[str, Checkpoint | None]]] = [[]]
        task_bytes = 0
        for agent_id, checkpoint, size in zip(ids, checkpoints, sizes, strict=True):
            if task_bytes >= LOAD_TASK_BYTES:
                tasks.append([])
                task_bytes = 0
            tasks[-1].append((agent_id, checkpoint))
            task_bytes += size
        # fork is cheapest and imports nothing again, but is only safe while this
        # process has one thread (guardd at startup); otherwise spawn.
        context = multiprocessing.get_context("fork" if threading.active_count() == 1 else "spawn")
        if context.get_start_method() == "fork":
            prepare_reading()  # inherited by every worker, not built in each
        pool = ProcessPoolExecutor(min(workers, len(tasks)), mp_context=context)
        # The cyclic collector is paused while the workers' states come in:
        # this process only unpickles and adopts them, which makes no
        # garbage cycles, while every state adopted lives on; each full
        # collection walked all of them again (a third of this process's
        # CPU time at 1,000 agents of 1,000 records).
        collecting = gc.isenabled()
        gc.disable()
        try:
            results = pool.map(
                _load_task,
                [store] * len(tasks),
                tasks,
                [public_key] * len(tasks),
                [signer] * len(tasks),
                [retention] * len(tasks),
                [recent_actions] * len(tasks),
            )
            for batch in results:
                yield from batch
                done += len(batch)
        except (BrokenProcessPool, OSError) as exc:
            log.warning("verifying logs in worker processes failed (%s); going on here", exc)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            if collecting:
                gc.enable()
    for agent_id, checkpoint in zip(ids[done:], checkpoints[done:], strict=True):
        yield load(
            store,
            agent_id,
            public_key,
            signer=signer,
            checkpoint=checkpoint,
            idempotency_retention=retention,
            recent_actions=recent_actions,
        )


def _load_task(
    store: LogStore,
    agents: list[tuple[str, Checkpoint | None]],
    public_key: bytes,
    signer: Signer | None,
    retention: float,
    recent_actions: int,
) -> list[Loaded]:
    """In a worker process: verify and fold these agents' logs."""
    out = []
    for agent_id, checkpoint in agents:
        loaded = load(
            store,
            agent_id,
            public_key,
            signer=signer,
            checkpoint=checkpoint,
            idempotency_retention=retention,
            recent_actions=recent_actions,
        )
        out.append(attrs.evolve(loaded, contents=attrs.evolve(loaded.contents, lines=[])))
    return out


def timestamp_now(clock: Clock) -> str:
    return timestamp_micros(round(clock() * 1_000_000))  # as the actor makes its ts


__all__ = ["Head", "LoadSummary", "Loading", "Registry", "quarantine_message"]
