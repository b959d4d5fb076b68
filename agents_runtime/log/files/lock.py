"""One owner per data directory: an exclusive ``flock`` on ``<data-dir>/lock``.

Two guardd processes on one data directory would both decide for the same
agents and both append to the same logs: budgets charged twice, forked
chains, quarantine at the next start. The lock is taken before anything in
the data directory is read, moved or created (the directory itself and the
lock file excepted). The kernel releases a ``flock`` when its holder exits,
kill -9 included, so a crash never leaves a stale lock behind. The holder's
PID is written into the file so a refused process can say who holds it.

Readers (``audit``) take no lock: they only read.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from agents_runtime.errors import DataDirError

LOCK_NAME = "lock"


class DataDirLock:
    """A held lock; ``release`` (or process exit) lets it go."""

    def __init__(self, root: Path, fd: int) -> None:
        self.root = root
        self._fd = fd

    @classmethod
    def acquire(cls, root: Path) -> DataDirLock:
        """Create ``root`` if needed and lock it, or raise DataDirError."""
        if root.exists() and not root.is_dir():
            raise DataDirError(f"data dir {root} is not a directory")
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except NotADirectoryError:
            raise DataDirError(f"data dir {root} is not a directory") from None
        except OSError as exc:
            raise DataDirError(f"cannot create data dir {root}: {exc.strerror}") from None
        path = root / LOCK_NAME
        try:
            # No O_TRUNC: a refused process must leave the holder's PID as it is.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise DataDirError(f"cannot open {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                who = f"pid {holder}" if holder is not None else "another process"
                raise DataDirError(f"data dir {root} is in use by {who}") from None
            raise DataDirError(f"cannot lock {path}: {exc.strerror}") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise DataDirError(f"cannot write {path}: {exc.strerror}") from None
        return cls(root, fd)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = -1


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        return int(text) if text.isdigit() else None
    except (OSError, UnicodeDecodeError):
        return None
