"""Log integrity at start, with a real guardd: each agent's head is kept in
``<checkpoint-dir>/<id>.checkpoint``, so complete lines cut off a log while
guardd was stopped quarantine the agent; a log holding only its genesis is
quarantined; the verify endpoint reports bytes after the committed head."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agents_runtime.log.checkpoint import CheckpointFileError, parse_checkpoint, signed_checkpoint
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head
from tests.guardd.conftest import Agent, Api, assert_error, ok
from tests.support.server import GuardServer


def checkpoint_of(root: Path, agent_id: str) -> Path:
    return root / "checkpoints" / f"{agent_id}.checkpoint"


def stored_head(path: Path) -> str | None:
    """``<seq>:<hash>`` of the signed checkpoint in ``path``; None when there
    is none yet, or it is not a signed note."""
    try:
        stored = parse_checkpoint(path.read_bytes())
    except (FileNotFoundError, CheckpointFileError, UnicodeDecodeError, ValueError):
        return None
    if not stored.is_signed_note:
        return None
    return f"{stored.checkpoint.seq}:{stored.checkpoint.hash}"


def head_of(api: Api, agent: Agent) -> str:
    head = api.status(agent)["head"]
    return f"{head['seq']}:{head['hash']}"


def entry(api: Api, agent_id: str) -> dict[str, object]:
    agents = ok(api.admin.get("/v1/agents"))["agents"]
    return next(a for a in agents if a["agent_id"] == agent_id)


def test_a_running_guardd_keeps_each_checkpoint_within_about_a_second(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create("busy")
    for _ in range(3):
        ok(agent.act("search"))
    path = checkpoint_of(api.server.data_dir, "busy")
    expected = head_of(api, agent)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if stored_head(path) == expected:
            break
        time.sleep(0.05)
    assert stored_head(path) == expected


def test_lines_cut_off_a_stopped_log_quarantine_the_agent(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create("cut")
    ok(agent.act("search"))
    ok(agent.act("search"))
    ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "done", "by": "ops"}))
    assert api.server.stop() == 0
    path = api.server.data_dir / "agents" / "cut.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    # Without its terminated record the agent would come back alive.
    path.write_bytes(b"".join(lines[:-1]))
    api.server.start()
    seq = len(lines) - 1
    listed = entry(api, "cut")
    assert listed["state"] == "quarantined"
    assert listed["error"] == f"line {seq + 1} (seq {seq}): truncated before checkpoint"
    assert_error(agent.act("search"), 503, "quarantined")
    message = f"quarantined: cut: line {seq + 1} (seq {seq}): truncated before checkpoint"
    assert message in api.server.read_output()


def test_a_stopped_log_rewritten_at_its_checkpoint_is_quarantined(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create("rewritten")
    ok(agent.act("search"))
    assert api.server.stop() == 0
    checkpoint = checkpoint_of(api.server.data_dir, "rewritten")
    seq = parse_checkpoint(checkpoint.read_bytes()).checkpoint.seq
    # An older version's unsigned line, still held against the log.
    checkpoint.write_text(f"{seq}:{'ab' * 32}\n")
    api.server.start()
    assert entry(api, "rewritten")["error"] == (
        f"line {seq + 1} (seq {seq}): checkpoint hash mismatch"
    )


def test_a_data_dir_without_checkpoints_upgrades_with_a_warning(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create("old")
    ok(agent.act("search"))
    head = head_of(api, agent)
    assert api.server.stop() == 0
    checkpoints = api.server.data_dir / "checkpoints"
    for path in checkpoints.iterdir():
        path.unlink()
    checkpoints.rmdir()
    api.server.start()
    assert entry(api, "old")["state"] == "active"
    assert f"agent old: no checkpoint; one is written from its verified log ({head})" in (
        api.server.read_output()
    )
    assert api.server.stop() == 0
    assert stored_head(checkpoint_of(api.server.data_dir, "old")) == head


def test_checkpoint_dir_from_the_environment_and_the_flag(tmp_path: Path) -> None:
    elsewhere = tmp_path / "other-volume"
    server = GuardServer(
        tmp_path / "guard-data", env={"GUARD_CHECKPOINT_DIR": str(elsewhere)}
    ).start()
    api = Api(server)
    try:
        agent = api.create("moved")
        head = head_of(api, agent)
        assert server.stop() == 0
        assert stored_head(elsewhere / "moved.checkpoint") == head
        assert not checkpoint_of(server.data_dir, "moved").exists()
    finally:
        api.close()
        server.kill()


def test_kill_9_under_checkpoints_quarantines_nothing(fresh_api: Api) -> None:
    api = fresh_api
    agents = [api.create(f"k{n}") for n in range(3)]
    for _ in range(3):
        for agent in agents:
            ok(agent.act("search"))
    time.sleep(1.5)  # a checkpoint round or two
    for agent in agents:
        ok(agent.act("search"))
    api.server.kill()
    api.server.start()
    assert all(entry(api, a.agent_id)["state"] == "active" for a in agents)


def test_a_log_holding_only_its_genesis_is_quarantined(fresh_api: Api) -> None:
    api = fresh_api
    api.create("bare")
    assert api.server.stop() == 0
    path = api.server.data_dir / "agents" / "bare.jsonl"
    path.write_bytes(path.read_bytes().splitlines(keepends=True)[0])
    checkpoint_of(api.server.data_dir, "bare").unlink()
    api.server.start()
    listed = entry(api, "bare")
    assert listed["state"] == "quarantined"
    assert listed["error"] == "line 2 (seq 1): log has no policy record"


def test_verify_reports_bytes_appended_after_the_committed_head(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create("appended")
    ok(agent.act("search"))
    path = api.server.data_dir / "agents" / "appended.jsonl"
    lines = len(path.read_bytes().splitlines())
    assert ok(api.admin.get(f"{agent.path}/verify"))["ok"] is True
    for junk in (b"junk\n", b"junk without a newline", json.dumps({"seq": lines}).encode()):
        with path.open("ab") as fh:
            fh.write(junk)
        try:
            report = ok(api.admin.get(f"{agent.path}/verify"))
        finally:
            with path.open("r+b") as fh:
                fh.truncate(fh.seek(0, 2) - len(junk))
        assert report == {
            "ok": False,
            "records": lines,
            "failure": {"line": lines + 1, "seq": None, "reason": "bytes after the committed head"},
        }
    assert ok(api.admin.get(f"{agent.path}/verify"))["ok"] is True


def test_an_unsigned_checkpoint_of_an_older_version_is_replaced_by_a_signed_one(
    fresh_api: Api,
) -> None:
    api = fresh_api
    agent = api.create("older")
    ok(agent.act("search"))
    head = head_of(api, agent)
    assert api.server.stop() == 0
    path = checkpoint_of(api.server.data_dir, "older")
    path.write_text(head + "\n")
    api.server.start()
    assert entry(api, "older")["state"] == "active"
    assert "agent older: its checkpoint is unsigned (an older version); a signed one" in (
        api.server.read_output()
    )
    assert api.server.stop() == 0
    assert stored_head(path) == head


def test_a_forged_checkpoint_is_ignored_with_a_warning_and_the_agent_served(
    fresh_api: Api,
) -> None:
    api = fresh_api
    agent = api.create("forged")
    ok(agent.act("search"))
    head = head_of(api, agent)
    assert api.server.stop() == 0
    path = checkpoint_of(api.server.data_dir, "forged")
    seq, digest = head.split(":")
    path.write_bytes(signed_checkpoint("forged", Head(int(seq), digest), Signer(b"\x05" * 32)))
    api.server.start()
    assert entry(api, "forged")["state"] == "active"
    ok(agent.act("search"))
    assert "agent forged: ignoring its checkpoint" in api.server.read_output()
