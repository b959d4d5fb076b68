"""The operators log on the file store: ``<data-dir>/operators.jsonl``.

One writer (the data-dir lock), so nothing appears that this process did not
write. A line a crash cut short (no newline at its end) is left out when the
log is read, and the next append writes over it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from agents_runtime.log.fsutil import fsync_dir


class FileOperatorsLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._end: int | None = None  # bytes of whole lines, once read

    def read(self) -> list[bytes]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        end = data.rfind(b"\n") + 1
        self._end = end
        return data[:end].split(b"\n")[:-1]

    async def append(self, lines: Sequence[bytes], after_seq: int) -> None:
        await asyncio.to_thread(self._append, b"".join(line + b"\n" for line in lines))

    def _append(self, data: bytes) -> None:
        if self._end is None:
            self.read()
        assert self._end is not None
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.lseek(fd, self._end, os.SEEK_SET)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.ftruncate(fd, self._end + len(data))  # a torn line after it goes
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.path.parent)
        self._end += len(data)

    async def newer(self, after_seq: int) -> list[bytes]:
        return []  # the only writer is this process
