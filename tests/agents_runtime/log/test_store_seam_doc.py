"""docs/design.md's "The storage seam" names every member of the protocols
of agents_runtime/log/store.py, so the section cannot drift from the code;
and no paragraph of design.md is written twice."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents_runtime.log.store import AgentLog, BatchHost, LogStore

DESIGN = Path(__file__).resolve().parents[3] / "docs" / "design.md"


def _section(title: str) -> str:
    text = DESIGN.read_text()
    start = text.index(f"### {title}\n")
    end = text.find("\n#", start + 1)
    return text[start:end]


def _members(protocol: type) -> list[str]:
    """The public names a protocol declares: methods, properties, attributes."""
    names = {n for n in vars(protocol) if not n.startswith("_")}
    names |= {n for n in vars(protocol).get("__annotations__", {}) if not n.startswith("_")}
    return sorted(names)


@pytest.mark.parametrize("protocol", [LogStore, AgentLog, BatchHost], ids=lambda p: p.__name__)
def test_the_storage_seam_section_names_every_member_of_the_protocol(protocol: type) -> None:
    section = _section("The storage seam")
    assert f"`{protocol.__name__}`" in section
    missing = [n for n in _members(protocol) if not re.search(rf"`{n}\b", section)]
    assert missing == []


def test_the_protocols_have_the_members_this_test_expects() -> None:
    # Guards the test itself: an empty member list would pass anything.
    assert {"run_batch", "finish", "lines", "agent_id", "size"} <= set(_members(AgentLog))
    assert {"follow", "poll_interval", "others_create_agents", "aclose"} <= set(_members(LogStore))
    assert {"committed", "decide", "fold", "rebuild"} <= set(_members(BatchHost))


def test_no_paragraph_of_the_design_notes_is_written_twice() -> None:
    paragraphs = [p.strip() for p in DESIGN.read_text().split("\n\n")]
    prose = [p for p in paragraphs if len(p) > 80 and not p.startswith(("|", "```"))]
    repeated = {p[:60] for p in prose if prose.count(p) > 1}
    assert repeated == set()
