"""Passkeys in the console, with Chromium's virtual authenticator (the
DevTools protocol's WebAuthn domain: CTAP2, internal transport, resident
keys, user verification): an operator, signed in with an operator token or
through single sign-on at an OpenID provider, registers a passkey, approves
a held payment with it, and `audit verify` then proves who approved that call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from agents_runtime.log import canonical
from audit.cli import main as audit_main
from client_sdk import verify_receipt
from tests.console.conftest import Console, WaitingAgent, admin, create_agent, log_records
from tests.console.test_signin import sign_in_at_provider
from tests.support.oidc_provider import CLIENT_ID, ROLES, OidcProvider
from tests.support.server import GuardServer

pytestmark = pytest.mark.browser

PAYMENTS = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {"pay": {"cost": 5, "requires_approval": True, "approval_passkey": True}},
    "default": None,
}
PAYMENT = {"amount": 42, "to": "acme"}


class LocalConsole(Console):
    """The console at http://localhost:<port>: a browser takes no IP address
    as a WebAuthn relying party, and guardd's default RP ID is localhost."""

    @property
    def url(self) -> str:
        return f"http://localhost:{self.server.port}"

    def open(self) -> LocalConsole:
        self.page.goto(f"{self.url}/")
        return self


def virtual_authenticator(page: Page) -> None:
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
            }
        },
    )


def register_a_passkey(console: Console) -> str:
    """Register a passkey in the console's Passkeys view; returns its credential ID."""
    console.testid("nav-passkeys").click()
    expect(console.testid("passkeys-view")).to_be_visible()
    console.testid("passkey-register").click()
    expect(console.testid("passkeys-status")).to_contain_text("registered")
    expect(console.testid("passkey")).to_have_count(1)
    return console.testid("passkey-id").inner_text()


def approve_a_held_payment(console: Console, token: str) -> dict[str, Any]:
    """Agent "payer" asks to pay, is held, and the console approves act-1 with
    the passkey; returns the action as the waiting agent last saw it."""
    agent = WaitingAgent(console.server, "payer", token, "pay", PAYMENT)
    agent.start()
    assert agent.requested.wait(10)
    console.show_pending()
    item = console.pending("payer", "act-1")
    expect(item).to_be_visible()
    item.get_by_test_id("approve-button").click()
    action = agent.result()
    assert action["status"] == "allowed"
    return action


def passkeys_registered(server: GuardServer) -> list[dict[str, Any]]:
    """The passkey_registered records of the guard's operators log."""
    lines = (server.data_dir / "operators.jsonl").read_bytes().splitlines()
    return [r for r in map(canonical.loads, lines) if r["kind"] == "passkey_registered"]


def approved_offline(
    server: GuardServer,
    action: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    *verify_args: str,
) -> None:
    """`audit verify` proves the passkey approved the payment, and so does
    the executor's receipt check, trusting the operators log's passkeys."""
    capsys.readouterr()
    log = str(server.data_dir / "agents" / "payer.jsonl")
    status = audit_main(["verify", *verify_args, log])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "passkeys:   1 signed decisions, every one verifies" in out

    action_id = verify_receipt(
        action["receipt"],
        server.public_key,
        agent_id="payer",
        tool="pay",
        input=PAYMENT,
        max_age_secs=600,
        passkeys=passkeys_registered(server),
    )
    assert action_id == "act-1"


def test_an_operator_registers_a_passkey_and_approves_a_held_payment_with_it(
    page: Page,
    make_server: Callable[..., GuardServer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = make_server()
    token = create_agent(server, "payer", PAYMENTS)
    with admin(server) as client:
        issued = client.post("/v1/operators/tokens", json={"name": "alice", "role": "approver"})
    operator_token = issued.json()["token"]
    virtual_authenticator(page)
    console = LocalConsole(page, server)
    console.open().sign_in(operator_token)
    expect(console.testid("agents-view")).to_be_visible()
    # An operator token's own name, typed for them by the console.
    expect(console.testid("operator-name")).to_have_value("alice")

    credential_id = register_a_passkey(console)
    action = approve_a_held_payment(console, token)

    allowed = [r for r in log_records(server, "payer") if r["kind"] == "action_allowed"]
    assert allowed[0]["passkey"]["credential_id"] == credential_id
    approved_offline(server, action, capsys)


def test_a_person_signed_in_at_the_provider_registers_a_passkey_and_approves_with_it(
    page: Page,
    make_server: Callable[..., GuardServer],
    oidc_provider: OidcProvider,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = make_server(
        env={
            "GUARD_OIDC_ISSUER": oidc_provider.issuer,
            "GUARD_OIDC_CLIENT_ID": CLIENT_ID,
            "GUARD_OIDC_ROLES": ROLES,
            "GUARD_OIDC_SCOPES": "openid email profile offline_access",
        }
    )
    token = create_agent(server, "payer", PAYMENTS)
    virtual_authenticator(page)
    console = LocalConsole(page, server)
    # The provider sends the browser back to the console's own origin.
    oidc_provider.allow_redirect(f"{console.url}/")
    console.open()
    sign_in_at_provider(page, "bob", "bob-pw")
    expect(console.testid("agents-view")).to_be_visible()
    expect(console.testid("signed-in-via")).to_have_text("via single sign-on")
    expect(console.testid("operator-name")).to_have_value("bob@example.test")

    credential_id = register_a_passkey(console)
    action = approve_a_held_payment(console, token)

    [allowed] = [r for r in log_records(server, "payer") if r["kind"] == "action_allowed"]
    assert allowed["passkey"]["credential_id"] == credential_id
    # The passkey and the approval are the provider's person, by issuer and subject.
    by_id = f"oidc:{oidc_provider.issuer}#bob"
    assert (allowed["approved_by"], allowed["by_id"]) == ("bob@example.test", by_id)
    registered = passkeys_registered(server)
    assert [(r["by_id"], r["credential_id"]) for r in registered] == [(by_id, credential_id)]
    operators = str(server.data_dir / "operators.jsonl")
    approved_offline(server, action, capsys, "--operators", operators)
