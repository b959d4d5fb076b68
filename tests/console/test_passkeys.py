"""Passkeys in the console, with Chromium's virtual authenticator (the
DevTools protocol's WebAuthn domain: CTAP2, internal transport, resident
keys, user verification): an operator registers a passkey, approves a held
payment with it, and `audit verify` then proves who approved that call."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from agents_runtime.log import canonical
from audit.cli import main as audit_main
from client_sdk import verify_receipt
from tests.console.conftest import Console, WaitingAgent, admin, create_agent, log_records
from tests.support.server import GuardServer

pytestmark = pytest.mark.browser

PAYMENTS = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {"pay": {"cost": 5, "requires_approval": True, "approval_passkey": True}},
    "default": None,
}


class LocalConsole(Console):
    """The console at http://localhost:<port>: a browser takes no IP address
    as a WebAuthn relying party, and guardd's default RP ID is localhost."""

    def open(self) -> LocalConsole:
        self.page.goto(f"http://localhost:{self.server.port}/")
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

    console.testid("nav-passkeys").click()
    expect(console.testid("passkeys-view")).to_be_visible()
    console.testid("passkey-register").click()
    expect(console.testid("passkeys-status")).to_contain_text("registered")
    expect(console.testid("passkey")).to_have_count(1)

    agent = WaitingAgent(server, "payer", token, "pay", {"amount": 42, "to": "acme"})
    agent.start()
    assert agent.requested.wait(10)
    console.show_pending()
    item = console.pending("payer", "act-1")
    expect(item).to_be_visible()
    item.get_by_test_id("approve-button").click()
    assert agent.result()["status"] == "allowed"

    allowed = [r for r in log_records(server, "payer") if r["kind"] == "action_allowed"]
    assert allowed[0]["passkey"]["credential_id"] == console.testid("passkey-id").inner_text()
    capsys.readouterr()
    status = audit_main(["verify", str(server.data_dir / "agents" / "payer.jsonl")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "passkeys:   1 signed decisions, every one verifies" in out

    # The executor's receipt check: the guard allowed it, and alice's passkey approved it.
    lines = (server.data_dir / "operators.jsonl").read_bytes().splitlines()
    trusted = [r for r in map(canonical.loads, lines) if r["kind"] == "passkey_registered"]
    action_id = verify_receipt(
        agent.result()["receipt"],
        server.public_key,
        agent_id="payer",
        tool="pay",
        input={"amount": 42, "to": "acme"},
        max_age_secs=600,
        passkeys=trusted,
    )
    assert action_id == "act-1"
