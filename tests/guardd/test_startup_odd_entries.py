"""Odd entries of ``agents/`` at start (a directory named like a log, a
symlink, a name that is not an agent ID, a stray file): each is reported with
one line and skipped; the other agents are served. Torn tails and unfinished
creations are normal and not reported."""

from __future__ import annotations

import os
from pathlib import Path

from tests.guardd.conftest import Api, ok

ODD_LINES = [
    "skipped agents/bad id!.jsonl: not a valid agent ID (1 to 64 of A-Z a-z 0-9 _ -)",
    "skipped agents/dir.jsonl: a directory, not a log file",
    "skipped agents/inside.jsonl: a symbolic link (guardd does not follow links in agents/)",
    "skipped agents/notes.txt: not an agent log (<agent_id>.jsonl)",
    "skipped agents/outside.jsonl: a symbolic link (guardd does not follow links in agents/)",
    "skipped agents/x\\nfake.jsonl: not a valid agent ID (1 to 64 of A-Z a-z 0-9 _ -)",
]


def test_odd_entries_are_reported_and_skipped_and_the_rest_is_served(
    fresh_api: Api, tmp_path: Path
) -> None:
    api = fresh_api
    good = api.create("good")
    ok(good.act("search"))
    assert api.server.stop() == 0
    agents = api.server.data_dir / "agents"
    log = (agents / "good.jsonl").read_bytes()
    (agents / "dir.jsonl").mkdir()
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(log)
    os.symlink(outside, agents / "outside.jsonl")
    os.symlink(agents / "good.jsonl", agents / "inside.jsonl")
    (agents / "bad id!.jsonl").write_bytes(log)
    (agents / "x\nfake.jsonl").write_bytes(log)
    (agents / "notes.txt").write_text("hello\n")
    (agents / "good.jsonl.torn").write_bytes(b'{"partial')
    api.server.start()
    output = api.server.read_output().split("guardd listening on")[-1]
    for line in ODD_LINES:
        assert output.count(line) == 1, (line, output)  # in the startup banner
    assert "torn" not in output
    assert "agents: 1 loaded, 0 quarantined" in output
    listed = ok(api.admin.get("/v1/agents"))["agents"]
    assert [(a["agent_id"], a["state"]) for a in listed] == [("good", "active")]
    assert ok(good.act("search"))["action_id"] == "act-2"
    # Nothing was followed or changed.
    assert outside.read_bytes() == log
    assert (agents / "dir.jsonl").is_dir()
