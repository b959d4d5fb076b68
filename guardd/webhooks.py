"""Webhook events: what guardd tells operators, and how it is signed.

An event is made from one committed log record (``event_for``), never from a
request, so nothing is announced that is not durable: ``approval.required``,
``approval.recorded`` (one approval of several required), ``approval.decided``
and ``agent.terminated``, plus ``agent.quarantined`` for
an agent whose log failed at startup. Its id, ``evt_<agent>_<seq>``, is the
same on every attempt, so receivers drop repeats by it. The body is
``{type, timestamp, data}`` (``standard_body``), or a Slack message
(``guardd.slack``). How events reach receivers (retries, order, positions)
is ``guardd.webhook_delivery``; docs/webhooks.md has every body and promise.

Payloads are signed as Standard Webhooks do: headers ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature`` (``v1,`` + base64 of
HMAC-SHA256 over ``id.timestamp.body`` with the secret ``whsec_<base64>``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs

from agents_runtime.core.records import entry_of
from guardd.jsonio import dumps

if TYPE_CHECKING:
    from guardd.config import Settings

FORMATS = ("standard", "slack")
# A path segment at least this long is shown cut (shown_url): such a
# segment is more likely a token (Slack's webhook URLs end in one) than a name.
LONG_SEGMENT = 16


class WebhookConfigError(ValueError):
    pass


def parse_secret(text: str) -> bytes:
    """The key of a ``whsec_<base64>`` secret."""
    if not text.startswith("whsec_"):
        raise WebhookConfigError("the webhook secret must be whsec_<base64>")
    try:
        key = base64.b64decode(text[len("whsec_") :], validate=True)
    except ValueError:
        raise WebhookConfigError("the webhook secret after whsec_ must be base64") from None
    if len(key) < 16:
        raise WebhookConfigError("the webhook secret must hold at least 16 bytes")
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value (Standard Webhooks, v1)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


@attrs.frozen
class Event:
    id: str
    type: str
    agent_id: str
    seq: int
    data: dict[str, Any]


def event_for(
    agent_id: str, record: dict[str, Any], requested: dict[str, Any] | None
) -> Event | None:
    """The event a committed record makes, if any: its kind's entry says
    which (``KindEntry.announces``). ``requested`` is the action_requested
    record of the action when the caller has it."""
    entry = entry_of(record["kind"])
    announced = None if entry is None else entry.announces(record, requested)
    if announced is None:
        return None
    event_type, fields = announced
    seq = record["seq"]
    data = {"agent_id": agent_id, "seq": seq, "ts": record["ts"]} | fields
    return Event(f"evt_{agent_id}_{seq}", event_type, agent_id, seq, data)


def standard_body(event: Event) -> bytes:
    """The body of the standard format: ``{type, timestamp, data}``."""
    return dumps({"type": event.type, "timestamp": event.data["ts"], "data": event.data})


def webhook_id(url: str) -> str:
    """A webhook's name in its position file, its metrics and the banner."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def shown_url(url: str) -> str:
    """``url`` as logs and the banner show it: scheme, host, port and path,
    never a user, password, query or fragment; a long path segment (a
    token, such as the last part of a Slack webhook URL) is cut to its
    first four characters."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None:
        host += f":{port}"
    path = "/".join(s if len(s) < LONG_SEGMENT else s[:4] + "…" for s in parts.path.split("/"))
    return f"{parts.scheme}://{host}{path}"


@attrs.frozen
class WebhookConfig:
    urls: tuple[str, ...]
    secret: bytes | None
    format: str = "standard"
    public_url: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookConfig:
        secret = parse_secret(settings.webhook_secret) if settings.webhook_secret else None
        return cls(settings.webhooks, secret, settings.webhook_format, settings.public_url)

    def banner(self) -> list[str]:
        """One line of the start banner per webhook."""
        signed = "signed" if self.secret is not None else "unsigned"
        return [
            f"webhook: {shown_url(url)} ({self.format}, {signed}; id {webhook_id(url)})"
            for url in self.urls
        ]
