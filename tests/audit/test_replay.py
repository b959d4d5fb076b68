"""``audit replay``: OK on logs the service wrote; each forged record that
verifies (re-signed with the key) but breaks the policy is named by its seq."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.core import commands as c
from agents_runtime.core.rate_history import TRIM_EVERY
from agents_runtime.log import canonical
from agents_runtime.log.kinds import Kind
from agents_runtime.log.record import Head, seal
from audit.cli import main
from audit.replay import fields_of, replay_records
from tests.agents_runtime.support import (
    AGENT,
    TEST_PUBLIC_KEY,
    TEST_SIGNER,
    D,
    Harness,
    policy,
    running_agent,
)

Records = list[dict[str, Any]]

POLICY = policy(
    budget=10,
    scar_limit=20,
    tools={"read": {"cost": 1}, "send": {"cost": 2, "requires_approval": True}},
    rate_limit={"max_actions": 3, "window_secs": 60},
)


async def varied_log(agent: Harness) -> None:
    """One of everything the service writes."""
    ask = agent.ask
    await ask(c.RequestAction("read", {"q": 1}, idempotency_key="k1"))
    await ask(c.RequestAction("read", {"q": 1}, idempotency_key="k1"))  # answered, not written
    await ask(c.RequestAction("nope"))  # tool_not_allowed, moderate scar
    await ask(c.RequestAction("send"))  # act-3 held
    await ask(c.RequestAction("send"))  # act-4 held
    await ask(c.Approve("act-3", "alice", "ok"))
    await ask(c.Reject("act-4", "bob", "no", "minor"))
    await ask(c.RequestAction("read", cost=D(50)))  # insufficient_budget
    await ask(c.RequestAction("read"))  # act-6: the third allowed within 60 s
    await ask(c.RequestAction("read"))  # act-7: rate_limited, minor scar
    await ask(c.ReportOutcome("act-1", "failure", c.AGENT, "broke"))
    agent.clock.advance(61)
    await ask(c.AddScar("minor", "watch it", "act-1"))
    await ask(c.SetPolicy(policy(budget=10, scar_limit=30, tools={"read": {"cost": 1}})))
    await ask(c.RequestAction("read", cost=D(2)))  # act-8: remaining 4
    await ask(c.RequestAction("read", cost=D(4)))  # act-9: remaining exactly 0: terminated
    await ask(c.RequestAction("read"))  # act-10: denied terminated
    await ask(c.ReportOutcome("act-9", "success", c.ADMIN))


async def write_log(
    root: Path, script: Callable[[Harness], Any], agent_policy: Any = POLICY
) -> Path:
    async with running_agent(root, agent_policy) as agent:
        await script(agent)
        return agent.path


def read(path: Path) -> Records:
    return [canonical.loads(line) for line in path.read_bytes().splitlines()]


def reseal(records: Records, start: int) -> Records:
    """Re-chain and re-sign records[start:] with the test key, as a forger
    holding the key would, so that the forged log verifies; an allowance's
    request_hash follows its re-sealed request, as a forger's would."""
    out = records[:start]
    moved: dict[str, str] = {}  # old hash -> new hash
    for record in records[start:]:
        prev = Head(out[-1]["seq"], out[-1]["hash"]) if out else Head.empty()
        fields = fields_of(record)
        if fields.get("request_hash") in moved:
            fields["request_hash"] = moved[fields["request_hash"]]
        out.append(seal(fields, prev=prev, ts=record["ts"], signer=TEST_SIGNER).record)
        if "hash" in record:
            moved[record["hash"]] = out[-1]["hash"]
    return out


def beside(log: Path, name: str) -> Path:
    """A path next to the data dir: a file named agents/<other>.jsonl would
    (rightly) fail verification for its log_id."""
    return log.parent.parent.parent / name


def write(path: Path, records: Records) -> Path:
    path.write_bytes(b"".join(canonical.dumps(r) + b"\n" for r in records))
    return path


def index_of(records: Records, kind: str, action_id: str | None = None, nth: int = 0) -> int:
    found = [
        i
        for i, r in enumerate(records)
        if r["kind"] == kind and (action_id is None or r.get("action_id") == action_id)
    ]
    return found[nth]


def replay(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    status = main(["replay", str(path), "--public-key", TEST_PUBLIC_KEY.hex(), *extra])
    return status, capsys.readouterr().out


@pytest.fixture
async def log(tmp_path: Path) -> Path:
    return await write_log(tmp_path / "data", varied_log)


# -- real logs -------------------------------------------------------------------


async def test_replay_says_ok_on_a_log_the_service_wrote(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = replay(log, capsys)
    assert status == 0
    records = read(log)
    assert out.splitlines() == [
        "OK: every record is what the log's own policy would have written "
        f"({len(records)} records, 16 commands re-run, 10 actions)"
    ]
    # Withdrawn and expired approvals (held_log), grants (granted_log) and
    # shadows (shadow_log) have their own logs below; approvals by several
    # people theirs (tests/guardd/test_quorum.py).
    assert {r["kind"] for r in records} == set(Kind) - {
        Kind.APPROVAL_RECORDED,
        Kind.ACTION_CANCELLED,
        Kind.APPROVAL_EXPIRED,
        Kind.GRANT_ISSUED,
        Kind.GRANT_REVOKED,
        Kind.SHADOW_SET,
        Kind.SHADOW_CLEARED,
    }


async def test_replay_json_report(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = replay(log, capsys, "--json")
    report = json.loads(out)
    assert status == 0
    assert (report["ok"], report["problems"], report["actions"]) == (True, [], 10)
    assert report["verification"]["ok"] is True


async def test_replay_without_a_public_key_warns_and_replays(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(log)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("OK: ")
    assert "warning: no --public-key given" in captured.err


def test_replay_reports_the_worked_example_as_cut_short(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # docs' worked example stops after a request, before its decision
    example = Path(__file__).parent.parent / "data" / "worked-example.jsonl"
    status, out = replay(example, capsys)
    assert status == 1
    assert out.splitlines()[1] == (
        "  seq 3: the log ends after seq 2; the policy would have written "
        "action_allowed act-1 (cost 0.5, remaining 99.5) "
        "(the command was cut short, e.g. by a crash)"
    )


async def test_operator_scars_signed_with_a_name_replay_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def script(agent: Harness) -> None:
        await agent.ask(c.RequestAction("send"))  # act-1 held
        await agent.ask(c.Reject("act-1", "bob", "no"))  # no scar chosen
        # the same approver scars the action afterwards: a command of its own,
        # not a scar the rejection should have written
        await agent.ask(c.AddScar("minor", "after all", "act-1", "bob"))
        await agent.ask(c.AddScar("moderate", "on the whole", None, "carol"))

    log = await write_log(tmp_path / "data", script)
    assert [r.get("by") for r in read(log) if r["kind"] == "scar"] == ["bob", "carol"]
    status, out = replay(log, capsys)
    assert status == 0, out
    assert "4 commands re-run" in out


async def test_a_rate_window_widened_after_its_times_left_memory_replays_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = 3 * TRIM_EVERY

    def rated(max_actions: int, window_secs: int) -> Any:
        rate = {"max_actions": max_actions, "window_secs": window_secs}
        return policy(budget=10_000, tools={"read": {"cost": 0}}, rate_limit=rate)

    async def script(agent: Harness) -> None:
        for _ in range(calls):  # one a second: the minute's window trims most
            await agent.ask(c.RequestAction("read"))
            agent.clock.advance(1)
        await agent.ask(c.SetPolicy(rated(calls + 1, 3600)))
        await agent.ask(c.RequestAction("read"))  # allowed: the hour's last call
        denied = await agent.ask(c.RequestAction("read"))  # counts the calls read back
        assert denied["reason"]["code"] == "rate_limited"

    log = await write_log(tmp_path / "data", script, rated(1000, 60))
    status, out = replay(log, capsys)
    assert status == 0, out
    assert f"{calls + 3} commands re-run" in out


# -- forged logs that verify ---------------------------------------------------------


def forge(log: Path, change: Callable[[Records], int]) -> Path:
    """Apply ``change`` (which returns the first index it touched) and re-seal."""
    records = read(log)
    start = change(records)
    forged = reseal(records, start)
    return write(beside(log, "forged.jsonl"), forged)


def forge_fields(log: Path, kind: str, action_id: str, **changes: Any) -> tuple[Path, int]:
    """Change fields of the ``kind`` record of ``action_id`` and re-seal; the
    forged log and that record's seq."""
    records = read(log)
    at = index_of(records, kind, action_id)

    def change(records: Records) -> int:
        records[at] = {**records[at], **changes}
        return at

    return forge(log, change), records[at]["seq"]


def expect_failure(capsys: pytest.CaptureFixture[str], path: Path, *problems: str) -> None:
    status, out = replay(path, capsys)
    lines = out.splitlines()
    assert status == 1, out
    noun = "record departs" if len(problems) == 1 else "records depart"
    assert lines[0] == (
        f"FAILED: {len(problems)} {noun} from what the log's own policy would have written"
    )
    assert lines[1 : 1 + len(problems)] == [f"  {p}" for p in problems]
    # and the forgery verifies: it is the policy, not the chain, that catches it
    assert main(["verify", str(path), "--public-key", TEST_PUBLIC_KEY.hex()]) == 0
    capsys.readouterr()


async def test_a_denied_action_re_signed_as_allowed_is_caught_naming_its_seq(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "action_denied", "act-5")  # insufficient_budget
    seq = records[at]["seq"]

    def allow(records: Records) -> int:
        remaining = 10 - 1 - 2  # spent before act-5
        records[at] = {
            **records[at],
            "kind": "action_allowed",
            "cost": 50,
            "remaining": remaining - 50,
        }
        del records[at]["reason"]
        return at

    expect_failure(
        capsys,
        forge(log, allow),
        f"seq {seq} (act-5): log has action_allowed act-5 (cost 50, remaining -43); "
        "the policy would have written action_denied act-5 (insufficient_budget)",
    )


async def test_a_wrong_charge_is_caught(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    forged, seq = forge_fields(log, "action_allowed", "act-1", cost=0, remaining=10)
    expect_failure(
        capsys,
        forged,
        f"seq {seq} (act-1): action_allowed: cost is 0, the policy gives 1; "
        "remaining is 10, the policy gives 9",
    )


async def test_a_wrong_remaining_is_caught(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    forged, seq = forge_fields(log, "action_allowed", "act-3", remaining=100)
    expect_failure(
        capsys,
        forged,
        f"seq {seq} (act-3): action_allowed: remaining is 100, the policy gives 7",
    )


async def test_a_missing_automatic_termination_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "terminated")
    before, after = records[at - 1]["seq"], records[at]["seq"]

    def drop(records: Records) -> int:
        del records[at]
        return at

    expect_failure(
        capsys,
        forge(log, drop),
        f"seq {after}: missing terminated (budget_exhausted, by system) after seq "
        f"{before}; the log goes on with action_requested act-10",
        # replay goes on as the policy would have: act-10's denial (terminated) matches
    )


async def test_an_action_allowed_after_terminated_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "action_denied", "act-10")
    seq = records[at]["seq"]

    def allow(records: Records) -> int:
        fields = {k: v for k, v in records[at].items() if k != "reason"}
        records[at] = {**fields, "kind": "action_allowed", "cost": 0, "remaining": 0}
        return at

    expect_failure(
        capsys,
        forge(log, allow),
        f"seq {seq} (act-10): log has action_allowed act-10 (cost 0, remaining 0); "
        "the policy would have written action_denied act-10 (terminated)",
    )


async def test_a_charge_after_terminated_is_caught_even_without_a_decision_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def script(agent: Harness) -> None:
        await agent.ask(c.Terminate("stop", "carol"))
        await agent.ask(c.RequestAction("read"))

    log = await write_log(tmp_path / "data", script)
    records = read(log)
    at = index_of(records, "action_denied", "act-1")
    seq = records[at]["seq"]

    def charge(records: Records) -> int:
        records[at] = {k: v for k, v in records[at].items() if k != "reason"} | {
            "kind": "action_allowed",
            "cost": 1,
            "remaining": 9,
        }
        return at

    expect_failure(
        capsys,
        forge(log, charge),
        f"seq {seq} (act-1): log has action_allowed act-1 (cost 1, remaining 9); "
        "the policy would have written action_denied act-1 (terminated)",
    )


async def test_a_rate_limited_request_re_signed_as_allowed_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "action_denied", "act-7")
    seq = records[at]["seq"]
    assert records[at]["reason"]["code"] == "rate_limited"

    def allow(records: Records) -> int:
        records[at] = {k: v for k, v in records[at].items() if k != "reason"} | {
            "kind": "action_allowed",
            "cost": 1,
            "remaining": 5,
        }
        del records[at + 1]  # its minor scar
        return at

    expect_failure(
        capsys,
        forge(log, allow),
        f"seq {seq} (act-7): log has action_allowed act-7 (cost 1, remaining 5); "
        "the policy would have written action_denied act-7 (rate_limited)",
        f"seq {seq + 1} (act-7): missing scar act-7 (minor, by system) after seq {seq}; "
        "the log goes on with outcome act-1 (failure)",
    )


async def test_an_approval_of_an_action_that_was_never_held_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "scar", "act-1", nth=1)  # the operator's scar on act-1
    seq = records[at]["seq"]

    def approve(records: Records) -> int:
        records[at] = {
            "seq": 0,
            "ts": records[at]["ts"],
            "kind": "action_allowed",
            "action_id": "act-2",
            "cost": 0,
            "remaining": 7,
            "approved_by": "mallory",
        }
        return at

    expect_failure(
        capsys,
        forge(log, approve),
        f"seq {seq} (act-2): action_allowed act-2 (cost 0, remaining 7) would have been "
        "refused: action act-2 is denied, not pending_approval",
    )


async def test_a_repeated_idempotency_key_that_created_an_action_is_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def script(agent: Harness) -> None:
        await agent.ask(c.RequestAction("read", idempotency_key="k"))
        await agent.ask(c.RequestAction("read", idempotency_key="other"))

    log = await write_log(tmp_path / "data", script)
    forged, seq = forge_fields(log, "action_requested", "act-2", idempotency_key="k")
    expect_failure(
        capsys,
        forged,
        f"seq {seq} (act-2): action_requested act-2: the policy writes nothing here "
        "(a repeated Idempotency-Key answers with the first decision)",
    )


async def test_a_harmful_outcome_reported_by_the_agent_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged, seq = forge_fields(log, "outcome", "act-9", outcome="harmful", by="agent")
    expect_failure(
        capsys,
        forged,
        f"seq {seq} (act-9): outcome act-9 (harmful) would have been refused: "
        "only the admin token may report a harmful outcome",
    )


async def test_a_scar_dropped_from_a_denial_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "scar", "act-2")
    seq = records[at]["seq"]

    def drop(records: Records) -> int:
        del records[at]
        return at

    expect_failure(
        capsys,
        forge(log, drop),
        f"seq {seq} (act-2): missing scar act-2 (moderate, by system) after seq {seq - 1}; "
        "the log goes on with action_requested act-3",
    )


async def test_an_extra_termination_inside_a_command_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "action_allowed", "act-1") + 1
    seq = records[at]["seq"]

    def insert(records: Records) -> int:
        extra = {"seq": 0, "ts": records[at - 1]["ts"], "kind": "terminated"}
        records.insert(at, extra | {"reason": "budget_exhausted", "by": "system"})
        return at

    expect_failure(
        capsys,
        forge(log, insert),
        f"seq {seq}: unexpected terminated (budget_exhausted, by system): "
        "the policy writes no such record",
    )


async def test_a_log_ending_before_its_termination_is_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def script(agent: Harness) -> None:
        await agent.ask(c.AddScar("fatal", "bad"))

    log = await write_log(tmp_path / "data", script)
    records = read(log)
    path = write(beside(log, "cut.jsonl"), records[:-1])
    expect_failure(
        capsys,
        path,
        f"seq {records[-1]['seq']}: the log ends after seq {records[-2]['seq']}; "
        "the policy would have written terminated (fatal_scar, by system) "
        "(the command was cut short, e.g. by a crash)",
    )


async def test_a_timestamp_going_backwards_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "action_requested", "act-2")
    seq = records[at]["seq"]
    earlier = "2000-01-01T00:00:00.000000Z"

    def backwards(records: Records) -> int:
        for i in (at, at + 1, at + 2):
            records[i] = {**records[i], "ts": earlier}
        return at

    expect_failure(
        capsys,
        forge(log, backwards),
        f"seq {seq} (act-2): ts {earlier} is before the previous record's",
    )


async def test_an_unknown_record_kind_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "action_requested", "act-2")
    seq = records[at]["seq"]

    def insert(records: Records) -> int:
        records.insert(at, {"seq": 0, "ts": records[at]["ts"], "kind": "bonus", "amount": 5})
        return at

    expect_failure(
        capsys,
        forge(log, insert),
        f"seq {seq}: unexpected bonus: no command starts with this record",
    )


# -- what is not replayed -----------------------------------------------------------------


async def test_a_log_that_fails_verification_fails_with_the_verification_failure(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    at = index_of(records, "action_allowed", "act-1")
    records[at]["cost"] = 0  # changed without re-sealing
    path = write(beside(log, "tampered.jsonl"), records)
    status, out = replay(path, capsys)
    lines = out.splitlines()
    assert status == 1
    assert lines[0] == "FAILED: the log does not verify, so it cannot be replayed"
    assert lines[1] == f"FAILED: line {at + 1} (seq {at}): hash does not match content"


async def test_a_log_that_fails_verification_json(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    records[3]["cost"] = 0
    path = write(beside(log, "tampered.jsonl"), records)
    status, out = replay(path, capsys, "--json")
    report = json.loads(out)
    assert status == 1
    assert report["ok"] is False
    assert report["verification"]["failure"] == {
        "line": 4,
        "seq": 3,
        "reason": "hash does not match content",
    }


async def test_a_log_signed_by_another_key_fails_verification(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["replay", str(log), "--public-key", "00" * 32])
    out = capsys.readouterr().out
    assert status == 1
    assert "public key does not match" in out


async def test_a_slice_cannot_be_replayed(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = read(log)
    path = write(beside(log, "slice.jsonl"), records[5:])
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"records start at seq 5, not 0: replay needs the whole log", err)


def test_a_missing_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "nothing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


# -- the engine directly -----------------------------------------------------------------


async def test_replayed_state_equals_the_state_the_service_rebuilds(log: Path) -> None:
    from tests.agents_runtime.support import load_log, log_lines, snapshot

    result = replay_records(read(log))
    loaded = load_log(log, AGENT, TEST_PUBLIC_KEY)
    assert result.ok
    assert result.state is not None
    assert loaded.state is not None
    lines = log_lines(log)
    assert snapshot(result.state, lines) == snapshot(loaded.state, lines)


def test_an_empty_record_list_replays_to_nothing() -> None:
    result = replay_records([])
    assert (result.ok, result.records, result.commands) == (True, 0, 0)


# -- withdrawn and expired approvals ---------------------------------------------------

HELD_POLICY = policy(
    budget=10,
    scar_limit=20,
    tools={"read": {"cost": 1}, "send": {"cost": 2, "requires_approval": True}},
    approval_timeout_secs=30,
)


async def held_log(agent: Harness) -> None:
    """act-1 cancelled, act-2 and act-3 expire together, act-4 approved in time."""
    for _ in range(3):
        await agent.ask(c.RequestAction("send"))
    await agent.ask(c.Cancel("act-1", c.AGENT, "gave up"))
    agent.clock.advance(31)
    await agent.ask(c.RequestAction("send"))  # expires act-2, act-3 first; act-4 held
    await agent.ask(c.Approve("act-4", "alice"))
    await agent.ask(c.RequestAction("read"))


@pytest.fixture
async def held(tmp_path: Path) -> Path:
    return await write_log(tmp_path / "data", held_log, HELD_POLICY)


async def test_replay_says_ok_on_cancelled_and_expired_approvals(
    held: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(held)
    expired = [r for r in records if r["kind"] == "approval_expired"]
    assert [r["action_id"] for r in expired] == ["act-2", "act-3"]
    assert {r["kind"] for r in records} >= {"action_cancelled", "approval_expired"}
    status, out = replay(held, capsys)
    assert status == 0, out


async def test_replay_reports_an_expiry_before_its_timeout(
    held: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(held)
    at = index_of(records, "approval_expired", "act-2")

    def early(records: Records) -> int:
        # Both expiries moved to 10 s after the request (still after the cancel).
        ts = records[index_of(records, "action_cancelled")]["ts"]
        for i in (at, at + 1):
            records[i] = {**records[i], "ts": ts}
        return at

    forged = forge(held, early)
    seq = records[at]["seq"]
    # act-3's expiry, in the same batch, is passed over with the first one.
    expect_failure(
        capsys,
        forged,
        f"seq {seq} (act-2): approval_expired act-2 (after 30 s) at {records[at - 1]['ts']}: "
        "the action is not pending, or its approval timeout under the policy in force "
        "has not run out",
        f"seq {seq + 2} (act-4): act-2 is still pending at {records[seq + 2]['ts']}, past its "
        "approval timeout: the policy would have written approval_expired before this",
        f"seq {seq + 2} (act-4): act-3 is still pending at {records[seq + 2]['ts']}, past its "
        "approval timeout: the policy would have written approval_expired before this",
    )


async def test_replay_reports_an_expired_or_cancelled_action_charged_later(
    held: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for action_id in ("act-1", "act-2"):
        records = read(held)
        last = records[-1]

        def charge(records: Records, action_id: str = action_id, last: Any = last) -> int:
            records.append(
                {
                    **last,
                    "seq": last["seq"] + 1,
                    "kind": "action_allowed",
                    "action_id": action_id,
                    "cost": 2,
                    "remaining": 3,
                    "approved_by": "mallory",
                }
            )
            return len(records) - 1

        forged = forge(held, charge)
        status, out = replay(forged, capsys)
        assert status == 1
        assert f"seq {last['seq'] + 1} ({action_id}): action_allowed {action_id} " in out
        assert "would have been refused" in out


# -- allowances that name their request (receipts) ----------------------------------


async def test_an_allowance_naming_another_request_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(log)
    other = records[index_of(records, "action_requested", "act-6")]["hash"]
    right = records[index_of(records, "action_requested", "act-1")]["hash"]
    forged, seq = forge_fields(log, "action_allowed", "act-1", request_hash=other)
    expect_failure(
        capsys,
        forged,
        f'seq {seq} (act-1): action_allowed: request_hash is "{other}", the policy gives "{right}"',
    )


async def test_an_allowance_naming_another_agent_is_caught(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged, seq = forge_fields(log, "action_allowed", "act-3", log_id="someone-else")
    expect_failure(
        capsys,
        forged,
        f'seq {seq} (act-3): action_allowed: log_id is "someone-else", the policy gives "{AGENT}"',
    )


async def test_allowances_written_before_they_named_their_request_replay_clean(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def strip(records: Records) -> int:
        for i, record in enumerate(records):
            if record["kind"] == "action_allowed":
                records[i] = {
                    k: v for k, v in record.items() if k not in ("log_id", "request_hash")
                }
        return index_of(records, "action_allowed")

    older = forge(log, strip)
    assert not any("request_hash" in r for r in read(older))
    status, out = replay(older, capsys)
    assert status == 0, out


# -- grants: every draw is checked against its grant --------------------------------


async def granted_log(agent: Harness) -> None:
    ask = agent.ask
    await ask(c.IssueGrant("send", "alice", max_calls=2, ttl_secs=D(600)))  # grt-1
    await ask(c.IssueGrant("send", "alice", max_cost=D(2), ttl_secs=D(60)))  # grt-2
    await ask(c.RequestAction("send"))  # act-1 on grt-2 (expires first)
    await ask(c.RequestAction("send"))  # act-2 on grt-1 (grt-2 spent)
    await ask(c.RevokeGrant("grt-1", "bob", "enough"))
    await ask(c.RequestAction("send"))  # act-3 held: nothing left to draw


@pytest.fixture
async def granted(tmp_path: Path) -> Path:
    return await write_log(tmp_path / "data", granted_log)


async def test_a_log_with_grants_replays_clean(
    granted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(granted)
    assert [r.get("grant_id") for r in records if r["kind"] == "action_allowed"] == [
        "grt-2",
        "grt-1",
    ]
    status, out = replay(granted, capsys)
    assert status == 0, out


async def test_a_draw_on_a_revoked_grant_is_caught(
    granted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(granted)
    at = index_of(records, "approval_required", "act-3")
    seq = records[at]["seq"]
    request = records[at - 1]

    def draw(records: Records) -> int:
        records[at] = {
            "kind": "action_allowed",
            "action_id": "act-3",
            "cost": 2,
            "remaining": 94,
            "log_id": AGENT,
            "request_hash": request["hash"],
            "grant_id": "grt-1",
            "seq": seq,
            "ts": records[at]["ts"],
        }
        return at

    expect_failure(
        capsys,
        forge(granted, draw),
        f"seq {seq} (act-3): log has action_allowed act-3 (cost 2, remaining 94, on grt-1); "
        "the policy would have written approval_required act-3 (cost 2)",
    )


async def test_a_draw_on_the_wrong_grant_is_caught(
    granted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged, seq = forge_fields(granted, "action_allowed", "act-1", grant_id="grt-1")
    expect_failure(
        capsys,
        forged,
        f'seq {seq} (act-1): action_allowed: grant_id is "grt-1", the policy gives "grt-2"',
    )


async def test_an_approval_passed_off_as_a_draw_is_caught(
    granted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(granted)
    at = index_of(records, "action_allowed", "act-2")

    def undraw(records: Records) -> int:
        records[at] = {k: v for k, v in records[at].items() if k != "grant_id"}
        return at

    seq = records[at]["seq"]
    expect_failure(
        capsys,
        forge(granted, undraw),
        f'seq {seq} (act-2): action_allowed: grant_id is missing, the policy gives "grt-1"',
    )


async def test_an_overdue_action_is_reported_before_a_record_that_does_not_apply(
    held: Path,
) -> None:
    # The pending actions past their deadline are reported at the record
    # that comes after it, even when that record cannot be rebuilt into its
    # command: the overdue check runs before the command is read from it.
    records = read(held)
    at = index_of(records, "approval_expired", "act-2")
    request = {**records[at + 2], "requested_cost": "a lot"}
    assert request["kind"] == "action_requested"
    result = replay_records([*records[:at], request])
    messages = [problem.message for problem in result.problems]
    assert [m.split(" is still pending")[0] for m in messages[:2]] == ["act-2", "act-3"]
    assert messages[2].startswith("record does not apply to the agent's state: ValueError(")
    assert len(messages) == 3


# -- shadow policies and named policies ------------------------------------------


async def shadow_log(agent: Harness) -> None:
    """A shadow that holds what the policy allows and allows what it holds,
    then a version of a named policy, then the shadow cleared."""
    candidate = policy(
        budget=10,
        scar_limit=20,
        tools={"read": {"cost": 1, "requires_approval": True}, "send": {"cost": 2}},
    )
    await agent.ask(c.SetShadow(candidate))
    await agent.ask(c.RequestAction("read"))  # allowed; the shadow holds it
    await agent.ask(c.RequestAction("send"))  # held; the shadow allows it
    await agent.ask(c.RequestAction("nope"))  # both deny: agreement
    await agent.ask(c.SetPolicy(POLICY, "fleet", 2))
    await agent.ask(c.RequestAction("read"))
    await agent.ask(c.ClearShadow())
    await agent.ask(c.RequestAction("read"))


@pytest.fixture
async def shadowed(tmp_path: Path) -> Path:
    return await write_log(tmp_path / "data", shadow_log, POLICY)


async def test_replay_proves_the_shadow_decisions_and_named_policy_versions(
    shadowed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(shadowed)
    kinds = {r["kind"] for r in records}
    assert {"shadow_set", "shadow_cleared"} <= kinds
    marked = [r["shadow"]["decision"] for r in records if "shadow" in r]
    assert marked == ["pending_approval", "allowed", "pending_approval"]
    named = [r for r in records if r["kind"] == "policy" and "policy_ref" in r]
    assert [(r["policy_ref"], r["version"]) for r in named] == [("fleet", 2)]
    status, out = replay(shadowed, capsys)
    assert status == 0, out


async def test_a_shadow_disagreement_dropped_from_a_decision_is_caught(
    shadowed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = read(shadowed)
    at = index_of(records, "action_allowed", "act-1")

    def drop(records: Records) -> int:
        records[at] = {k: v for k, v in records[at].items() if k != "shadow"}
        return at

    status, out = replay(forge(shadowed, drop), capsys)
    assert status == 1, out
    assert f"seq {records[at]['seq']} (act-1)" in out
