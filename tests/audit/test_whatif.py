"""``audit replay --policy``: a candidate policy re-decides real history.

Histories are written by the service itself (the actor, or a real guardd over
HTTP); the report says which decisions would change, how, and what the
history cannot tell."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents_runtime.core import commands as c
from audit.cli import main
from tests.agents_runtime.support import TEST_PUBLIC_KEY, D, Harness, policy, running_agent
from tests.support.server import GuardServer

TOOLS = {
    "read": {"cost": 1},
    "send": {"cost": 2, "requires_approval": True},
    "delete": {"cost": 3},
}
POLICY = policy(budget=20, scar_limit=50, tools=TOOLS)


async def history(agent: Harness) -> None:
    ask = agent.ask
    await ask(c.RequestAction("read", {"q": "a"}))  # act-1 allowed
    await ask(c.RequestAction("delete", {"path": "/tmp/x"}))  # act-2 allowed
    await ask(c.RequestAction("send", {"to": "ops"}))  # act-3 held
    await ask(c.Approve("act-3", "alice"))  # allowed
    await ask(c.RequestAction("send", {"to": "eve"}))  # act-4 held
    await ask(c.Reject("act-4", "bob", "no"))  # denied:rejected
    await ask(c.RequestAction("delete", {"path": "/etc"}))  # act-5 allowed
    await ask(c.ReportOutcome("act-5", "failure", c.AGENT, "oops"))  # a minor scar
    await ask(c.RequestAction("nope"))  # act-6 denied:tool_not_allowed
    await ask(c.RequestAction("read", {"q": "b"}, D(2)))  # act-7 allowed


async def write_log(root: Path, script: Callable[[Harness], Any] = history) -> Path:
    async with running_agent(root, POLICY) as agent:
        await script(agent)
        return agent.path


def candidate(tmp_path: Path, **overrides: Any) -> Path:
    path = tmp_path / "candidate.json"
    body = {"budget": 20, "scar_limit": 50, "tools": TOOLS} | overrides
    path.write_text(json.dumps(body))
    return path


def what_if(
    capsys: pytest.CaptureFixture[str], *args: str, key: bool = True
) -> tuple[int, str, str]:
    extra = ["--public-key", TEST_PUBLIC_KEY.hex()] if key else []
    status = main(["replay", *args, *extra])
    out, err = capsys.readouterr()
    return status, out, err


def report(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    status, out, _ = what_if(capsys, *args, "--json")
    assert status == 0, out
    (line,) = out.splitlines()
    result = json.loads(line)
    assert isinstance(result, dict)
    return result


def read(path: Path) -> bytes:
    return path.read_bytes()


@pytest.fixture
async def log(tmp_path: Path) -> Path:
    return await write_log(tmp_path / "data")


async def test_the_logs_own_policy_changes_nothing(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path)))
    assert (result["decisions"], result["changed"], result["by_change"]) == (7, 0, {})
    assert result["spent_before"] == result["spent_after"] == 1 + 3 + 2 + 3 + 2
    assert result["examples"] == []
    assert result["agent_id"] == "agent-1"


async def test_a_tool_taken_away_is_reported_by_change_by_tool_and_example(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = {"read": TOOLS["read"], "send": TOOLS["send"]}
    before = read(log)
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path, tools=tools)))
    assert read(log) == before  # only read
    assert result["changed"] == 2
    assert result["by_change"] == {"allowed->denied:tool_not_allowed": 2}
    assert result["by_tool"] == {"delete": 2}
    assert result["spent_before"] == 11
    assert result["spent_after"] == 11 - 3 - 3
    first, second = result["examples"]
    assert first == {
        "seq": 4,
        "action_id": "act-2",
        "tool": "delete",
        "input": '{"path":"/tmp/x"}',
        "before": "allowed",
        "after": "denied:tool_not_allowed",
    }
    assert (second["action_id"], second["before"]) == ("act-5", "allowed")
    # act-5's failure is dropped with it: its action is no longer allowed
    assert result["outcomes_dropped"] == 1
    assert any("not guessed" in rule for rule in result["rules"])


async def test_approval_needed_where_history_has_none_stays_pending_and_says_so(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = TOOLS | {"delete": {"cost": 3, "requires_approval": True}}
    path = str(candidate(tmp_path, tools=tools))
    result = report(capsys, str(log), "--policy", path)
    assert result["by_change"] == {"allowed->pending_approval": 2}
    assert result["pending_without_approval"] == 2
    assert result["spent_after"] == 11 - 6
    status, out, _ = what_if(capsys, str(log), "--policy", path)
    assert status == 0
    assert out.splitlines()[:2] == [
        "agent agent-1: 7 actions re-decided under " + path + "; 2 would change",
        "  spent: 11 in the history, 5 under the candidate",
    ]
    assert (
        "  2 action(s) the candidate holds for approval were never approved in this history: "
        "counted as pending_approval, charged nothing"
    ) in out
    assert "rules:" in out


async def test_operators_steps_replay_where_the_candidate_also_holds_and_drop_where_not(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # send no longer needs approval: act-3's approval and act-4's rejection are moot
    tools = TOOLS | {"send": {"cost": 2}}
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path, tools=tools)))
    assert result["by_change"] == {"denied:rejected->allowed": 1}
    assert result["operator_steps_dropped"] == 2
    # a budget too small for the approval when it comes: the approval's re-run checks deny it
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path, budget=5)))
    # act-3 and act-4 no longer fit when requested: denied at once, no one is asked
    assert result["by_change"] == {
        "allowed->denied:insufficient_budget": 3,
        "denied:rejected->denied:insufficient_budget": 1,
    }
    assert [e["action_id"] for e in result["examples"]] == ["act-3", "act-4", "act-5", "act-7"]
    assert result["operator_steps_dropped"] == 2


async def test_later_policy_changes_are_left_out_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def script(agent: Harness) -> None:
        await agent.ask(c.RequestAction("read"))
        await agent.ask(c.SetPolicy(policy(budget=20, scar_limit=50, tools={"read": {}})))
        await agent.ask(c.RequestAction("delete"))  # denied under the later policy

    log = await write_log(tmp_path / "data", script)
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path)))
    assert result["policies_left_out"] == 1
    assert result["by_change"] == {"denied:tool_not_allowed->allowed": 1}
    _, out, _ = what_if(capsys, str(log), "--policy", str(candidate(tmp_path)))
    assert "  left out: 1 later policy record(s) of the history" in out


async def test_a_log_that_does_not_verify_is_not_replayed_exit_1(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged = tmp_path / "forged.jsonl"
    forged.write_bytes(read(log).replace(b'"q":"a"', b'"q":"z"'))
    status, out, _ = what_if(capsys, str(forged), "--policy", str(candidate(tmp_path)))
    assert status == 1
    assert out.splitlines()[0].endswith("FAILED: the log does not verify; not replayed")


async def test_a_data_dirs_own_key_is_named_as_such_when_the_logs_do_not_match_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = await write_log(tmp_path / "data")
    assert log.parent.name == "agents"
    pub = log.parent.parent / "keys" / "audit.pub"
    pub.parent.mkdir(exist_ok=True)
    pub.write_text("ab" * 32 + "\n")
    policy_file = str(candidate(tmp_path))
    status, out, err = what_if(
        capsys, "--data-dir", str(log.parent.parent), "--policy", policy_file, key=False
    )
    assert status == 1
    assert "the data directory's own key" in err
    assert (
        f"the genesis record names public key {TEST_PUBLIC_KEY.hex()}, "
        f"not the data directory's own {pub}"
    ) in out
    assert "--public-key" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--store", "mysql://db/guard", "--policy", "p.json"],
            "audit: error: --store must be a postgresql:// URL",
            id="store",
        ),
        pytest.param(
            ["--data-dir", "."],
            "audit: error: --data-dir, --store and --agent ask what a candidate would "
            "decide: add --policy FILE",
            id="data-dir-without-policy",
        ),
        pytest.param(
            ["LOG", "--data-dir", ".", "--policy", "POLICY"],
            "audit: error: give one of a log file, --data-dir DIR or --store URL",
            id="both",
        ),
        pytest.param(
            ["LOG", "--policy", "missing.json"],
            "audit: error: cannot read the candidate policy missing.json: No such file or "
            "directory",
            id="no-policy-file",
        ),
        pytest.param(
            ["LOG", "--policy", "BAD"],
            "audit: error: candidate policy BAD: not a valid policy: ",
            id="bad-policy",
        ),
        pytest.param(
            ["LOG", "--policy", "POLICY", "--examples", "-1"],
            "audit: error: argument --examples: must be a whole number >= 0, not '-1'",
            id="examples",
        ),
    ],
)
async def test_bad_input_is_one_line_and_exit_2(
    log: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "BAD").write_text('{"budget": 1, "tools": {"x": {"cots": 1}}}')
    candidate(tmp_path)
    args = [{"LOG": str(log), "POLICY": "candidate.json"}.get(a, a) for a in args]
    status, out, err = what_if(capsys, *args)
    assert status == 2
    assert out == ""
    assert err.startswith(message), err
    assert len(err.splitlines()) == 1


# -- a whole data directory, written over HTTP ---------------------------------------


def test_data_dir_what_if_over_a_history_written_through_http(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = GuardServer(tmp_path / "guard-data").start()
    try:
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        with httpx.Client(base_url=server.url, timeout=30) as http:
            tokens = {}
            for agent_id in ("billing", "support"):
                body = {"agent_id": agent_id, "policy": POLICY_BODY}
                created = http.post("/v1/agents", json=body, headers=admin)
                assert created.status_code == 201, created.text
                tokens[agent_id] = {"Authorization": f"Bearer {created.json()['token']}"}
            for tool, n in (("read", 3), ("delete", 2)):
                for i in range(n):
                    http.post(
                        "/v1/agents/billing/actions",
                        json={"tool": tool, "input": {"i": i}},
                        headers=tokens["billing"],
                    ).raise_for_status()
            http.post(
                "/v1/agents/support/actions", json={"tool": "read"}, headers=tokens["support"]
            ).raise_for_status()
    finally:
        server.kill()
    tools = {"read": TOOLS["read"]}
    policy_file = candidate(tmp_path, tools=tools)
    data_dir = str(tmp_path / "guard-data")
    status, out, err = what_if(
        capsys, "--data-dir", data_dir, "--policy", str(policy_file), "--json", key=False
    )
    assert status == 0, out + err
    assert "the data directory's own key" in err
    billing, support = (json.loads(line) for line in out.splitlines())
    assert (billing["agent_id"], billing["decisions"], billing["changed"]) == ("billing", 5, 2)
    assert billing["by_change"] == {"allowed->denied:tool_not_allowed": 2}
    assert (billing["spent_before"], billing["spent_after"]) == (9, 3)
    assert (support["agent_id"], support["changed"]) == ("support", 0)
    # one agent only
    status, out, _ = what_if(
        capsys,
        "--data-dir",
        data_dir,
        "--agent",
        "support",
        "--policy",
        str(policy_file),
        "--public-key",
        server.public_key,
        "--json",
        key=False,
    )
    assert status == 0
    assert [json.loads(line)["agent_id"] for line in out.splitlines()] == ["support"]
    status, _, err = what_if(
        capsys, "--data-dir", data_dir, "--agent", "ghost", "--policy", str(policy_file)
    )
    assert (status, err.strip()) == (2, f"audit: error: {data_dir} holds no agent ghost")


POLICY_BODY = {"budget": 20, "scar_limit": 50, "tools": TOOLS}


async def test_grants_of_the_history_are_issued_and_drawn_under_the_candidate_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def script(agent: Harness) -> None:
        await agent.ask(c.IssueGrant("send", "alice", max_calls=1, ttl_secs=D(600)))
        await agent.ask(c.RequestAction("send"))  # act-1 drawn on grt-1
        await agent.ask(c.RequestAction("send"))  # act-2 held
        await agent.ask(c.Approve("act-2", "alice"))

    log = await write_log(tmp_path / "data", script)
    same = report(capsys, str(log), "--policy", str(candidate(tmp_path)))
    assert (same["changed"], same["pending_without_approval"]) == (0, 0)
    # a costlier send: the grant has room for one call, and the budget for it
    tools = TOOLS | {"send": {"cost": 15, "requires_approval": True}}
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path, tools=tools)))
    assert result["by_change"] == {"allowed->denied:insufficient_budget": 1}
    assert result["spent_after"] == 15


async def shadowed_history(agent: Harness) -> None:
    candidate = policy(budget=20, scar_limit=50, tools={"read": {"cost": 1}})
    await agent.ask(c.SetShadow(candidate))
    await history(agent)
    await agent.ask(c.SetPolicy(POLICY, "fleet", 3))
    await agent.ask(c.ClearShadow())
    await agent.ask(c.RequestAction("read"))


async def test_shadow_records_and_named_policy_versions_change_no_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = await write_log(tmp_path / "data", shadowed_history)
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path)))
    assert (result["decisions"], result["changed"], result["by_change"]) == (8, 0, {})


# -- policy rules, tags and cost_from --------------------------------------------------

RULED_TOOLS = TOOLS | {
    "read": {"cost": 1, "tags": ["private"]},
    "delete": {
        "cost": 3,
        "rules": [
            {"name": "etc", "when": "input.path.startsWith('/etc')", "effect": "deny"},
            {
                "name": "after-reads",
                "when": "'private' in history.tags_used && history.calls['read'] >= 2",
                "effect": "deny",
            },
        ],
    },
    "send": {
        "cost": 2,
        "rules": [{"name": "ops", "when": "input.to == 'ops'", "effect": "allow"}],
        "requires_approval": True,
    },
}


async def test_a_candidate_with_rules_redecides_by_input_and_history(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path, tools=RULED_TOOLS)))
    # act-3 (to ops) is allowed at once by its rule, so its approval is moot;
    # act-5 deletes under /etc.
    assert result["by_change"] == {"allowed->denied:policy_rule": 1}
    assert [e["action_id"] for e in result["examples"]] == ["act-5"]
    assert result["operator_steps_dropped"] == 1


async def test_a_candidate_charging_from_an_input_key_it_lacks_denies_policy_error(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = TOOLS | {"read": {"cost_from": "n"}}
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path, tools=tools)))
    assert result["by_change"] == {"allowed->denied:policy_error": 2}


async def test_a_log_written_under_rules_replays_exactly_and_changes_nothing_under_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ruled = policy(budget=20, scar_limit=50, tools=RULED_TOOLS)

    async def script(agent: Harness) -> None:
        ask = agent.ask
        await ask(c.RequestAction("read", {"q": "a"}))  # allowed, tagged
        await ask(c.RequestAction("delete", {"path": "/tmp/x"}))  # allowed
        await ask(c.RequestAction("send", {"to": "ops"}))  # allowed by rule ops
        await ask(c.RequestAction("send", {"to": "eve"}))  # held
        await ask(c.RequestAction("read", {"q": "b"}))  # second read
        await ask(c.Approve("act-4", "alice"))  # allowed on approval
        await ask(c.RequestAction("delete", {"path": "/tmp/y"}))  # denied: after-reads
        await ask(c.RequestAction("delete", {"path": "/etc"}))  # denied: etc

    async with running_agent(tmp_path / "data", ruled) as agent:
        await script(agent)
        log = agent.path
    records = [json.loads(line) for line in log.read_text().splitlines()]
    ruled_by = [(r["kind"], r["rule"]) for r in records if "rule" in r]
    assert ruled_by == [
        ("action_allowed", "ops"),
        ("action_denied", "after-reads"),
        ("action_denied", "etc"),
    ]
    status, out, _ = what_if(capsys, str(log))
    assert status == 0, out
    result = report(capsys, str(log), "--policy", str(candidate(tmp_path, tools=RULED_TOOLS)))
    assert (result["decisions"], result["changed"]) == (7, 0)


async def test_a_rejections_own_scar_counts_once_under_the_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One severe scar (10) is below the scar limit of 15; counted twice (the
    # rejection run again writes it, and its record run as an operator's scar
    # would write it again) it would end the agent before act-2.
    async def rejected_with_scar(agent: Harness) -> None:
        await agent.ask(c.RequestAction("send", {"to": "eve"}))  # act-1 held
        await agent.ask(c.Reject("act-1", "bob", "no", "severe"))  # denied:rejected, scar
        await agent.ask(c.RequestAction("read", {"q": "a"}))  # act-2 allowed

    async with running_agent(
        tmp_path / "data", policy(budget=20, scar_limit=15, tools=TOOLS)
    ) as agent:
        await rejected_with_scar(agent)
        log = agent.path
    path = tmp_path / "candidate.json"
    path.write_text(json.dumps({"budget": 20, "scar_limit": 15, "tools": TOOLS}))
    result = report(capsys, str(log), "--policy", str(path))
    assert (result["decisions"], result["changed"], result["by_change"]) == (2, 0, {})


async def test_idempotency_keys_are_kept_as_long_as_the_guardd_that_wrote_the_log_kept_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same key two days apart: a new request for a guardd that keeps
    # keys a day (the default), a repeat for one that keeps them three.
    async def reused_key(agent: Harness) -> None:
        await agent.ask(c.RequestAction("read", {"q": "a"}, None, "k"))  # act-1
        agent.clock.advance(2 * 86_400)
        await agent.ask(c.RequestAction("read", {"q": "a"}, None, "k"))  # act-2

    log = await write_log(tmp_path / "data", reused_key)
    path = str(candidate(tmp_path))
    result = report(capsys, str(log), "--policy", path)
    assert (result["decisions"], result["changed"]) == (2, 0)
    longer = report(capsys, str(log), "--policy", path, "--idempotency-retention", "259200")
    assert longer["by_change"] == {"allowed->requested": 1}
