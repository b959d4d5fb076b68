"""Reading records back by seq: from the log file (guardd) or from memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.state import AgentState, apply
from agents_runtime.errors import LogReadError
from agents_runtime.log import canonical
from agents_runtime.log.record import Head, seal
from agents_runtime.log.recordstore import FileRecords, MemoryRecords
from tests.agents_runtime.support import TEST_SIGNER, policy, running_agent

TOOLS = {"read": {"cost": 1}, "send": {"cost": 2, "requires_approval": True}}


def _lines(count: int) -> list[bytes]:
    head = Head.empty()
    lines = []
    for n in range(count):
        sealed = seal(
            {"kind": "scar", "n": n, "pad": "x" * n}, prev=head, ts="t", signer=TEST_SIGNER
        )
        head = sealed.head
        lines.append(sealed.line)
    return lines


def _written(path: Path, count: int) -> tuple[list[bytes], FileRecords]:
    """A log of ``count`` records on disk, and a store that has added them all."""
    lines = _lines(count)
    path.write_bytes(b"".join(lines))
    store = FileRecords(path)
    for line in lines:
        store.add(canonical.loads(line[:-1]), line)
    return lines, store


def test_file_records_read_each_record_back_by_seq(tmp_path: Path) -> None:
    lines, store = _written(tmp_path / "a.jsonl", 20)
    assert len(store) == 20
    for seq in (0, 7, 19):
        assert store.get(seq) == canonical.loads(lines[seq][:-1])


def test_file_records_serve_lines_not_yet_written_until_told_they_are(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(3)
    path.write_bytes(lines[0])
    store = FileRecords(path)
    store.add(canonical.loads(lines[0][:-1]), lines[0])
    for line in lines[1:]:
        store.add(canonical.loads(line[:-1]), line, written=False)
    assert store.get(2)["n"] == 2  # from memory: the file does not hold it yet
    with path.open("ab") as fh:
        fh.write(lines[1] + lines[2])
    store.written()
    assert store.get(2)["n"] == 2  # now from the file


def test_file_records_count_and_index_lines_not_yet_written(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines = _lines(4)
    path.write_bytes(b"".join(lines))
    store = FileRecords(path)
    store.add(canonical.loads(lines[0][:-1]), lines[0])
    store.add(canonical.loads(lines[1][:-1]), lines[1], written=False)
    store.add(canonical.loads(lines[2][:-1]), lines[2], written=False)
    assert len(store) == 3
    store.add(canonical.loads(lines[3][:-1]), lines[3])  # indexed after the two before it
    assert len(store) == 4
    assert store.end == len(b"".join(lines))
    assert [store.get(seq)["n"] for seq in range(4)] == [0, 1, 2, 3]


@pytest.mark.parametrize("seq", [-1, 3, 10**9])
def test_file_records_refuse_a_seq_the_log_does_not_have(tmp_path: Path, seq: int) -> None:
    _, store = _written(tmp_path / "a.jsonl", 3)
    with pytest.raises(LogReadError, match="no record at seq"):
        store.get(seq)


def test_file_records_notice_a_log_changed_under_them(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    lines, store = _written(path, 3)
    path.write_bytes(lines[1] + lines[0] + lines[2])  # same length, other order
    with pytest.raises(LogReadError):
        store.get(1)
    path.unlink()
    with pytest.raises(LogReadError, match="cannot read"):
        store.get(0)


def test_memory_records_keep_every_record_folded() -> None:
    store = MemoryRecords()
    store.add({"seq": 0, "kind": "genesis"})
    assert store.get(0)["kind"] == "genesis"
    with pytest.raises(LogReadError):
        store.get(1)


async def test_actions_decided_at_request_are_read_from_the_log_not_kept(tmp_path: Path) -> None:
    async with running_agent(tmp_path, policy(budget=1000, tools=TOOLS)) as agent:
        for n in range(50):
            await agent.ask(c.RequestAction("read", {"n": n, "text": "x" * 100}))
        await agent.ask(c.RequestAction("nope", {"n": 50}))
        state = agent.state
        assert (state.action_count, state.held, state.pending) == (51, {}, {})
        action = await agent.ask(c.GetAction("act-7"))
        assert (action["input"], action["status"], action["cost"]) == (
            {"n": 6, "text": "x" * 100},
            "allowed",
            1,
        )
        denied = await agent.ask(c.GetAction("act-51"))
        assert denied["reason"] == {"code": "tool_not_allowed", "tool": "nope"}


async def test_held_actions_stay_in_memory_with_their_answer(tmp_path: Path) -> None:
    async with running_agent(tmp_path, policy(tools=TOOLS)) as agent:
        await agent.ask(c.RequestAction("send", {"to": "ops"}))
        await agent.ask(c.Approve("act-1", "alice", "fine"))
        assert list(agent.state.held) == ["act-1"]
        assert agent.state.pending == {}
        action = await agent.ask(c.GetAction("act-1"))
        assert (action["approved_by"], action["note"], action["cost"]) == ("alice", "fine", 2)


async def test_a_finished_action_of_a_log_changed_under_guardd_is_an_internal_error(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path, policy(tools=TOOLS)) as agent:
        await agent.ask(c.RequestAction("read", {"q": 1}))
        await agent.ask(c.RequestAction("read", {"q": 2}))
        lines = agent.path.read_bytes().splitlines(keepends=True)
        agent.path.write_bytes(b"".join(lines[:2]))  # cut both actions off
        with pytest.raises(LogReadError) as caught:
            await agent.ask(c.GetAction("act-2"))
        assert caught.value.code == "internal"
        agent.path.write_bytes(b"".join(lines))  # put back for the replay check on exit


def test_file_records_offsets_grow_past_4_gib(tmp_path: Path) -> None:
    store = FileRecords(tmp_path / "a.jsonl")
    store.add({}, b"x" * 10)
    store.end = 2**32 - 5  # as if the file were that long
    store.add({}, b"y" * 10)
    store.add({}, b"z" * 10)
    assert len(store) == 3
    assert store.end == 2**32 + 15


def test_action_seqs_grow_past_2_to_the_32() -> None:
    state = AgentState("a")
    for seq in (5, 2**32 + 7):
        n = state.action_count + 1
        record = {
            "kind": "action_requested",
            "seq": seq,
            "ts": "2026-01-01T00:00:00.000000Z",
            "hash": "0" * 64,
            "action_id": f"act-{n}",
        }
        apply(state, record)
    assert list(state.action_seqs) == [5, 2**32 + 7]
