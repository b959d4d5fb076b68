"""The admin token: asked for, kept in sessionStorage only, sent only as a Bearer header."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, Request, expect

from tests.console.conftest import Console, create_agent
from tests.support.server import GuardServer

pytestmark = pytest.mark.browser


def test_a_wrong_token_shows_an_error_and_asks_again(console: Console) -> None:
    create_agent(console.server, "someone")
    console.open()
    expect(console.testid("login")).to_be_visible()
    expect(console.testid("agents-view")).to_be_hidden()

    console.sign_in("not-the-admin-token")
    error = console.testid("login-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("The server refused the admin token (unauthorized: ")
    expect(console.testid("token-input")).to_be_visible()
    expect(console.testid("token-input")).to_have_value("")
    expect(console.testid("agents-view")).to_be_hidden()
    assert console.page.evaluate("sessionStorage.length") == 0

    console.sign_in()
    expect(console.agent("someone")).to_be_visible()
    expect(console.testid("login")).to_be_hidden()


def test_the_token_travels_only_in_the_authorization_header(console: Console) -> None:
    token = console.server.admin_token
    create_agent(console.server, "someone")
    requests: list[Request] = []
    console.page.on("request", lambda request: requests.append(request))
    console.open_signed_in(operator="alice")
    expect(console.agent("someone")).to_be_visible()
    console.page.wait_for_timeout(2500)

    # GET /v1/auth/config is public: it says whether single sign-on is offered.
    api_calls = [r for r in requests if "/v1/" in r.url and "/v1/auth/config" not in r.url]
    assert api_calls
    for request in requests:
        assert token not in request.url
        assert (request.post_data or "").find(token) == -1
    for request in api_calls:
        assert request.headers["authorization"] == f"Bearer {token}"
    assert token not in console.page.url
    assert console.page.evaluate("JSON.stringify(localStorage)").find(token) == -1
    assert console.page.evaluate("Object.values(sessionStorage)") == [token]
    assert console.page.evaluate("localStorage.getItem('guard.operator')") == "alice"

    console.page.reload()  # same tab: still signed in
    expect(console.agent("someone")).to_be_visible()
    expect(console.testid("operator-name")).to_have_value("alice")
    console.testid("sign-out").click()
    expect(console.testid("login")).to_be_visible()
    assert console.page.evaluate("sessionStorage.length") == 0


def test_a_401_while_working_forgets_the_token_and_asks_again(
    page: Page, make_server: Callable[..., GuardServer]
) -> None:
    server = make_server(env={"GUARD_ADMIN_TOKEN": "first-admin-token-0123456789-abcdefghij"})
    create_agent(server, "someone")
    console = Console(page, server).open_signed_in()
    expect(console.agent("someone")).to_be_visible()

    server.extra_env["GUARD_ADMIN_TOKEN"] = "second-admin-token-9876543210-abcdefghij"
    server.restart()

    expect(console.testid("login")).to_be_visible()
    expect(console.testid("login-error")).to_contain_text("Enter it again.")
    assert page.evaluate("sessionStorage.length") == 0
    console.sign_in("second-admin-token-9876543210-abcdefghij")
    expect(console.agent("someone")).to_be_visible()
