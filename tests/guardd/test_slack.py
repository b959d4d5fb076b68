"""Slack messages of webhook events: the exact text, with agent-supplied
markup shown as text, never as a mention or a link."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from guardd.slack import escape, slack_body
from guardd.webhooks import Event

URL = "https://guard.example"
TS = "2026-01-01T10:00:00.000000Z"
CHANNEL = "<!channel>"
FAKE_LINK = "<https://evil.example/approve|Open in the console>"


def event(kind: str, agent_id: str = "bot", **data: Any) -> Event:
    return Event(
        f"evt_{agent_id}_7", kind, agent_id, 7, {"agent_id": agent_id, "seq": 7, "ts": TS, **data}
    )


def text(kind: str, remaining: Any = None, url: str | None = URL, **data: Any) -> str:
    body = slack_body(event(kind, **data), url, remaining)
    assert set(body) == {"text"}
    return str(body["text"])


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        pytest.param("<!channel>", "&lt;!channel&gt;", id="mention"),
        pytest.param("<https://x|y>", "&lt;https://x|y&gt;", id="link"),
        pytest.param("a & b", "a &amp; b", id="ampersand"),
        pytest.param("&lt;", "&amp;lt;", id="an-entity-stays-text"),
    ],
)
def test_escape_turns_slack_markup_into_text(raw: str, shown: str) -> None:
    assert escape(raw) == shown


def test_approval_required_shows_tool_each_input_key_cost_budget_left_and_the_inbox() -> None:
    got = text(
        "approval.required",
        remaining=Decimal("95.5"),
        action_id="act-2",
        cost=5,
        tool="send_email",
        input={"to": CHANNEL, "body": FAKE_LINK, "cc": "a&b"},  # listed as the log has them
    )
    assert got == (
        "*Approval required*: agent `bot` asks to run `send_email` (act-2)\n"
        "Cost: 5, budget left: 95.5\n"
        "Input:\n"
        '• `body`: `"&lt;https://evil.example/approve|Open in the console&gt;"`\n'
        '• `cc`: `"a&amp;b"`\n'
        '• `to`: `"&lt;!channel&gt;"`\n'
        "<https://guard.example/#/pending|Approve or reject in the console>"
    )
    assert "<!" not in got
    assert got.count("<https://") == 1  # ours alone


def test_markup_in_a_tool_name_or_a_key_is_text_too() -> None:
    got = text(
        "approval.required",
        action_id="act-1",
        cost=1,
        tool=f"x{CHANNEL}",
        input={CHANNEL: 1},
    )
    assert got.splitlines()[0] == (
        "*Approval required*: agent `bot` asks to run `x&lt;!channel&gt;` (act-1)"
    )
    assert got.splitlines()[3] == "• `&lt;!channel&gt;`: `1`"


def test_long_inputs_are_shown_key_by_key_cut_short_and_counted() -> None:
    value = {f"k{n:02}": "v" * 100 if n == 0 else n for n in reversed(range(12))}
    got = text("approval.required", action_id="act-1", cost=1, tool="t", input=value, url=None)
    lines = got.splitlines()
    assert lines[:4] == [
        "*Approval required*: agent `bot` asks to run `t` (act-1)",
        "Cost: 1",
        "Input:",
        '• `k00`: `"' + "v" * 78 + "…`",
    ]
    assert lines[4:] == [*(f"• `k{n:02}`: `{n}`" for n in range(1, 10)), "• … and 2 more keys"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        pytest.param(None, "Input: none", id="none"),
        pytest.param("line one\nline two", 'Input: `"line one\\nline two"`', id="string"),
        pytest.param([1, 2], "Input: `[1,2]`", id="list"),
        pytest.param({}, "Input: `{}`", id="empty-object"),
        pytest.param({"q": "a`b"}, '• `q`: "a`b"', id="a-backtick-ends-no-code-span"),
        pytest.param({"q": "x" * 300}, '• `q`: `"' + "x" * 78 + "…`", id="cut"),
    ],
)
def test_inputs_of_every_shape_take_one_line_each(value: Any, shown: str) -> None:
    got = text("approval.required", action_id="act-1", cost=1, tool="t", input=value, url=None)
    assert got.splitlines()[-1] == shown


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        pytest.param(
            {"decision": "allowed", "approved_by": "alice", "cost": 5, "note": f"ok {CHANNEL}"},
            "*Approved*: `send_email` (act-2) of agent `bot`, by alice, cost 5\n"
            "Note: ok &lt;!channel&gt;",
            id="allowed",
        ),
        pytest.param(
            {"decision": "denied", "by": "alice", "reason": {"code": "insufficient_budget"}},
            "*Denied*: `send_email` (act-2) of agent `bot`: approved by alice, "
            "but the checks failed (insufficient_budget)",
            id="denied",
        ),
        pytest.param(
            {"decision": "rejected", "by": "mallory <@U1>", "reason": f"no\n\n{FAKE_LINK}"},
            "*Rejected*: `send_email` (act-2) of agent `bot`, by mallory &lt;@U1&gt;: "
            "no &lt;https://evil.example/approve|Open in the console&gt;",
            id="rejected",
        ),
        pytest.param(
            {"decision": "expired", "timeout_secs": 300},
            "*Expired*: `send_email` (act-2) of agent `bot`: no decision within 300 s",
            id="expired",
        ),
        pytest.param(
            {"decision": "cancelled", "by": "agent", "reason": "gave up"},
            "*Withdrawn*: `send_email` (act-2) of agent `bot`, by agent: gave up",
            id="cancelled",
        ),
    ],
)
def test_decided_messages_say_who_decided_and_why(data: dict[str, Any], shown: str) -> None:
    got = text("approval.decided", action_id="act-2", tool="send_email", **data)
    assert got == shown + "\n<https://guard.example/#/agents/bot|Open the agent in the console>"


def test_terminated_and_quarantined_messages_escape_the_reason() -> None:
    terminated = text("agent.terminated", reason=f"done {CHANNEL}", by="carol & co", url=None)
    assert terminated == "*Agent `bot` terminated* by carol &amp; co: done &lt;!channel&gt;"
    quarantined = text("agent.quarantined", error="seq 3: hash <mismatch>", url=URL + "/")
    assert quarantined == (
        "*Agent `bot` quarantined*: seq 3: hash &lt;mismatch&gt;\n"
        "<https://guard.example/#/agents/bot|Open the agent in the console>"
    )


def test_our_link_cannot_be_ended_early_by_the_public_url() -> None:
    got = text("agent.terminated", reason="r", by="b", url="https://guard.example/a|b>c&d")
    assert got.splitlines()[-1] == (
        "<https://guard.example/a%7Cb&gt;c&amp;d/#/agents/bot|Open the agent in the console>"
    )
