"""An agent another node created, not loaded yet on the console's node: listed as
such (not as quarantined), loaded by opening its page (docs/console.md; the
loading itself is docs/scale-out.md, "How a node loads agents")."""

from __future__ import annotations

import concurrent.futures
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from playwright.sync_api import Page, expect

from tests.console.conftest import APPROVAL_POLICY, Console, admin, create_agent, request_action
from tests.support.postgres import run_sql
from tests.support.server import GuardServer

pytestmark = pytest.mark.browser

POLICY: dict[str, Any] = {"budget": 100, "scar_limit": 10, "tools": {"web_search": {"cost": 3}}}


@attrs.frozen
class Nodes:
    one: GuardServer
    two: GuardServer
    dsn: str


@pytest.fixture
def nodes(postgres_dsn: str, tmp_path: Path) -> Iterator[Nodes]:
    """Two guardd nodes on one PostgreSQL database, with the same signing keys."""
    one = GuardServer(tmp_path / "node1", args=["--store", postgres_dsn]).start()
    started = [one]
    try:
        shutil.copytree(tmp_path / "node1" / "keys", tmp_path / "node2" / "keys")
        started.append(GuardServer(tmp_path / "node2", args=["--store", postgres_dsn]).start())
        yield Nodes(one, started[1], postgres_dsn)
    finally:
        for server in started:
            server.kill()


def listed(server: GuardServer, agent_id: str) -> dict[str, Any]:
    with admin(server) as client:
        response = client.get("/v1/agents")
    assert response.status_code == 200, response.text
    [entry] = [e for e in response.json()["agents"] if e["agent_id"] == agent_id]
    return dict(entry)


def test_an_agent_of_another_node_is_listed_unloaded_and_its_page_loads_it(
    nodes: Nodes, page: Page
) -> None:
    token = create_agent(nodes.one, "elsewhere", POLICY)
    request_action(nodes.one, "elsewhere", token, "web_search", {"q": "where"})
    console = Console(page, nodes.two).open_signed_in()
    row = console.agent("elsewhere")
    expect(row.get_by_test_id("agent-state")).to_have_text("unloaded")
    expect(row).to_have_attribute("data-state", "unloaded")
    expect(row.get_by_test_id("agent-state-detail")).to_have_text(
        "not loaded on this node yet: its page loads it"
    )
    expect(row.get_by_test_id("budget-text")).to_be_hidden()
    expect(row.get_by_test_id("count-allowed")).to_be_hidden()
    expect(row.get_by_test_id("terminate-button")).to_be_hidden()
    # The list's refreshes leave it as it is: only a request about it loads it.
    first = console.testid("updated-at").get_attribute("datetime")
    expect(console.testid("updated-at")).not_to_have_attribute("datetime", first or "")
    expect(row.get_by_test_id("agent-state")).to_have_text("unloaded")
    assert listed(nodes.two, "elsewhere") == {"agent_id": "elsewhere", "state": "unloaded"}

    row.get_by_test_id("agent-id").click()
    expect(console.testid("detail-state")).to_have_text("alive")
    expect(console.testid("detail-budget")).to_have_text("3 spent · 97 left of 100")
    expect(console.testid("detail-loading")).to_be_hidden()
    expect(console.testid("history-tool")).to_have_text(["web_search"])
    assert listed(nodes.two, "elsewhere")["state"] == "active"

    console.show_agents()
    expect(row.get_by_test_id("agent-state")).to_have_text("alive")
    expect(row).to_have_attribute("data-state", "alive")
    expect(row.get_by_test_id("budget-text")).to_have_text("3 spent · 97 left of 100")
    expect(row.get_by_test_id("count-allowed")).to_have_text("1")
    expect(row.get_by_test_id("terminate-button")).to_be_visible()


def test_an_unloaded_agent_whose_log_was_changed_shows_quarantined_when_opened(
    nodes: Nodes, page: Page
) -> None:
    token = create_agent(nodes.one, "changed", POLICY)
    request_action(nodes.one, "changed", token, "web_search", {"q": "where"})
    # Its action's row changed behind both nodes' backs: listing does not read it.
    # (In a thread: Playwright's event loop runs in this one.)
    change = (
        "update guard_logs set line = convert_to(replace(convert_from(line, 'UTF8'),"
        " '\"web_search\"', '\"web_starch\"'), 'UTF8') where agent_id = $1 and seq = 2"
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(run_sql, nodes.dsn, change, "changed").result()
    console = Console(page, nodes.two).open_signed_in()
    row = console.agent("changed")
    expect(row.get_by_test_id("agent-state")).to_have_text("unloaded")

    row.get_by_test_id("agent-id").click()
    expect(console.testid("detail-quarantined")).to_be_visible()
    expect(console.testid("quarantine-reason")).to_contain_text("seq 2")
    expect(console.testid("detail-loading")).to_be_hidden()
    console.show_agents()
    expect(row.get_by_test_id("agent-state")).to_have_text("quarantined")
    expect(row.get_by_test_id("agent-state-detail")).to_contain_text("seq 2")


def test_verify_log_of_an_unloaded_agent_loads_it_and_shows_ok(nodes: Nodes, page: Page) -> None:
    token = create_agent(nodes.one, "checked", POLICY)
    request_action(nodes.one, "checked", token, "web_search", {"q": "where"})
    console = Console(page, nodes.two).open_signed_in()
    row = console.agent("checked")
    expect(row.get_by_test_id("agent-state")).to_have_text("unloaded")
    row.get_by_test_id("verify-button").click()
    expect(row.get_by_test_id("verify-status")).to_have_text("OK")
    expect(row.get_by_test_id("agent-state")).to_have_text("alive")


def test_the_inbox_says_which_agents_are_not_loaded_and_loads_them_to_list_what_they_hold(
    nodes: Nodes, page: Page
) -> None:
    token = create_agent(nodes.one, "holder", APPROVAL_POLICY)
    held = request_action(nodes.one, "holder", token, "send_email", {"to": "ops"})
    assert held["decision"] == "pending_approval"
    create_agent(nodes.one, "idle", APPROVAL_POLICY)
    console = Console(page, nodes.two).open_signed_in()
    console.show_pending()
    note = console.testid("pending-unloaded")
    expect(console.testid("pending-unloaded-text")).to_have_text(
        "2 agents are not loaded on this node yet: actions they hold for approval are not "
        "listed until loaded."
    )
    expect(console.testid("pending-empty")).to_be_visible()

    console.testid("pending-load-button").click()
    expect(console.pending("holder", held["action_id"])).to_be_visible()
    expect(note).to_be_hidden()
    assert listed(nodes.two, "holder")["state"] == "active"
    assert listed(nodes.two, "idle")["state"] == "active"
