"""Webhook delivery: each webhook follows every agent's committed log, off
the decision path, and delivers each event it finds with a task of its own,
retried on its own schedule, so that a slow or failing event holds back
nothing but its own agent's delivery position.

What is promised (docs/webhooks.md says it to operators):

- At least once. A webhook's position per agent, kept in
  ``<data-dir>/webhooks/<id>.position`` by ``WebhookPositions``, moves past
  a record only once that record's event was delivered (2xx) or given up,
  and the events of every record before it too; records that make no event
  are passed at once. A restart starts again at the positions: an event that
  was still being retried is sent again, and so may be events after it that
  had been delivered. Every attempt of an event carries its id.
- Order. Per agent, an event's first attempt starts only once the previous
  event's first attempt has ended, so a receiver that answers 2xx at once sees
  each agent's events in log order. An event whose attempt failed is retried
  (exponential backoff with jitter) while later ones go on, and may then
  arrive after them. Agents do not wait for each other.
- Giving up. An event still undelivered ``give_up_after`` (24 hours) after
  its record was written is dropped after its next failed attempt, with an
  error log line and a count; every event is tried at least once, even one
  read after guardd was stopped for longer than that.
- A receiver that answers ``410 Gone`` is not posted to again until guardd
  restarts (a log line, and the webhook's ``disabled`` metric).
- Bounded memory, whatever the traffic. A webhook holds at most
  ``WINDOW_EVENTS`` undelivered events and ``WINDOW_BYTES`` of their bodies;
  beyond that it reads no further and the records wait in the log. It
  reads a log ``PAGE`` records at a time, so that a backlog (after the
  receiver was down, or without a position file) is never read whole. Of
  the records it reads it keeps nothing else: what an action held for
  approval asked is in its agent's state already. An attempt takes at most
  ``post_timeout``, and reads at most ``MAX_ANSWER`` bytes of the answer.

Tasks: ``Webhooks.run`` owns one task per webhook in a task group, and each
webhook owns its reader, its position keeper and its deliveries in a task
group of its own; everything stops by cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import AsyncGenerator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Protocol, cast

import attrs
import httpx

from agents_runtime.log import canonical
from agents_runtime.log.record import timestamp_micros
from agents_runtime.log.verify import Failure
from agents_runtime.runtime.actor import AgentActor
from agents_runtime.runtime.registry import Registry, quarantine_message
from guardd.jsonio import dumps
from guardd.slack import slack_body
from guardd.webhooks import (
    Event,
    WebhookConfig,
    WebhookConfigError,
    event_for,
    shown_url,
    sign,
    standard_body,
    webhook_id,
)

log = logging.getLogger("guardd.webhooks")

MAX_POSTS = 8  # attempts in flight at once, per webhook
WINDOW_EVENTS = 256  # undelivered events held, per webhook
WINDOW_BYTES = 16 * 1024 * 1024  # bytes of their bodies (one larger event still goes alone)
PAGE = 32  # records read from a log at once, per webhook (a backlog is read page by page)
MAX_ANSWER = 4096  # bytes of a receiver's answer read at most; the rest is never read
STOP_TIMEOUT = 2.0  # seconds for every webhook task to end once cancelled
RESTART_AFTER = 5.0  # seconds before a webhook stopped by an unexpected error starts again
SAVE_EVERY = 0.2  # seconds between two writes of a webhook's positions
QUARANTINED_ATTEMPTS = 3  # agent.quarantined is best effort: no record says so
TIMING_ENV = "GUARD_TEST_WEBHOOK_TIMING"  # test-only: "post_timeout=1,give_up_after=2"
# The position of an agent a new webhook found not loaded yet, on a store
# only this process writes: nothing is appended to its log before it is
# loaded here, so the webhook begins at the head it is loaded at (not at its
# first record). Saved as such until then, so a restart keeps to it.
AT_LOAD = -2


@attrs.frozen
class Timing:
    """How long things take, in seconds. The tests shorten them through
    ``GUARD_TEST_WEBHOOK_TIMING`` (docs/operations.md, "Test-only")."""

    post_timeout: float = 10.0  # one whole attempt: connect, send, answer
    first_backoff: float = 0.5  # before the first retry; doubled after each
    max_backoff: float = 60.0
    give_up_after: float = 24 * 3600.0  # counted from the record's ts
    poll_every: float = 0.2  # between looks at the committed heads

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Timing:
        text = env.get(TIMING_ENV, "")
        values: dict[str, float] = {}
        known = attrs.fields_dict(cls)
        for part in filter(None, text.split(",")):
            name, _, value = part.partition("=")
            if name not in known:
                raise WebhookConfigError(f"{TIMING_ENV}: no setting {name!r}")
            try:
                values[name] = float(value)
            except ValueError:
                raise WebhookConfigError(f"{TIMING_ENV}: {name} must be seconds") from None
        return cls(**values)


class Gone(Exception):
    """The receiver answered 410 Gone: it wants no more events."""


class PositionStore(Protocol):
    """Where a webhook's delivery position per agent is kept (the storage seam)."""

    def load(self) -> dict[str, int]: ...

    def save(self, positions: dict[str, int]) -> None: ...


class WebhookPositions:
    """``<data-dir>/webhooks/<id>.position``: JSON {agent: last seq handled}.
    Written whole to a temporary file, fsynced and renamed over the old one."""

    def __init__(self, root: Path, webhook_id: str) -> None:
        self.path = root / "webhooks" / f"{webhook_id}.position"

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict[str, int]:
        try:
            value = json.loads(self.path.read_bytes())
            if not isinstance(value, dict):
                raise TypeError
            return {str(k): int(v) for k, v in value.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, TypeError):
            # Sending every event again is the safe side of losing the file.
            log.error("%s is not a JSON object of seqs: every event is sent again", self.path)
            return {}

    def save(self, positions: dict[str, int]) -> None:
        self.path.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            fh.write(json.dumps(positions, sort_keys=True).encode())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)


@attrs.define(eq=False)
class Delivery:
    """An event read and not yet delivered or given up: only what its
    attempts need (the body is made once; the event's data is not kept)."""

    id: str
    agent_id: str
    seq: int
    body: bytes
    born: float  # its record's ts, in seconds since the epoch


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts).timestamp()


class Webhook:
    """One receiver: its positions, its reader and its deliveries. The
    counts are read by ``guardd.metrics`` (``WebhookCounts``)."""

    def __init__(
        self,
        url: str,
        config: WebhookConfig,
        registry: Registry,
        store: PositionStore,
        client: httpx.AsyncClient,
        timing: Timing,
    ) -> None:
        self.url = url
        self.id = webhook_id(url)
        self.shown = shown_url(url)
        self.config = config
        self.registry = registry
        self.store = store
        self.client = client
        self.timing = timing
        self.positions = store.load()
        self.sent = 0  # events delivered
        self.failed = 0  # attempts that failed
        self.given_up = 0  # events dropped after give_up_after
        self.retrying = 0  # events waiting for their next attempt
        self.disabled = False  # after a 410 Gone
        self._posts = asyncio.Semaphore(MAX_POSTS)
        self._saved = threading.Lock()
        self._version = 0  # of the positions, so that an older save never lands last
        self._written = -1
        self._reset()

    def _reset(self) -> None:
        """Forget everything but the positions (a fresh start reads again from them)."""
        self.read_to: dict[str, int] = {}  # per agent, the last seq read
        self.undelivered: dict[str, dict[int, Delivery]] = {}  # per agent, in seq order
        self._first_tried: dict[str, asyncio.Event] = {}  # per agent, of its last event
        self._events = 0  # in the window
        self._bytes = 0
        self._room = asyncio.Event()
        self._dirty = asyncio.Event()

    def oldest_undelivered(self, now: float) -> float:
        """Seconds since the record of the oldest event held undelivered (0 when none)."""
        oldest = min((next(iter(d.values())).born for d in self.undelivered.values()), default=now)
        return max(0.0, now - oldest)

    # -- the reader ---------------------------------------------------------

    async def run(self) -> None:
        """Deliver until cancelled, or until the receiver answers 410."""
        while True:
            try:
                await self._run()
                return
            except Exception:  # a store that cannot be read, say; CancelledError goes through
                log.exception(
                    "webhook %s: delivery stopped by an error; starting again in %.0f s",
                    self.shown,
                    RESTART_AFTER,
                )
            self._reset()
            await asyncio.sleep(RESTART_AFTER)

    async def _run(self) -> None:
        self._start_from_heads()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._keep_positions(), name=f"positions {self.shown}")
                group.create_task(self._announce_quarantined(), name=f"quarantined {self.shown}")
                await self._follow(group)
        except* Gone:
            self.disabled = True
            log.error(
                "webhook %s answered 410 Gone: disabled until guardd restarts (its events "
                "stay in the logs; remove the URL from the settings to stop sending them)",
                self.shown,
            )
        finally:
            self._save(self._snapshot())

    def _start_from_heads(self) -> None:
        """A webhook seen for the first time starts at the committed heads:
        it reports what happens from now on, not the whole history. Agents
        not loaded yet (loading on first use) start at the head they are
        loaded at, where only this process writes (``AT_LOAD``); on a store
        other nodes write, at their first record (other nodes may have
        appended to them since)."""
        exists = getattr(self.store, "exists", None)
        if self.positions or (exists is not None and exists()):
            return
        registry = self.registry
        for agent_id, actor in registry.actors.items():
            self.positions[agent_id] = actor.committed_head.seq
        if not registry.store.others_create_agents:
            for agent_id in registry.unloaded:
                self.positions[agent_id] = AT_LOAD
        self._save(self._snapshot())

    def _position(self, agent_id: str, actor: AgentActor) -> int:
        """The seq of the last record passed for ``agent_id`` (-1: none)."""
        position = self.positions.get(agent_id, -1)
        if position == AT_LOAD:
            position = self.positions[agent_id] = actor.loaded_seq
            self._dirty.set()
        return position

    async def _follow(self, group: asyncio.TaskGroup) -> None:
        while True:
            moved = False
            for agent_id, actor in list(self.registry.actors.items()):
                seen = self.read_to.get(agent_id)
                if seen is None:
                    seen = self._position(agent_id, actor)
                if actor.committed_head.seq > seen:
                    moved = await self._read(agent_id, actor, group) or moved
            if not moved:
                await asyncio.sleep(self.timing.poll_every)

    async def _read(self, agent_id: str, actor: AgentActor, group: asyncio.TaskGroup) -> bool:
        """Read the next page of the agent's records past those already read
        and hold their events for delivery; False when there was nothing new
        after all. ``_follow`` comes back for the next page (after a page of
        each other agent's)."""
        after = self.read_to.get(agent_id)
        if after is None:
            after = self._position(agent_id, actor)
        read = actor.log.read_after
        lines = await asyncio.to_thread(read, after, actor.committed, PAGE)
        for line in lines:
            record = canonical.loads(line)
            # What was asked, for the events of an action held for approval:
            # the agent's state keeps the request of each such action while
            # it is pending or among the latest; one that left memory since
            # (this reader lagging behind) is read back from the log.
            action_id = record.get("action_id")
            held = actor.state.held.get(action_id) if action_id is not None else None
            requested = held.request if held is not None else None
            event = event_for(agent_id, record, requested)
            if event is not None and requested is None and action_id is not None:
                requested = await actor.old_request(action_id)
                if requested is not None:
                    event = event_for(agent_id, record, requested)
            if event is None:
                self._passed(agent_id, record["seq"])
            else:
                await self._admit(event, group)
        return bool(lines)

    def _passed(self, agent_id: str, seq: int) -> None:
        """A record read that leaves nothing to deliver."""
        self.read_to[agent_id] = seq
        if agent_id not in self.undelivered and seq > self.positions.get(agent_id, -1):
            self.positions[agent_id] = seq
            self._dirty.set()

    async def _admit(self, event: Event, group: asyncio.TaskGroup) -> None:
        """Hold ``event`` for delivery once the window has room, and start its task."""
        body = self._body(event)
        while self._events >= WINDOW_EVENTS or (
            self._events and self._bytes + len(body) > WINDOW_BYTES
        ):
            self._room.clear()
            await self._room.wait()
        agent_id = event.agent_id
        delivery = Delivery(event.id, agent_id, event.seq, body, _epoch(event.data["ts"]))
        self._events += 1
        self._bytes += len(body)
        self.undelivered.setdefault(agent_id, {})[event.seq] = delivery
        self.read_to[agent_id] = event.seq
        before = self._first_tried.get(agent_id)
        tried = self._first_tried[agent_id] = asyncio.Event()
        group.create_task(self._deliver(delivery, before, tried), name=event.id)

    def _body(self, event: Event) -> bytes:
        if self.config.format != "slack":
            return standard_body(event)
        remaining = None
        if event.type == "approval.required":
            actor = self.registry.actors.get(event.agent_id)
            remaining = actor.state.remaining if actor is not None else None
        return dumps(slack_body(event, self.config.public_url, remaining))

    # -- deliveries ---------------------------------------------------------

    async def _deliver(
        self, delivery: Delivery, before: asyncio.Event | None, tried: asyncio.Event
    ) -> None:
        """Attempt until delivered or given up; the first attempt only once
        the agent's previous event has had its own."""
        try:
            if before is not None:
                await before.wait()
            delay = self.timing.first_backoff
            attempts = 0
            while True:
                why = await self._attempt(delivery.id, delivery.body)
                attempts += 1
                self._tried(delivery.agent_id, tried)
                if why is None:
                    self.sent += 1
                    break
                self.failed += 1
                age = time.time() - delivery.born
                if age >= self.timing.give_up_after:
                    self.given_up += 1
                    log.error(
                        "webhook %s: %s given up after %d attempts over %.0f s (%s)",
                        self.shown,
                        delivery.id,
                        attempts,
                        age,
                        why,
                    )
                    break
                # One line per event, not per attempt: a receiver down for an
                # hour would otherwise write one for every event every minute.
                level = logging.WARNING if attempts == 1 else logging.DEBUG
                message = "webhook %s: %s not delivered (%s); retrying"
                log.log(level, message, self.shown, delivery.id, why)
                self.retrying += 1
                try:
                    await asyncio.sleep(delay * random.uniform(0.5, 1.0))  # noqa: S311 - jitter, not a secret
                finally:
                    self.retrying -= 1
                delay = min(self.timing.max_backoff, delay * 2)
            self._handled(delivery)
        finally:
            self._tried(delivery.agent_id, tried)
            self._events -= 1
            self._bytes -= len(delivery.body)
            self._room.set()

    def _tried(self, agent_id: str, tried: asyncio.Event) -> None:
        tried.set()
        if self._first_tried.get(agent_id) is tried:
            del self._first_tried[agent_id]  # the agent's next event need not wait

    def _handled(self, delivery: Delivery) -> None:
        """Delivered or given up: the position moves up to the agent's
        oldest event still undelivered."""
        agent_id = delivery.agent_id
        waiting = self.undelivered[agent_id]
        del waiting[delivery.seq]
        if waiting:
            position = next(iter(waiting)) - 1
        else:
            del self.undelivered[agent_id]
            position = self.read_to[agent_id]
        if position > self.positions.get(agent_id, -1):
            self.positions[agent_id] = position
            self._dirty.set()

    async def _attempt(self, event_id: str, body: bytes) -> str | None:
        """Post once: None when the receiver took it (2xx), else why not.
        Gone on 410."""
        async with self._posts:
            # Stamped once a post may go: receivers refuse stale timestamps.
            now = int(time.time())
            headers = {
                "content-type": "application/json",
                "webhook-id": event_id,
                "webhook-timestamp": str(now),
            }
            if self.config.secret is not None:
                headers["webhook-signature"] = sign(self.config.secret, event_id, now, body)
            try:
                async with asyncio.timeout(self.timing.post_timeout):
                    request = self.client.stream("POST", self.url, content=body, headers=headers)
                    async with request as answer:
                        status = answer.status_code
                        start = await _start_of(answer)
            except TimeoutError:
                return f"no answer within {self.timing.post_timeout:g} s"
            except httpx.HTTPError as exc:
                return f"{type(exc).__name__}: {exc}"
        if 200 <= status < 300:
            return None
        if status == 410:
            raise Gone(event_id)
        return f"HTTP {status}" + (f" {start[:200]!r}" if start else "")

    async def _announce_quarantined(self) -> None:
        """agent.quarantined for each agent quarantined at load, then, once
        the background sweep has ended (--load-agents on-first-use), for each
        quarantined since (by the sweep, or at a first use before it ended):
        best effort, a few attempts each, since no record says so (and so no
        position)."""
        announced = set(self.registry.quarantined)
        for agent_id, failure in list(self.registry.quarantined.items()):
            await self._announce(agent_id, failure)
        await self.registry.swept()
        for agent_id, failure in list(self.registry.quarantined.items()):
            if agent_id not in announced:
                await self._announce(agent_id, failure)

    async def _announce(self, agent_id: str, failure: Failure) -> None:
        ts = timestamp_micros(round(time.time() * 1_000_000))
        data = {"agent_id": agent_id, "error": quarantine_message(failure), "ts": ts}
        event = Event(f"evt_{agent_id}_quarantined", "agent.quarantined", agent_id, -1, data)
        body = self._body(event)
        delay = self.timing.first_backoff
        for attempt in range(QUARANTINED_ATTEMPTS):
            why = await self._attempt(event.id, body)
            if why is None:
                self.sent += 1
                break
            self.failed += 1
            if attempt + 1 == QUARANTINED_ATTEMPTS:
                log.warning("webhook %s: %s not delivered (%s)", self.shown, event.id, why)
            else:
                await asyncio.sleep(delay)
                delay = min(self.timing.max_backoff, delay * 2)

    # -- positions ----------------------------------------------------------

    async def _keep_positions(self) -> None:
        """Write the positions whenever they moved, one write at a time."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await asyncio.to_thread(self._save, self._snapshot())
            # At most one write (and fsync) a SAVE_EVERY: a position behind
            # by that much only repeats events after a crash.
            await asyncio.sleep(SAVE_EVERY)

    def _snapshot(self) -> tuple[int, dict[str, int]]:
        self._version += 1
        return self._version, dict(self.positions)

    def _save(self, snapshot: tuple[int, dict[str, int]]) -> None:
        version, positions = snapshot
        with self._saved:
            if version > self._written:  # a save cancelled while on its thread may land late
                self.store.save(positions)
                self._written = version


async def _start_of(answer: httpx.Response) -> bytes:
    """At most MAX_ANSWER bytes of an answer's body, as sent (never
    decompressed); the rest is left unread and the connection closed."""
    got = bytearray()
    raw = cast(AsyncGenerator[bytes, None], answer.aiter_raw())  # it is one: close it with us
    async with contextlib.aclosing(raw) as chunks:
        async for chunk in chunks:
            got += chunk[: MAX_ANSWER - len(got)]
            if len(got) >= MAX_ANSWER:
                break
    return bytes(got)


class Webhooks:
    """Every configured webhook, each delivered by its own task, all owned
    by one task group (``run``)."""

    def __init__(
        self,
        config: WebhookConfig,
        registry: Registry,
        data_dir: Path,
        timing: Timing | None = None,
    ) -> None:
        self.config = config
        self.timing = timing if timing is not None else Timing.from_env(os.environ)
        # httpx logs every request with its whole URL at INFO (httpcore at
        # DEBUG): a webhook URL may hold a token, in its query or its path.
        # guardd's own lines name webhooks by shown_url.
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.client = httpx.AsyncClient(timeout=self.timing.post_timeout)
        self.hooks = [
            Webhook(
                url,
                config,
                registry,
                WebhookPositions(data_dir, webhook_id(url)),
                self.client,
                self.timing,
            )
            for url in config.urls
        ]
        self._runner: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Deliver to every webhook until cancelled."""
        try:
            async with asyncio.TaskGroup() as group:
                for hook in self.hooks:
                    group.create_task(hook.run(), name=f"webhook {hook.shown}")
        finally:
            await self.client.aclose()

    def start(self) -> None:
        """Run in a task of its own, until ``stop``."""
        self._runner = asyncio.get_running_loop().create_task(self.run(), name="webhooks")

    async def stop(self) -> None:
        """Cancel the deliveries and wait for them, at most STOP_TIMEOUT."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        runner.cancel()
        done, _ = await asyncio.wait({runner}, timeout=STOP_TIMEOUT)
        if not done:
            log.error("webhook deliveries did not stop within %.0f s", STOP_TIMEOUT)
        elif not runner.cancelled() and runner.exception() is not None:
            log.error("webhook deliveries ended with an error", exc_info=runner.exception())
