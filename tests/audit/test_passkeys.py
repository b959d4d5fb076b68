"""``audit verify`` checks passkey-signed approvals offline (audit.passkeys):
from a real guardd's logs, and from forgeries re-signed with the audit key,
which only the passkey check can catch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from agents_runtime.log import canonical
from agents_runtime.log.keys import Signer
from agents_runtime.log.record import Head, seal
from audit.cli import main
from tests.support.authenticator import Authenticator
from tests.support.server import GuardServer

POLICY = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {"pay": {"requires_approval": True, "approval_passkey": "both"}},
}


@attrs.define
class Signed:
    server: GuardServer
    log: Path  # agents/payer.jsonl
    key: Authenticator
    seq: int  # of the approval


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    """A guardd whose agent `payer` had act-1 approved with a passkey, act-2
    rejected with it; then the passkey revoked."""
    server = GuardServer(tmp_path_factory.mktemp("pk") / "guard-data").start()
    try:
        with server.client(server.admin_token) as admin:
            body = {"name": "alice", "role": "approver"}
            token = admin.post("/v1/operators/tokens", json=body).json()["token"]
            key = Authenticator(f"http://localhost:{server.port}")
            with server.client(token) as alice:
                options = alice.post("/v1/operators/passkeys/options").json()
                registered = alice.post("/v1/operators/passkeys", json=key.register(options))
                assert registered.status_code == 201, registered.text
                admin.post("/v1/agents", json={"agent_id": "payer", "policy": POLICY})
                for action_id, decision in (("act-1", "approve"), ("act-2", "reject")):
                    admin.post("/v1/agents/payer/actions", json={"tool": "pay", "input": {"n": 1}})
                    base = f"/v1/agents/payer/actions/{action_id}"
                    opts = alice.get(f"{base}/approval-options?decision={decision}").json()
                    body = {"passkey": key.assertion(opts["challenge"]), "reason": "no"}
                    if decision == "approve":
                        del body["reason"]
                    answer = alice.post(f"{base}/{decision}", json=body)
                    assert answer.status_code == 200, answer.text
            admin.post(f"/v1/operators/passkeys/{key.id}/revoke")
        log = server.data_dir / "agents" / "payer.jsonl"
        seq = next(r["seq"] for r in _records(log) if r["kind"] == "action_allowed")
        yield Signed(server, log, key, seq)
    finally:
        server.kill()


def _records(path: Path) -> list[dict[str, Any]]:
    return [canonical.loads(line) for line in path.read_bytes().splitlines()]


def _signer(server: GuardServer) -> Signer:
    seed = (server.data_dir / "keys" / "audit.key").read_text().strip()
    return Signer(bytes.fromhex(seed))


def _reseal(records: list[dict[str, Any]], signer: Signer) -> bytes:
    out, head = [], Head.empty()
    for record in records:
        fields = {k: v for k, v in record.items() if k not in ("seq", "ts", "prev", "hash", "sig")}
        sealed = seal(fields, prev=head, ts=record["ts"], signer=signer)
        out.append(sealed.line)
        head = sealed.head
    return b"".join(out)


def forged(signed: Signed, tmp_path: Path, change: Any, *, operators: bool = False) -> list[str]:
    """A copy of the data dir with the agent's log (or the operators log)
    changed by ``change`` and re-signed with the audit key: the argv of
    ``audit verify`` on it."""
    data = tmp_path / "data"
    (data / "agents").mkdir(parents=True)
    agent = _records(signed.log)
    ops = _records(signed.server.data_dir / "operators.jsonl")
    change(ops if operators else agent)
    signer = _signer(signed.server)
    (data / "agents" / "payer.jsonl").write_bytes(_reseal(agent, signer))
    (data / "operators.jsonl").write_bytes(_reseal(ops, signer))
    return ["verify", str(data / "agents" / "payer.jsonl")]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(argv)
    return status, capsys.readouterr().out


def test_a_log_of_passkey_signed_decisions_verifies(
    signed: Signed, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run(["verify", str(signed.log)], capsys)
    assert status == 0, out
    assert "passkeys:   2 signed decisions, every one verifies" in out


def test_without_the_operators_log_the_decisions_cannot_be_checked(
    signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "payer.jsonl"
    copy.write_bytes(signed.log.read_bytes())
    status, out = run(["verify", str(copy), "--log-id", "payer"], capsys)
    assert status == 1
    assert f"approval at seq {signed.seq}: no operators log to check" in out
    with_it = ["--operators", str(signed.server.data_dir / "operators.jsonl")]
    status, out = run(["verify", str(copy), "--log-id", "payer", *with_it], capsys)
    assert status == 0, out


def _at(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(r for r in records if r["kind"] == kind)


def _edit_approver(records: list[dict[str, Any]]) -> None:
    _at(records, "action_allowed")["by_id"] = "token:tok-someone-else"


def _edit_input(records: list[dict[str, Any]]) -> None:
    requested = _at(records, "action_requested")
    requested["input"] = {"n": 1000}


def _edit_signature(records: list[dict[str, Any]]) -> None:
    proof = _at(records, "action_allowed")["passkey"]
    proof["signature"] = proof["signature"][:-4] + (
        "AAAA" if proof["signature"][-4:] != "AAAA" else "BBBB"
    )


def _strip_passkey(records: list[dict[str, Any]]) -> None:
    del _at(records, "action_allowed")["passkey"]


def _approve_later(records: list[dict[str, Any]]) -> None:
    # The approval moved after the passkey's revocation (which came last).
    _at(records, "action_allowed")["ts"] = "2999-01-01T00:00:00.000000Z"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(
            _edit_approver, "passkey credential is registered to token:", id="approver-edited"
        ),
        pytest.param(_edit_signature, "passkey signature does not verify", id="signature"),
        pytest.param(_strip_passkey, "the policy wants a passkey and none is there", id="stripped"),
        pytest.param(
            _approve_later, "passkey credential was revoked before the decision", id="revoked"
        ),
    ],
)
def test_a_forged_approval_re_signed_with_the_audit_key_fails(
    signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, reason: str
) -> None:
    status, out = run(forged(signed, tmp_path, change), capsys)
    assert status == 1, out
    assert f"passkeys:   FAILED: approval at seq {signed.seq}: {reason}" in out


def test_another_input_breaks_the_binding(
    signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run(forged(signed, tmp_path, _edit_input), capsys)
    assert status == 1, out
    # The allowance names its request by hash: the chain check fails first.
    assert "passkeys:" not in out or "challenge is not the binding" in out


def test_a_credential_registered_after_the_approval_fails(
    signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def later(records: list[dict[str, Any]]) -> None:
        _at(records, "passkey_registered")["ts"] = "2999-01-01T00:00:00.000000Z"

    status, out = run(forged(signed, tmp_path, later, operators=True), capsys)
    assert status == 1, out
    assert f"approval at seq {signed.seq}: passkey credential was registered after" in out


def test_a_forged_rejection_names_the_rejection(
    signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(records: list[dict[str, Any]]) -> None:
        _at(records, "action_rejected")["by_id"] = "token:tok-x"

    status, out = run(forged(signed, tmp_path, edit), capsys)
    assert status == 1, out
    seq = _at(_records(signed.log), "action_rejected")["seq"]
    assert f"rejection at seq {seq}: passkey credential is registered to" in out


def test_replay_re_decides_a_log_of_passkey_signed_decisions(
    signed: Signed, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run(["replay", str(signed.log)], capsys)
    assert status == 0, out


def test_replay_fails_an_approval_whose_assertion_was_cut_out(
    signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = forged(signed, tmp_path, _strip_passkey)
    status, out = run(["replay", argv[1]], capsys)
    assert status == 1, out
    assert "needs the approver's passkey" in out


def test_what_if_runs_the_passkey_signed_approvals_under_a_candidate(
    signed: Signed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = tmp_path / "candidate.json"
    candidate.write_text(
        '{"budget": 100, "scar_limit": 10, "tools": {"pay": {"requires_approval": true}}}'
    )
    status, out = run(["replay", str(signed.log), "--policy", str(candidate)], capsys)
    assert status == 0, out


def test_a_store_s_passkey_signed_decisions_verify_against_its_operators_log(
    postgres_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = GuardServer(tmp_path / "node", args=["--store", postgres_dsn]).start()
    try:
        with server.client(server.admin_token) as admin:
            body = {"name": "alice", "role": "approver"}
            token = admin.post("/v1/operators/tokens", json=body).json()["token"]
            key = Authenticator(f"http://localhost:{server.port}")
            with server.client(token) as alice:
                options = alice.post("/v1/operators/passkeys/options").json()
                alice.post("/v1/operators/passkeys", json=key.register(options))
                admin.post("/v1/agents", json={"agent_id": "stored", "policy": POLICY})
                admin.post("/v1/agents/stored/actions", json={"tool": "pay", "input": {}})
                base = "/v1/agents/stored/actions/act-1"
                opts = alice.get(f"{base}/approval-options").json()
                answer = alice.post(
                    f"{base}/approve", json={"passkey": key.assertion(opts["challenge"])}
                )
                assert answer.status_code == 200, answer.text
        key_hex = server.public_key
    finally:
        server.kill()
    status, out = run(["verify", "--store", postgres_dsn, "--public-key", key_hex], capsys)
    assert status == 0, out
    assert "passkeys:   1 signed decisions, every one verifies" in out
    status, out = run(
        ["verify", "--store", postgres_dsn, "--agent", "stored", "--public-key", key_hex], capsys
    )
    assert status == 0, out
    assert "passkeys:   1 signed decisions, every one verifies" in out
