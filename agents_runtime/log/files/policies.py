"""The named policies of a data dir: ``policies/<name>.jsonl``, one signed
line per version (``log/policies.py``).

A new version rewrites its name's file whole: written and fsynced under a
temporary name, renamed into place and the directory fsynced, so a crash
leaves the file as it was or with the new version, never half a line. The
files are small (one line per version of one policy) and written only by an
operator's ``PUT``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from agents_runtime.log.fsutil import fsync_dir, write_all
from agents_runtime.log.policies import PolicyStoreError, Version, valid_name

SUFFIX = ".jsonl"
TMP = ".tmp"


class FilePolicies:
    """The ``PolicyStore`` of a data dir."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, name: str) -> Path:
        return self.root / f"{name}{SUFFIX}"

    def load(self) -> dict[str, list[bytes]]:
        found: dict[str, list[bytes]] = {}
        try:
            entries = sorted(os.scandir(self.root), key=lambda e: e.name)
        except FileNotFoundError:
            return found
        for entry in entries:
            name = entry.name[: -len(SUFFIX)]
            if not entry.name.endswith(SUFFIX) or not valid_name(name):
                continue  # a temporary file a crash left, or not ours
            data = Path(entry.path).read_bytes()
            found[name] = data.splitlines()
        return found

    async def put(self, version: Version) -> None:
        await asyncio.to_thread(self._put, version)

    def _put(self, version: Version) -> None:
        path = self.path(version.name)
        try:
            old = path.read_bytes()
        except FileNotFoundError:
            old = b""
        if old.count(b"\n") != version.version - 1:
            raise PolicyStoreError(
                f"named policy {version.name} does not end at version {version.version - 1}"
            )
        try:
            self.root.mkdir(mode=0o700, exist_ok=True)
            tmp = path.with_name(path.name + TMP)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                write_all(fd, old + version.line + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            fsync_dir(self.root)
        except OSError as exc:
            raise PolicyStoreError(f"writing named policy {version.name} failed: {exc}") from exc

    async def delete(self, name: str) -> None:
        await asyncio.to_thread(self._delete, name)

    def _delete(self, name: str) -> None:
        try:
            self.path(name).unlink(missing_ok=True)
            fsync_dir(self.root)
        except OSError as exc:
            raise PolicyStoreError(f"removing named policy {name} failed: {exc}") from exc
