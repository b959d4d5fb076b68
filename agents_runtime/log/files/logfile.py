"""Log files on disk: reading with torn-tail detection, durable appends.

An append is durable when ``append`` returns: the bytes were written in full
and fsynced. The committer makes many logs durable at once instead: it
``write``s each batch, then ``sync_logs`` makes all of them durable with one
flush of their file system (see ``FileIO.sync_fs`` for why that is safe and
docs/design.md for the figures). A new log is written to a temporary file,
fsynced, renamed into place and the directory fsynced, so a crash never
leaves a half-created log.
A crash in the middle of an append can leave a final line without its
newline; ``split_log`` reports it as a torn tail when it does not parse, and
``move_torn_tail`` moves it aside to ``<log>.torn``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path
from time import perf_counter

from agents_runtime.errors import LogWriteError
from agents_runtime.log.fsutil import create_new, fsync_dir, write_all
from agents_runtime.log.store import LogContents, split_log

TMP_SUFFIX = ".tmp"
TORN_SUFFIX = ".torn"


def read_log(path: Path) -> LogContents:
    return split_log(path.read_bytes())


# syncfs(2) through the C library: the os module has no binding for it.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syncfs.argtypes = [ctypes.c_int]
_libc.syncfs.restype = ctypes.c_int


def _syncfs(fd: int) -> None:
    # A ctypes call lets the GIL go for its duration, as os.fsync does.
    if _libc.syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


class FileIO:
    """The system calls an append makes. Tests replace it to inject faults."""

    def write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def sync_fs(self, fd: int) -> None:
        """Make everything written to the file system holding ``fd`` (the
        logs' directory, see FlushAnchors) durable: ``syncfs``, then
        ``fdatasync`` of ``fd``.

        ``syncfs`` writes and waits for the data and inodes of every file of
        the file system, and since Linux 5.8 reports a writeback error that
        struck any of them since ``fd`` was opened. It asks the disk to flush
        its cache before it writes the block device's own buffers, though,
        and a file system without a journal (ext2, ext4 without one, as on
        the machine we measured) keeps its inodes there: an appended file's
        new size could still sit in the disk's volatile cache. The
        ``fdatasync`` after it, with nothing of ``fd`` left to write, is
        then one more cache flush (counted by the kernel: one flush
        request), which makes those inodes durable too.
        """
        _syncfs(fd)
        os.fdatasync(fd)


DEFAULT_IO = FileIO()


class LogFile:
    """An open log, append-only. After a failed write or fsync it refuses
    every further append: the kernel may have dropped the pages, so retrying
    the fsync and then acknowledging would lie."""

    def __init__(self, path: Path, fd: int, io: FileIO = DEFAULT_IO) -> None:
        self.path = path
        self._fd = fd
        self._io = io
        self.failed: BaseException | None = None
        # sync_logs flushes each file system once: the logs share one.
        self.device = os.fstat(fd).st_dev if fd >= 0 else -1

    @classmethod
    def create(cls, path: Path, data: bytes, io: FileIO = DEFAULT_IO) -> LogFile:
        """Create ``path`` holding ``data`` durably; fails if it exists."""
        tmp = path.with_name(path.name + TMP_SUFFIX)
        try:
            create_new(path, data, tmp=tmp, write=io.write, fsync=io.fsync)
        except FileExistsError:
            raise
        except OSError as exc:
            raise LogWriteError(f"cannot create {path.name}: {exc}") from exc
        return cls.open(path, io)

    @classmethod
    def open(cls, path: Path, io: FileIO = DEFAULT_IO) -> LogFile:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        return cls(path, fd, io)

    def write(self, data: bytes) -> None:
        """Write ``data`` (whole lines) without making it durable: the
        committer's half of an append, ``sync_logs`` is the other. Raise
        LogWriteError if the write fails."""
        if self.failed is not None:
            raise LogWriteError(f"{self.path.name} refuses writes after an earlier failure")
        try:
            write_all(self._fd, data, self._io.write)
        except OSError as exc:
            raise self.fail(exc) from exc

    def fail(self, exc: BaseException) -> LogWriteError:
        """Refuse every further append: the write or the flush of this log
        failed with ``exc``. Returns the error for the caller to raise."""
        self.failed = exc
        return LogWriteError(f"append to {self.path.name} failed: {exc}")

    def append(self, data: bytes) -> tuple[float, float]:
        """Write ``data`` (whole lines) and fsync it, or raise LogWriteError.
        Returns the seconds the write and the fsync took (for metrics: three
        clock readings, nothing next to an fsync)."""
        if self.failed is not None:
            raise LogWriteError(f"{self.path.name} refuses writes after an earlier failure")
        try:
            started = perf_counter()
            write_all(self._fd, data, self._io.write)
            written = perf_counter()
            self._io.fsync(self._fd)
            synced = perf_counter()
        except OSError as exc:
            self.failed = exc
            raise LogWriteError(f"append to {self.path.name} failed: {exc}") from exc
        return written - started, synced - written

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# A round of at most this many logs fsyncs each of them instead of the
# shared flush: no more system calls than syncfs + fdatasync, and nothing
# else of the file system is flushed (a lone request at low load pays for
# its own log only).
FSYNC_EACH_UP_TO = 2


class FlushAnchors:
    """One descriptor per file system for the shared flushes of its logs:
    the directory of the first log flushed there, opened once.

    ``syncfs`` reports a writeback error of the file system once per open
    file description (Linux 5.8 and later). Through the logs' own
    descriptors, one error would fail the first round flushed through each
    of them in turn, fencing agent after agent long after it struck; through
    one descriptor, it fails the round it struck (whose pages it may have
    lost) and no other.
    """

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}

    def fd_for(self, logfile: LogFile) -> int:
        fd = self._fds.get(logfile.device)
        if fd is None:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
            fd = self._fds[logfile.device] = os.open(logfile.path.parent, flags)
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def sync_logs(logs: Sequence[LogFile], anchors: FlushAnchors | None = None) -> list[OSError | None]:
    """Make what was ``write``n to ``logs`` durable. Returns, log by log,
    None or the error that failed it.

    Up to FSYNC_EACH_UP_TO logs: one fsync each, and a failed fsync fails
    its own log alone. More: one ``FileIO.sync_fs`` for each file system and
    I/O of the logs, in production one file system and one I/O, so one
    ``syncfs`` and one ``fdatasync`` whatever the number of logs, through
    the file system's descriptor in ``anchors`` (without, through the first
    log's own). (A test's FaultyIO takes a turn of its own, so a fault
    injected into one log's flush reaches the flush every log of the round
    depends on.) When a shared flush fails, nobody can tell which logs'
    pages were lost, so every log of the round fails with it.
    """
    if len(logs) <= FSYNC_EACH_UP_TO:
        errors: list[OSError | None] = []
        for logfile in logs:
            try:
                logfile._io.fsync(logfile._fd)
            except OSError as exc:
                errors.append(exc)
            else:
                errors.append(None)
        return errors
    flushed: set[tuple[int, int]] = set()
    try:
        for logfile in logs:
            key = (logfile.device, id(logfile._io))
            if key not in flushed:
                flushed.add(key)
                fd = logfile._fd if anchors is None else anchors.fd_for(logfile)
                logfile._io.sync_fs(fd)
    except OSError as exc:
        return [exc] * len(logs)
    return [None] * len(logs)


def move_torn_tail(path: Path, contents: LogContents) -> None:
    """Append the torn bytes to ``<path>.torn`` and cut them from the log;
    add the newline a complete last line is missing."""
    if contents.torn_tail is not None:
        torn = path.with_name(path.name + TORN_SUFFIX)
        fd = os.open(torn, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, contents.torn_tail)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(path.parent)
        with path.open("r+b") as fh:
            fh.truncate(contents.valid_length)
            fh.flush()
            os.fsync(fh.fileno())
    elif contents.missing_newline:
        with path.open("ab") as fh:
            fh.write(b"\n")
            fh.flush()
            os.fsync(fh.fileno())
