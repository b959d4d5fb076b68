"""Webhooks: operators are told when something waits, is decided, or ends.

Events are made from committed log records only (never from requests), so
nothing is sent for a record that is not durable. Each webhook has one
asyncio task, off the decision path: it watches every agent's committed head,
reads the records past its delivery position from the log file, posts an
event for each record that makes one, and moves its position (kept in
``<data-dir>/webhooks/<id>.position`` by ``WebhookPositions``) only once the
receiver answered 2xx. A restart, or a receiver down for an hour, loses
nothing; a position lost or behind only causes repeats, which receivers drop
by the event's id (``evt_<agent>_<seq>``, the same on every attempt).

Payloads are signed as Standard Webhooks do: headers ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature`` (``v1,`` + base64 of
HMAC-SHA256 over ``id.timestamp.body`` with the secret ``whsec_<base64>``).
Failed posts are retried with exponential backoff and jitter, at most 30 s
apart: at-least-once, in log order per webhook.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Protocol

import attrs
import httpx

from agents_runtime.log import canonical
from agents_runtime.log.kinds import Kind, table
from agents_runtime.log.store import AgentLog, Committed
from agents_runtime.runtime.registry import Registry, quarantine_message
from guardd.jsonio import dumps

log = logging.getLogger("guardd.webhooks")

FORMATS = ("standard", "slack")
POLL_EVERY = 0.2  # seconds between looks at the committed heads
MAX_BACKOFF = 30.0
FIRST_BACKOFF = 0.5
POST_TIMEOUT = 10.0

# The records that decide a held action, each with the webhook's word for it.
DECIDED = table(
    {
        Kind.ACTION_ALLOWED: "allowed",
        Kind.ACTION_DENIED: "denied",  # an approval whose re-run checks failed
        Kind.ACTION_REJECTED: "rejected",
        Kind.APPROVAL_EXPIRED: "expired",
        Kind.ACTION_CANCELLED: "cancelled",
    },
    complete=False,
)


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
    """The event a committed record makes, if any. ``requested`` is the
    action_requested record of the action when the caller has it."""
    kind = record["kind"]
    seq = record["seq"]
    base: dict[str, Any] = {"agent_id": agent_id, "seq": seq, "ts": record["ts"]}
    if kind == Kind.APPROVAL_REQUIRED:
        data = base | {"action_id": record["action_id"], "cost": record["cost"]}
        if requested is not None:
            data |= {"tool": requested["tool"], "input": requested["input"]}
        return Event(f"evt_{agent_id}_{seq}", "approval.required", agent_id, seq, data)
    if kind in DECIDED:
        if kind == Kind.ACTION_ALLOWED and "approved_by" not in record:
            return None  # allowed at request time: nobody waited
        if kind == Kind.ACTION_DENIED and "by" not in record:
            return None
        data = base | {"action_id": record["action_id"], "decision": DECIDED[kind]}
        for key in ("approved_by", "by", "note", "reason", "cost", "timeout_secs"):
            if key in record:
                data[key] = record[key]
        if requested is not None:
            data["tool"] = requested["tool"]
        return Event(f"evt_{agent_id}_{seq}", "approval.decided", agent_id, seq, data)
    if kind == Kind.TERMINATED:
        data = base | {"reason": record["reason"], "by": record["by"]}
        return Event(f"evt_{agent_id}_{seq}", "agent.terminated", agent_id, seq, data)
    return None


def _summary(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_body(event: Event, public_url: str | None) -> dict[str, Any]:
    """A Slack-compatible message: tool, agent, cost, input summary, link."""
    data = event.data
    action = data.get("action_id")
    tool = data.get("tool", "?")
    if event.type == "approval.required":
        text = (
            f"Approval required: agent `{event.agent_id}` wants `{tool}` ({action}), "
            f"cost {data.get('cost')}. Input: {_summary(data.get('input'))}"
        )
    elif event.type == "approval.decided":
        who = data.get("approved_by") or data.get("by") or "guardd"
        text = f"{action} (`{tool}`) of agent `{event.agent_id}`: {data['decision']} by {who}"
    elif event.type == "agent.terminated":
        text = f"Agent `{event.agent_id}` terminated: {data['reason']} (by {data['by']})"
    else:
        text = f"Agent `{event.agent_id}` quarantined: {data.get('error')}"
    if public_url:
        text += f" <{public_url.rstrip('/')}/#/agents/{event.agent_id}|Open in the console>"
    return {"text": text}


class PositionStore(Protocol):
    """Where a webhook's delivery position per agent is kept (the storage seam)."""

    def load(self) -> dict[str, int]: ...

    def save(self, positions: dict[str, int]) -> None: ...


class WebhookPositions:
    """``<data-dir>/webhooks/<id>.position``: JSON {agent: last seq handled}.
    Written whole to a temporary file, fsynced and renamed over the old one."""

    def __init__(self, root: Path, webhook_id: str) -> None:
        self.path = root / "webhooks" / f"{webhook_id}.position"

    def load(self) -> dict[str, int]:
        try:
            value = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except ValueError:
            log.error("%s is not JSON; events may be sent again", self.path)
            return {}
        return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else {}

    def save(self, positions: dict[str, int]) -> None:
        self.path.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            fh.write(json.dumps(positions, sort_keys=True).encode())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)


def webhook_id(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


@attrs.frozen
class WebhookConfig:
    urls: tuple[str, ...]
    secret: bytes | None
    format: str = "standard"
    public_url: str | None = None


class Webhook:
    """One receiver: its positions, and the task that delivers to it."""

    def __init__(
        self,
        url: str,
        config: WebhookConfig,
        registry: Registry,
        store: PositionStore,
        client: httpx.AsyncClient,
    ) -> None:
        self.url = url
        self.config = config
        self.registry = registry
        self.store = store
        self.client = client
        self.positions = store.load()
        self.read_to: dict[str, int] = {}  # the seq of the last record read
        self.requested: dict[tuple[str, str], dict[str, Any]] = {}

    def start_from_heads(self) -> None:
        """A webhook seen for the first time starts at the committed heads:
        it reports what happens from now on, not the whole history."""
        if self.positions or self.store_exists():
            return
        for agent_id, actor in self.registry.actors.items():
            self.positions[agent_id] = actor.committed_head.seq
        self.store.save(self.positions)

    def store_exists(self) -> bool:
        path = getattr(self.store, "path", None)
        return isinstance(path, Path) and path.exists()

    async def run(self) -> None:
        while True:
            moved = False
            for agent_id, actor in list(self.registry.actors.items()):
                head = actor.committed_head.seq
                if head > self.positions.get(agent_id, -1):
                    await self._deliver_agent(agent_id, actor.log, actor.committed)
                    moved = True
            if not moved:
                await asyncio.sleep(POLL_EVERY)

    async def _deliver_agent(self, agent_id: str, log: AgentLog, committed: Committed) -> None:
        position = self.positions.get(agent_id, -1)
        lines = await asyncio.to_thread(log.read_after, self.read_to.get(agent_id, -1), committed)
        for line in lines:
            record = canonical.loads(line)
            seq = record["seq"]
            if record["kind"] == Kind.ACTION_REQUESTED:
                self.requested[(agent_id, record["action_id"])] = record
            if seq <= position:
                self.read_to[agent_id] = seq
                continue
            action_id = record.get("action_id")
            requested = self.requested.get((agent_id, action_id)) if action_id else None
            event = event_for(agent_id, record, requested)
            if event is not None:
                await self.send(event)
                if event.type == "approval.decided" and action_id is not None:
                    self.requested.pop((agent_id, action_id), None)
            self.positions[agent_id] = position = seq
            self.read_to[agent_id] = seq
            if event is not None:
                await asyncio.to_thread(self.store.save, dict(self.positions))
        await asyncio.to_thread(self.store.save, dict(self.positions))

    def body(self, event: Event) -> bytes:
        if self.config.format == "slack":
            return dumps(slack_body(event, self.config.public_url))
        return dumps({"type": event.type, "timestamp": event.data["ts"], "data": event.data})

    async def send(self, event: Event, *, attempts: int | None = None) -> bool:
        """Post until 2xx (or ``attempts`` tries); True once delivered."""
        body = self.body(event)
        delay = FIRST_BACKOFF
        tries = 0
        while True:
            tries += 1
            now = int(time.time())
            headers = {
                "content-type": "application/json",
                "webhook-id": event.id,
                "webhook-timestamp": str(now),
            }
            if self.config.secret is not None:
                headers["webhook-signature"] = sign(self.config.secret, event.id, now, body)
            try:
                answer = await self.client.post(self.url, content=body, headers=headers)
                if 200 <= answer.status_code < 300:
                    return True
                why = f"HTTP {answer.status_code}"
            except httpx.HTTPError as exc:
                why = f"{type(exc).__name__}: {exc}"
            if attempts is not None and tries >= attempts:
                log.warning("webhook %s: %s not delivered (%s); giving up", self.url, event.id, why)
                return False
            log.warning("webhook %s: %s not delivered (%s); retrying", self.url, event.id, why)
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))  # noqa: S311 - jitter, not a secret
            delay = min(MAX_BACKOFF, delay * 2)

    async def send_quarantined(self) -> None:
        """agent.quarantined for each agent quarantined at load: best effort,
        since no record says so."""
        for agent_id, failure in self.registry.quarantined.items():
            data = {"agent_id": agent_id, "error": quarantine_message(failure), "ts": _now_ts()}
            event = Event(f"evt_{agent_id}_quarantined", "agent.quarantined", agent_id, -1, data)
            await self.send(event, attempts=3)


def _now_ts() -> str:
    from agents_runtime.log.record import timestamp_micros

    return timestamp_micros(round(time.time() * 1_000_000))


class Webhooks:
    """Every configured webhook, each delivered by its own task."""

    def __init__(self, config: WebhookConfig, registry: Registry, data_dir: Path) -> None:
        self.config = config
        self.client = httpx.AsyncClient(timeout=POST_TIMEOUT)
        self.hooks = [
            Webhook(url, config, registry, WebhookPositions(data_dir, webhook_id(url)), self.client)
            for url in config.urls
        ]
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        for hook in self.hooks:
            hook.start_from_heads()
            for work in (hook.run(), hook.send_quarantined()):
                task = asyncio.get_running_loop().create_task(work, name=f"webhook:{hook.url}")
                self.tasks.add(task)
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s ended with an error", task.get_name(), exc_info=task.exception())

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=2.0)
        await self.client.aclose()
