"""Screenshots of the console at desktop and phone width, for a person to look at.

They are written to tests/artifacts/ (git-ignored). The test also checks that the
page never scrolls sideways.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.console.conftest import ARTIFACTS, Console, admin, create_agent, request_action
from tests.console.test_agents import tamper_one_byte
from tests.support.server import GuardServer

pytestmark = pytest.mark.browser

MAILER_POLICY = {
    "budget": 100,
    "scar_limit": 10,
    "approval_timeout_secs": 3600,
    "rate_limit": {"max_actions": 30, "window_secs": 60},
    "tools": {
        "send_email": {"cost": 5, "requires_approval": True},
        "web_search": {"cost": 1, "max_calls": 50},
        "deploy": {"cost": 20, "requires_approval": True, "approval_timeout_secs": 900},
    },
    "default": None,
}


def populate(server: GuardServer) -> None:
    """Agents in every state, with pending approvals, decisions, scars and spending."""
    research = create_agent(server, "research-bot")
    for _ in range(7):
        request_action(server, "research-bot", research, "web_search", {"q": "guard"})
    request_action(server, "research-bot", research, "shell", {"cmd": "rm -rf /"})
    mailer = create_agent(server, "mailer", MAILER_POLICY)
    request_action(
        server,
        "mailer",
        mailer,
        "send_email",
        {"to": "board@example.com", "subject": "Quarterly numbers", "body": "Hello " * 60},
    )
    request_action(server, "mailer", mailer, "send_email", {"to": "x" * 120 + "@example.com"})
    request_action(server, "mailer", mailer, "deploy", {"service": "billing", "version": "2.4.1"})
    request_action(server, "mailer", mailer, "send_email", {"to": "team@example.com"})
    with admin(server) as client:
        ok = client.post(
            "/v1/agents/mailer/actions/act-4/reject",
            json={"approver": "bob", "reason": "not to the whole team", "scar": "minor"},
        )
        assert ok.status_code == 200, ok.text
    request_action(server, "mailer", mailer, "web_search", {"q": "numbers"})
    create_agent(server, "retired")
    with admin(server) as client:
        client.post("/v1/agents/retired/terminate", json={"reason": "project ended", "by": "dave"})
    tampered = create_agent(server, "tampered")
    request_action(server, "tampered", tampered, "web_search", {"q": "hello world"})
    server.stop()
    tamper_one_byte(server.data_dir / "agents" / "tampered.jsonl", b"hello world")
    server.start()


def shoot(page: Page, name: str, width: int) -> None:
    page.screenshot(path=ARTIFACTS / f"console-{name}-{width}.png", full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("width", [pytest.param(1280, id="desktop"), pytest.param(390, id="phone")])
def test_screenshots_of_every_view(browser: Browser, guard_server: GuardServer, width: int) -> None:
    populate(guard_server)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        console = Console(context.new_page(), guard_server).open_signed_in(operator="alice")
        page = console.page
        expect(console.testid("agent")).to_have_count(4)
        expect(console.agent("tampered").get_by_test_id("agent-state")).to_have_text("quarantined")
        console.agent("research-bot").get_by_test_id("verify-button").click()
        expect(console.agent("research-bot").get_by_test_id("verify-status")).to_have_text("OK")
        shoot(page, "agents", width)

        console.show_pending()
        expect(console.testid("pending-item")).to_have_count(3)
        shoot(page, "pending", width)

        # The inbox: one approved here, one decided elsewhere, a filter on.
        first = console.pending("mailer", "act-1")
        first.get_by_test_id("approve-note").fill("numbers checked")
        first.get_by_test_id("approve-button").click()
        expect(first.get_by_test_id("settled-text")).to_contain_text("Approved by alice (you)")
        with admin(guard_server) as client:
            client.post(
                "/v1/agents/mailer/actions/act-2/reject",
                json={"approver": "bob", "reason": "unknown recipient"},
            )
        expect(console.pending("mailer", "act-2").get_by_test_id("settled-text")).to_contain_text(
            "Rejected elsewhere by bob"
        )
        shoot(page, "inbox", width)
        console.testid("filter-tool").select_option("deploy")
        expect(console.testid("filter-count")).to_have_text("1 of 1 waiting shown")
        shoot(page, "inbox-filtered", width)

        page.goto(f"{guard_server.url}/#/agents/mailer")
        expect(console.testid("history-item")).to_have_count(5)
        expect(console.testid("policy-tool")).to_have_count(3)
        shoot(page, "agent", width)

        console.show_agents()
        console.agent("research-bot").get_by_test_id("agent-id").click()
        expect(console.testid("log-record").first).to_be_visible()
        shoot(page, "detail", width)

        page.goto(f"{guard_server.url}/#/agents/tampered")
        expect(console.testid("detail-quarantined")).to_be_visible()
        shoot(page, "quarantined", width)
    finally:
        context.close()
