"""The console offers only what the roles of whoever holds the token allow
(GET /v1/me), and says who that is, their roles and how they authenticated:
with an operator token, the admin token (break-glass) or single sign-on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.console.conftest import Console, admin, create_agent, log_records, request_action
from tests.console.test_signin import sign_in_at_provider
from tests.support.oidc_provider import CLIENT_ID, ROLES, OidcProvider
from tests.support.server import GuardServer

pytestmark = pytest.mark.browser

VIEWER_NOTE = (
    "Viewer: you can see everything; approving, rejecting and grants need the approver role, "
    "terminating an agent the admin role."
)
APPROVER_NOTE = "Approver: terminating an agent needs the admin role."


def operator_token(server: GuardServer, name: str, role: str) -> str:
    with admin(server) as client:
        response = client.post("/v1/operators/tokens", json={"name": name, "role": role})
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


def held_action(server: GuardServer) -> None:
    """An agent "mailer" with one action held for approval (act-1)."""
    token = create_agent(server, "mailer")
    assert request_action(server, "mailer", token, "send_email", {"to": "a@example.com"})[
        "decision"
    ] == ("pending_approval")


def expect_offers(console: Console, *, decide: bool, terminate: bool) -> None:
    """The pending card of act-1 and the agent's row offer exactly this."""
    console.show_pending()
    item = console.pending("mailer", "act-1")
    expect(item).to_be_visible()
    expect(item.get_by_test_id("pending-input")).to_be_visible()  # every role reads it
    for control in ("approve-form", "reject-form", "grant-form"):
        if decide:
            expect(item.get_by_test_id(control)).to_be_visible()
        else:
            expect(item.get_by_test_id(control)).to_be_hidden()
    console.show_agents()
    row = console.agent("mailer")
    expect(row.get_by_test_id("verify-button")).to_be_visible()
    if terminate:
        expect(row.get_by_test_id("terminate-button")).to_be_visible()
    else:
        expect(row.get_by_test_id("terminate-button")).to_be_hidden()


@pytest.mark.parametrize(
    ("role", "roles", "note", "decide", "terminate"),
    [
        pytest.param("viewer", "(viewer)", VIEWER_NOTE, False, False, id="viewer"),
        pytest.param("approver", "(approver, viewer)", APPROVER_NOTE, True, False, id="approver"),
        pytest.param("admin", "(admin, approver, viewer)", None, True, True, id="admin"),
    ],
)
def test_an_operator_token_is_offered_only_what_its_role_allows(
    console: Console, role: str, roles: str, note: str | None, decide: bool, terminate: bool
) -> None:
    server = console.server
    held_action(server)
    console.open().sign_in(operator_token(server, f"{role}-bot", role))
    expect(console.agent("mailer")).to_be_visible()
    expect(console.testid("signed-in-name")).to_have_text(f"{role}-bot")
    expect(console.testid("signed-in-roles")).to_have_text(roles)
    expect(console.testid("signed-in-via")).to_have_text("via an operator token")
    # Decisions are recorded under the token's name: nobody types another.
    expect(console.testid("operator-name")).to_have_value(f"{role}-bot")
    expect(console.testid("operator-name")).to_have_attribute("readonly", "")
    if note is None:
        expect(console.testid("role-note")).to_be_hidden()
    else:
        expect(console.testid("role-note")).to_have_text(note)
    expect_offers(console, decide=decide, terminate=terminate)


def test_an_approver_token_approves_under_its_own_name_and_id_and_the_history_says_so(
    console: Console,
) -> None:
    server = console.server
    held_action(server)
    console.open().sign_in(operator_token(server, "approver-bot", "approver"))
    console.show_pending()
    item = console.pending("mailer", "act-1")
    item.get_by_test_id("approve-button").click()
    expect(item.get_by_test_id("settled-text")).to_contain_text("Approved by approver-bot (you)")
    [allowed] = [r for r in log_records(server, "mailer") if r["kind"] == "action_allowed"]
    with admin(server) as client:
        [issued] = client.get("/v1/operators/tokens").json()["tokens"]
    assert (allowed["approved_by"], allowed["by_id"]) == (
        "approver-bot",
        f"token:{issued['token_id']}",
    )
    # The agent's history says who decided, and how they authenticated.
    console.page.goto(f"{server.url}/#/agents/mailer")
    history = console.page.locator('[data-testid="history-item"][data-action-id="act-1"]')
    expect(history.get_by_test_id("history-by")).to_have_text(
        f"approver-bot (operator token {issued['token_id']})"
    )


def test_the_admin_token_is_shown_as_break_glass_and_offered_everything(
    console: Console,
) -> None:
    held_action(console.server)
    console.open_signed_in(operator="alice")
    expect(console.testid("signed-in-name")).to_have_text("the admin token")
    expect(console.testid("signed-in-roles")).to_have_text("(admin, approver, viewer)")
    expect(console.testid("signed-in-via")).to_have_text("via the admin token (break-glass)")
    expect(console.testid("operator-name")).to_be_editable()  # who holds it types their name
    expect(console.testid("operator-name")).to_have_value("alice")
    expect(console.testid("role-note")).to_be_hidden()
    expect_offers(console, decide=True, terminate=True)


def test_a_refused_operator_token_asks_again_naming_the_kind_of_token(console: Console) -> None:
    console.open().sign_in("opr_not-a-token-anyone-issued")
    expect(console.testid("login-error")).to_contain_text(
        "The server refused the operator token (unauthorized: "
    )
    expect(console.testid("token-input")).to_be_visible()


@pytest.fixture
def sso_server(make_server: Callable[..., GuardServer], oidc_provider: OidcProvider) -> GuardServer:
    server = make_server(
        env={
            "GUARD_OIDC_ISSUER": oidc_provider.issuer,
            "GUARD_OIDC_CLIENT_ID": CLIENT_ID,
            "GUARD_OIDC_ROLES": ROLES,
        }
    )
    oidc_provider.allow_redirect(f"{server.url}/")
    return server


@pytest.mark.parametrize(
    ("user", "name", "roles", "decide"),
    [
        pytest.param("carol", "carol@example.test", "(viewer)", False, id="viewer"),
        pytest.param("bob", "bob@example.test", "(approver, viewer)", True, id="approver"),
        pytest.param("alice", "alice@example.test", "(admin, approver, viewer)", True, id="admin"),
    ],
)
def test_a_person_signed_in_is_offered_only_what_their_groups_allow(
    page: Page, sso_server: GuardServer, user: str, name: str, roles: str, decide: bool
) -> None:
    held_action(sso_server)
    console = Console(page, sso_server).open()
    sign_in_at_provider(page, user, f"{user}-pw")
    expect(console.agent("mailer")).to_be_visible()
    expect(console.testid("signed-in-name")).to_have_text(name)
    expect(console.testid("signed-in-roles")).to_have_text(roles)
    expect(console.testid("signed-in-via")).to_have_text("via single sign-on")
    expect_offers(console, decide=decide, terminate=user == "alice")
