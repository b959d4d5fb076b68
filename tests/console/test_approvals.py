"""Pending approvals in the console: approve, reject, live refresh, and no HTML from agents."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from tests.console.conftest import (
    Console,
    WaitingAgent,
    agent_status,
    create_agent,
    log_records,
    request_action,
)

pytestmark = pytest.mark.browser


def test_approve_with_note_releases_the_waiting_agent(console: Console) -> None:
    server = console.server
    token = create_agent(server, "mailer")
    console.open_signed_in(operator="alice")
    expect(console.agent("mailer").get_by_test_id("agent-state")).to_have_text("alive")

    agent = WaitingAgent(server, "mailer", token, "send_email", {"to": "bob@example.com"})
    agent.start()
    assert agent.requested.wait(10)
    assert agent.decision == {"decision": "pending_approval", "action_id": "act-1"}

    console.show_pending()
    item = console.pending("mailer", "act-1")
    expect(item).to_be_visible()  # within a refresh
    expect(console.testid("pending-count")).to_have_text("1")
    expect(item.get_by_test_id("pending-tool")).to_have_text("send_email")
    expect(item.get_by_test_id("pending-cost")).to_have_text("5")
    expect(item.get_by_test_id("pending-agent")).to_have_text("mailer")
    expect(item.get_by_test_id("pending-input")).to_have_text(
        json.dumps({"to": "bob@example.com"}, indent=2)
    )
    expect(item.get_by_test_id("pending-requested-at")).to_contain_text(" s ago")

    item.get_by_test_id("approve-note").fill("checked the recipient")
    item.get_by_test_id("approve-button").click()

    assert agent.result()["status"] == "allowed"
    expect(item.get_by_test_id("settled-text")).to_contain_text(
        "Approved by alice (you): allowed, cost 5, 95 left · note: “checked the recipient”"
    )
    expect(console.testid("flash")).to_contain_text(
        "act-1 of mailer: allowed (cost 5, 95 left), note: “checked the recipient”"
    )
    item.get_by_test_id("dismiss-button").click()
    expect(item).to_have_count(0)
    allowed = [r for r in log_records(server, "mailer") if r["kind"] == "action_allowed"]
    assert len(allowed) == 1
    assert allowed[0]["action_id"] == "act-1"
    assert allowed[0]["approved_by"] == "alice"
    assert allowed[0]["note"] == "checked the recipient"

    console.show_agents()
    row = console.agent("mailer")
    expect(row.get_by_test_id("budget-text")).to_have_text("5 spent · 95 left of 100")
    expect(row.get_by_test_id("count-allowed")).to_have_text("1")
    expect(row.get_by_test_id("count-pending")).to_have_text("0")


def test_reject_with_a_moderate_scar_raises_the_scar_score_by_three(console: Console) -> None:
    server = console.server
    token = create_agent(server, "mailer")
    request_action(server, "mailer", token, "send_email", {"to": "all@example.com"})
    before = agent_status(server, "mailer")["scar_score"]
    console.open_signed_in(operator="carol")
    console.show_pending()

    item = console.pending("mailer", "act-1")
    item.get_by_test_id("reject-reason").fill("mass mailing is not allowed")
    item.get_by_test_id("reject-scar").select_option("moderate")
    item.get_by_test_id("reject-button").click()

    expect(item.get_by_test_id("settled-text")).to_contain_text(
        "Rejected by carol (you): mass mailing is not allowed · moderate scar"
    )
    expect(console.testid("flash")).to_contain_text(
        "act-1 of mailer: denied (rejected): “mass mailing is not allowed”, moderate scar"
    )
    status = agent_status(server, "mailer")
    assert status["scar_score"] == before + 3
    assert [(s["severity"], s["action_id"]) for s in status["scars"]] == [("moderate", "act-1")]

    console.show_agents()
    expect(console.agent("mailer").get_by_test_id("scar-score")).to_have_text(f"{before + 3} / 10")
    expect(console.agent("mailer").get_by_test_id("count-denied")).to_have_text("1")


def test_reject_needs_a_reason_and_approve_needs_an_operator_name(console: Console) -> None:
    server = console.server
    token = create_agent(server, "mailer")
    request_action(server, "mailer", token, "send_email")
    console.open_signed_in(operator=None)
    console.testid("operator-name").fill("")
    console.show_pending()
    item = console.pending("mailer", "act-1")

    item.get_by_test_id("reject-button").click()  # empty reason: the browser refuses
    assert item.get_by_test_id("reject-reason").evaluate("el => el.validity.valueMissing")
    item.get_by_test_id("approve-button").click()  # no operator name
    expect(item.get_by_test_id("pending-error")).to_have_text(
        "Not decided: enter your operator name at the top of the page first."
    )
    expect(console.testid("operator-name")).to_be_focused()
    assert agent_status(server, "mailer")["actions_pending"] == 1


def test_an_approve_without_operator_name_says_why_beside_the_name_field(console: Console) -> None:
    server = console.server
    token = create_agent(server, "mailer")
    for i in range(8):  # enough cards that the last is far below the name field
        request_action(server, "mailer", token, "send_email", {"to": f"user{i}@example.com"})
    console.open_signed_in(operator=None)
    console.testid("operator-name").fill("   ")  # blank is no name
    console.show_pending()
    last = console.pending("mailer", "act-8")
    last.scroll_into_view_if_needed()
    expect(console.testid("operator-name")).not_to_be_in_viewport()

    last.get_by_test_id("approve-note").fill("looks fine")
    last.get_by_test_id("approve-button").click()
    needed = console.testid("operator-needed")
    expect(needed).to_have_text(
        "Nothing was decided: enter your name here first. "
        "Every decision is signed into the agent's log with it."
    )
    expect(needed).to_be_in_viewport()  # where the page went: beside the focused field
    expect(console.testid("operator-name")).to_be_focused()
    expect(console.testid("operator-name")).to_have_attribute("aria-invalid", "true")
    expect(last.get_by_test_id("pending-error")).to_contain_text("Not decided")
    assert agent_status(server, "mailer")["actions_pending"] == 8

    console.testid("operator-name").fill("alice")
    expect(needed).to_be_hidden()
    expect(console.testid("operator-name")).not_to_have_attribute("aria-invalid", "true")
    last.get_by_test_id("approve-button").click()
    expect(last.get_by_test_id("settled-text")).to_contain_text(
        "Approved by alice (you): allowed, cost 5, 95 left · note: “looks fine”"
    )
    assert agent_status(server, "mailer")["actions_pending"] == 7


def test_approving_for_a_terminated_agent_shows_the_denial(console: Console) -> None:
    server = console.server
    token = create_agent(server, "mailer")
    request_action(server, "mailer", token, "send_email")
    with server.client(server.admin_token) as client:
        response = client.post("/v1/agents/mailer/terminate", json={"reason": "done", "by": "bob"})
    assert response.status_code == 200, response.text
    console.open_signed_in(operator="alice")
    console.show_pending()  # pending actions of a terminated agent stay pending

    item = console.pending("mailer", "act-1")
    expect(item.get_by_test_id("pending-budget")).to_have_text(
        "agent terminated (done): approving it is denied"
    )
    item.get_by_test_id("approve-button").click()
    expect(console.testid("flash")).to_contain_text("act-1 of mailer: denied (terminated)")
    expect(item.get_by_test_id("settled-text")).to_contain_text(
        "Denied when approved by alice (you): terminated (reason done)"
    )


def test_typing_survives_the_live_refresh(console: Console) -> None:
    server = console.server
    token = create_agent(server, "mailer")
    request_action(server, "mailer", token, "send_email", {"n": 1})
    console.open_signed_in()
    console.show_pending()

    first = console.pending("mailer", "act-1")
    first.get_by_test_id("approve-note").fill("a note")
    reason = first.get_by_test_id("reject-reason")
    reason.click()
    reason.press_sequentially("half-typed reas")

    request_action(server, "mailer", token, "send_email", {"n": 2})
    expect(console.pending("mailer", "act-2")).to_be_visible()  # a refresh happened
    console.page.wait_for_timeout(2500)  # and another one
    expect(reason).to_be_focused()
    expect(reason).to_have_value("half-typed reas")
    expect(first.get_by_test_id("approve-note")).to_have_value("a note")
    reason.press_sequentially("on")
    expect(reason).to_have_value("half-typed reason")
    # oldest first
    expect(console.testid("pending-item")).to_have_count(2)
    expect(console.testid("pending-item").first).to_have_attribute("data-action-id", "act-1")


HOSTILE_TOOL = 'x"><script>window.__pwned=1</script>'
HOSTILE_INPUT = '<img src=x onerror="window.__pwned=1">'


def test_agent_supplied_html_is_shown_as_text(console: Console) -> None:
    server = console.server
    policy = {"budget": 100, "scar_limit": 10, "tools": {}, "default": {"requires_approval": True}}
    token = create_agent(server, "intruder", policy)
    assert request_action(server, "intruder", token, HOSTILE_TOOL, HOSTILE_INPUT)["decision"] == (
        "pending_approval"
    )
    assert request_action(server, "intruder", token, "note", {"html": HOSTILE_INPUT})[
        "decision"
    ] == ("pending_approval")
    console.open_signed_in()
    console.show_pending()

    first = console.pending("intruder", "act-1")
    expect(first.get_by_test_id("pending-tool")).to_have_text(HOSTILE_TOOL)
    expect(first.get_by_test_id("pending-input")).to_have_text(json.dumps(HOSTILE_INPUT))
    second = console.pending("intruder", "act-2")
    expect(second.get_by_test_id("pending-input")).to_have_text(
        json.dumps({"html": HOSTILE_INPUT}, indent=2)
    )
    console.page.goto(f"{server.url}/#/agents/intruder")  # the log view shows kinds only
    expect(console.testid("log-record").first).to_be_visible()

    assert console.page.evaluate("typeof window.__pwned") == "undefined"
    assert console.page.locator("main img, main script").count() == 0


def test_a_quorum_shows_its_approvals_and_an_approval_short_of_it_is_recorded(
    console: Console,
) -> None:
    server = console.server
    deploy = {"cost": 1, "requires_approval": True, "approvals_required": 2}
    quorum = {"budget": 10, "scar_limit": 5, "tools": {"deploy": deploy}}
    token = create_agent(server, "shipper", quorum)
    request_action(server, "shipper", token, "deploy", {"v": 3})
    console.open_signed_in(operator="alice")
    console.show_pending()
    item = console.pending("shipper", "act-1")
    expect(item.get_by_test_id("pending-approvals")).to_have_text("0 of 2")
    item.get_by_test_id("approve-button").click()
    expect(item.get_by_test_id("settled-text")).to_contain_text(
        "Approval recorded by alice (you): 1 of 2: alice (admin token); it waits for more"
    )
    records = log_records(server, "shipper")
    assert (records[-1]["kind"], records[-1]["by"], records[-1]["by_id"]) == (
        "approval_recorded",
        "alice",
        "admin-token",
    )
