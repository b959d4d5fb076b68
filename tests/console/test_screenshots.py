"""Screenshots of the console at desktop and phone width, for a person to look at.

They are written to tests/artifacts/ (git-ignored). The test also checks that the
page never scrolls sideways.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.console.conftest import ARTIFACTS, Console, create_agent, request_action
from tests.console.test_agents import tamper_one_byte
from tests.support.server import GuardServer

pytestmark = pytest.mark.browser


def populate(server: GuardServer) -> None:
    """Agents in every state, with pending approvals, scars and spending."""
    research = create_agent(server, "research-bot")
    for _ in range(7):
        request_action(server, "research-bot", research, "web_search", {"q": "guard"})
    request_action(server, "research-bot", research, "shell", {"cmd": "rm -rf /"})
    mailer = create_agent(server, "mailer")
    request_action(
        server,
        "mailer",
        mailer,
        "send_email",
        {"to": "board@example.com", "subject": "Quarterly numbers", "body": "Hello " * 60},
    )
    request_action(server, "mailer", mailer, "send_email", {"to": "x" * 120 + "@example.com"})
    create_agent(server, "retired")
    with server.client(server.admin_token) as client:
        client.post("/v1/agents/retired/terminate", json={"reason": "project ended", "by": "dave"})
    tampered = create_agent(server, "tampered")
    request_action(server, "tampered", tampered, "web_search", {"q": "hello world"})
    server.stop()
    tamper_one_byte(server.data_dir / "agents" / "tampered.jsonl", b"hello world")
    server.start()


@pytest.mark.parametrize("width", [pytest.param(1280, id="desktop"), pytest.param(390, id="phone")])
def test_screenshots_of_agents_and_pending(
    browser: Browser, guard_server: GuardServer, width: int
) -> None:
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
        page.screenshot(path=ARTIFACTS / f"console-agents-{width}.png", full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= width

        console.show_pending()
        expect(console.testid("pending-item")).to_have_count(2)
        page.screenshot(path=ARTIFACTS / f"console-pending-{width}.png", full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= width

        console.show_agents()
        console.agent("research-bot").get_by_test_id("agent-id").click()
        expect(console.testid("log-record").first).to_be_visible()
        page.screenshot(path=ARTIFACTS / f"console-detail-{width}.png", full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= width
    finally:
        context.close()
