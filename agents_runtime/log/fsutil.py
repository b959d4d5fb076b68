"""File-system helpers for files that must survive a crash whole or not at
all: key files, new logs, checkpoints.

Here, beside the format rather than in ``log/files``, because the key files
need them too and the format does not know the file store (the layers of
``[tool.importlinter]`` in pyproject.toml).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

Write = Callable[[int, memoryview], int]  # os.write's shape
Fsync = Callable[[int], None]


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (a file created, renamed or
    removed there) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes, write: Write = os.write) -> None:
    """Write every byte of ``data``: ``write`` may write fewer than asked."""
    view = memoryview(data)
    while view:
        written = write(fd, view)
        if written <= 0:
            raise OSError("write made no progress")
        view = view[written:]


def create_new(
    path: Path,
    data: bytes,
    *,
    tmp: Path,
    write: Write = os.write,
    fsync: Fsync = os.fsync,
) -> None:
    """Create ``path`` (mode 0600) holding ``data``, atomically and durably:
    written in full and fsynced under the name ``tmp`` (in the same
    directory), linked into place and the directory fsynced. A crash leaves
    either no file or the whole file, and a secret is never readable by
    others, not even for a moment (never chmod-ed after writing).

    Raises FileExistsError if ``path`` exists: ``link``, unlike ``rename``,
    never replaces a file. Any other OSError leaves neither ``path`` nor
    ``tmp``: a file that was not made durable was not created. ``write`` and
    ``fsync`` are the system calls, for tests that inject faults.
    """
    tmp.unlink(missing_ok=True)  # left by a crash during an earlier attempt
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, data, write)
        fsync(fd)
    except OSError:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.link(tmp, path)
        tmp.unlink()
        fsync_dir(path.parent)
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        raise
    except OSError:
        path.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
        raise


def replace(path: Path, data: bytes, *, tmp: Path, write: Write = os.write) -> None:
    """Replace ``path`` (mode 0600) by a file holding ``data``, atomically
    and durably: written in full and fsynced under the name ``tmp`` (same
    directory), renamed over ``path``, and the directory fsynced. A crash at
    any moment leaves ``path`` holding either its old bytes or the new
    ones, never a part; at worst a stray ``tmp``, which the next call
    truncates. ``write`` is os.write's shape, for tests that stop half way."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, data, write)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
