"""Slack messages for webhook events (``--webhook-format slack``).

Everything an agent (or an operator, through a reason or a note) supplies is
escaped as Slack requires (``&``, ``<``, ``>``), so that no input can mention
``<!channel>`` or draw a link of its own beside ours; only the link guardd
writes from ``--public-url`` is markup. Values are shown short and on one
line: an approver reads the tool, each key of the input with the start of
its value, the cost and the budget left, and follows the link to act.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from urllib.parse import quote

from guardd.jsonio import dumps
from guardd.webhooks import Event

MAX_KEYS = 10  # input keys listed; the rest are counted
MAX_KEY = 40  # characters of a key shown
MAX_VALUE = 80  # characters of a value shown (as JSON)
MAX_TEXT = 300  # characters of a reason, a note, an error, a name
MAX_INPUT = 200  # characters of an input that is not an object (as JSON)

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def escape(text: str) -> str:
    """``text`` as Slack shows it literally: ``&``, ``<`` and ``>`` escaped."""
    return text.translate(_ESCAPES)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain(value: Any, limit: int = MAX_TEXT) -> str:
    """Supplied text on one line (runs of white space, newlines included,
    become one space), cut to ``limit`` characters, escaped."""
    return escape(_cut(" ".join(str(value).split()), limit))


def code(value: Any, limit: int = MAX_TEXT) -> str:
    """Supplied text as inline code; plain when it holds a backtick, which
    would end the code span early."""
    text = plain(value, limit)
    return text if "`" in text else f"`{text}`"


def json_text(value: Any, limit: int) -> str:
    """A JSON value as inline code: its compact JSON (newlines stay ``\\n``), cut."""
    return code(dumps(value).decode(), limit)


def input_lines(value: Any) -> list[str]:
    """The input as an approver reads it: each key of an object, in the
    order the log holds them (RFC 8785's: by UTF-16 code units, whatever
    order the agent sent), with the start of its value."""
    if value is None:
        return ["Input: none"]
    if not isinstance(value, dict) or not value:
        return [f"Input: {json_text(value, MAX_INPUT)}"]
    lines = ["Input:"]
    for key, item in sorted(value.items(), key=_log_order)[:MAX_KEYS]:
        lines.append(f"• {code(key, MAX_KEY)}: {json_text(item, MAX_VALUE)}")
    if len(value) > MAX_KEYS:
        more = len(value) - MAX_KEYS
        lines.append(f"• … and {more} more key{'s' if more > 1 else ''}")
    return lines


def _log_order(item: tuple[str, Any]) -> bytes:
    return item[0].encode("utf-16-be", "surrogatepass")


def money(value: Any) -> str:
    return dumps(value).decode() if isinstance(value, int | Decimal) else plain(value)


def _link(url: str, label: str) -> str:
    # Our own markup: the URL comes from --public-url; a "|" or ">" in it
    # would end the link early.
    return f"<{escape(url).replace('|', '%7C')}|{label}>"


def _decided(event: Event) -> str:
    data = event.data
    what = (
        f"{code(data['tool'], MAX_KEY)} ({plain(data['action_id'])})"
        if "tool" in data
        else (plain(data["action_id"]))
    )
    subject = f"{what} of agent {code(event.agent_id)}"
    decision = data["decision"]
    if decision == "allowed":
        text = f"*Approved*: {subject}, by {plain(data.get('approved_by', '?'))}"
        if "cost" in data:
            text += f", cost {money(data['cost'])}"
    elif decision == "denied":
        reason = data.get("reason")
        code_ = reason.get("code") if isinstance(reason, dict) else reason
        text = (
            f"*Denied*: {subject}: approved by {plain(data.get('by', '?'))}, "
            f"but the checks failed ({plain(code_)})"
        )
    elif decision == "rejected":
        text = f"*Rejected*: {subject}, by {plain(data.get('by', '?'))}"
        if data.get("reason"):
            text += f": {plain(data['reason'])}"
    elif decision == "expired":
        text = f"*Expired*: {subject}: no decision within {money(data.get('timeout_secs'))} s"
    else:  # cancelled
        text = f"*Withdrawn*: {subject}, by {plain(data.get('by', '?'))}"
        if data.get("reason"):
            text += f": {plain(data['reason'])}"
    if data.get("note"):
        text += f"\nNote: {plain(data['note'])}"
    return text


def slack_body(
    event: Event, public_url: str | None, remaining: Any | None = None
) -> dict[str, Any]:
    """The Slack message of ``event``. ``remaining`` is the agent's budget
    left when the message is made, shown with an ``approval.required``."""
    data = event.data
    agent = code(event.agent_id)
    base = public_url.rstrip("/") if public_url else None
    link = None
    if event.type == "approval.required":
        lines = [
            f"*Approval required*: agent {agent} asks to run "
            f"{code(data.get('tool', '?'), MAX_KEY)} ({plain(data['action_id'])})",
            f"Cost: {money(data['cost'])}"
            + (f", budget left: {money(remaining)}" if remaining is not None else ""),
            *input_lines(data.get("input")),
        ]
        if base:
            link = _link(f"{base}/#/pending", "Approve or reject in the console")
        text = "\n".join(lines)
    else:
        if event.type == "approval.decided":
            text = _decided(event)
        elif event.type == "approval.recorded":
            text = (
                f"*Approval recorded* for {plain(data['action_id'])} of agent {agent} by "
                f"{plain(data['by'])}: {data.get('approvals_required', '?')} required"
            )
        elif event.type == "agent.terminated":
            text = f"*Agent {agent} terminated* by {plain(data['by'])}: {plain(data['reason'])}"
        else:  # agent.quarantined
            text = f"*Agent {agent} quarantined*: {plain(data.get('error'))}"
        if base:
            page = f"{base}/#/agents/{quote(event.agent_id, safe='')}"
            link = _link(page, "Open the agent in the console")
    if link is not None:
        text += "\n" + link
    return {"text": text}
