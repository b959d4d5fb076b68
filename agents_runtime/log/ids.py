"""Agent IDs: the name of an agent and of its log, in every store and file."""

from __future__ import annotations

import re

AGENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def valid_agent_id(agent_id: str) -> bool:
    return AGENT_ID.fullmatch(agent_id) is not None
