"""The agents view and an agent's detail: state, budget, scars, verify, terminate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.console.conftest import (
    Console,
    agent_status,
    create_agent,
    log_records,
    request_action,
)

pytestmark = pytest.mark.browser


def tamper_one_byte(log: Path, needle: bytes) -> None:
    """Overwrite the first byte of `needle` (put inside a string value) in the log file."""
    at = log.read_bytes().index(needle)
    with log.open("r+b") as fh:
        fh.seek(at)
        fh.write(b"j" if needle[:1] != b"j" else b"k")


def test_verify_shows_ok_and_a_tampered_log_shows_quarantined(console: Console) -> None:
    server = console.server
    token = create_agent(server, "writer")
    create_agent(server, "bystander")
    request_action(server, "writer", token, "web_search", {"q": "hello world"})
    console.open_signed_in()

    row = console.agent("writer")
    row.get_by_test_id("verify-button").click()
    result = row.get_by_test_id("verify-result")
    expect(result.get_by_test_id("verify-status")).to_have_text("OK")
    with server.client(server.admin_token) as client:
        report = client.get("/v1/agents/writer/verify").json()
    assert report["ok"] is True
    expect(result).to_contain_text(f"{report['records']} records")
    expect(result.get_by_test_id("verify-head-seq")).to_have_text(str(report["head"]["seq"]))
    expect(result.get_by_test_id("verify-head-hash")).to_have_text(report["head"]["hash"][:12])

    server.stop()
    expect(console.testid("offline-banner")).to_be_visible()
    expect(console.testid("offline-banner")).to_contain_text("Cannot reach the guard server")
    expect(console.testid("offline-banner")).to_contain_text(  # the one time format
        re.compile(r"Showing data from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d · \d+ s ago\.")
    )
    tamper_one_byte(server.data_dir / "agents" / "writer.jsonl", b"hello world")
    server.start()

    expect(console.testid("offline-banner")).to_be_hidden()
    with server.client(server.admin_token) as client:
        entries = {a["agent_id"]: a for a in client.get("/v1/agents").json()["agents"]}
    assert entries["writer"]["state"] == "quarantined"
    assert "hash does not match content" in entries["writer"]["error"]
    expect(row.get_by_test_id("agent-state")).to_have_text("quarantined")
    expect(row.get_by_test_id("agent-state-detail")).to_have_text(entries["writer"]["error"])
    expect(row.get_by_test_id("terminate-button")).to_be_hidden()
    bystander = console.agent("bystander")
    expect(bystander.get_by_test_id("agent-state")).to_have_text("alive")

    row.get_by_test_id("agent-id").click()  # the detail says why, and what to do
    expect(console.testid("quarantine-reason")).to_contain_text(entries["writer"]["error"])
    expect(console.testid("quarantine-steps")).to_contain_text("Restore agents/writer.jsonl")
    expect(console.testid("quarantine-steps")).to_contain_text("Restart guardd")
    expect(console.testid("log-table")).to_be_hidden()


def test_verify_shows_the_first_bad_record_of_a_log_changed_on_disk(console: Console) -> None:
    server = console.server
    token = create_agent(server, "writer")
    request_action(server, "writer", token, "web_search", {"q": "hello world"})
    request_action(server, "writer", token, "web_search", {"q": "later"})
    console.open_signed_in()
    tamper_one_byte(server.data_dir / "agents" / "writer.jsonl", b"hello world")

    row = console.agent("writer")
    row.get_by_test_id("verify-button").click()
    result = row.get_by_test_id("verify-result")
    with server.client(server.admin_token) as client:
        report = client.get("/v1/agents/writer/verify").json()
    assert report["ok"] is False
    assert report["failure"]["reason"] == "hash does not match content"
    expect(result.get_by_test_id("verify-status")).to_have_text("FAILED")
    expect(result).to_contain_text(f"{report['records']} records")
    expect(result.get_by_test_id("verify-line")).to_have_text(str(report["failure"]["line"]))
    expect(result.get_by_test_id("verify-seq")).to_have_text(str(report["failure"]["seq"]))
    expect(result.get_by_test_id("verify-reason")).to_have_text("hash does not match content")


def test_terminate_asks_for_confirmation_then_shows_the_reason(console: Console) -> None:
    server = console.server
    create_agent(server, "runaway")
    console.open_signed_in(operator="dave")
    row = console.agent("runaway")

    row.get_by_test_id("terminate-button").click()
    form = row.get_by_test_id("terminate-form")
    expect(form.get_by_test_id("terminate-by")).to_have_value("dave")  # the remembered name
    form.get_by_test_id("terminate-reason").fill("spending too fast")
    form.get_by_test_id("terminate-continue").click()

    expect(form.get_by_test_id("terminate-confirm-step")).to_be_visible()
    expect(form.get_by_test_id("terminate-confirm-text")).to_contain_text(
        "Terminate agent runaway permanently? Reason: “spending too fast”, by dave."
    )
    console.page.wait_for_timeout(2500)  # a refresh passes; nothing happened yet
    assert agent_status(server, "runaway")["alive"] is True
    form.get_by_test_id("terminate-confirm").click()

    expect(row.get_by_test_id("agent-state")).to_have_text("terminated")
    expect(row.get_by_test_id("agent-state-detail")).to_have_text("spending too fast")
    expect(form).to_be_hidden()
    expect(row.get_by_test_id("terminate-button")).to_be_hidden()
    status = agent_status(server, "runaway")
    assert (status["alive"], status["termination_reason"]) == (False, "spending too fast")
    terminated = [r for r in log_records(server, "runaway") if r["kind"] == "terminated"]
    assert [(r["reason"], r["by"]) for r in terminated] == [("spending too fast", "dave")]


def test_terminate_can_be_cancelled_at_the_confirmation(console: Console) -> None:
    server = console.server
    create_agent(server, "keeper")
    console.open_signed_in(operator="dave")
    row = console.agent("keeper")
    row.get_by_test_id("terminate-button").click()
    row.get_by_test_id("terminate-reason").fill("oops")
    row.get_by_test_id("terminate-continue").click()
    row.get_by_test_id("terminate-back").click()
    expect(row.get_by_test_id("terminate-reason")).to_have_value("oops")
    row.get_by_test_id("terminate-cancel").click()
    expect(row.get_by_test_id("terminate-form")).to_be_hidden()
    assert agent_status(server, "keeper")["alive"] is True


def test_an_api_error_is_shown_with_its_code(console: Console) -> None:
    server = console.server
    create_agent(server, "twice")
    console.open_signed_in(operator="dave")
    row = console.agent("twice")
    row.get_by_test_id("terminate-button").click()
    row.get_by_test_id("terminate-reason").fill("second")
    row.get_by_test_id("terminate-continue").click()
    expect(row.get_by_test_id("terminate-confirm")).to_be_focused()

    with server.client(server.admin_token) as client:
        response = client.post("/v1/agents/twice/terminate", json={"reason": "first", "by": "eve"})
    assert response.status_code == 200, response.text
    row.get_by_test_id("terminate-confirm").click()

    with server.client(server.admin_token) as client:
        again = client.post("/v1/agents/twice/terminate", json={"reason": "x", "by": "eve"}).json()
    expect(row.get_by_test_id("terminate-error")).to_have_text(
        f"already_terminated: {again['error']}"
    )
    expect(row.get_by_test_id("agent-state-detail")).to_have_text("first")


def test_exact_decimals_are_shown_as_the_server_wrote_them(console: Console) -> None:
    server = console.server
    policy = {"budget": 1, "scar_limit": 10, "tools": {"search": {"cost": 0.1}}, "default": None}
    token = create_agent(server, "tenths", policy)
    for _ in range(3):
        assert request_action(server, "tenths", token, "search")["decision"] == "allowed"
    console.open_signed_in()

    row = console.agent("tenths")
    expect(row.get_by_test_id("budget-text")).to_have_text("0.3 spent · 0.7 left of 1")
    width = row.get_by_test_id("budget-bar").locator(".bar-fill").evaluate("el => el.style.width")
    assert float(width.removesuffix("%")) == pytest.approx(30)
    expect(row.get_by_test_id("count-allowed")).to_have_text("3")


def test_detail_shows_status_scars_and_the_last_log_records(console: Console) -> None:
    server = console.server
    token = create_agent(server, "detailed")
    request_action(server, "detailed", token, "web_search")
    request_action(server, "detailed", token, "shell")  # not in policy: denied with a scar
    console.open_signed_in()

    console.agent("detailed").get_by_test_id("agent-id").click()
    expect(console.testid("detail-view")).to_be_visible()
    expect(console.testid("detail-id")).to_have_text("detailed")
    status = agent_status(server, "detailed")
    expect(console.testid("detail-state")).to_have_text("alive")
    expect(console.testid("detail-scar-score")).to_have_text(f"{status['scar_score']} / 10")
    scars = console.testid("scar")
    expect(scars).to_have_count(len(status["scars"]))
    expect(scars.first.get_by_test_id("scar-reason")).to_have_text(status["scars"][0]["reason"])

    records = log_records(server, "detailed")
    rows = console.testid("log-record")
    expect(rows).to_have_count(len(records))
    newest = records[-1]
    expect(rows.first).to_have_attribute("data-seq", str(newest["seq"]))
    expect(rows.first).to_contain_text(newest["kind"])
    expect(rows.first.locator("time")).to_have_attribute("title", newest["ts"])
    expect(rows.first).to_contain_text(newest["hash"][:12])
    expect(rows.last).to_have_attribute("data-kind", "genesis")

    request_action(server, "detailed", token, "web_search")  # new records arrive live
    expect(rows).to_have_count(len(log_records(server, "detailed")))
    console.testid("back").click()
    expect(console.testid("agents-view")).to_be_visible()
