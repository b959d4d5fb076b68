"""Checkpoint files: each agent's committed head kept beside its log.

``<checkpoint-dir>/<agent_id>.checkpoint`` holds one line, ``<seq>:<hash>``
(the form ``audit verify --checkpoint`` takes). The hash chain shows any
change inside a log, but not complete lines cut off its end: the shorter
file is a valid log. Startup verifies each log against its checkpoint, so a
log cut while guardd was stopped is quarantined (``truncated before
checkpoint``), and one rewritten from some record on fails at the
checkpoint's seq (``checkpoint hash mismatch``).

A checkpoint trails its log: the registry writes the heads that moved at
most once a second, off the decision path, and all of them at a graceful
stop. It only ever names a head whose records are fsynced, so a crash leaves
it at or behind the log, never ahead of it. Each file is replaced whole
(temporary file, fsync, rename, directory fsync), so it is never half
written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from agents_runtime.log.fsutil import fsync_dir
from agents_runtime.log.ids import valid_agent_id
from agents_runtime.log.record import Head
from agents_runtime.log.verify import Checkpoint

CHECKPOINT_SUFFIX = ".checkpoint"
TMP_SUFFIX = ".tmp"
MAX_SIZE = 256  # "<seq>:<64 hex>\n" is far shorter; a larger file is not one of ours


class CheckpointFileError(ValueError):
    """A checkpoint file that exists but cannot be read as one."""


@attrs.frozen
class CheckpointDir:
    root: Path

    def path(self, agent_id: str) -> Path:
        return self.root / f"{agent_id}{CHECKPOINT_SUFFIX}"

    def prepare(self) -> None:
        """Create the directory (0700) if it is missing."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def read(self, agent_id: str) -> Checkpoint | None:
        """The agent's checkpoint; None when it has none; CheckpointFileError
        when the file is there but is not a checkpoint."""
        try:
            return read_checkpoint_file(self.path(agent_id))
        except FileNotFoundError:
            return None

    def agent_ids(self) -> list[str]:
        """IDs of every checkpoint file in the directory."""
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        ids = []
        for entry in entries:
            name = entry.name
            if name.endswith(CHECKPOINT_SUFFIX):
                agent_id = name[: -len(CHECKPOINT_SUFFIX)]
                if valid_agent_id(agent_id):
                    ids.append(agent_id)
        return sorted(ids)

    def write(self, heads: Mapping[str, Head], sync_first: Iterable[Path] = ()) -> None:
        """Replace the checkpoint of each agent in ``heads``, then fsync the
        directory once. ``sync_first``: logs to fsync before any checkpoint
        names their records (logs loaded at startup, which this process has
        not fsynced itself). Raises OSError; files already replaced stay."""
        for log_path in sync_first:
            fd = os.open(log_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for agent_id, head in heads.items():
            _replace(self.path(agent_id), head.checkpoint().encode("ascii") + b"\n")
        if heads:
            fsync_dir(self.root)


def read_checkpoint_file(path: Path) -> Checkpoint:
    """The checkpoint in ``path``: one line ``<seq>:<hash>``. Raises
    FileNotFoundError when there is no such file, CheckpointFileError when it
    cannot be read or is not a checkpoint."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_SIZE + 1)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise CheckpointFileError(f"{path}: {exc.strerror or exc}") from None
    try:
        if len(data) > MAX_SIZE or not data.endswith(b"\n") or data.count(b"\n") != 1:
            raise ValueError("not one line ending in a newline")
        return Checkpoint.parse(data[:-1].decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointFileError(f"{path}: {exc}") from None


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


__all__ = ["CHECKPOINT_SUFFIX", "CheckpointDir", "CheckpointFileError", "read_checkpoint_file"]
