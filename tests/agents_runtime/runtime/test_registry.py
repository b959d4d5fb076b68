"""The registry: creation, loading at startup (verify, fold, torn tails,
quarantine), lookup and listing."""

from __future__ import annotations

import asyncio
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.policy import parse_policy, policy_json
from agents_runtime.errors import AgentExists, NotFound, PolicyError, Quarantined
from agents_runtime.log import canonical
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.files.logfile import read_log
from agents_runtime.log.files.store import FileStore
from agents_runtime.log.record import FORMAT, Head, seal
from agents_runtime.log.verify import Failure
from agents_runtime.runtime.registry import Registry, quarantine_message
from guardd.app import BY_COMMAND
from tests.agents_runtime.support import (
    AGENT,
    TEST_PUBLIC_KEY,
    TEST_SIGNER,
    FakeClock,
    log_lines,
    policy,
    running_agent,
    running_registry,
    snapshot,
    write_test_keys,
)


async def make_agent(root: Path, agent_id: str = AGENT, requests: int = 2) -> Path:
    async with running_agent(root, agent_id=agent_id) as agent:
        for _ in range(requests):
            await agent.ask(c.RequestAction("read"))
        return agent.path


def loaded_registry(root: Path) -> Registry:
    data_dir = DataDir(root)
    write_test_keys(root)
    return Registry(FileStore(data_dir), data_dir.prepare(), clock=FakeClock(), render=BY_COMMAND)


def close(registry: Registry) -> None:
    """Close what load() opened, for a registry that was never started."""
    for actor in registry.actors.values():
        actor.log.close()
    registry.store.close()


def lines(path: Path) -> list[dict[str, Any]]:
    return [canonical.loads(line) for line in path.read_bytes().splitlines()]


# -- creation ----------------------------------------------------------------------


async def test_create_writes_genesis_and_policy(tmp_path: Path) -> None:
    agent_policy = policy(budget=7)
    async with running_registry(tmp_path) as registry:
        status = await registry.create(AGENT, agent_policy)
        path = registry.store.path(AGENT)
    genesis, first_policy = lines(path)
    assert genesis["kind"] == "genesis"
    assert (genesis["seq"], genesis["format"], genesis["log_id"]) == (0, FORMAT, AGENT)
    assert genesis["public_key"] == TEST_PUBLIC_KEY.hex()
    assert genesis["prev"] == "0" * 64
    assert (first_policy["kind"], first_policy["seq"]) == ("policy", 1)
    assert first_policy["policy"] == canonical.loads(canonical.dumps(policy_json(agent_policy)))
    assert status["head"] == {"seq": 1, "hash": first_policy["hash"]}
    assert (status["alive"], status["budget"], status["remaining"]) == (True, 7, 7)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not path.with_name(path.name + ".tmp").exists()


async def test_creating_an_existing_agent_is_agent_exists(tmp_path: Path) -> None:
    async with running_registry(tmp_path) as registry:
        await registry.create(AGENT, policy())
        before = registry.store.path(AGENT).read_bytes()
        with pytest.raises(AgentExists, match=f"^agent {AGENT} already exists$"):
            await registry.create(AGENT, policy(budget=1))
        assert registry.store.path(AGENT).read_bytes() == before


async def test_creating_the_same_agent_twice_at_once_creates_it_once(tmp_path: Path) -> None:
    async with running_registry(tmp_path) as registry:
        results = await asyncio.gather(
            *(registry.create("twin", policy()) for _ in range(5)), return_exceptions=True
        )
        assert sum(isinstance(r, dict) for r in results) == 1
        assert sum(isinstance(r, AgentExists) for r in results) == 4


async def test_an_unknown_agent_is_not_found(tmp_path: Path) -> None:
    async with running_registry(tmp_path) as registry:
        with pytest.raises(NotFound, match=r"^no agent nobody$"):
            registry.ref("nobody")
        assert not registry.exists("nobody")


# -- loading -------------------------------------------------------------------------


async def test_a_restart_rebuilds_the_same_state(tmp_path: Path) -> None:
    async with running_agent(
        tmp_path, policy(tools={"read": {}, "send": {"requires_approval": True}})
    ) as agent:
        await agent.ask(c.RequestAction("read"))
        await agent.ask(c.RequestAction("send"))
        await agent.ask(c.AddScar("minor", "x"))
        before = snapshot(agent.state, log_lines(agent.path))
    registry = loaded_registry(tmp_path)
    summary = registry.load()
    try:
        assert (summary.loaded, summary.quarantined, summary.torn) == (1, {}, [])
        assert snapshot(registry.actors[AGENT].state, log_lines(agent.path)) == before
    finally:
        close(registry)


async def test_a_torn_tail_is_reported_moved_aside_and_cut(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    good = path.read_bytes()
    torn = b'{"action_id":"act-3","cost":1,"hash":"ab'
    path.write_bytes(good + torn)
    assert read_log(path).torn_tail == torn
    registry = loaded_registry(tmp_path)
    summary = registry.load()
    close(registry)
    assert (summary.loaded, summary.quarantined, summary.torn) == (1, {}, [AGENT])
    assert path.read_bytes() == good
    assert path.with_name(path.name + ".torn").read_bytes() == torn
    # a second torn tail is appended to the same .torn file
    path.write_bytes(good + b"{")
    registry = loaded_registry(tmp_path)
    assert registry.load().torn == [AGENT]
    close(registry)
    assert path.with_name(path.name + ".torn").read_bytes() == torn + b"{"


async def test_after_a_torn_tail_the_agent_goes_on_from_its_last_whole_record(
    tmp_path: Path,
) -> None:
    path = await make_agent(tmp_path)
    path.write_bytes(path.read_bytes() + b'{"kind":"action_requ')
    async with running_registry(tmp_path) as registry:
        reply = await registry.ref(AGENT).ask(c.RequestAction("read"))
        assert reply["action_id"] == "act-3"
    registry = loaded_registry(tmp_path)
    summary = registry.load()
    close(registry)
    assert (summary.quarantined, summary.torn) == ({}, [])


async def test_a_last_line_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    contents = read_log(path)
    assert (contents.torn_tail, contents.missing_newline) == (None, True)
    registry = loaded_registry(tmp_path)
    summary = registry.load()
    close(registry)
    assert (summary.loaded, summary.torn) == (1, [])
    assert path.read_bytes() == data
    assert registry.actors[AGENT].state.actions_allowed == 2


async def test_an_unfinished_creation_is_removed(tmp_path: Path) -> None:
    await make_agent(tmp_path)
    leftover = tmp_path / "agents" / "half.jsonl.tmp"
    leftover.write_bytes(b'{"kind":"gen')
    registry = loaded_registry(tmp_path)
    summary = registry.load()
    close(registry)
    assert (summary.removed, summary.loaded) == (1, 1)
    assert not leftover.exists()


def quarantine(tmp_path: Path) -> tuple[Registry, Failure]:
    registry = loaded_registry(tmp_path)
    summary = registry.load()
    close(registry)
    assert AGENT in summary.quarantined
    return registry, summary.quarantined[AGENT]


async def test_a_changed_record_quarantines_the_agent(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    data = path.read_bytes().replace(b'"remaining":99,', b'"remaining":100,', 1)
    path.write_bytes(data)
    registry, failure = quarantine(tmp_path)
    assert failure == Failure(4, 3, "hash does not match content")
    assert path.read_bytes() == data  # left as it is for the operator
    message = (
        f"agent {AGENT} is quarantined: its log failed verification at startup "
        "(line 4 (seq 3): hash does not match content)"
    )
    with pytest.raises(Quarantined, match=f"^{re.escape(message)}$"):
        registry.ref(AGENT)
    assert registry.exists(AGENT)


async def test_a_bad_line_in_the_middle_quarantines_the_agent(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    records = path.read_bytes().splitlines(keepends=True)
    records[3] = b"{not json\n"
    path.write_bytes(b"".join(records))
    _, failure = quarantine(tmp_path)
    assert failure == Failure(4, None, "not valid JSON")


async def test_a_log_copied_from_another_agent_is_quarantined(tmp_path: Path) -> None:
    path = await make_agent(tmp_path, "original")
    path.rename(path.with_name(f"{AGENT}.jsonl"))
    _, failure = quarantine(tmp_path)
    assert failure == Failure(1, 0, "log_id does not match")


async def test_a_log_signed_by_another_key_is_quarantined(tmp_path: Path) -> None:
    other = tmp_path / "other"
    path = await make_agent(other)
    (tmp_path / "agents").mkdir(parents=True)
    write_test_keys(tmp_path)
    for name in ("audit.key", "audit.pub"):
        (tmp_path / "keys" / name).unlink()
    DataDir(tmp_path).prepare()  # fresh keys: no log exists yet
    (tmp_path / "agents" / path.name).write_bytes(path.read_bytes())
    data_dir = DataDir(tmp_path)
    registry = Registry(FileStore(data_dir), data_dir.prepare(), clock=FakeClock())
    summary = registry.load()
    close(registry)
    assert summary.quarantined[AGENT] == Failure(1, 0, "public key does not match")


async def test_a_signed_record_that_makes_no_sense_quarantines_the_agent(tmp_path: Path) -> None:
    path = await make_agent(tmp_path)
    records = lines(path)
    last = records[-1]
    forged = seal(
        {"kind": "outcome", "action_id": "act-99", "outcome": "success", "by": "agent"},
        prev=Head(last["seq"], last["hash"]),
        ts=last["ts"],
        signer=TEST_SIGNER,
    )
    path.write_bytes(path.read_bytes() + forged.line)
    _, failure = quarantine(tmp_path)
    assert (failure.seq, failure.reason) == (last["seq"] + 1, "record does not apply: 'act-99'")


async def test_a_policy_an_earlier_release_admitted_loads_though_this_one_would_refuse_it(
    tmp_path: Path,
) -> None:
    """The limits on a policy's cost apply when it is set; a log written
    under looser ones must still load, and its policy still decide."""
    path = await make_agent(tmp_path, requests=0)
    joins = (
        "input.a + input.b + input.c + input.d + input.e + input.f == 'abcdef'"  # 5 +: 1 too many
    )
    recorded = policy_json(policy())
    recorded["tools"]["read"]["rules"] = [{"name": "joined", "when": joins, "effect": "deny"}]
    with pytest.raises(PolicyError, match="more than 4 \\+ that may join"):
        parse_policy(recorded)
    last = lines(path)[-1]
    written = seal(
        {"kind": "policy", "policy": recorded},
        prev=Head(last["seq"], last["hash"]),
        ts=last["ts"],
        signer=TEST_SIGNER,
    )
    path.write_bytes(path.read_bytes() + written.line)
    async with running_registry(tmp_path) as registry:
        assert registry.exists(AGENT)
        ref = registry.ref(AGENT)
        joined = await ref.ask(c.RequestAction("read", {k: k for k in "abcdef"}))
        other = await ref.ask(c.RequestAction("read", {k: "z" for k in "abcdef"}))
    assert joined["decision"] == "denied"
    assert joined["reason"]["rule"] == "joined"
    assert other["decision"] == "allowed"


async def test_quarantined_agents_are_listed_with_their_error(tmp_path: Path) -> None:
    await make_agent(tmp_path, "fine")
    path = await make_agent(tmp_path, "broken")
    path.write_bytes(path.read_bytes().replace(b'"remaining":99,', b'"remaining":9,', 1))
    async with running_registry(tmp_path) as registry:
        entries = await registry.list()
    assert [e.agent_id for e in entries] == ["broken", "fine"]
    failure = entries[0].failure
    assert failure is not None
    assert entries[0].status is None
    assert quarantine_message(failure) == "line 4 (seq 3): hash does not match content"
    assert entries[1].status["actions_allowed"] == 2
    assert entries[1].failure is None
