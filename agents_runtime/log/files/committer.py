"""The committer: makes the batches of every actor durable, on one writer
thread, with one flush per round for all of them.

An actor hands its batch (the records of the commands it just ran, one
bytes) to ``Committer.append`` and answers its callers only once that
returns. The writer takes every batch waiting, as one round: it writes each
batch to its own agent's log (plain writes, into the page cache), then makes
them all durable with one flush of the file system holding the logs
(``logfile.sync_logs``: ``syncfs``, then one ``fdatasync``; a round of one
or two logs fsyncs each instead, as many calls and nothing else flushed),
then answers every actor of the round. While a round is being flushed, the next batches
queue up and form the next round, so a slow flush is paid once per round,
not once per agent: on a disk whose flush takes 1 ms, 100 agents no longer
get one batch per millisecond between them. The per-agent log files stay
exactly what they were (the signed artifact users export and verify); only
when they are made durable changed.

A round's flush is one step for all its batches. If it fails (``EIO``),
nobody can tell whose pages were lost, so every batch of the round fails:
each log refuses further writes (``LogFile.fail``) and each actor fences its
agent, as one failed fsync did before. (In a round of one or two logs each
has its own fsync, and a failed one fails its own batch alone.) It is never retried: after a failed
flush the kernel may have dropped the pages, and a second flush that
succeeds would acknowledge records that are not on disk. A batch whose
write fails fails alone, before the flush; the others of the round go on.

Why one ``syncfs`` and not one ``fsync`` per log, or several writer threads
fsyncing at once: every ``fsync`` asks the disk for a cache flush, and threads
fsyncing in parallel only let the block layer merge some of them, while
``syncfs`` and one ``fdatasync`` make a whole round durable with two cache
flushes, whatever the number of logs (docs/design.md, "Durability shared
across agents", has the measured table). The cost:
``syncfs`` also writes out whatever else is dirty on that file system, so a
data dir on a file system of its own keeps other programs' writes out of
guardd's rounds (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
from time import perf_counter

import attrs

from agents_runtime.log.files.logfile import FlushAnchors, LogFile, sync_logs
from agents_runtime.log.store import CommitObserver


@attrs.frozen
class _Commit:
    loop: asyncio.AbstractEventLoop
    logfile: LogFile
    data: bytes
    future: asyncio.Future[None]


_Result = tuple[asyncio.Future[None], BaseException | None]


def _settle(results: list[_Result]) -> None:
    for future, error in results:
        if future.done():  # its actor was cancelled at shutdown
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


class Committer:
    """Writes the batches of every actor on one writer thread and makes each
    round of them durable with one flush, so a slow disk delays a round
    once, and never the event loop.

    The batches asked for during one turn of the loop are handed over
    together (one queue extend, one wake-up of the writer); the writer
    answers each round with one wake-up of each loop. An actor has at most
    one batch in flight, so a round holds at most one batch of each log.

    One writer: every writer thread takes the GIL several times a batch,
    and each time it takes it from a busy loop, that loop then waits to get
    it back: on the 2-core reference machine, two and four writers (each
    fsyncing its own batches) were slower than one under load, and with
    one flush a round there is nothing left for a second writer to overlap.

    ``inline=True`` writes and fsyncs each batch on the loop instead (tools,
    tests).

    ``on_commit``, when set, is called once a round after its flush, on the
    writer thread: paid once a round, never once a record.
    """

    def __init__(self, *, inline: bool = False) -> None:
        self.inline = inline
        self.on_commit: CommitObserver | None = None
        self._turns: dict[asyncio.AbstractEventLoop, list[_Commit]] = {}
        self._queued: collections.deque[_Commit] = collections.deque()
        self._wake: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._anchors = FlushAnchors()  # used by the writer thread only

    async def append(self, logfile: LogFile, data: bytes) -> None:
        """Return once ``data`` is written and durable; raise LogWriteError if not."""
        if self.inline:
            timing = logfile.append(data)
            if self.on_commit is not None:
                self.on_commit(data.count(b"\n"), *timing)
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        turn = self._turns.get(loop)
        if turn is None:
            turn = self._turns[loop] = []
            loop.call_soon(self._hand_off, loop)
        turn.append(_Commit(loop, logfile, data, future))
        await future

    def _hand_off(self, loop: asyncio.AbstractEventLoop) -> None:
        commits = self._turns.pop(loop)
        if self._writer is None:
            self._writer = threading.Thread(target=self._write, name="guard-commit", daemon=True)
            self._writer.start()
        self._queued.extend(commits)
        self._wake.put(True)

    def _write(self) -> None:
        """The writer thread: on each wake-up, commit rounds until none is left."""
        queued = self._queued
        while self._wake.get():
            while queued:
                # Only this thread takes from the queue: it cannot empty under us.
                commits = [queued.popleft() for _ in range(len(queued))]
                settled: dict[asyncio.AbstractEventLoop, list[_Result]] = {}
                for commit, error in self._commit(commits):
                    settled.setdefault(commit.loop, []).append((commit.future, error))
                for loop, results in settled.items():
                    with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                        loop.call_soon_threadsafe(_settle, results)

    def _commit(self, commits: list[_Commit]) -> list[tuple[_Commit, BaseException | None]]:
        """One round: write every batch, then one flush for those written."""
        results: list[tuple[_Commit, BaseException | None]] = []
        written: list[_Commit] = []
        started = perf_counter()
        for commit in commits:
            try:
                commit.logfile.write(commit.data)
            except BaseException as exc:  # the waiting actor handles it
                results.append((commit, exc))
            else:
                written.append(commit)
        if not written:
            return results
        wrote = perf_counter()
        try:
            errors: list[OSError | None] = sync_logs([c.logfile for c in written], self._anchors)
        except Exception as exc:  # not an I/O error, but nothing is known durable
            errors = [OSError(f"flush failed: {exc!r}")] * len(written)
        synced = perf_counter()
        durable = 0
        for commit, error in zip(written, errors, strict=True):
            if error is None:
                results.append((commit, None))
                durable += commit.data.count(b"\n")  # a record is a line: memchr speed
            else:
                results.append((commit, commit.logfile.fail(error)))
        observe = self.on_commit
        if observe is not None and durable:
            observe(durable, wrote - started, synced - wrote)
        return results

    def close(self) -> None:
        """Stop the writer once the queued batches are committed."""
        writer, self._writer = self._writer, None
        if writer is not None:
            self._wake.put(False)
            writer.join()
        self._anchors.close()
