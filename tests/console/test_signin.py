"""Single sign-on in the console: Chromium signs in through the real test
provider's login page (Authorization Code with PKCE) and approves a held action."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, Request, expect

from tests.console.conftest import Console, WaitingAgent, create_agent, log_records
from tests.support.oidc_provider import CLIENT_ID, ROLES, OidcProvider
from tests.support.server import GuardServer

pytestmark = pytest.mark.browser


@pytest.fixture
def sso_server(make_server: Callable[..., GuardServer], oidc_provider: OidcProvider) -> GuardServer:
    server = make_server(
        env={
            "GUARD_OIDC_ISSUER": oidc_provider.issuer,
            "GUARD_OIDC_CLIENT_ID": CLIENT_ID,
            "GUARD_OIDC_ROLES": ROLES,
            "GUARD_OIDC_SCOPES": "openid email profile offline_access",
        }
    )
    oidc_provider.allow_redirect(f"{server.url}/")
    return server


def sign_in_at_provider(page: Page, user: str, password: str) -> None:
    page.get_by_test_id("sso-signin").click()
    page.locator("#login").fill(user)
    page.locator("#password").fill(password)
    page.locator("#submit").click()


def test_a_person_signs_in_at_the_provider_and_approves_a_held_action(
    page: Page, sso_server: GuardServer, oidc_provider: OidcProvider
) -> None:
    console = Console(page, sso_server)
    token = create_agent(sso_server, "mailer")
    requests: list[Request] = []
    page.on("request", lambda request: requests.append(request))
    console.open()
    expect(console.testid("sso-signin")).to_be_visible()
    expect(console.testid("break-glass")).to_have_text("Break-glass: the admin token")
    expect(console.testid("token-input")).to_be_visible()

    sign_in_at_provider(page, "alice", "alice-pw")
    expect(console.agent("mailer")).to_be_visible()
    expect(console.testid("signed-in-name")).to_have_text("alice@example.test")
    expect(console.testid("operator-name")).to_have_value("alice@example.test")
    expect(console.testid("operator-name")).to_have_attribute("readonly", "")
    expect(console.testid("sign-out")).to_have_text("Sign out")
    assert "code=" not in page.url

    agent = WaitingAgent(sso_server, "mailer", token, "send_email", {"to": "bob@example.com"})
    agent.start()
    assert agent.requested.wait(10)
    console.show_pending()
    item = console.pending("mailer", "act-1")
    item.get_by_test_id("approve-button").click()
    assert agent.result()["status"] == "allowed"
    expect(item.get_by_test_id("settled-text")).to_contain_text(
        "Approved by alice@example.test (you): allowed"
    )
    allowed = [r for r in log_records(sso_server, "mailer") if r["kind"] == "action_allowed"]
    assert [r["approved_by"] for r in allowed] == ["alice@example.test"]
    # Who approved, as guardd knows her: the issuer and her subject there.
    assert [r["by_id"] for r in allowed] == [f"oidc:{oidc_provider.issuer}#alice"]
    # The agent's history says who decided, and where they signed in.
    page.goto(f"{sso_server.url}/#/agents/mailer")
    history = page.locator('[data-testid="history-item"][data-action-id="act-1"]')
    expect(history.get_by_test_id("history-by")).to_have_text(
        f"alice@example.test (signed in at {oidc_provider.issuer})"
    )
    page.goto(f"{sso_server.url}/#/agents")

    # The ID token was the bearer; no token was kept in storage or put in a URL.
    bearers = {
        r.headers.get("authorization")
        for r in requests
        if r.url.startswith(sso_server.url) and "/v1/agents" in r.url
    }
    assert len(bearers - {None}) >= 1
    for bearer in bearers - {None}:
        assert bearer.startswith("Bearer eyJ")
        assert sso_server.admin_token not in bearer
    stored = page.evaluate(
        "JSON.stringify([Object.entries(sessionStorage), Object.entries(localStorage)])"
    )
    assert "eyJ" not in stored
    for request in requests:
        assert "id_token" not in request.url
        assert "refresh_token" not in request.url

    # A reload loses the tokens (memory only) and signs in again through the
    # provider's session, without its login page.
    page.reload()
    expect(console.testid("signed-in-name")).to_have_text("alice@example.test")
    expect(console.agent("mailer")).to_be_visible()

    console.testid("sign-out").click()
    expect(console.testid("login")).to_be_visible()
    expect(console.testid("login-error")).to_have_text("Signed out.")
    page.reload()  # signed out: no sign-in at once
    expect(console.testid("sso-signin")).to_be_visible()


def test_the_console_renews_the_id_token_with_the_refresh_token(
    page: Page, sso_server: GuardServer, oidc_provider: OidcProvider
) -> None:
    console = Console(page, sso_server)
    create_agent(sso_server, "mailer")
    console.open()
    sign_in_at_provider(page, "alice", "alice-pw")
    expect(console.agent("mailer")).to_be_visible()
    # The renewal is due a minute before expiry; run it now rather than wait.
    with page.expect_response(lambda r: r.url == f"{oidc_provider.issuer}/token") as answer:
        page.evaluate("import('/console/sso.js').then((sso) => sso.renew())")
    assert "grant_type=refresh_token" in (answer.value.request.post_data or "")
    renewed = answer.value.json()["id_token"]
    with page.expect_request(
        lambda r: (
            r.url.startswith(f"{sso_server.url}/v1/agents")
            and r.headers.get("authorization") == f"Bearer {renewed}"
        )
    ):
        pass  # the next refresh, within 2 s, sends the renewed token
    expect(console.agent("mailer")).to_be_visible()
    expect(console.testid("signed-in-name")).to_have_text("alice@example.test")


def test_a_browser_clock_ahead_of_the_provider_renews_once_per_lifetime_not_in_a_loop(
    page: Page, sso_server: GuardServer, oidc_provider: OidcProvider
) -> None:
    # The provider's ID tokens live 300 s; with the browser 10 minutes ahead
    # every token looked expired on arrival and was renewed again at once.
    page.clock.install(time=time.time() + 600)
    console = Console(page, sso_server)
    create_agent(sso_server, "mailer")
    refreshes: list[Request] = []

    def is_refresh(request: Request) -> bool:
        return request.url == f"{oidc_provider.issuer}/token" and "grant_type=refresh_token" in (
            request.post_data or ""
        )

    page.on("request", lambda r: refreshes.append(r) if is_refresh(r) else None)
    console.open()
    sign_in_at_provider(page, "alice", "alice-pw")
    expect(console.agent("mailer")).to_be_visible()
    for _ in range(2):  # the console asks guardd every 2 s: a renewal due at once has gone
        with page.expect_request(lambda r: r.url.startswith(f"{sso_server.url}/v1/agents")):
            pass
    assert refreshes == []
    with page.expect_request(is_refresh):
        page.clock.run_for(241_000)  # a minute before the token's own 300 s are out
    assert len(refreshes) == 1


def test_a_person_without_the_role_is_told_what_guardd_refused(
    page: Page, sso_server: GuardServer, oidc_provider: OidcProvider
) -> None:
    console = Console(page, sso_server)
    console.open()
    sign_in_at_provider(page, "dave", "dave-pw")
    expect(console.testid("signed-in-name")).to_have_text("Dave Nogroup")
    expect(console.testid("api-error")).to_contain_text(
        "forbidden: this endpoint needs the viewer role; Dave Nogroup holds no role"
    )


def test_an_email_no_operator_name_may_hold_is_passed_over_for_the_name(
    page: Page, sso_server: GuardServer, oidc_provider: OidcProvider
) -> None:
    # guardd would pass it over too: the console must send the name guardd shows.
    console = Console(page, sso_server)
    create_agent(sso_server, "mailer")
    console.open()
    sign_in_at_provider(page, "erin", "erin-pw")
    expect(console.agent("mailer")).to_be_visible()
    expect(console.testid("signed-in-name")).to_have_text("Erin Admin")
    expect(console.testid("operator-name")).to_have_value("Erin Admin")


def test_an_email_the_provider_says_is_unverified_is_passed_over_for_the_name(
    page: Page, sso_server: GuardServer, oidc_provider: OidcProvider
) -> None:
    # frank typed alice's address at the provider, which did not verify it.
    console = Console(page, sso_server)
    create_agent(sso_server, "mailer")
    console.open()
    sign_in_at_provider(page, "frank", "frank-pw")
    expect(console.agent("mailer")).to_be_visible()
    expect(console.testid("signed-in-name")).to_have_text("Frank Admin")
    expect(console.testid("operator-name")).to_have_value("Frank Admin")


def test_a_wrong_password_stays_at_the_provider(
    page: Page, sso_server: GuardServer, oidc_provider: OidcProvider
) -> None:
    console = Console(page, sso_server)
    console.open()
    sign_in_at_provider(page, "alice", "wrong")
    expect(page.locator("#error")).to_have_text("Unknown user or wrong password.")
    assert page.url.startswith(oidc_provider.issuer)


def test_without_single_sign_on_only_the_admin_token_is_offered(console: Console) -> None:
    console.open()
    expect(console.testid("token-input")).to_be_visible()
    expect(console.testid("sso")).to_be_hidden()


def test_the_break_glass_admin_token_still_opens_the_console_beside_single_sign_on(
    page: Page, sso_server: GuardServer
) -> None:
    console = Console(page, sso_server)
    create_agent(sso_server, "mailer")
    console.open()
    expect(console.testid("sso-signin")).to_be_visible()
    console.sign_in()
    expect(console.agent("mailer")).to_be_visible()
    expect(console.testid("signed-in-via")).to_have_text("via the admin token (break-glass)")
    expect(console.testid("operator-name")).to_be_editable()
    expect(console.testid("sign-out")).to_have_text("Forget token")
