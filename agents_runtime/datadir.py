"""The data directory: where keys and agent logs live.

<data-dir>/keys/audit.key   audit.pub   token.key   admin.token
<data-dir>/agents/<agent_id>.jsonl
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import attrs

from agents_runtime.keys import KeyRing, create_keys, fsync_dir, load_keys
from agents_runtime.logfile import TMP_SUFFIX

AGENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
LOG_SUFFIX = ".jsonl"


def valid_agent_id(agent_id: str) -> bool:
    return AGENT_ID.fullmatch(agent_id) is not None


@attrs.frozen
class DataDir:
    root: Path

    @property
    def keys_dir(self) -> Path:
        return self.root / "keys"

    @property
    def agents_dir(self) -> Path:
        return self.root / "agents"

    def log_path(self, agent_id: str) -> Path:
        return self.agents_dir / f"{agent_id}{LOG_SUFFIX}"

    def agent_ids(self) -> list[str]:
        """IDs of every log on disk, sorted."""
        if not self.agents_dir.is_dir():
            return []
        ids = []
        for entry in os.scandir(self.agents_dir):
            name = entry.name
            if name.endswith(LOG_SUFFIX) and valid_agent_id(name[: -len(LOG_SUFFIX)]):
                ids.append(name[: -len(LOG_SUFFIX)])
        return sorted(ids)

    def remove_unfinished(self) -> list[Path]:
        """Delete logs whose creation a crash cut short (never acknowledged)."""
        removed = []
        if self.agents_dir.is_dir():
            for path in self.agents_dir.glob(f"*{LOG_SUFFIX}{TMP_SUFFIX}"):
                path.unlink()
                removed.append(path)
        return removed

    def prepare(self) -> KeyRing:
        """Create the directories, and the keys while no log exists; load the keys."""
        fresh = not self.agents_dir.exists()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.agents_dir.mkdir(mode=0o700, exist_ok=True)
        if not self.agent_ids():
            create_keys(self.keys_dir)
        if fresh:
            # The new directories' own entries must be durable before the
            # first log in them is acknowledged.
            fsync_dir(self.root)
            fsync_dir(self.root.resolve().parent)
        return load_keys(self.keys_dir)
