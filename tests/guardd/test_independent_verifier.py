"""A log produced through the API verifies with an independent verifier
(tests/guardd/independent_verifier.py) against ``GET /v1/public-key``: both
the file in the data directory and the records of ``GET .../log``."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from agents_runtime.log.kinds import Kind
from tests.guardd import independent_verifier as iv
from tests.guardd.conftest import Agent, Api, ok

POLICY = {
    "budget": 10,
    "scar_limit": 20,
    "tools": {
        "search": {"cost": 0.1},
        "send_email": {"cost": 2.5, "requires_approval": True},
        "page_oncall": {"requires_approval": True, "approval_timeout_secs": 0.2},
        "deploy": {"requires_approval": True, "approvals_required": 2},
    },
    "default": {"cost": 0.000001, "max_calls": 1},
    "rate_limit": {"max_actions": 100, "window_secs": 0.5},
}
UNUSUAL_INPUT = {
    "numbers": [0.1, -0.0, 1e21, 1.5e-7, 2.50, 100, -3, 9007199254740991, 1e-6],
    "strings": ["é", "😀", "ﬀ", "\u2028", "\x00\x1f", '"\\/'],
    "keys": {"é": 1, "z": 2, "😀": 3, "ﬀ": 4, "Z": 5, "\u0080": 6, "": 7},
    "nested": [[], {}, [None, True, False]],
}


@pytest.fixture(scope="module")
def logged(api: Api) -> Agent:
    """An agent whose log holds every record kind and awkward values."""
    agent = api.create("verified", POLICY)
    ok(agent.act("search", input=UNUSUAL_INPUT))
    ok(agent.act("search", input="plain", cost=0.3))
    ok(agent.act("send_email", input={"to": "bob"}))
    ok(agent.act("send_email", input={"to": "eve"}))
    ok(agent.act("unlisted"))
    ok(agent.act("unlisted"))  # tool_call_limit under the default rule: a scar
    ok(api.approve(agent, "act-3", approver="carol", note="ok ✓"))
    ok(api.reject(agent, "act-4", approver="dave", reason="no", scar="moderate"))
    ok(agent.act("send_email", input={"to": "zed"}))  # act-7: withdrawn by the agent
    ok(agent.client.post(f"{agent.path}/actions/act-7/cancel", json={"reason": "gave up"}))
    grant = {"tool": "send_email", "by": "erin", "max_calls": 1, "ttl_secs": 600}
    ok(api.admin.post(f"{agent.path}/grants", json=grant), 201)  # grt-1
    ok(api.admin.post(f"{agent.path}/grants/grt-1/revoke", json={"by": "erin"}))
    ok(agent.act("page_oncall"))  # act-8: nobody decides in time
    expired = ok(agent.client.get(f"{agent.path}/actions/act-8", params={"wait": 10}))
    assert expired["status"] == "denied", expired
    url = f"{agent.path}/actions/act-1/outcome"
    ok(agent.client.post(url, json={"status": "failure", "detail": "timeout"}))
    ok(api.admin.post(f"{agent.path}/scars", json={"severity": "minor", "reason": "r"}))
    ok(api.admin.put(f"{agent.path}/policy", json=POLICY | {"budget": 11}))
    ok(api.admin.put(f"{agent.path}/shadow", json=POLICY | {"budget": 1}))
    ok(agent.act("search"))  # decided beside the shadow, which would deny it
    ok(api.admin.request("DELETE", f"{agent.path}/shadow"))
    headers = {"Idempotency-Key": "idem-1"}
    ok(agent.client.post(f"{agent.path}/actions", json={"tool": "search"}, headers=headers))
    held = ok(agent.act("deploy"))["action_id"]  # two approvals required: one given
    ok(api.approve(agent, held, approver="carol"))
    ok(api.admin.post(f"{agent.path}/terminate", json={"reason": "done", "by": "op"}))
    ok(agent.act("search"))  # denied after termination, still logged
    return agent


@pytest.fixture(scope="module")
def public_key(api: Api) -> str:
    return ok(api.client().get("/v1/public-key"))["public_key"]  # type: ignore[no-any-return]


def _file(api: Api, agent: Agent) -> bytes:
    return (api.server.data_dir / "agents" / f"{agent.agent_id}.jsonl").read_bytes()


def test_log_file_verifies_independently_against_the_public_key(
    api: Api, logged: Agent, public_key: str
) -> None:
    count, head = iv.verify_file(_file(api, logged), public_key_hex=public_key, log_id="verified")
    assert head == api.status(logged)["head"]
    report = ok(api.admin.get(f"{logged.path}/verify"))
    assert (count, head) == (report["records"], report["head"])
    assert {r["kind"] for r in api.records(logged)} == set(Kind)  # every kind checked


def test_records_from_the_log_endpoint_verify_independently(
    api: Api, logged: Agent, public_key: str
) -> None:
    records: list[dict[str, object]] = []
    after = -1
    while True:
        page = ok(api.admin.get(f"{logged.path}/log", params={"after": after, "limit": 7}))
        if not page["records"]:
            break
        records += page["records"]
        after = page["records"][-1]["seq"]
    count, head = iv.verify_records(records, public_key_hex=public_key, log_id="verified")
    assert head == page["head"]
    assert count == len(records) == head["seq"] + 1


def test_records_from_the_log_endpoint_are_the_lines_of_the_file(api: Api, logged: Agent) -> None:
    lines = _file(api, logged).split(b"\n")[:-1]
    assert [iv.parse(line) for line in lines] == api.records(logged)


def test_the_records_carry_what_decisions_md_says(api: Api, logged: Agent) -> None:
    records = api.records(logged)
    genesis, policy = records[0], records[1]
    assert genesis["log_id"] == "verified"
    assert genesis["format"] == "guard-log/1"
    assert policy["policy"]["budget"] == 10
    requested = next(r for r in records if r["kind"] == "action_requested")
    assert (requested["action_id"], requested["tool"]) == ("act-1", "search")
    assert requested["input"]["keys"] == UNUSUAL_INPUT["keys"]
    allowed = next(r for r in records if r.get("approved_by") == "carol")
    assert (allowed["kind"], allowed["note"]) == ("action_allowed", "ok ✓")
    keyed = next(r for r in records if "idempotency_key" in r)
    assert keyed["idempotency_key"] == "idem-1"
    terminated = next(r for r in records if r["kind"] == "terminated")
    assert (terminated["reason"], terminated["by"]) == ("done", "op")


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        pytest.param(
            lambda lines: (
                [lines[0], lines[1], lines[2].replace(b'"search"', b'"Search"'), *lines[3:]]
            ),
            "hash does not match content",
            id="changed-byte",
        ),
        pytest.param(lambda lines: lines[:3] + lines[4:], "seq out of order", id="dropped-line"),
        pytest.param(
            lambda lines: lines[:3] + lines[4:5] + lines[3:4] + lines[5:],
            "seq out of order",
            id="swapped-lines",
        ),
        pytest.param(
            lambda lines: [lines[0], lines[1], lines[2].replace(b'{"', b'{ "', 1), *lines[3:]],
            "not canonical JSON",
            id="not-canonical",
        ),
    ],
)
def test_independent_verifier_finds_tampering(
    api: Api, logged: Agent, public_key: str, tamper: object, reason: str
) -> None:
    lines = _file(api, logged).split(b"\n")[:-1]
    with pytest.raises(iv.Invalid) as caught:
        iv.verify(tamper(lines), public_key_hex=public_key, log_id="verified")  # type: ignore[operator]
    assert caught.value.reason == reason
    assert caught.value.line in (3, 4)


def test_independent_verifier_refuses_another_key_and_another_log_id(
    api: Api, logged: Agent, public_key: str
) -> None:
    data = _file(api, logged)
    other_key = bytes(nacl.signing.SigningKey.generate().verify_key).hex()
    with pytest.raises(iv.Invalid, match=r"^line 1 \(seq 0\): public key does not match$"):
        iv.verify_file(data, public_key_hex=other_key, log_id="verified")
    with pytest.raises(iv.Invalid, match=r"^line 1 \(seq 0\): log_id does not match$"):
        iv.verify_file(data, public_key_hex=public_key, log_id="someone-else")


def test_ts_and_common_fields_have_the_documented_form(api: Api, logged: Agent) -> None:
    for record in api.records(logged):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", record["ts"]), record
        assert {"seq", "kind", "ts", "prev", "hash", "sig"} <= set(record)


def test_the_head_of_the_status_is_a_checkpoint_that_keeps_verifying(
    api: Api, public_key: str
) -> None:
    agent = api.create(policy=POLICY)
    ok(agent.act("search"))
    head = api.status(agent)["head"]
    checkpoint = (head["seq"], head["hash"])
    ok(agent.act("search"))
    data = _file(api, agent)
    count, _ = iv.verify_file(
        data, public_key_hex=public_key, log_id=agent.agent_id, checkpoint=checkpoint
    )
    assert count == head["seq"] + 3
    cut = b"".join(line + b"\n" for line in data.split(b"\n")[: head["seq"]])
    with pytest.raises(iv.Invalid, match=r"truncated before checkpoint$"):
        iv.verify_file(cut, public_key_hex=public_key, log_id=agent.agent_id, checkpoint=checkpoint)


VECTORS = Path(__file__).parents[1] / "data" / "tampered"


def _vectors() -> list[Any]:
    expectations = json.loads((VECTORS / "expectations.json").read_text())
    return [pytest.param(v, id=v["file"].removesuffix(".jsonl")) for v in expectations["vectors"]]


@pytest.mark.skipif(not VECTORS.is_dir(), reason="the tamper vectors are not there")
@pytest.mark.parametrize("vector", _vectors() if VECTORS.is_dir() else [])
def test_independent_verifier_agrees_with_the_tamper_vectors(vector: dict[str, Any]) -> None:
    expectations = json.loads((VECTORS / "expectations.json").read_text())
    seq, digest = expectations["checkpoint"].split(":")
    data = (VECTORS / vector["file"]).read_bytes()
    key, victim = expectations["public_key"], expectations["victim"]
    for expected, checkpoint in (
        (vector["failure"], None),
        (vector["failure_with_checkpoint"], (int(seq), digest)),
    ):
        if expected is None:
            iv.verify_file(data, public_key_hex=key, log_id=victim, checkpoint=checkpoint)
            continue
        with pytest.raises(iv.Invalid) as caught:
            iv.verify_file(data, public_key_hex=key, log_id=victim, checkpoint=checkpoint)
        failure = caught.value
        assert {"line": failure.line, "seq": failure.seq, "reason": failure.reason} == expected


def test_independent_verifier_accepts_the_worked_example_of_the_format_doc() -> None:
    data = (Path(__file__).parents[1] / "data" / "worked-example.jsonl").read_bytes()
    key = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
    assert iv.verify_file(data, public_key_hex=key, log_id="worked-example") == (
        3,
        {"seq": 2, "hash": "fdf3f7bb94081cf4956f162bc236cc87394af0b3d317d94393de744222a7cb75"},
    )


def test_every_allowance_names_its_agent_and_its_request(api: Api, logged: Agent) -> None:
    records = api.records(logged)
    requests = {r["action_id"]: r for r in records if r["kind"] == "action_requested"}
    allowances = [r for r in records if r["kind"] == "action_allowed"]
    assert len(allowances) >= 3  # at request time, an approval, an Idempotency-Key request
    for allowed in allowances:
        assert allowed["log_id"] == "verified"
        assert allowed["request_hash"] == requests[allowed["action_id"]]["hash"]


def test_receipts_over_http_check_independently(api: Api, logged: Agent, public_key: str) -> None:
    lines = _file(api, logged).decode().split("\n")[:-1]
    for action_id, tool in (("act-1", "search"), ("act-3", "send_email")):
        action = ok(logged.client.get(f"{logged.path}/actions/{action_id}"))
        receipt = action["receipt"]
        assert all(line in lines for line in receipt)
        checked = iv.check_receipt(
            receipt,
            public_key_hex=public_key,
            log_id="verified",
            tool=tool,
            tool_input=action["input"],
        )
        assert checked == action_id
    agent = api.create("receipted", POLICY)
    decision = ok(agent.act("search", input=UNUSUAL_INPUT))
    assert (
        iv.check_receipt(
            decision["receipt"],
            public_key_hex=public_key,
            log_id="receipted",
            tool="search",
            tool_input=UNUSUAL_INPUT,
        )
        == decision["action_id"]
    )
    with pytest.raises(iv.Refused, match=r"^another agent's receipt$"):
        iv.check_receipt(
            decision["receipt"],
            public_key_hex=public_key,
            log_id="verified",
            tool="search",
            tool_input=UNUSUAL_INPUT,
        )


def test_the_checkpoint_guardd_writes_is_checked_independently(api: Api, public_key: str) -> None:
    agent = api.create(policy=POLICY)
    ok(agent.act("search"))
    head = api.status(agent)["head"]
    path = api.server.data_dir / "checkpoints" / f"{agent.agent_id}.checkpoint"
    for _ in range(200):  # written within about a second of the commit
        if path.exists() and path.read_bytes().startswith(
            f"guardd/{agent.agent_id}\n{head['seq'] + 1}\n".encode()
        ):
            break
        time.sleep(0.05)
    data = path.read_bytes()
    seq, digest = iv.checkpoint_head(data, public_key_hex=public_key, log_id=agent.agent_id)
    assert {"seq": seq, "hash": digest} == head
    iv.verify_file(
        _file(api, agent),
        public_key_hex=public_key,
        log_id=agent.agent_id,
        checkpoint=(seq, digest),
    )
    with pytest.raises(iv.Invalid, match="checkpoint is for another log"):
        iv.checkpoint_head(data, public_key_hex=public_key, log_id="someone-else")
    with pytest.raises(iv.Invalid, match="checkpoint signature does not verify"):
        iv.checkpoint_head(
            data.replace(b"guardd/", b"guardd/x", 1),
            public_key_hex=public_key,
            log_id="x" + agent.agent_id,
        )


def test_the_documented_checkpoint_example_is_checked_independently() -> None:
    data = Path(__file__).parents[1] / "data"
    seed = bytes.fromhex((data / "worked-example.key").read_text().strip())
    key = nacl.signing.SigningKey(seed).verify_key.encode().hex()
    checkpoint = iv.checkpoint_head(
        (data / "worked-example.checkpoint").read_bytes(),
        public_key_hex=key,
        log_id="worked-example",
    )
    iv.verify_file(
        (data / "worked-example.jsonl").read_bytes(),
        public_key_hex=key,
        log_id="worked-example",
        checkpoint=checkpoint,
    )
    assert checkpoint[0] == 2
