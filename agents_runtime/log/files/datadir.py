"""The data directory: where keys and agent logs live.

<data-dir>/keys/audit.key   audit.pub   token.key   admin.token
<data-dir>/agents/<agent_id>.jsonl
<data-dir>/operators.jsonl   (the operators log: operator tokens issued and revoked)
<data-dir>/policies/<name>.jsonl         (named policies, one signed line per version)
<data-dir>/checkpoints/<agent_id>.checkpoint   (unless --checkpoint-dir says elsewhere)

Besides the logs, ``agents/`` may hold ``<log>.torn`` (torn tails moved
aside) and ``<log>.tmp`` (a creation a crash cut short, removed at start).
Anything else there is an odd entry: reported at start and skipped, never
followed or loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from agents_runtime.log.files.logfile import TMP_SUFFIX, TORN_SUFFIX
from agents_runtime.log.fsutil import fsync_dir

# AGENT_ID is named here too until guardd.openapi takes it from log.ids.
from agents_runtime.log.ids import AGENT_ID as AGENT_ID
from agents_runtime.log.ids import valid_agent_id
from agents_runtime.log.keys import KeyRing, create_keys, load_keys
from agents_runtime.log.snapshot import SNAPSHOT_SUFFIX
from agents_runtime.log.store import Scan

LOG_SUFFIX = ".jsonl"
CHECKPOINTS = "checkpoints"
SNAPSHOTS = "snapshots"


def _odd(entry: os.DirEntry[str]) -> str | None:
    """What is wrong with an entry of ``agents/``, or None when it is one of ours."""
    name = entry.name
    if entry.is_symlink():
        # A link could lead anywhere, outside the data dir included: never followed.
        return "a symbolic link (guardd does not follow links in agents/)"
    regular = entry.is_file(follow_symlinks=False)
    for suffix, what in ((TORN_SUFFIX, "a torn tail"), (TMP_SUFFIX, "an unfinished log")):
        if name.endswith(suffix):
            return None if regular else f"named as {what} but not a regular file"
    if not name.endswith(LOG_SUFFIX):
        return "not an agent log (<agent_id>.jsonl)"
    if not valid_agent_id(name[: -len(LOG_SUFFIX)]):
        return "not a valid agent ID (1 to 64 of A-Z a-z 0-9 _ -)"
    if entry.is_dir(follow_symlinks=False):
        return "a directory, not a log file"
    if not regular:
        return "not a regular file"
    return None


def _shown(name: str) -> str:
    """A file name safe to print on one line: escapes control characters
    (and non-ASCII, and bytes that are not UTF-8) as Python writes them."""
    return name.encode("unicode_escape").decode("ascii")


@attrs.frozen
class DataDir:
    root: Path

    @property
    def keys_dir(self) -> Path:
        return self.root / "keys"

    @property
    def agents_dir(self) -> Path:
        return self.root / "agents"

    @property
    def operators_path(self) -> Path:
        """The operators log (agents_runtime/log/operators.py)."""
        return self.root / "operators.jsonl"

    def log_path(self, agent_id: str) -> Path:
        return self.agents_dir / f"{agent_id}{LOG_SUFFIX}"

    @property
    def policies_dir(self) -> Path:
        """The named (fleet) policies: ``policies/<name>.jsonl``."""
        return self.root / "policies"

    @property
    def checkpoints_dir(self) -> Path:
        """Where checkpoints go when no other directory is given."""
        return self.root / CHECKPOINTS

    @property
    def snapshots_dir(self) -> Path:
        """Where the agents' state snapshots are kept."""
        return self.root / SNAPSHOTS

    def snapshot_path(self, agent_id: str) -> Path:
        return self.snapshots_dir / f"{agent_id}{SNAPSHOT_SUFFIX}"

    def agent_ids(self) -> list[str]:
        """IDs of every log on disk, sorted."""
        return self.scan().agent_ids

    def scan(self) -> Scan:
        """One pass over ``agents/``: the logs, and a line for each odd entry."""
        ids: list[str] = []
        odd: list[str] = []
        try:
            entries = sorted(os.scandir(self.agents_dir), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return Scan([], [])
        for entry in entries:
            name = entry.name
            problem = _odd(entry)
            if problem is not None:
                odd.append(f"skipped agents/{_shown(name)}: {problem}")
            elif name.endswith(LOG_SUFFIX):
                ids.append(name[: -len(LOG_SUFFIX)])
        return Scan(ids, odd)

    def remove_unfinished(self) -> list[Path]:
        """Delete logs whose creation a crash cut short (never acknowledged)."""
        removed = []
        if self.agents_dir.is_dir():
            for path in self.agents_dir.glob(f"*{LOG_SUFFIX}{TMP_SUFFIX}"):
                if path.is_symlink() or not path.is_file():
                    continue  # not ours: scan() reports it
                path.unlink()
                removed.append(path)
        return removed

    def create_keys(self) -> None:
        """Create every missing key file (a new store with no logs yet)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        create_keys(self.keys_dir)

    def prepare(self, *, may_create_keys: bool = True) -> KeyRing:
        """Create the directories, and the keys while no log exists (unless
        told not to: another store holds the logs); load the keys."""
        fresh = not self.agents_dir.exists()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.agents_dir.mkdir(mode=0o700, exist_ok=True)
        if may_create_keys and not self.agent_ids():
            create_keys(self.keys_dir)
        if fresh:
            # The new directories' own entries must be durable before the
            # first log in them is acknowledged.
            fsync_dir(self.root)
            fsync_dir(self.root.resolve().parent)
        return load_keys(self.keys_dir)
