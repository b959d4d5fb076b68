"""Operator tokens (docs/api.md, "Operator tokens") and the operators log
(docs/log-format.md, "The operators log"), over real HTTP."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.log.operators import verify_operators
from audit.cli import main as audit_main
from tests.guardd.conftest import Api, assert_error, ok
from tests.support.server import GuardServer, free_port


def issue(api: Api, name: str = "ci-bot", role: str = "approver", **extra: Any) -> dict[str, Any]:
    body = {"name": name, "role": role, **extra}
    return ok(api.admin.post("/v1/operators/tokens", json=body), 201)  # type: ignore[no-any-return]


def operators_lines(api: Api) -> list[bytes]:
    return (api.server.data_dir / "operators.jsonl").read_bytes().splitlines()


def test_issue_answers_201_with_the_secret_once_and_the_token_authenticates(api: Api) -> None:
    issued = issue(api, "deploy-bot", "approver")
    assert issued["token"].startswith("opr_")
    assert issued["token_id"].startswith("tok-")
    assert issued["name"] == "deploy-bot"
    assert issued["role"] == "approver"
    assert issued["expires_at"] is None
    assert issued["status"] == "active"
    assert issued["issued_by"] == "admin"
    me = ok(api.client(issued["token"]).get("/v1/me"))
    assert me == {
        "name": "deploy-bot",
        "id": f"token:{issued['token_id']}",
        "roles": ["approver", "viewer"],
        "via": "operator_token",
    }


def test_a_token_may_do_what_its_role_allows_and_no_more(api: Api) -> None:
    agent = api.create()
    viewer = api.client(issue(api, "watcher", "viewer")["token"])
    ok(viewer.get(agent.path))
    ok(viewer.get(f"{agent.path}/log"))
    denied = viewer.post(f"{agent.path}/grants", json={"tool": "search", "max_calls": 1})
    body = assert_error(denied, 403, "forbidden")
    assert body["error"] == "this endpoint needs the approver role; watcher holds viewer"
    approver = api.client(issue(api, "lead", "approver")["token"])
    denied = approver.post("/v1/operators/tokens", json={"name": "x", "role": "viewer"})
    assert assert_error(denied, 403, "forbidden")["error"] == (
        "this endpoint needs the admin role; lead holds approver, viewer"
    )
    admin = api.client(issue(api, "boss", "admin")["token"])
    ok(admin.post("/v1/operators/tokens", json={"name": "x", "role": "viewer"}), 201)


def test_the_list_has_every_token_and_no_secret(api: Api) -> None:
    issued = issue(api, "listed", "viewer")
    listed = ok(api.admin.get("/v1/operators/tokens"))["tokens"]
    mine = [t for t in listed if t["token_id"] == issued["token_id"]]
    assert mine == [{k: v for k, v in issued.items() if k != "token"}]
    assert issued["token"] not in json.dumps(listed)


def test_a_revoked_token_is_401_and_a_second_revoke_is_409(api: Api) -> None:
    issued = issue(api, "leaver", "approver")
    client = api.client(issued["token"])
    ok(client.get("/v1/me"))
    revoked = ok(api.admin.post(f"/v1/operators/tokens/{issued['token_id']}/revoke"))
    assert revoked["status"] == "revoked"
    assert revoked["revoked_at"] is not None
    assert_error(client.get("/v1/me"), 401, "unauthorized")
    again = api.admin.post(f"/v1/operators/tokens/{issued['token_id']}/revoke")
    assert_error(again, 409, "invalid_state")


def test_revoking_a_token_never_issued_is_404(api: Api) -> None:
    assert_error(api.admin.post("/v1/operators/tokens/tok-nothing/revoke"), 404, "not_found")


def test_an_unknown_operator_token_is_401(api: Api) -> None:
    assert_error(api.client("opr_" + "A" * 43).get("/v1/me"), 401, "unauthorized")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({"name": "x", "role": "owner"}, "$.role", id="unknown-role"),
        pytest.param({"name": "x", "role": "viewer", "ttl_secs": 0}, "$.ttl_secs", id="zero"),
        pytest.param({"name": "x", "role": "viewer", "ttl_secs": -5}, "$.ttl_secs", id="negative"),
        pytest.param(
            {"name": "x", "role": "viewer", "ttl_secs": 365 * 24 * 3600 + 1},
            "$.ttl_secs: at most 31536000 seconds (a year)",
            id="over-a-year",
        ),
        pytest.param({"role": "viewer"}, "$.name", id="no-name"),
    ],
)
def test_bad_token_bodies_are_400_naming_the_key(
    api: Api, body: dict[str, Any], message: str
) -> None:
    answer = api.admin.post("/v1/operators/tokens", json=body)
    assert message in assert_error(answer, 400, "bad_request")["error"]


def test_a_token_past_its_expiry_is_401_and_listed_expired(api: Api) -> None:
    issued = issue(api, "brief", "viewer", ttl_secs=1)
    assert issued["expires_at"] is not None
    client = api.client(issued["token"])
    for _ in range(100):  # bounded: the token lives one second
        if client.get("/v1/me").status_code == 401:
            break
        time.sleep(0.05)
    assert_error(client.get("/v1/me"), 401, "unauthorized")
    listed = ok(api.admin.get("/v1/operators/tokens"))["tokens"]
    assert [t["status"] for t in listed if t["token_id"] == issued["token_id"]] == ["expired"]


def test_the_operators_log_is_signed_chained_and_holds_a_hash_never_the_secret(api: Api) -> None:
    issued = issue(api, "logged", "admin", ttl_secs=3600)
    ok(api.admin.post(f"/v1/operators/tokens/{issued['token_id']}/revoke"))
    lines = operators_lines(api)
    report = verify_operators(lines, public_key=bytes.fromhex(api.server.public_key))
    assert report.ok, report.failure
    records = [json.loads(line) for line in lines]
    assert records[0]["kind"] == "genesis"
    assert records[0]["log_id"] == "operators"
    issued_record = next(
        r
        for r in records
        if r["kind"] == "operator_token_issued" and r["token_id"] == issued["token_id"]
    )
    assert issued_record["name"] == "logged"
    assert issued_record["role"] == "admin"
    assert issued_record["expires_at"] == issued["expires_at"]
    assert issued_record["by"] == "admin"
    assert issued_record["by_id"] == "admin-token"
    assert issued_record["secret_sha256"] == hashlib.sha256(issued["token"].encode()).hexdigest()
    assert issued["token"] not in b"\n".join(lines).decode()
    assert records[-1]["kind"] == "operator_token_revoked"
    assert records[-1]["token_id"] == issued["token_id"]


def test_tokens_and_revocations_survive_a_restart(fresh_api: Api) -> None:
    kept = issue(fresh_api, "kept", "viewer")
    gone = issue(fresh_api, "gone", "viewer")
    ok(fresh_api.admin.post(f"/v1/operators/tokens/{gone['token_id']}/revoke"))
    fresh_api.server.restart()
    ok(fresh_api.client(kept["token"]).get("/v1/me"))
    assert_error(fresh_api.client(gone["token"]).get("/v1/me"), 401, "unauthorized")


def test_a_torn_last_line_is_left_out_and_written_over(fresh_api: Api) -> None:
    kept = issue(fresh_api, "kept", "viewer")
    fresh_api.server.stop()
    path = fresh_api.server.data_dir / "operators.jsonl"
    path.write_bytes(path.read_bytes() + b'{"kind":"operator_tok')
    fresh_api.server.start()
    ok(fresh_api.client(kept["token"]).get("/v1/me"))
    issue(fresh_api, "after", "viewer")
    report = verify_operators(operators_lines(fresh_api), public_key=None)
    assert report.ok, report.failure


def _tampered(server: GuardServer) -> None:
    path = server.data_dir / "operators.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"role":"viewer"', b'"role":"admin"')
    path.write_bytes(b"".join(lines))


def test_a_tampered_operators_log_stops_guardd_with_the_reason(fresh_api: Api) -> None:
    issue(fresh_api, "escalated", "viewer")
    server = fresh_api.server
    server.stop()
    _tampered(server)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "guardd",
            "--port",
            str(free_port()),
            "--data-dir",
            str(server.data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "guardd: the operators log failed verification at line 2 (seq 1): " in result.stderr
    assert "hash does not match content" in result.stderr


def test_audit_verify_checks_the_operators_log(
    fresh_api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    issue(fresh_api, "audited", "viewer")
    path = fresh_api.server.data_dir / "operators.jsonl"
    key = fresh_api.server.public_key
    assert audit_main(["verify", str(path), "--public-key", key]) == 0
    fresh_api.server.stop()
    _tampered(fresh_api.server)
    assert audit_main(["verify", str(path), "--public-key", key]) != 0
    assert "hash does not match content" in capsys.readouterr().out


def test_audit_verify_refuses_an_agent_log_passed_off_as_the_operators_log(
    api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = api.create()
    fake = tmp_path / "operators.jsonl"
    fake.write_text("\n".join(api.log_lines(agent)) + "\n")
    assert audit_main(["verify", str(fake), "--public-key", api.server.public_key]) != 0
    assert "log_id is not operators" in capsys.readouterr().out
