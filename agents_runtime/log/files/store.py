"""The file store: each agent's log is one file in the data dir.

The layout is ``DataDir``'s (datadir.py); appends go through the committer,
which makes the batches of every agent waiting at one moment durable with
one flush (committer.py). One guardd holds a data dir at a time (lock.py),
so the file store has one writer: its batches are decided once and
appended, and a failed write fences the agent (part of the batch may be on
disk; a restart sorts it out).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from agents_runtime.errors import AgentExists, AgentUnavailable, LogReadError, LogWriteError
from agents_runtime.log.files.committer import Committer
from agents_runtime.log.files.cursors import Cursors, line_end, read_lines
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.lineindex import LineIndex
from agents_runtime.log.files.logfile import DEFAULT_IO, FileIO, LogFile, move_torn_tail, read_log
from agents_runtime.log.files.operators import FileOperatorsLog
from agents_runtime.log.files.policies import FilePolicies
from agents_runtime.log.fsutil import replace
from agents_runtime.log.store import (
    Batch,
    BatchHost,
    CommitObserver,
    Committed,
    LogContents,
    Scan,
    split_log,
)

READ_ONLY = "read-only"
SNAPSHOT_TMP_SUFFIX = ".tmp"  # a snapshot being written (fsutil.replace)


class FileAgentLog:
    """One agent's log file, opened for appends (or not, when ``logfile`` is
    None: guardd has no signing key and never writes)."""

    __slots__ = ("_committer", "_cursors", "_index", "agent_id", "logfile", "path", "size")

    def __init__(
        self,
        agent_id: str,
        path: Path,
        logfile: LogFile | None,
        committer: Committer,
        size: int,
    ) -> None:
        self.agent_id = agent_id
        self.path = path
        self.logfile = logfile
        self._committer = committer
        self.size = size
        # Where the last few read_after calls stopped, so that each reader
        # following the log (the webhooks) reads each line once; made by the
        # first read_after (nothing for an agent no webhook follows).
        self._cursors: Cursors | None = None
        self._index: LineIndex | None = None  # made by the first lines()

    async def run_batch(self, host: BatchHost, batch: Batch) -> bool:
        """The single writer's commit: decide once, append, and on a failed
        write fence the agent and fail every caller of the batch."""
        answers, errors, stop, data = await host.decide(batch)
        if data:
            try:
                await self.append(data)
            except LogWriteError as exc:
                failure = AgentUnavailable(host.fence(exc))
                errors = [(f, failure) for f, _ in answers + errors]
                answers = []
            else:
                host.advance(len(data))
        host.answer(answers, errors)
        return stop

    async def finish(self, host: BatchHost, data: bytes) -> None:
        try:
            await self.append(data)
        except LogWriteError as exc:
            host.fence(exc)
        else:
            host.advance(len(data))

    async def append(self, data: bytes) -> None:
        """Make ``data`` (whole lines) durable at the end of the log;
        LogWriteError when it is not (what reached the file is unknown)."""
        if self.logfile is None:
            raise LogWriteError(READ_ONLY)
        await self._committer.append(self.logfile, data)

    def read(self, upto: Committed) -> LogContents:
        with self.path.open("rb") as fh:
            return split_log(fh.read(upto.size))

    def read_after(self, seq: int, upto: Committed, limit: int | None = None) -> list[bytes]:
        if seq >= upto.head.seq or limit == 0:
            return []
        cursors = self._cursors
        if cursors is None:
            # Two first reads at once may each make one: one is kept, and
            # the other's cursor is merely not remembered.
            cursors = self._cursors = Cursors()
        known = cursors.nearest(seq, upto.head.seq, upto.size)
        try:
            # Unbuffered: each read asks for exactly what it needs.
            with self.path.open("rb", buffering=0) as fh:
                start = line_end(fh, self.path.name, seq, known)
                lines, end = read_lines(fh, self.path.name, start, upto.size, limit)
        except OSError as exc:
            raise LogReadError(f"cannot read {self.path.name}: {exc}") from exc
        if lines:
            cursors.remember(seq + len(lines), end)
        return lines

    def read_beyond(self, upto: Committed) -> bytes:
        with self.path.open("rb") as fh:
            fh.seek(upto.size)
            return fh.read()

    async def lines(self, seqs: Sequence[int], upto: Committed) -> dict[int, bytes]:
        # Only the agent's actor calls this, one call at a time: the index
        # needs no lock.
        return await asyncio.to_thread(self._lines, seqs, upto.size)

    def _lines(self, seqs: Sequence[int], size: int) -> dict[int, bytes]:
        if self._index is None:
            self._index = LineIndex()
        try:
            with self.path.open("rb") as fh:
                return self._index.read(fh, self.path.name, seqs, size)
        except OSError as exc:
            raise LogReadError(f"cannot read {self.path.name}: {exc}") from exc

    def close(self) -> None:
        if self.logfile is not None:
            self.logfile.close()


class FileStore:
    """The logs of a data dir. ``io_for`` gives the system calls each
    agent's log is written with (the reliability tests inject faults there)."""

    # One writer (the data-dir lock): nothing appears that this process did
    # not write, so nothing to poll, discover or collide with.
    poll_interval = None
    others_create_agents = False
    conflicts = None

    def __init__(
        self,
        data_dir: DataDir,
        *,
        committer: Committer | None = None,
        io_for: Callable[[str], FileIO] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.committer = committer or Committer()
        self.io_for = io_for or (lambda agent_id: DEFAULT_IO)

    def __reduce__(self) -> tuple[type[FileStore], tuple[DataDir]]:
        # A worker process that verifies logs at startup only reads: it gets
        # a store of the same data dir without this one's writer thread.
        return (FileStore, (self.data_dir,))

    def describe(self) -> str:
        return f"files in {self.data_dir.agents_dir}"

    def default_checkpoint_dir(self) -> Path:
        return self.data_dir.checkpoints_dir

    def path(self, agent_id: str) -> Path:
        return self.data_dir.log_path(agent_id)

    @property
    def policies(self) -> FilePolicies:
        """The named policies, under ``policies/`` of the data dir."""
        return FilePolicies(self.data_dir.policies_dir)

    def scan(self) -> Scan:
        return self.data_dir.scan()

    def remove_unfinished(self) -> int:
        return len(self.data_dir.remove_unfinished())

    def read(self, agent_id: str) -> LogContents:
        return read_log(self.path(agent_id))

    def sizes(self, agent_ids: Sequence[str]) -> dict[str, int]:
        out = {}
        for agent_id in agent_ids:
            try:
                out[agent_id] = self.path(agent_id).stat().st_size
            except OSError:
                out[agent_id] = 0  # read() will say what is wrong with it
        return out

    def open(self, agent_id: str, contents: LogContents, *, writable: bool) -> FileAgentLog:
        path = self.path(agent_id)
        if contents.torn_tail is not None or contents.missing_newline:
            move_torn_tail(path, contents)
        size = path.stat().st_size
        logfile = LogFile.open(path, self.io_for(agent_id)) if writable else None
        return FileAgentLog(agent_id, path, logfile, self.committer, size)

    async def create(self, agent_id: str, data: bytes) -> FileAgentLog:
        path = self.path(agent_id)
        try:
            logfile = await asyncio.to_thread(LogFile.create, path, data, self.io_for(agent_id))
        except FileExistsError:
            raise AgentExists(f"agent {agent_id} already exists") from None
        return FileAgentLog(agent_id, path, logfile, self.committer, len(data))

    def read_snapshot(self, agent_id: str) -> bytes | None:
        try:
            return self.data_dir.snapshot_path(agent_id).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            why = exc.strerror or exc
            raise LogReadError(f"reading the snapshot of {agent_id}: {why}") from None

    def write_snapshot(self, agent_id: str, seq: int, data: bytes) -> None:
        """Replace the agent's snapshot file whole (fsutil.replace): a crash
        leaves the old snapshot or the new one."""
        snapshots = self.data_dir.snapshots_dir
        snapshots.mkdir(mode=0o700, exist_ok=True)
        path = self.data_dir.snapshot_path(agent_id)
        replace(path, data, tmp=path.with_name(path.name + SNAPSHOT_TMP_SUFFIX))

    def make_durable(self, agent_ids: Iterable[str]) -> None:
        for agent_id in agent_ids:
            fd = os.open(self.path(agent_id), os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def observe_commits(self, observer: CommitObserver) -> None:
        self.committer.on_commit = observer

    def operators_log(self) -> FileOperatorsLog:
        return FileOperatorsLog(self.data_dir.operators_path)

    async def follow(self, appended: Callable[[str, int], None]) -> None:
        """Returns at once: the data-dir lock makes this process the only writer."""

    async def unready(self) -> str | None:
        return None  # readiness probes the data dir itself

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop the committer once the queued batches are written."""
        self.committer.close()
