"""The shadow policy on an agent's page (Chromium): none, then the candidate
with its agreements, each kind of disagreement and the last ones, kept up as
requests are decided."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.console.conftest import Console, admin, create_agent, request_action

pytestmark = pytest.mark.browser

# Holds nothing and lets web_search through too: send_email would be allowed.
CANDIDATE = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {"send_email": {"cost": 5}, "web_search": {"cost": 1}},
}


def test_the_agents_page_shows_its_shadow_policy_and_disagreements(console: Console) -> None:
    server = console.server
    token = create_agent(server, "shadowed")
    console.open_signed_in()
    console.page.goto(f"{server.url}/#/agents/shadowed")
    expect(console.testid("shadow-none")).to_be_visible()

    with admin(server) as client:
        response = client.put("/v1/agents/shadowed/shadow", json=CANDIDATE)
    assert response.status_code == 200, response.text
    request_action(server, "shadowed", token, "web_search", {"q": "x"})
    request_action(server, "shadowed", token, "send_email", {"to": "ops"})

    shadow = console.testid("detail-shadow")
    expect(shadow.get_by_test_id("shadow-from")).to_have_text("a policy of its own")
    expect(shadow.get_by_test_id("shadow-agree")).to_have_text("1 of 2 requests")
    row = shadow.locator('[data-testid="shadow-disagree"][data-key="pending_approval->allowed"]')
    expect(row).to_have_text("pending_approval here, allowed in shadow: 1")
    expect(shadow.get_by_test_id("shadow-recent")).to_have_text("Last disagreements: act-2")

    with admin(server) as client:
        assert client.delete("/v1/agents/shadowed/shadow").status_code == 200
    expect(console.testid("shadow-none")).to_be_visible()
