"""Grants in the console (Chromium): "approve this and grant…" on a pending
card, then the agent's page lists the grant with what is left, and revokes it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.console.conftest import Console, create_agent, log_records, request_action

pytestmark = pytest.mark.browser


def test_approve_and_grant_lets_the_next_matching_calls_through(console: Console) -> None:
    server = console.server
    token = create_agent(server, "mailer")
    request_action(server, "mailer", token, "send_email", {"to": "ops@example.com", "n": 1})
    console.open_signed_in(operator="alice")
    console.show_pending()
    item = console.pending("mailer", "act-1")
    expect(item).to_be_visible()

    item.get_by_test_id("grant-open").click()
    item.get_by_test_id("grant-calls").fill("2")
    item.get_by_test_id("grant-cost").fill("")
    item.get_by_test_id("grant-minutes").fill("30")
    ticks = item.get_by_test_id("grant-match")
    expect(ticks).to_have_count(2)  # one per key of the input
    item.locator('[data-testid="grant-match"][data-key="to"]').check()
    item.get_by_test_id("grant-note").fill("weekly report")
    item.get_by_test_id("grant-button").click()

    expect(item.get_by_test_id("settled-text")).to_contain_text("Approved by alice (you)")
    records = log_records(server, "mailer")
    [issued] = [r for r in records if r["kind"] == "grant_issued"]
    assert (issued["tool"], issued["by"], issued["max_calls"], issued["max_cost"]) == (
        "send_email",
        "alice",
        2,
        None,
    )
    assert (issued["input_match"], issued["note"]) == ({"to": "ops@example.com"}, "weekly report")
    approved = [r for r in records if r["kind"] == "action_allowed"]
    assert [(r["action_id"], r.get("approved_by")) for r in approved] == [("act-1", "alice")]

    # the grant stands in for the next approvals of matching calls only
    drawn = request_action(server, "mailer", token, "send_email", {"to": "ops@example.com"})
    assert (drawn["decision"], drawn["grant_id"]) == ("allowed", "grt-1")
    other = request_action(server, "mailer", token, "send_email", {"to": "eve@example.com"})
    assert other["decision"] == "pending_approval"

    # the agent's page lists it with what is left, and revokes it
    console.page.goto(f"{server.url}/#/agents/mailer")
    grant = console.page.locator('[data-testid="grant"][data-grant-id="grt-1"]')
    expect(grant.get_by_test_id("grant-status")).to_have_text("active")
    expect(grant.get_by_test_id("grant-left")).to_have_text("1 of 2 calls")
    expect(grant.get_by_test_id("grant-input-match")).to_contain_text('"to":"ops@example.com"')
    expect(grant.get_by_test_id("grant-by")).to_have_text("alice")
    grant.get_by_test_id("grant-revoke").click()
    expect(grant.get_by_test_id("grant-status")).to_have_text("revoked")
    expect(grant.get_by_test_id("grant-revoke")).to_be_hidden()
    revoked = [r for r in log_records(server, "mailer") if r["kind"] == "grant_revoked"]
    assert [(r["grant_id"], r["by"]) for r in revoked] == [("grt-1", "alice")]
    again = request_action(server, "mailer", token, "send_email", {"to": "ops@example.com"})
    assert again["decision"] == "pending_approval"


def test_a_grant_without_a_bound_is_refused_on_the_card(console: Console) -> None:
    server = console.server
    token = create_agent(server, "mailer")
    request_action(server, "mailer", token, "send_email", "plain text")
    console.open_signed_in(operator="alice")
    console.show_pending()
    item = console.pending("mailer", "act-1")
    item.get_by_test_id("grant-open").click()
    expect(item.get_by_test_id("grant-match")).to_have_count(0)  # nothing to match on
    item.get_by_test_id("grant-calls").fill("")
    item.get_by_test_id("grant-button").click()
    expect(item.get_by_test_id("pending-error")).to_have_text(
        "A grant needs a bound: a number of calls, a cost, or both."
    )
    # nothing was written: still pending, no grant
    assert [r["kind"] for r in log_records(server, "mailer")][-1] == "approval_required"
