"""Passkeys (docs/api.md, "Passkeys"): registered by an operator, revoked by
an admin, and signing approvals of tools whose rule says
``approval_passkey``; over real HTTP, with a software authenticator that
builds every WebAuthn byte as a real one does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents_runtime.log import canonical
from agents_runtime.log.passkeys import b64url, binding, unb64url
from audit.cli import main as audit_main
from client_sdk import ReceiptError, verify_receipt
from tests.guardd.conftest import Agent, Api, Session, assert_error, ok
from tests.support.authenticator import UP, Authenticator
from tests.support.oidc_provider import CLIENT_ID, ROLES, OidcProvider
from tests.support.server import GuardServer

POLICY = {
    "budget": 1000,
    "scar_limit": 10,
    "tools": {
        "pay": {"requires_approval": True, "approval_passkey": True},
        "delete": {"requires_approval": True, "approval_passkey": "both"},
        "search": {"requires_approval": True},
        "wire": {"requires_approval": True, "approval_passkey": True, "approvals_required": 2},
    },
}


@pytest.fixture(scope="module")
def origin(api: Api) -> str:
    return f"http://localhost:{api.server.port}"


def operator(api: Api, name: str, role: str = "approver") -> Session:
    body = {"name": name, "role": role}
    issued = ok(api.admin.post("/v1/operators/tokens", json=body), 201)
    return api.client(issued["token"])


def register(client: Session, key: Authenticator) -> dict[str, Any]:
    options = ok(client.post("/v1/operators/passkeys/options"))
    return ok(client.post("/v1/operators/passkeys", json=key.register(options)), 201)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def alice(api: Api) -> Session:
    return operator(api, "alice")


@pytest.fixture(scope="module")
def alice_key(alice: Session, origin: str) -> Authenticator:
    key = Authenticator(origin)
    register(alice, key)
    return key


def held(api: Api, tool: str = "pay", **tool_input: Any) -> tuple[Agent, str]:
    agent = api.create(policy=POLICY)
    decision = ok(agent.act(tool, input=tool_input or {"amount": 5}))
    assert decision["decision"] == "pending_approval"
    return agent, decision["action_id"]


def options(client: Session, agent: Agent, action_id: str, decision: str = "approve") -> Any:
    path = f"{agent.path}/actions/{action_id}/approval-options?decision={decision}"
    return ok(client.get(path))


def approve(client: Session, agent: Agent, action_id: str, assertion: Any) -> Any:
    path = f"{agent.path}/actions/{action_id}/approve"
    return client.post(path, json={"passkey": assertion})


def test_register_writes_passkey_registered_and_lists_it_as_the_callers(
    api: Api, alice: Session, origin: str
) -> None:
    key = Authenticator(origin, alg="EdDSA")
    registered = register(alice, key)
    assert registered["credential_id"] == key.id
    assert registered["alg"] == -8
    assert registered["rp_id"] == "localhost"
    assert registered["status"] == "active"
    mine = ok(alice.get("/v1/operators/passkeys"))["passkeys"]
    assert key.id in [p["credential_id"] for p in mine]
    bob = operator(api, "bob-lister")
    assert ok(bob.get("/v1/operators/passkeys"))["passkeys"] == []
    lines = (api.server.data_dir / "operators.jsonl").read_bytes().splitlines()
    records = [canonical.loads(line) for line in lines]
    written = [r for r in records if r.get("credential_id") == key.id]
    assert written[0]["kind"] == "passkey_registered"
    assert written[0]["by_id"] == registered["by_id"]
    assert written[0]["origin"] == origin


def test_the_admin_token_may_not_register_a_passkey(api: Api) -> None:
    refused = assert_error(api.admin.post("/v1/operators/passkeys/options"), 403, "forbidden")
    assert refused["error"].startswith("the admin token is no person")


@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param({"origin": "http://evil.example"}, "origin", id="wrong-origin"),
        pytest.param({"rp_id": "evil.example"}, "RP ID", id="wrong-rp-id"),
    ],
)
def test_a_registration_from_another_origin_or_rp_is_refused(
    alice: Session, origin: str, change: dict[str, str], error: str
) -> None:
    key = Authenticator(origin)
    options_ = ok(alice.post("/v1/operators/passkeys/options"))
    refused = assert_error(
        alice.post("/v1/operators/passkeys", json=key.register(options_, **change)),
        403,
        "forbidden",
    )
    assert refused["error"].startswith("passkey registration does not verify")
    assert error in refused["error"]


def test_a_registration_challenge_is_good_once(alice: Session, origin: str) -> None:
    key = Authenticator(origin)
    options_ = ok(alice.post("/v1/operators/passkeys/options"))
    ok(alice.post("/v1/operators/passkeys", json=key.register(options_)), 201)
    again = Authenticator(origin)
    refused = assert_error(
        alice.post("/v1/operators/passkeys", json=again.register(options_)), 403, "forbidden"
    )
    assert refused["error"] == (
        "passkey registration challenge is unknown, used or expired: ask for new options"
    )


def test_approval_with_the_passkey_allows_and_records_the_assertion(
    api: Api, alice: Session, alice_key: Authenticator
) -> None:
    agent, action_id = held(api)
    opts = options(alice, agent, action_id)
    records = api.records(agent)
    requested = next(r for r in records if r["kind"] == "action_requested")
    me = ok(alice.get("/v1/me"))
    expected = binding(agent.agent_id, action_id, requested["hash"], "approve", me["id"])
    assert opts["challenge"] == b64url(expected)
    assert {"type": "public-key", "id": alice_key.id} in opts["allowCredentials"]
    assertion = alice_key.assertion(opts["challenge"])
    decided = ok(approve(alice, agent, action_id, assertion))
    assert decided["decision"] == "allowed"
    allowed = api.records(agent)[-1]
    assert allowed["kind"] == "action_allowed"
    assert allowed["passkey"] == {
        "credential_id": alice_key.id,
        "authenticator_data": assertion["response"]["authenticatorData"],
        "client_data_json": assertion["response"]["clientDataJSON"],
        "signature": assertion["response"]["signature"],
    }


def test_approval_without_a_passkey_is_403_and_writes_nothing(api: Api, alice: Session) -> None:
    agent, action_id = held(api)
    before = api.log_lines(agent)
    refused = assert_error(
        alice.post(f"{agent.path}/actions/{action_id}/approve", json={}), 403, "forbidden"
    )
    assert refused["error"].startswith(f"approve of {action_id} needs the approver's passkey")
    assert api.log_lines(agent) == before


def _other_action(
    api: Api, agent: Agent, action_id: str, alice: Session, key: Authenticator
) -> Any:
    other = ok(agent.act("pay", input={"amount": 5}))["action_id"]
    return key.assertion(options(alice, agent, other)["challenge"])


def _other_input(api: Api, agent: Agent, action_id: str, alice: Session, key: Authenticator) -> Any:
    # The same action ID in another agent's log, for another input.
    twin, twin_action = held(api, amount=500)
    return key.assertion(options(alice, twin, twin_action)["challenge"])


def _reject_decision(
    api: Api, agent: Agent, action_id: str, alice: Session, key: Authenticator
) -> Any:
    return key.assertion(options(alice, agent, action_id, "reject")["challenge"])


@pytest.mark.parametrize(
    ("make", "error"),
    [
        pytest.param(
            _other_action,
            "passkey challenge is not the binding of this decision",
            id="another-action",
        ),
        pytest.param(
            _other_input,
            "passkey challenge is not the binding of this decision",
            id="another-input",
        ),
        pytest.param(
            _reject_decision,
            "passkey challenge is not the binding of this decision",
            id="another-decision",
        ),
    ],
)
def test_an_assertion_made_for_another_binding_is_refused(
    api: Api, alice: Session, alice_key: Authenticator, make: Any, error: str
) -> None:
    agent, action_id = held(api)
    assertion = make(api, agent, action_id, alice, alice_key)
    before = api.log_lines(agent)
    refused = assert_error(approve(alice, agent, action_id, assertion), 403, "forbidden")
    assert refused["error"] == error
    assert api.log_lines(agent) == before


def test_another_approvers_assertion_is_refused(
    api: Api, alice: Session, alice_key: Authenticator, origin: str
) -> None:
    agent, action_id = held(api)
    bob = operator(api, "bob")
    bob_key = Authenticator(origin)
    register(bob, bob_key)
    # Bob signs his own binding; Alice sends it as hers.
    stolen = bob_key.assertion(options(bob, agent, action_id)["challenge"])
    refused = assert_error(approve(alice, agent, action_id, stolen), 403, "forbidden")
    assert refused["error"] == "passkey credential is not registered to alice"
    # Alice's own passkey over Bob's binding: the binding names Alice, not Bob.
    forged = alice_key.assertion(options(bob, agent, action_id)["challenge"])
    refused = assert_error(approve(alice, agent, action_id, forged), 403, "forbidden")
    assert refused["error"] == "passkey challenge is not the binding of this decision"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param(
            {"origin": "http://evil.example"},
            "passkey origin http://evil.example is not",
            id="origin",
        ),
        pytest.param(
            {"rp_id": "evil.example"}, "passkey rp ID hash is not that of localhost", id="rp-id"
        ),
        pytest.param({"flags": UP}, "passkey assertion lacks user verification", id="no-uv"),
        pytest.param(
            {"kind": "webauthn.create"},
            "passkey clientDataJSON type is webauthn.create, not webauthn.get",
            id="type",
        ),
    ],
)
def test_an_assertion_from_elsewhere_or_without_verification_is_refused(
    api: Api, alice: Session, alice_key: Authenticator, change: dict[str, Any], error: str
) -> None:
    agent, action_id = held(api)
    assertion = alice_key.assertion(options(alice, agent, action_id)["challenge"], **change)
    refused = assert_error(approve(alice, agent, action_id, assertion), 403, "forbidden")
    assert refused["error"].startswith(error)


def test_a_tampered_signature_is_refused(api: Api, origin: str) -> None:
    frank = operator(api, "frank")
    key = Authenticator(origin, alg="EdDSA")
    register(frank, key)
    agent, action_id = held(api)
    assertion = key.assertion(options(frank, agent, action_id)["challenge"])
    signature = bytearray(unb64url(assertion["response"]["signature"], "signature"))
    signature[0] ^= 1
    assertion["response"]["signature"] = b64url(bytes(signature))
    refused = assert_error(approve(frank, agent, action_id, assertion), 403, "forbidden")
    assert refused["error"] == "passkey signature does not verify"


def test_a_replayed_assertion_is_refused(
    api: Api, alice: Session, alice_key: Authenticator
) -> None:
    agent, action_id = held(api)
    assertion = alice_key.assertion(options(alice, agent, action_id)["challenge"])
    ok(approve(alice, agent, action_id, assertion))
    assert_error(approve(alice, agent, action_id, assertion), 409, "invalid_state")
    # Replayed on another action (of the same agent): its binding differs.
    second = ok(agent.act("pay", input={"amount": 5}))["action_id"]
    refused = assert_error(approve(alice, agent, second, assertion), 403, "forbidden")
    assert refused["error"] == "passkey challenge is not the binding of this decision"


def test_a_sign_counter_that_does_not_move_forward_is_refused(api: Api, origin: str) -> None:
    carol = operator(api, "carol")
    key = Authenticator(origin)
    key.sign_count = 10
    register(carol, key)
    agent, action_id = held(api)
    first = key.assertion(options(carol, agent, action_id)["challenge"])
    agent2, action2 = held(api)
    second = key.assertion(options(carol, agent2, action2)["challenge"])
    ok(approve(carol, agent2, action2, second))  # counter 12
    refused = assert_error(approve(carol, agent, action_id, first), 403, "forbidden")
    assert refused["error"] == "passkey sign counter did not move forward (11 after 12)"


def test_a_revoked_passkey_is_refused(api: Api, origin: str) -> None:
    dave = operator(api, "dave")
    key = Authenticator(origin)
    register(dave, key)
    agent, action_id = held(api)
    assertion = key.assertion(options(dave, agent, action_id)["challenge"])
    revoked = ok(api.admin.post(f"/v1/operators/passkeys/{key.id}/revoke"))
    assert revoked["status"] == "revoked"
    refused = assert_error(approve(dave, agent, action_id, assertion), 403, "forbidden")
    assert refused["error"].startswith("passkey credential was revoked at ")
    assert_error(api.admin.post(f"/v1/operators/passkeys/{key.id}/revoke"), 409, "invalid_state")
    assert_error(api.admin.post("/v1/operators/passkeys/nope/revoke"), 404, "not_found")


def test_a_rejection_needs_the_passkey_only_when_the_rule_says_both(
    api: Api, alice: Session, alice_key: Authenticator
) -> None:
    agent, action_id = held(api, "pay")
    ok(alice.post(f"{agent.path}/actions/{action_id}/reject", json={"reason": "no"}))
    agent, action_id = held(api, "delete")
    refused = assert_error(
        alice.post(f"{agent.path}/actions/{action_id}/reject", json={"reason": "no"}),
        403,
        "forbidden",
    )
    assert refused["error"].startswith(f"reject of {action_id} needs the approver's passkey")
    assertion = alice_key.assertion(options(alice, agent, action_id, "reject")["challenge"])
    body = {"reason": "no", "passkey": assertion}
    decided = ok(alice.post(f"{agent.path}/actions/{action_id}/reject", json=body))
    assert decided["reason"]["code"] == "rejected"
    rejected = api.records(agent)[-1]
    assert rejected["kind"] == "action_rejected"
    assert rejected["passkey"]["credential_id"] == alice_key.id


def test_each_approval_of_a_quorum_carries_its_own_assertion(
    api: Api, alice: Session, alice_key: Authenticator, origin: str
) -> None:
    erin = operator(api, "erin")
    erin_key = Authenticator(origin, alg="EdDSA")
    register(erin, erin_key)
    agent, action_id = held(api, "wire")
    first = alice_key.assertion(options(alice, agent, action_id)["challenge"])
    assert ok(approve(alice, agent, action_id, first))["decision"] == "pending_approval"
    second = erin_key.assertion(options(erin, agent, action_id)["challenge"])
    assert ok(approve(erin, agent, action_id, second))["decision"] == "allowed"
    records = api.records(agent)
    recorded = next(r for r in records if r["kind"] == "approval_recorded")
    assert recorded["passkey"]["credential_id"] == alice_key.id
    assert records[-1]["passkey"]["credential_id"] == erin_key.id


def _registered(api: Api) -> list[dict[str, Any]]:
    lines = (api.server.data_dir / "operators.jsonl").read_bytes().splitlines()
    records = [canonical.loads(line) for line in lines]
    return [r for r in records if r["kind"] == "passkey_registered"]


def test_the_receipt_of_a_passkey_approval_proves_the_approver_to_the_executor(
    api: Api, alice: Session, alice_key: Authenticator
) -> None:
    agent, action_id = held(api, amount=7)
    assertion = alice_key.assertion(options(alice, agent, action_id)["challenge"])
    receipt = ok(approve(alice, agent, action_id, assertion))["receipt"]
    check = {
        "public_key": api.server.public_key,
        "agent_id": agent.agent_id,
        "tool": "pay",
        "input": {"amount": 7},
        "max_age_secs": 600,
    }
    trusted = _registered(api)
    assert verify_receipt(receipt, passkeys=trusted, **check) == action_id  # type: ignore[arg-type]
    others = [r for r in trusted if r["credential_id"] != alice_key.id]
    with pytest.raises(
        ReceiptError, match=r"^receipt refused: the allowance's passkey is not one you trust$"
    ):
        verify_receipt(receipt, passkeys=others, **check)  # type: ignore[arg-type]
    # An approval with no passkey (a rule that wants none) proves no approver.
    plain, plain_id = held(api, "search")
    unsigned = ok(alice.post(f"{plain.path}/actions/{plain_id}/approve", json={}))["receipt"]
    with pytest.raises(
        ReceiptError, match=r"^receipt refused: the allowance carries no passkey assertion$"
    ):
        verify_receipt(  # type: ignore[arg-type]
            unsigned,
            passkeys=trusted,
            **{**check, "agent_id": plain.agent_id, "tool": "search", "input": {"amount": 5}},
        )


def test_a_policy_rule_wants_a_passkey_for_the_calls_it_holds_only(
    api: Api, alice: Session, alice_key: Authenticator
) -> None:
    big = {
        "name": "big",
        "when": "double(input.amount) > 100.0",
        "effect": "require_approval",
        "approval_passkey": True,
    }
    policy = {
        "budget": 1000,
        "scar_limit": 10,
        "tools": {"pay": {"requires_approval": True, "rules": [big]}},
    }
    agent = api.create(policy=policy)
    small = ok(agent.act("pay", input={"amount": 5}))["action_id"]
    large = ok(agent.act("pay", input={"amount": 500}))["action_id"]
    assert ok(alice.post(f"{agent.path}/actions/{small}/approve", json={}))["decision"] == "allowed"
    refused = assert_error(
        alice.post(f"{agent.path}/actions/{large}/approve", json={}), 403, "forbidden"
    )
    assert refused["error"].startswith(f"approve of {large} needs the approver's passkey")
    assert options(alice, agent, large)["passkey_required"] is True
    assertion = alice_key.assertion(options(alice, agent, large)["challenge"])
    assert ok(approve(alice, agent, large, assertion))["decision"] == "allowed"


def test_only_a_require_approval_rule_takes_approval_passkey(api: Api) -> None:
    rule = {"name": "r", "when": "true", "effect": "allow", "approval_passkey": True}
    policy = {"budget": 10, "scar_limit": 10, "tools": {"pay": {"rules": [rule]}}}
    refused = assert_error(
        api.admin.post("/v1/agents", json={"agent_id": "bad-rule", "policy": policy}),
        400,
        "bad_request",
    )
    assert "only a require_approval rule takes approval_passkey" in refused["error"]


@pytest.mark.parametrize(
    "response",
    [
        pytest.param({}, id="empty"),
        pytest.param({"clientDataJSON": "e30", "attestationObject": "AAAA"}, id="not-cbor"),
        pytest.param({"clientDataJSON": 5, "attestationObject": None}, id="wrong-types"),
    ],
)
def test_a_malformed_registration_is_400_and_writes_nothing(
    api: Api, alice: Session, response: dict[str, Any]
) -> None:
    before = (api.server.data_dir / "operators.jsonl").read_bytes()
    body = {"id": "AAAA", "rawId": "AAAA", "type": "public-key", "response": response}
    answer = alice.post("/v1/operators/passkeys", json=body)
    assert answer.status_code in (400, 403), answer.text
    assert (api.server.data_dir / "operators.jsonl").read_bytes() == before


def test_a_malformed_assertion_is_400(api: Api, alice: Session) -> None:
    agent, action_id = held(api)
    refused = assert_error(approve(alice, agent, action_id, {"id": 1}), 400, "bad_request")
    assert refused["error"].startswith("passkey is no WebAuthn assertion")


def test_an_unreadable_attestation_answering_a_real_challenge_is_refused_saying_so(
    api: Api, alice: Session, origin: str
) -> None:
    options_ = ok(alice.post("/v1/operators/passkeys/options"))
    credential = Authenticator(origin).register(options_)
    credential["response"]["attestationObject"] = b64url(b"\xa1\x63fmt\x01")  # CBOR, no authData
    refused = assert_error(alice.post("/v1/operators/passkeys", json=credential), 403, "forbidden")
    assert refused["error"] == (
        "passkey registration does not verify: attestationObject was malformed."
    )


def test_a_person_signed_in_registers_a_passkey_and_signs_an_approval_with_it(
    tmp_path: Path, oidc_provider: OidcProvider
) -> None:
    env = {
        "GUARD_OIDC_ISSUER": oidc_provider.issuer,
        "GUARD_OIDC_CLIENT_ID": CLIENT_ID,
        "GUARD_OIDC_ROLES": ROLES,
    }
    server = GuardServer(tmp_path / "guard-data", env=env).start()
    try:
        key = Authenticator(f"http://localhost:{server.port}", alg="EdDSA")
        with server.client(oidc_provider.id_token("alice")) as alice:
            options_ = alice.post("/v1/operators/passkeys/options").json()
            registered = alice.post("/v1/operators/passkeys", json=key.register(options_))
            assert registered.status_code == 201, registered.text
            by_id = f"oidc:{oidc_provider.issuer}#alice"
            assert registered.json()["by_id"] == by_id
            alice.post("/v1/agents", json={"agent_id": "sso-payer", "policy": POLICY})
            with server.client(server.admin_token) as admin:
                admin.post("/v1/agents/sso-payer/actions", json={"tool": "pay", "input": {}})
            base = "/v1/agents/sso-payer/actions/act-1"
            opts = alice.get(f"{base}/approval-options").json()
            assert opts["binding"]["by_id"] == by_id
            body = {"passkey": key.assertion(opts["challenge"])}
            assert alice.post(f"{base}/approve", json=body).json()["decision"] == "allowed"
        assert audit_main(["verify", str(server.data_dir / "agents" / "sso-payer.jsonl")]) == 0
    finally:
        server.kill()
