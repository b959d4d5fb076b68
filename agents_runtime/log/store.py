"""The storage seam: what the runtime needs of whatever keeps the logs.

Everything above the log layer (the registry, the actors, guardd's routes)
reaches the records of an agent's log only through a ``LogStore`` and the
``AgentLog`` handles it gives out, and never opens a path. The file store
(``agents_runtime.log.files.store.FileStore``, one file per agent in the data
dir) is the embedded default; another store (PostgreSQL, for several guardd
nodes) implements the same two protocols.

The log's bytes are the same in every store: canonical record lines, each
ending in a newline, chained and signed as docs/log-format.md says. A store
keeps lines; it never parses, re-encodes or reorders them.

What the protocols ask of a store, and why:

- ``AgentLog.append(data, after)`` makes a batch durable, or fails whole.
  ``after`` is the committed head the actor saw when it sealed the batch. A
  store shared by several writers (nodes) refuses the batch with
  ``HeadMoved`` when its head is no longer ``after``; the actor then reads
  what was appended (``read_after``), folds it and decides again. The file
  store has one writer (the data-dir lock) and never raises it.
- Durability may be shared: the file store makes the batches of every agent
  waiting at one moment durable with one flush (its committer); a database
  commits each batch in one transaction. Either way ``append`` returns only
  once the batch is durable.
- A store with several writers says so (``AgentLog.shared``). The actor of
  a shared log reads what the other writers appended (``newer``) before each
  batch, verifies it and folds it: so a read never answers from a state
  older than a write another node acknowledged. A write that fails on a
  shared store leaves nothing half-written (a transaction committed or did
  not), so the agent is not fenced: its state is rebuilt from the store and
  the callers are told to retry.
- ``LogStore.on_appended`` tells the runtime that another writer appended
  to a log, so that long-polls on this node wake at once; a store with one
  writer never calls it.
- ``AgentLog.lines`` reads a few earlier records by seq for a reply (a
  finished action's view, the first decision of a repeated request), off
  the event loop. The other reads are blocking calls: the runtime makes
  them on worker threads or in worker processes, never on the event loop
  while it serves requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

import attrs

from agents_runtime.errors import CanonicalError, GuardError
from agents_runtime.log import canonical
from agents_runtime.log.record import Head

# Told of each round made durable: its records, the seconds its writes took
# (all batches) and the seconds of the flush that made them durable.
CommitObserver = Callable[[int, float, float], None]


class HeadMoved(GuardError):
    """Another writer appended to the log after the head the batch follows:
    nothing of the batch was written."""


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


class AgentLog(Protocol):
    """One agent's log in a store, held by that agent's actor."""

    agent_id: str
    size: int  # bytes of the log when it was opened or created
    shared: bool  # other writers (guardd nodes) may append to it

    async def append(self, data: bytes, after: Committed) -> None:
        """Make ``data`` (whole lines, the records that follow ``after``)
        durable. LogWriteError when it is not (the agent must be fenced:
        what reached the store is unknown); HeadMoved when another writer
        appended after ``after`` (nothing was written)."""
        ...

    async def newer(self, after: Committed) -> list[bytes]:
        """The lines (without their newline) other writers committed after
        ``after``, read off the event loop; always empty for a store with
        one writer. LogReadError when the store cannot be read."""
        ...

    def read(self, upto: Committed) -> LogContents:
        """The committed lines, up to ``upto`` (blocking)."""
        ...

    def read_after(self, seq: int, upto: Committed) -> list[bytes]:
        """The committed lines of the records after ``seq`` (blocking)."""
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

    shared: bool  # other writers (guardd nodes) may create and append logs

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

    def size(self, agent_id: str) -> int:
        """About how many bytes the log holds (to plan parallel loading)."""
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

    def make_durable(self, agent_ids: Iterable[str]) -> None:
        """Make every record of these logs durable, also those this process
        did not write (blocking); done before a checkpoint names them."""
        ...

    def observe_commits(self, observer: CommitObserver) -> None:
        """Tell ``observer`` of each durable round (for metrics): its
        records, the seconds its writes took and the seconds of its flush."""
        ...

    def on_appended(self, callback: Callable[[str, int], None]) -> None:
        """Call ``callback(agent_id, seq)`` when another writer appends."""
        ...

    async def unready(self) -> str | None:
        """Why the store cannot take a write just now, in one sentence; None
        when it can (for ``/readyz``)."""
        ...

    def close(self) -> None:
        """Release what the store holds, once every actor has stopped."""
        ...
