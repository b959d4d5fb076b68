"""The storage seam: what the runtime needs of whatever keeps the logs.

Everything above the log layer (the registry, the actors, guardd's routes)
reaches the records of an agent's log only through a ``LogStore`` and the
``AgentLog`` handles it gives out, and never opens a path. The file store
(``agents_runtime.log.files.store.FileStore``, one file per agent in the data
dir) is the embedded default; the PostgreSQL store
(``agents_runtime.log.postgres.store.PgStore``, shared by several guardd
nodes) implements the same two protocols. ``agents_runtime.log.stores.open_store``
builds either from where it is.

The log's bytes are the same in every store: canonical record lines, each
ending in a newline, chained and signed as docs/log-format.md says. A store
keeps lines; it never parses, re-encodes or reorders them.

What the protocols ask of a store, and why:

- A store brings its own way of committing a batch (``AgentLog.run_batch``):
  the actor hands it each batch with itself as the ``BatchHost``, which
  decides the commands into the bytes of their records and does what the
  store's strategy asks of it (answer, fail, fence, fold, rebuild,
  quarantine): whatever needs the agent's state, its key or the domain's
  fold, which the log layer does not know. The file store has one writer
  (the data-dir lock): it decides, appends, and fences the agent when a
  write fails. The PostgreSQL store is shared: it first has the host
  verify and fold what other nodes appended, then decides, and when
  another node appended first decides again (retry, backoff, read-back
  after a failed write, quarantine). So no code above the seam asks which
  kind of store it has.
- Durability may be shared: the file store makes the batches of every agent
  waiting at one moment durable with one flush (its committer); the
  PostgreSQL store commits the batches of every agent waiting at one moment
  in one statement. Either way a batch is answered only once it is durable.
- ``LogStore.follow`` tells the runtime that another writer appended to a
  log, so that long-polls on this node wake at once; ``poll_interval`` says
  how often a long-poll reads again in case a notice was lost, and
  ``others_create_agents`` whether an agent this process has not loaded may
  yet be in the store. A store with one writer returns at once, says None
  and False.
- ``AgentLog.lines`` reads a few earlier records by seq for a reply (a
  finished action's view, the first decision of a repeated request), off
  the event loop. The other reads are blocking calls: the runtime makes
  them on worker threads or in worker processes, never on the event loop
  while it serves requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from agents_runtime.errors import CanonicalError, Failure, GuardError, LogWriteError
from agents_runtime.log import canonical
from agents_runtime.log.operators import OperatorsLog
from agents_runtime.log.policies import PolicyStore
from agents_runtime.log.record import Head

# Told of each round made durable: its records, the seconds its writes took
# (all batches) and the seconds of the flush that made them durable.
CommitObserver = Callable[[int, float, float], None]


# What a caller is told when the store cannot be read or written just now.
UNREACHABLE = "the store cannot be reached just now; nothing was written: try again"
# The reason (docs/log-format.md, "Failure reasons") an agent is quarantined
# with when the store no longer holds its head as it was (HeadGone).
GAP = "gap: a committed record is gone from the store"


class HeadMoved(GuardError):
    """Another writer appended to the log after the head the batch follows:
    nothing of the batch was written."""


class HeadGone(GuardError):
    """The store no longer holds, as it was, the record a batch follows or a
    read starts from (rows deleted or replaced under a running node):
    nothing was written, and nothing may be written after the gap."""

    def __init__(self, agent_id: str, seq: int) -> None:
        super().__init__(
            f"log {agent_id}: the store no longer holds seq {seq} as this node committed"
            " or read it (rows deleted or replaced under the running nodes): a gap"
        )
        self.seq = seq


@attrs.frozen
class LogContents:
    """What a store read of one log."""

    lines: list[bytes]  # complete lines, without newlines
    torn_tail: bytes | None  # final bytes without newline that do not parse
    missing_newline: bool  # the last line parses but its newline was never written
    valid_length: int  # bytes that are complete lines

    @classmethod
    def of_lines(cls, lines: list[bytes]) -> LogContents:
        return cls(lines, None, False, sum(len(line) + 1 for line in lines))


def split_log(data: bytes) -> LogContents:
    """The lines of a log's bytes; a final line without its newline is a torn
    tail when it does not parse (a write a crash cut short)."""
    if not data:
        return LogContents([], None, False, 0)
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the data ends with a newline
    if not tail:
        return LogContents(lines, None, False, len(data))
    try:
        canonical.loads(tail)
    except CanonicalError:
        return LogContents(lines, tail, False, len(data) - len(tail))
    lines.append(tail)
    return LogContents(lines, None, True, len(data))


@attrs.frozen
class Committed:
    """What of a log is known durable: its last record, and the bytes of its
    lines (newlines included) up to and with it."""

    head: Head
    size: int


# A batch: each command with the future its caller waits on (None for the
# actor's own messages); the replies and errors a batch decided, by future.
Batch = list[tuple[Any, asyncio.Future[Any] | None]]
Answers = list[tuple[asyncio.Future[Any], Any]]
Errors = list[tuple[asyncio.Future[Any], BaseException]]


class BatchHost(Protocol):
    """The actor, as the commit strategy of its log sees it
    (``agents_runtime.runtime.actor.AgentActor``). The strategy decides when
    and how often a batch is decided and what happens when a write fails;
    the host does everything that needs the agent's state, its key or the
    domain's fold, which the log layer does not know."""

    committed: Committed  # what of the log is known durable (the head appends follow)

    async def decide(self, batch: Batch, /) -> tuple[Answers, Errors, bool, bytes]:
        """Run the batch's commands in order on the state, each seeing the
        records of those before it: their replies, their errors, whether the
        batch asks the actor to stop, and the records' lines to append (b""
        for none). The state runs ahead of ``committed`` until ``advance``."""
        ...

    def answer(self, answers: Answers, errors: Errors, /) -> None:
        """Give each caller its reply or error; wake the long-polls."""
        ...

    def fail(self, batch: Batch, error: BaseException, /) -> bool:
        """Fail every caller of the batch with ``error`` (no long-poll is
        woken: the state may be ahead of the store); whether the batch asks
        the actor to stop."""
        ...

    def advance(self, size: int, /) -> None:
        """The last batch (``size`` bytes) is durable: its last record is
        the committed head."""
        ...

    def fence(self, error: LogWriteError, /) -> str:
        """A write failed and what reached the store is unknown: refuse
        writes until a restart, fall back to the committed state; the
        message callers are given."""
        ...

    def fold(self, lines: list[bytes], /) -> Failure | None:
        """Verify the lines another writer committed after ``committed``
        (chain and key) and fold each; ``committed`` then ends with them.
        The first failure, if one fails (the agent must be quarantined)."""
        ...

    async def rebuild(self, upto: Committed, /) -> Failure | None:
        """Rebuild the state from the store's lines up to ``upto``, off the
        event loop, verifying each; the first failure (the state is then
        unchanged). LogReadError when the store cannot be read."""
        ...

    def quarantine(self, failure: Failure, /) -> str:
        """A record in the store fails: the agent serves no more (the
        registry lists it as quarantined); the message callers are given."""
        ...

    def postpone_expiry(self, seconds: float, /) -> None:
        """Try a due approval expiry again only after ``seconds``."""
        ...


class AgentLog(Protocol):
    """One agent's log in a store, held by that agent's actor."""

    agent_id: str
    size: int  # bytes of the log when it was opened or created

    async def run_batch(self, host: BatchHost, batch: Batch) -> bool:
        """Commit ``batch`` by this store's strategy: have ``host`` decide
        it, make its records durable, answer or fail every caller. Whether
        the actor stops after it (asked to, or the agent serves no more)."""
        ...

    async def finish(self, host: BatchHost, data: bytes) -> None:
        """Commit the records that finish a command a crash cut short,
        before the first batch (``host`` has folded them already)."""
        ...

    def read(self, upto: Committed) -> LogContents:
        """The committed lines, up to ``upto`` (blocking)."""
        ...

    def read_after(self, seq: int, upto: Committed, limit: int | None = None) -> list[bytes]:
        """The committed lines of the records after ``seq``, the first
        ``limit`` of them (None: all), blocking. A reader following the log
        (the webhooks) reads in pages of ``limit`` lines, so that catching up
        a backlog holds one page at a time; a read after where an earlier one
        stopped costs the lines it returns, not the log's size."""
        ...

    def read_beyond(self, upto: Committed) -> bytes:
        """The bytes the store holds after ``upto`` (blocking): records
        committed since, a write under way, or what someone else added."""
        ...

    async def lines(self, seqs: Sequence[int], upto: Committed) -> dict[int, bytes]:
        """The lines (without their newline) of the committed records at
        ``seqs``, read off the event loop: what a reply quotes of an earlier
        record. LogReadError when one cannot be read."""
        ...

    def close(self) -> None: ...


@attrs.frozen
class Scan:
    agent_ids: list[str]  # sorted
    odd: list[str]  # one line per entry that is not a log, ready to print


class LogStore(Protocol):
    """Where the logs of every agent are kept."""

    @property
    def poll_interval(self) -> float | None:
        """Seconds between reads of the store while a long-poll waits, for
        writes of other processes whose notice (``follow``) may be lost;
        None when every write goes through this process."""
        ...

    @property
    def others_create_agents(self) -> bool:
        """Whether other processes may create agents in the store while this
        one serves: an ID this process has not loaded may still be there."""
        ...

    @property
    def conflicts(self) -> int | None:
        """Batches decided again because another writer appended to the
        agent's log first (for metrics); None where that cannot happen."""
        ...

    @property
    def policies(self) -> PolicyStore:
        """Where the store keeps the named (fleet) policies."""
        ...

    def describe(self) -> str:
        """Where the store is, for the startup banner (no secrets)."""
        ...

    def default_checkpoint_dir(self) -> Path:
        """Where this node keeps checkpoints unless told otherwise."""
        ...

    def scan(self) -> Scan:
        """Every agent whose log the store holds, and the entries it skipped."""
        ...

    def remove_unfinished(self) -> int:
        """Remove logs whose creation a crash cut short; how many."""
        ...

    def read(self, agent_id: str) -> LogContents:
        """The whole log of ``agent_id`` (blocking; may run in a worker process)."""
        ...

    def sizes(self, agent_ids: Sequence[str]) -> dict[str, int]:
        """About how many bytes each of these logs holds (to plan parallel
        loading), in one request to the store (blocking)."""
        ...

    def open(self, agent_id: str, contents: LogContents, *, writable: bool) -> AgentLog:
        """The handle of a loaded log; a torn tail in ``contents`` is set
        aside first, so the log holds exactly its complete lines."""
        ...

    async def create(self, agent_id: str, data: bytes) -> AgentLog:
        """Write a new log holding ``data`` durably. AgentExists when the
        store already holds a log of that ID; LogWriteError when the write
        fails (nothing is left behind)."""
        ...

    def read_snapshot(self, agent_id: str) -> bytes | None:
        """The bytes of the agent's state snapshot (agents_runtime/log/
        snapshot.py), unverified; None when it has none (blocking; may run
        in a worker process). LogReadError when it cannot be read."""
        ...

    def write_snapshot(self, agent_id: str, seq: int, data: bytes) -> None:
        """Replace the agent's snapshot by ``data``, the snapshot at ``seq``,
        atomically: a crash leaves the old one or the new one (blocking).
        One at an older seq than the store holds may be dropped. Raises
        OSError or LogWriteError; nothing depends on it having worked."""
        ...

    def make_durable(self, agent_ids: Iterable[str]) -> None:
        """Make every record of these logs durable, also those this process
        did not write (blocking); done before a checkpoint names them."""
        ...

    def operators_log(self) -> OperatorsLog:
        """Where this store keeps the operators log (agents_runtime/log/operators.py)."""
        ...

    def observe_commits(self, observer: CommitObserver) -> None:
        """Tell ``observer`` of each durable round (for metrics): its
        records, the seconds its writes took and the seconds of its flush."""
        ...

    async def follow(self, appended: Callable[[str, int], None]) -> None:
        """Call ``appended(agent_id, seq)`` whenever another writer commits
        records of a log, until cancelled (the caller owns the task); a
        store with one writer returns at once."""
        ...

    async def unready(self) -> str | None:
        """Why the store cannot take a write just now, in one sentence; None
        when it can (for ``/readyz``)."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds once every actor has stopped: what
        is queued is finished first; tasks of its own end by cancellation."""
        ...
