"""The console as an inbox: the agent's decisions and policy, pending cards that say
what the operator needs (budget, wait, expiry), filters, the tab title, desktop
notifications, cards decided elsewhere, one time format, a quarantined agent's page.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.console.conftest import (
    Console,
    admin,
    create_agent,
    log_records,
    request_action,
)
from tests.console.test_agents import tamper_one_byte
from tests.support.server import GuardServer

pytestmark = pytest.mark.browser

TITLE = "Agent Action Guard · console"

INBOX_POLICY: dict[str, Any] = {
    "budget": 100,
    "scar_limit": 20,
    "approval_timeout_secs": 600,
    "rate_limit": {"max_actions": 50, "window_secs": 60},
    "tools": {
        "send_email": {"cost": 5, "requires_approval": True},
        "web_search": {"cost": 1, "max_calls": 40},
        "deploy": {"cost": 20, "requires_approval": True, "approval_timeout_secs": 1},
    },
    "default": None,
}

# What a time of the one format reads: local date and time, then its age or countdown.
ONE_FORMAT = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d · "
    r"(?:\d+ (?:s|min|h|d) ago|in \d+ (?:s|min|h|d)(?: \d+ (?:s|min|h))?)$"
)


def post(server: GuardServer, path: str, body: dict[str, Any], token: str | None = None) -> Any:
    with server.client(token or server.admin_token) as client:
        response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def get(server: GuardServer, path: str) -> Any:
    with admin(server) as client:
        response = client.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def wait_for_status(server: GuardServer, agent_id: str, action_id: str, status: str) -> Any:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        action = get(server, f"/v1/agents/{agent_id}/actions/{action_id}")
        if action["status"] == status:
            return action
        time.sleep(0.1)
    raise AssertionError(f"{action_id} never became {status}: {action}")


def record_of(server: GuardServer, agent_id: str, kind: str, action_id: str) -> dict[str, Any]:
    [record] = [
        r
        for r in log_records(server, agent_id)
        if r["kind"] == kind and r.get("action_id") == action_id
    ]
    return record


# ---- the agent's page: decisions and policy ---------------------------------


def test_agent_page_shows_every_decision_with_reason_approver_outcome_scars_and_times(
    console: Console,
) -> None:
    server = console.server
    token = create_agent(server, "worker", INBOX_POLICY)
    url = "/v1/agents/worker/actions"
    request_action(server, "worker", token, "web_search", {"q": "prices"})  # act-1 allowed
    post(server, f"{url}/act-1/outcome", {"status": "success", "detail": "3 hits"}, token)
    request_action(server, "worker", token, "shell", {"cmd": "ls"})  # act-2 not in policy
    request_action(server, "worker", token, "send_email", {"to": "a@example.com"})  # act-3
    post(server, f"{url}/act-3/approve", {"approver": "alice", "note": "known customer"})
    post(server, f"{url}/act-3/outcome", {"status": "failure", "detail": "bounced"}, token)
    request_action(server, "worker", token, "send_email", {"to": "all@example.com"})  # act-4
    post(server, f"{url}/act-4/reject", {"approver": "bob", "reason": "too wide", "scar": "minor"})
    request_action(server, "worker", token, "send_email", {"to": "c@example.com"})  # act-5
    post(server, f"{url}/act-5/cancel", {"reason": "the user gave up"}, token)
    request_action(server, "worker", token, "deploy", {"v": 2})  # act-6: 1 s to decide
    wait_for_status(server, "worker", "act-6", "denied")
    request_action(server, "worker", token, "send_email", {"to": "d@example.com"})  # act-7 waits

    console.open_signed_in()
    console.page.goto(f"{server.url}/#/agents/worker")
    items = console.testid("history-item")
    expect(items).to_have_count(7)
    expect(items.first).to_have_attribute("data-action-id", "act-7")  # newest first

    def item(action_id: str) -> Any:
        return console.page.locator(f'[data-testid="history-item"][data-action-id="{action_id}"]')

    def check(action_id: str, decision: str, reason: str, **facts: str) -> None:
        it = item(action_id)
        expect(it.get_by_test_id("history-decision")).to_have_text(decision)
        expect(it.get_by_test_id("history-reason")).to_have_text(reason)
        for testid, text in facts.items():
            expect(it.get_by_test_id(testid.replace("_", "-"))).to_contain_text(text)

    check(
        "act-1",
        "allowed",
        "allowed · cost 1 · 99 left",
        history_by="not needed",
        history_outcome="success (reported by agent): 3 hits",
    )
    check("act-2", "denied", "denied · tool_not_allowed (tool shell)", history_scar="moderate")
    expect(item("act-2").get_by_test_id("history-by")).to_have_count(0)  # nobody was asked
    check(
        "act-3",
        "allowed",
        "allowed · cost 5 · 94 left",
        history_by="alice (admin token)",
        history_note="known customer",
        history_outcome="failure (reported by agent): bounced",
        history_scar="minor scar: outcome: failure: bounced",
    )
    check(
        "act-4",
        "rejected",
        "rejected: too wide",
        history_by="bob (admin token)",
        history_scar="minor scar: too wide (by bob)",
    )
    check("act-5", "cancelled", "cancelled: the user gave up", history_by="agent")
    check(
        "act-6",
        "expired",
        "denied · approval_expired: nobody decided within 1 s",
        history_by="nobody, in time",
    )
    check("act-7", "pending", "waiting for approval")
    expect(item("act-3").get_by_test_id("history-tool")).to_have_text("send_email")
    expect(item("act-3").get_by_test_id("history-cost")).to_have_text("5")
    expect(item("act-3").get_by_test_id("history-input")).to_have_text(
        '{\n  "to": "a@example.com"\n}'
    )
    # times: each is the record's own, in the one format, exact UTC on hover
    requested = record_of(server, "worker", "action_requested", "act-3")
    decided = record_of(server, "worker", "action_allowed", "act-3")
    outcome = record_of(server, "worker", "outcome", "act-3")
    it = item("act-3")
    expect(it.get_by_test_id("history-requested-at").locator("time")).to_have_attribute(
        "title", requested["ts"]
    )
    expect(it.get_by_test_id("history-decided-at").locator("time")).to_have_attribute(
        "title", decided["ts"]
    )
    expect(it.get_by_test_id("history-outcome").locator("time")).to_have_attribute(
        "title", outcome["ts"]
    )

    post(server, f"{url}/act-7/approve", {"approver": "carol"})  # the page follows the log
    check("act-7", "allowed", "allowed · cost 5 · 89 left", history_by="carol")


def test_agent_page_shows_its_policy_from_the_policy_endpoint_and_follows_a_new_one(
    console: Console,
) -> None:
    server = console.server
    create_agent(server, "worker", INBOX_POLICY)
    console.open_signed_in()
    console.page.goto(f"{server.url}/#/agents/worker")
    policy = console.testid("detail-policy")
    expect(policy.get_by_test_id("policy-budget")).to_have_text("100")
    expect(policy.get_by_test_id("policy-scar-limit")).to_have_text("20")
    expect(policy.get_by_test_id("policy-rate-limit")).to_have_text("50 actions per 60 s")
    expect(policy.get_by_test_id("policy-approval-timeout")).to_have_text("600 s")
    expect(policy.get_by_test_id("policy-default")).to_have_text("refused (not in the policy)")
    rows = policy.get_by_test_id("policy-tool")
    expect(rows).to_have_count(3)
    seen = [
        [cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()] for i in range(3)
    ]
    assert seen == [
        ["deploy", "20", "needs approval", "no limit", "1 s"],
        ["send_email", "5", "needs approval", "no limit", "600 s (the policy's)"],
        ["web_search", "1", "no", "40", "–"],  # no approval, so no approval timeout
    ]
    assert get(server, "/v1/agents/worker/policy")["tools"]["web_search"]["max_calls"] == 40

    new_policy = {
        "budget": 50,
        "scar_limit": 5,
        "tools": {"read_file": {"cost": 0.5}},
        "default": {"cost": 2, "requires_approval": True},
    }
    with admin(server) as client:
        assert client.put("/v1/agents/worker/policy", json=new_policy).status_code == 200
    expect(policy.get_by_test_id("policy-budget")).to_have_text("50")
    expect(policy.get_by_test_id("policy-approval-timeout")).to_have_text(
        "none: held actions wait until decided"
    )
    expect(policy.get_by_test_id("policy-default")).to_have_text("cost 2 · needs approval")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-tool", "read_file")


def test_no_approval_timeout_is_shown_for_what_needs_no_approval(console: Console) -> None:
    server = console.server
    create_agent(
        server,
        "worker",
        {
            "budget": 10,
            "scar_limit": 5,
            "approval_timeout_secs": 600,
            "tools": {
                "read": {"cost": 1, "approval_timeout_secs": 30},
                "write": {"cost": 2, "requires_approval": True, "approval_timeout_secs": 30},
            },
            "default": {"cost": 1, "approval_timeout_secs": 45},
        },
    )
    console.open_signed_in()
    console.page.goto(f"{server.url}/#/agents/worker")
    policy = console.testid("detail-policy")
    expect(policy.get_by_test_id("policy-approval-timeout")).to_have_text("600 s")
    expect(policy.get_by_test_id("policy-default")).to_have_text("cost 1 · no approval")
    read = policy.locator('[data-testid="policy-tool"][data-tool="read"]')
    write = policy.locator('[data-testid="policy-tool"][data-tool="write"]')
    expect(read.get_by_test_id("policy-tool-timeout")).to_have_text("–")
    expect(write.get_by_test_id("policy-tool-timeout")).to_have_text("30 s")


def test_agent_page_lets_the_operator_approve_and_reject_its_pending_actions(
    console: Console,
) -> None:
    server = console.server
    token = create_agent(server, "worker", INBOX_POLICY)
    other = create_agent(server, "other", INBOX_POLICY)
    request_action(server, "worker", token, "send_email", {"to": "a@example.com"})
    request_action(server, "other", other, "send_email")
    request_action(server, "worker", token, "send_email", {"to": "b@example.com"})
    console.open_signed_in(operator="alice")
    console.page.goto(f"{server.url}/#/agents/worker")

    page = console.testid("detail-view")
    waiting = page.get_by_test_id("detail-pending")
    cards = waiting.get_by_test_id("pending-item")
    expect(cards).to_have_count(2)  # only this agent's, oldest first
    assert [cards.nth(i).get_attribute("data-action-id") for i in range(2)] == ["act-1", "act-2"]
    first, second = cards.nth(0), cards.nth(1)
    expect(first.get_by_test_id("pending-budget")).to_have_text("100 left of 100")
    expect(first.get_by_test_id("pending-expires-at")).to_contain_text("in ")

    first.get_by_test_id("approve-note").fill("known recipient")
    first.get_by_test_id("approve-button").click()
    expect(first.get_by_test_id("settled-text")).to_contain_text(
        "Approved by alice (you): allowed, cost 5, 95 left · note: “known recipient”"
    )
    second.get_by_test_id("reject-reason").fill("not this one")
    second.get_by_test_id("reject-button").click()
    expect(second.get_by_test_id("settled-text")).to_contain_text(
        "Rejected by alice (you): not this one"
    )
    assert record_of(server, "worker", "action_allowed", "act-1")["note"] == "known recipient"
    assert record_of(server, "worker", "action_rejected", "act-2")["reason"] == "not this one"
    history = page.locator('[data-testid="history-item"][data-action-id="act-1"]')
    expect(history.get_by_test_id("history-decision")).to_have_text("allowed")

    # The inbox says the same of them: decided here, by you, not elsewhere.
    console.show_pending()
    inbox = console.testid("pending-view")
    card = inbox.locator(
        '[data-testid="pending-item"][data-agent-id="worker"][data-action-id="act-1"]'
    )
    expect(card.get_by_test_id("settled-text")).to_contain_text("Approved by alice (you)")
    expect(inbox.locator('[data-testid="pending-item"][data-agent-id="other"]')).to_have_count(1)

    # Back on the page: dismissing a decided card there hides the section.
    console.page.goto(f"{server.url}/#/agents/worker")
    expect(waiting).to_be_hidden()  # a page opened anew shows only what waits


def test_agent_page_card_decided_elsewhere_says_who(console: Console) -> None:
    server = console.server
    token = create_agent(server, "worker", INBOX_POLICY)
    request_action(server, "worker", token, "send_email")
    console.open_signed_in(operator="alice")
    console.page.goto(f"{server.url}/#/agents/worker")
    card = console.testid("detail-pending").get_by_test_id("pending-item")
    expect(card).to_have_count(1)
    post(server, "/v1/agents/worker/actions/act-1/approve", {"approver": "bob", "note": "ok"})
    expect(card.get_by_test_id("settled-text")).to_contain_text("Approved elsewhere by bob at ")
    card.get_by_test_id("dismiss-button").click()
    expect(card).to_have_count(0)
    expect(console.testid("detail-pending")).to_be_hidden()


# ---- pending cards, tab title, notifications ---------------------------------


def test_pending_card_shows_budget_left_time_waiting_and_the_expiry_countdown(
    console: Console,
) -> None:
    server = console.server
    policy = {**INBOX_POLICY, "budget": 10}
    token = create_agent(server, "worker", policy)
    request_action(server, "worker", token, "send_email", {"to": "a@example.com"})
    console.open_signed_in()
    console.show_pending()
    card = console.pending("worker", "act-1")
    expect(card.get_by_test_id("pending-budget")).to_have_text("10 left of 10")
    [entry] = get(server, "/v1/agents/worker/actions/pending")["pending"]
    waiting = card.get_by_test_id("pending-requested-at")
    expect(waiting).to_have_attribute("title", entry["requested_at"])
    expect(waiting).to_have_text(re.compile(r" · \d+ s ago$"))
    expires = card.get_by_test_id("pending-expires-at")
    expect(expires).to_have_attribute("title", entry["expires_at"])
    expect(expires).to_have_text(re.compile(r" · in (?:10 min 0 s|9 min \d+ s)$"))
    before = expires.inner_text()
    console.page.wait_for_timeout(1100)
    assert expires.inner_text() != before  # the countdown moves on its own

    for _ in range(6):  # spending elsewhere leaves too little for this action
        request_action(server, "worker", token, "web_search")
    expect(card.get_by_test_id("pending-budget")).to_have_text(
        "4 left of 10: not enough for this action"
    )

    # a policy without a timeout: the card says it waits for ever
    patient = create_agent(
        server,
        "forever",
        {"budget": 5, "scar_limit": 5, "tools": {"x": {"cost": 1, "requires_approval": True}}},
    )
    request_action(server, "forever", patient, "x")
    other = console.pending("forever", "act-1")
    expect(other.get_by_test_id("pending-no-expiry")).to_have_text("never (no approval timeout)")
    expect(other.get_by_test_id("pending-expires-at")).to_be_hidden()


def test_tab_title_counts_pending_actions(console: Console) -> None:
    server = console.server
    token = create_agent(server, "worker", INBOX_POLICY)
    console.open_signed_in()
    expect(console.page).to_have_title(TITLE)
    request_action(server, "worker", token, "send_email")
    request_action(server, "worker", token, "send_email")
    expect(console.page).to_have_title(f"(2) {TITLE}")  # on any view, within a refresh
    post(server, "/v1/agents/worker/actions/act-1/reject", {"approver": "bob", "reason": "no"})
    expect(console.page).to_have_title(f"(1) {TITLE}")
    post(server, "/v1/agents/worker/actions/act-2/approve", {"approver": "bob"})
    expect(console.page).to_have_title(TITLE)


# Observes the browser's Notification API: each constructor call and each permission request.
RECORD_NOTIFICATIONS = """
(() => {
  const Real = window.Notification;
  window.__notifications = [];
  window.__permissionRequests = 0;
  function Recorded(title, options) {
    const { body, tag } = options || {};
    window.__notifications.push({ title, body, tag });
    return new Real(title, options);
  }
  Object.defineProperty(Recorded, "permission", { get: () => Real.permission });
  Recorded.requestPermission = (...args) => {
    window.__permissionRequests += 1;
    return Real.requestPermission(...args);
  };
  window.Notification = Recorded;
})();
"""


def wait_until(page: Page, expression: str, timeout: float = 10.0) -> None:
    """Poll a JavaScript expression (the page's CSP refuses wait_for_function's eval)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"never true: {expression}"
        page.wait_for_timeout(100)


def notifying_console(browser: Browser, server: GuardServer, grant: bool) -> tuple[Console, Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    if grant:
        context.grant_permissions(["notifications"], origin=server.url)
    context.add_init_script(RECORD_NOTIFICATIONS)
    page = context.new_page()
    page.set_default_timeout(10_000)
    return Console(page, server), context


def test_notify_me_turns_on_a_desktop_notification_for_each_new_pending_action(
    browser: Browser, guard_server: GuardServer
) -> None:
    server = guard_server
    token = create_agent(server, "worker", INBOX_POLICY)
    request_action(server, "worker", token, "send_email", {"n": 1})  # waiting before the page opens
    console, context = notifying_console(browser, server, grant=True)
    try:
        console.open_signed_in()
        console.show_pending()
        expect(console.pending("worker", "act-1")).to_be_visible()
        request_action(server, "worker", token, "send_email", {"n": 2})
        expect(console.pending("worker", "act-2")).to_be_visible()
        page: Page = console.page
        assert page.evaluate("window.__notifications") == []  # not asked for: none shown
        assert page.evaluate("window.__permissionRequests") == 0

        console.testid("notify-button").click()
        expect(console.testid("notify-state")).to_have_text(
            "Desktop notifications are on: one for each new pending action."
        )
        expect(console.testid("notify-button")).to_have_text("Stop notifications")
        request_action(server, "worker", token, "send_email", {"n": 3})
        wait_until(page, "window.__notifications.length > 0")
        page.wait_for_timeout(2500)  # another refresh: still one notification for act-3
        assert page.evaluate("window.__notifications") == [
            {
                "title": "Approval needed: send_email",
                "body": "worker asks for send_email (act-3, cost 5)",
                "tag": "worker/act-3",
            }
        ]

        page.reload()  # the choice is remembered (the token too: same tab)
        expect(console.testid("pending-count")).to_have_text("3")
        expect(console.testid("notify-button")).to_have_text("Stop notifications")
        page.wait_for_timeout(2500)
        assert page.evaluate("window.__notifications") == []  # what waited at load is not new
        console.testid("notify-button").click()  # and it can be turned off
        expect(console.testid("notify-button")).to_have_text("Notify me")
        request_action(server, "worker", token, "send_email", {"n": 4})
        expect(console.testid("pending-count")).to_have_text("4")
        assert page.evaluate("window.__notifications") == []
    finally:
        context.close()


def test_permission_is_asked_only_when_the_operator_clicks_notify_me(
    browser: Browser, guard_server: GuardServer
) -> None:
    server = guard_server
    token = create_agent(server, "worker", INBOX_POLICY)
    request_action(server, "worker", token, "send_email")
    console, context = notifying_console(browser, server, grant=False)
    try:
        console.open_signed_in()
        console.show_pending()
        expect(console.pending("worker", "act-1")).to_be_visible()
        console.page.wait_for_timeout(2500)  # a refresh or two
        assert console.page.evaluate("window.__permissionRequests") == 0
        assert console.page.evaluate("Notification.permission") == "default"
        console.testid("notify-button").click()
        wait_until(console.page, "window.__permissionRequests === 1")
    finally:
        context.close()


# ---- filters ---------------------------------------------------------------


def test_pending_filters_by_agent_and_tool_and_keeps_oldest_first(console: Console) -> None:
    server = console.server
    policy = {
        **INBOX_POLICY,
        "tools": {**INBOX_POLICY["tools"], "deploy": {"cost": 20, "requires_approval": True}},
    }
    one = create_agent(server, "one", policy)
    two = create_agent(server, "two", policy)
    request_action(server, "one", one, "send_email")  # one/act-1
    request_action(server, "two", two, "deploy")  # two/act-1
    request_action(server, "one", one, "deploy")  # one/act-2
    request_action(server, "two", two, "send_email")  # two/act-2
    console.open_signed_in()
    console.show_pending()
    cards = console.page.locator('[data-testid="pending-item"]:visible')
    expect(cards).to_have_count(4)

    def shown() -> list[str]:
        return [
            f"{c.get_attribute('data-agent-id')}/{c.get_attribute('data-action-id')}"
            for c in cards.all()
        ]

    assert shown() == ["one/act-1", "two/act-1", "one/act-2", "two/act-2"]
    console.testid("filter-agent").select_option("two")
    expect(cards).to_have_count(2)
    assert shown() == ["two/act-1", "two/act-2"]
    expect(console.testid("filter-count")).to_have_text("2 of 4 waiting shown")
    console.testid("filter-tool").select_option("deploy")
    expect(cards).to_have_count(1)
    assert shown() == ["two/act-1"]
    console.testid("filter-agent").select_option("")
    expect(cards).to_have_count(2)
    assert shown() == ["two/act-1", "one/act-2"]

    request_action(server, "one", one, "deploy")  # a new one that matches joins at the end
    expect(cards).to_have_count(3)
    assert shown() == ["two/act-1", "one/act-2", "one/act-3"]
    request_action(server, "two", two, "web_search")  # not held: nothing changes
    console.testid("filter-tool").select_option("send_email")
    expect(cards).to_have_count(2)
    console.testid("filter-agent").select_option("one")
    post(server, "/v1/agents/one/actions/act-1/approve", {"approver": "bob"})
    expect(console.testid("filter-count")).to_have_text("0 of 4 waiting shown")
    expect(cards).to_have_count(1)  # the decided card stays, readable, until dismissed
    cards.first.get_by_test_id("dismiss-button").click()
    expect(console.testid("pending-empty")).to_have_text("Nothing waiting matches these filters.")
    console.testid("filter-clear").click()
    expect(cards).to_have_count(4)
    expect(console.testid("filter-count")).to_have_text("")


# ---- decided elsewhere, and confirmations ------------------------------------


def test_a_card_decided_elsewhere_says_who_decided_what_and_stays_until_dismissed(
    console: Console,
) -> None:
    server = console.server
    policy = {
        **INBOX_POLICY,
        "tools": {
            **INBOX_POLICY["tools"],
            "deploy": {"cost": 20, "requires_approval": True, "approval_timeout_secs": 4},
        },
    }
    token = create_agent(server, "worker", policy)
    for n in range(3):
        request_action(server, "worker", token, "send_email", {"n": n})
    console.open_signed_in()
    console.show_pending()
    request_action(server, "worker", token, "deploy")  # act-4, expires in 4 s
    for action_id in ("act-1", "act-2", "act-3", "act-4"):
        expect(console.pending("worker", action_id)).to_be_visible()

    url = "/v1/agents/worker/actions"
    post(server, f"{url}/act-1/approve", {"approver": "bob", "note": "fine by me"})
    post(server, f"{url}/act-2/reject", {"approver": "bob", "reason": "wrong list"})
    post(server, f"{url}/act-3/cancel", {"reason": "timed out in the client"}, token)
    wait_for_status(server, "worker", "act-4", "denied")

    def said(action_id: str) -> Any:
        return console.pending("worker", action_id).get_by_test_id("settled-text")

    expect(said("act-1")).to_have_text(
        re.compile(r"^Approved elsewhere by bob at .+ ago: “fine by me” · allowed, cost 5$")
    )
    expect(said("act-2")).to_have_text(
        re.compile(r"^Rejected elsewhere by bob at .+ ago: wrong list$")
    )
    expect(said("act-3")).to_have_text(
        re.compile(r"^Cancelled by agent at .+ ago: timed out in the client$")
    )
    expect(said("act-4")).to_have_text(
        re.compile(
            r"^Expired at .+ ago: nobody decided within 4 s, so it was denied \(approval_expired\)$"
        )
    )
    for action_id, kind in [
        ("act-1", "action_allowed"),
        ("act-2", "action_rejected"),
        ("act-3", "action_cancelled"),
        ("act-4", "approval_expired"),
    ]:
        ts = record_of(server, "worker", kind, action_id)["ts"]
        expect(said(action_id).locator("time")).to_have_attribute("title", ts)
    expect(console.pending("worker", "act-1")).to_have_attribute("data-settled", "allowed")
    expect(console.pending("worker", "act-4")).to_have_attribute("data-settled", "expired")
    expect(console.pending("worker", "act-1").get_by_test_id("approve-form")).to_be_hidden()
    expect(console.testid("pending-count")).to_have_text("0")

    console.page.wait_for_timeout(2500)  # refreshes pass: the cards are still there to read
    expect(console.testid("pending-item")).to_have_count(4)
    console.pending("worker", "act-2").get_by_test_id("dismiss-button").click()
    expect(console.pending("worker", "act-2")).to_have_count(0)
    expect(console.testid("pending-item")).to_have_count(3)


def test_approving_what_was_decided_meanwhile_shows_who_decided_what(
    browser: Browser, guard_server: GuardServer
) -> None:
    server = guard_server
    token = create_agent(server, "worker", INBOX_POLICY)
    request_action(server, "worker", token, "send_email")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.clock.install()  # timers stand still: no refresh comes between the two decisions
        console = Console(page, server).open_signed_in(operator="alice")
        console.show_pending()
        card = console.pending("worker", "act-1")
        expect(card).to_be_visible()
        post(
            server,
            "/v1/agents/worker/actions/act-1/reject",
            {"approver": "bob", "reason": "too risky"},
        )
        with admin(server) as client:
            late = client.post("/v1/agents/worker/actions/act-1/approve", json={"approver": "x"})
        assert late.status_code == 409
        card.get_by_test_id("approve-button").click()
        expect(card.get_by_test_id("settled-text")).to_have_text(
            re.compile(r"^Rejected elsewhere by bob at .+: too risky$")
        )
        expect(card.get_by_test_id("settled-said")).to_have_text(
            f"The server said: {late.json()['error']}"
        )
        expect(card.get_by_test_id("pending-error")).to_be_hidden()
        assert "was rejected by bob at" in late.json()["error"]
    finally:
        context.close()


def test_confirmations_stay_in_view_until_dismissed(
    browser: Browser, guard_server: GuardServer
) -> None:
    server = guard_server
    token = create_agent(server, "worker", INBOX_POLICY)
    request_action(server, "worker", token, "send_email")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.clock.install()
        console = Console(page, server).open_signed_in(operator="alice")
        console.show_pending()
        card = console.pending("worker", "act-1")
        card.get_by_test_id("approve-button").click()
        expect(card.get_by_test_id("settled-text")).to_contain_text(
            "Approved by alice (you): allowed, cost 5, 95 left"
        )
        expect(console.testid("flash")).to_contain_text("act-1 of worker: allowed")
        page.clock.run_for(60_000)  # a minute of refreshes later
        expect(console.testid("pending-count")).to_have_text("0")
        expect(card.get_by_test_id("settled-text")).to_contain_text("Approved by alice (you)")
        expect(console.testid("flash")).to_be_visible()
        console.testid("flash-dismiss").click()
        expect(console.testid("flash")).to_be_hidden()
        card.get_by_test_id("dismiss-button").click()
        expect(card).to_have_count(0)
        expect(console.testid("pending-empty")).to_be_visible()
    finally:
        context.close()


# ---- one time format; a quarantined agent ----------------------------------


def test_every_time_is_local_with_its_age_and_the_exact_utc_value_on_hover(
    browser: Browser, guard_server: GuardServer
) -> None:
    server = guard_server
    token = create_agent(server, "worker", INBOX_POLICY)
    request_action(server, "worker", token, "web_search")
    request_action(server, "worker", token, "send_email")
    zone = "Asia/Kathmandu"  # UTC+5:45: no chance of matching UTC by accident
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id=zone)
    try:
        console = Console(context.new_page(), server).open_signed_in()
        for view in ("pending", "agent"):
            if view == "pending":
                console.show_pending()
                expect(console.testid("pending-item")).to_have_count(1)
            else:
                console.page.goto(f"{server.url}/#/agents/worker")
                expect(console.testid("log-record")).to_have_count(
                    len(log_records(server, "worker"))
                )
            times = console.page.locator("main time:visible")
            assert times.count() >= 2
            for t in times.all():
                utc = t.get_attribute("title")
                assert utc == t.get_attribute("datetime")
                text = t.inner_text()
                assert ONE_FORMAT.match(text), text
                local = datetime.fromisoformat(utc.replace("Z", "+00:00")).astimezone(
                    ZoneInfo(zone)
                )
                assert text.startswith(local.strftime("%Y-%m-%d %H:%M:%S")), (text, utc)
            # and no time is written any other way in the page
            assert re.search(r"\d{4}-\d\d-\d\dT\d\d:", console.page.inner_text("main")) is None
    finally:
        context.close()


def test_a_quarantined_agents_page_says_to_restore_the_log_and_restart(console: Console) -> None:
    server = console.server
    token = create_agent(server, "broken", INBOX_POLICY)
    request_action(server, "broken", token, "web_search", {"q": "hello world"})
    server.stop()
    tamper_one_byte(server.data_dir / "agents" / "broken.jsonl", b"hello world")
    server.start()
    [entry] = get(server, "/v1/agents")["agents"]
    assert entry["state"] == "quarantined"

    console.open_signed_in()
    console.page.goto(f"{server.url}/#/agents/broken")
    box = console.testid("detail-quarantined")
    expect(box).to_be_visible()
    expect(box).to_contain_text("This agent is quarantined.")
    expect(console.testid("quarantine-reason")).to_contain_text(entry["error"])
    steps = console.testid("quarantine-steps").locator("li")
    expect(steps).to_have_text(
        [
            re.compile(
                r"^Restore agents/broken\.jsonl in guardd's data directory from a backup "
                r"\(or repair it\)\."
            ),
            "Restart guardd: it verifies every log again when it starts.",
        ]
    )
    expect(console.testid("detail-error")).to_be_hidden()
    expect(console.testid("log-table")).to_be_hidden()
