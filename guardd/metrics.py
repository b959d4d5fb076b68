"""Prometheus metrics of one guardd: what it decided, how long requests and
log commits took, and what its agents hold.

Each app has its own ``CollectorRegistry`` (never prometheus_client's global
one), so tests and several apps in one process keep their counts apart.

Cost on the decision path is kept to a few dict lookups and one ``observe``
a request: label children are made once per label set and kept in dicts;
commits are observed once a round (every agent's batch written, one shared
flush) on the writer thread; gauges (pending
approvals, agents by state, log bytes) are not updated by any request but
computed from the agents' registry when ``/metrics`` is read. Webhook
delivery keeps plain counts on each webhook, read the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from time import perf_counter, time
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from quart import Quart, Response
from quart.typing import ResponseTypes
from quart.wrappers import Request
from werkzeug.routing import Rule

from agents_runtime.runtime.registry import Registry
from guardd.errors import register_error_handlers
from guardd.jsonio import SECURITY_HEADERS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds. Decisions take a few ms alone and tens under load; a long-poll
# (GET .../actions/<id>?wait=) may take up to a minute.
REQUEST_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
)  # fmt: skip
# Seconds of one write or one fsync of a batch.
IO_BUCKETS = (
    0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0,
)  # fmt: skip
# Records in one batch: up to 256 commands (the actor's MAX_BATCH), each
# writing one to three records.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

UNMATCHED = "unmatched"  # the route label of a request no route matched
# The method label of a request no route matched: one of these, else "other",
# so that made-up methods cannot grow the label set.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Metrics:
    """The metrics of one app, and the cheap calls that record them."""

    def __init__(self, agents: Registry) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "guard_decisions",
            "Decisions answered, by decision and reason code (reason is empty when allowed "
            "or pending)",
            ("decision", "reason"),
            registry=self.registry,
        )
        self.requests = Histogram(
            "guard_request_duration_seconds",
            "Time the app took to answer a request, by route rule and method",
            ("route", "method"),
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.batch_records = Histogram(
            "guard_commit_batch_records",
            "Records made durable by one commit round (a write per batch, one flush)",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.write_seconds = Histogram(
            "guard_log_write_seconds",
            "Time of the writes of one commit round",
            buckets=IO_BUCKETS,
            registry=self.registry,
        )
        self.fsync_seconds = Histogram(
            "guard_log_fsync_seconds",
            "Time of the flush of one commit round (syncfs + fdatasync, or one fsync a log)",
            buckets=IO_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(AgentsCollector(agents))
        self._count_decision: dict[tuple[str, str], Callable[[], None]] = {}
        self._observe_request: dict[tuple[str, str], Callable[[float], None]] = {}
        self._observe_batch = self.batch_records.observe
        self._observe_write = self.write_seconds.observe
        self._observe_fsync = self.fsync_seconds.observe
        agents.store.observe_commits(self.commit)

    def decision(self, reply: dict[str, Any]) -> None:
        """Count the decision a request, an approval or a rejection answered with."""
        reason = reply.get("reason")
        key = (reply["decision"], reason["code"] if reason else "")
        inc = self._count_decision.get(key)
        if inc is None:
            inc = self._count_decision[key] = self.decisions.labels(*key).inc
        inc()

    def request(self, rule: Rule | None, method: str, seconds: float) -> None:
        """Observe one request's time under its route rule (never its path)."""
        if rule is None:
            key = (UNMATCHED, method if method in _METHODS else "other")
        else:
            # A matched rule allows only its own few methods.
            key = (rule.rule, method)
        observe = self._observe_request.get(key)
        if observe is None:
            observe = self._observe_request[key] = self.requests.labels(*key).observe
        observe(seconds)

    def commit(self, records: int, write: float, fsync: float) -> None:
        """Observe one commit round (called on the writer thread that wrote it)."""
        self._observe_batch(records)
        self._observe_write(write)
        self._observe_fsync(fsync)

    def watch_webhooks(self, hooks: Sequence[WebhookCounts]) -> None:
        """Expose the delivery counts of ``hooks`` (read at scrape time)."""
        self.registry.register(WebhooksCollector(hooks))

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry)


class AgentsCollector(Collector):
    """Gauges read off the agents' registry at scrape time: nothing on the
    decision path keeps them. A scrape runs on the event loop, as the actors
    do, so it reads each agent's state between two batches."""

    def __init__(self, agents: Registry) -> None:
        self.agents = agents

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        agents = self.agents
        active = terminated = pending = log_bytes = 0
        disagreements: dict[str, int] = {}
        for actor in agents.actors.values():
            state = actor.state
            if state.shadow_disagreements is not None:
                for key, count in state.shadow_disagreements.items():
                    disagreements[key] = disagreements.get(key, 0) + count
            if state.alive:
                active += 1
            else:
                terminated += 1
            pending += len(state.pending)
            log_bytes += actor.committed.size
        # A quarantined log is left as it is in the store: its size when it
        # was quarantined (a scrape never asks the store, on the event loop).
        log_bytes += sum(agents.quarantined_bytes.values())
        by_state, pending_family, bytes_family = self._families()
        by_state.add_metric(("active",), active)
        by_state.add_metric(("terminated",), terminated)
        by_state.add_metric(("quarantined",), len(agents.quarantined))
        # Agents listed but not loaded yet (loaded on first use, or by the
        # sweep): their logs are neither read nor counted in the log bytes
        # until then.
        by_state.add_metric(("unloaded",), len(agents.unloaded))
        pending_family.add_metric((), pending)
        bytes_family.add_metric((), log_bytes)
        yield from (by_state, pending_family, bytes_family)
        # Folded from the decision records (each agent's whole life): a
        # restart counts them again from the logs, as a counter may restart.
        shadow = CounterMetricFamily(
            "guard_shadow_disagreements",
            "Requests a shadow policy would have decided otherwise, by the live decision and "
            "the shadow's",
            labels=("live", "shadow"),
        )
        for key, count in sorted(disagreements.items()):
            live, _, theirs = key.partition("->")
            shadow.add_metric((live, theirs), count)
        yield shadow
        conflicts = agents.store.conflicts  # None: a store where no other node writes
        if conflicts is not None:
            family = CounterMetricFamily(
                "guard_store_conflicts",
                "Batches decided again because another node appended to the agent's log first",
                labels=(),
            )
            family.add_metric((), conflicts)
            yield family

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("guard_agents", "Agents by state", labels=("state",)),
            GaugeMetricFamily(
                "guard_pending_approvals", "Actions waiting for an operator's decision", labels=()
            ),
            GaugeMetricFamily(
                "guard_log_bytes",
                "Bytes in the agents' logs: committed records, and quarantined logs as on disk"
                " (not those of agents this node has not loaded yet)",
                labels=(),
            ),
        )


class WebhookCounts(Protocol):
    """What a webhook's delivery counts (guardd.webhook_delivery.Webhook)."""

    id: str  # the webhook's id: its label, as in the banner and its position file
    sent: int  # events delivered (answered 2xx)
    failed: int  # attempts that failed: an answer other than 2xx, a timeout, no connection
    given_up: int  # events dropped, still undelivered after the retry time
    retrying: int  # events waiting for their next attempt
    disabled: bool  # the receiver answered 410 Gone

    def oldest_undelivered(self, now: float) -> float: ...


class WebhooksCollector(Collector):
    """Webhook delivery, read off each webhook at scrape time, one series
    per webhook labelled by its id."""

    def __init__(self, hooks: Sequence[WebhookCounts]) -> None:
        self.hooks = hooks

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        now = time()
        sent, failed, given_up, retrying, oldest, disabled = families = self._families()
        for hook in self.hooks:
            labels = (hook.id,)
            sent.add_metric(labels, hook.sent)
            failed.add_metric(labels, hook.failed)
            given_up.add_metric(labels, hook.given_up)
            retrying.add_metric(labels, hook.retrying)
            oldest.add_metric(labels, hook.oldest_undelivered(now))
            disabled.add_metric(labels, 1 if hook.disabled else 0)
        yield from families

    @staticmethod
    def _families() -> tuple[
        CounterMetricFamily,
        CounterMetricFamily,
        CounterMetricFamily,
        GaugeMetricFamily,
        GaugeMetricFamily,
        GaugeMetricFamily,
    ]:
        label = ("webhook",)
        return (
            CounterMetricFamily(
                "guard_webhook_sent", "Webhook events the receiver took (2xx)", labels=label
            ),
            CounterMetricFamily(
                "guard_webhook_failed",
                "Webhook attempts that failed (not 2xx, no answer in time, no connection)",
                labels=label,
            ),
            CounterMetricFamily(
                "guard_webhook_given_up",
                "Webhook events dropped, still undelivered when their retry time ran out",
                labels=label,
            ),
            GaugeMetricFamily(
                "guard_webhook_retrying",
                "Webhook events waiting for their next attempt after a failed one",
                labels=label,
            ),
            GaugeMetricFamily(
                "guard_webhook_oldest_undelivered_seconds",
                "Age of the record of the oldest webhook event held undelivered (0: none)",
                labels=label,
            ),
            GaugeMetricFamily(
                "guard_webhook_disabled",
                "1 once the receiver answered 410 Gone: nothing more is sent until a restart",
                labels=label,
            ),
        )


class TimedQuart(Quart):
    """A Quart app that observes how long it takes to answer each request.

    Timing ``handle_request`` costs two clock readings and one ``observe``
    a request, with no before/after hook to run; the route's rule is known
    by then (the request was matched when its context was pushed)."""

    metrics: Metrics

    async def handle_request(self, request: Request) -> ResponseTypes:
        started = perf_counter()
        try:
            return await super().handle_request(request)
        finally:
            self.metrics.request(request.url_rule, request.method, perf_counter() - started)


def metrics_response(metrics: Metrics) -> Response:
    headers = {"Cache-Control": "no-store", **SECURITY_HEADERS}
    return Response(metrics.exposition(), content_type=CONTENT_TYPE, headers=headers)


def create_metrics_app(metrics: Metrics) -> Quart:
    """The app of the ``--metrics-listen`` address: ``GET /metrics`` without
    a token and nothing else (any other path is 404), so that the address
    can be opened to a scraper without opening the API. It shares the main
    app's ``metrics``; its own requests are not timed."""
    app = Quart("guardd-metrics", static_folder=None)
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    register_error_handlers(app)

    @app.get("/metrics")
    async def metrics_page() -> Response:
        return metrics_response(metrics)

    @app.after_request
    async def _headers(response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    return app
