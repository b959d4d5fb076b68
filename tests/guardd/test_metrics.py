"""GET /metrics: the Prometheus text of a real guardd, its token rule, the
--metrics-listen address and --no-metrics."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from guardd.config import SettingsError, parse_settings
from tests.guardd.conftest import Agent, Api, assert_error, ok
from tests.support.server import GuardServer, free_port

ACTIONS_ROUTE = "/v1/agents/<agent_id>/actions"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(api: Api) -> Samples:
    response = api.admin.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, int]]:
    """A guardd with --metrics-listen, one of whose agents is quarantined
    (a byte of its log changed while guardd was stopped)."""
    metrics_port = free_port()
    server = GuardServer(
        tmp_path_factory.mktemp("metrics") / "guard-data",
        args=["--metrics-listen", f"127.0.0.1:{metrics_port}"],
    ).start()
    api = Api(server)
    try:
        tampered = api.create("tampered")
        ok(tampered.act("search"))
        assert server.stop() == 0
        path = server.data_dir / "agents" / "tampered.jsonl"
        data = bytearray(path.read_bytes())
        data[data.index(b'"tool":"search"') + len(b'"tool":"s')] = ord("S")
        path.write_bytes(bytes(data))
        server.start()
        yield api, metrics_port
    finally:
        api.close()
        server.kill()


@pytest.fixture
def api(metered: tuple[Api, int]) -> Api:
    return metered[0]


# -- access ---------------------------------------------------------------------


def test_metrics_without_a_token_is_401(api: Api) -> None:
    assert_error(api.client().get("/metrics"), 401, "unauthorized")


def test_metrics_with_an_agent_token_is_403(api: Api) -> None:
    agent = api.create()
    assert_error(agent.client.get("/metrics"), 403, "forbidden")


def test_metrics_with_the_admin_token_parse_as_prometheus_text(api: Api) -> None:
    response = api.admin.get("/metrics")
    assert response.status_code == 200
    assert response.headers["x-content-type-options"] == "nosniff"
    families = {f.name for f in text_string_to_metric_families(response.text)}
    assert families >= {
        "guard_decisions",
        "guard_request_duration_seconds",
        "guard_pending_approvals",
        "guard_agents",
        "guard_commit_batch_records",
        "guard_log_write_seconds",
        "guard_log_fsync_seconds",
        "guard_log_bytes",
    }


# -- what is counted --------------------------------------------------------------


def test_decisions_are_counted_by_decision_and_reason(api: Api) -> None:
    agent = api.create()
    before = scrape(api)
    ok(agent.act("search"))
    ok(agent.act("search"))
    assert ok(agent.act("delete_database"))["decision"] == "denied"
    held = ok(agent.act("send_email"))["action_id"]
    held_too = ok(agent.act("send_email"))["action_id"]
    assert ok(api.approve(agent, held))["decision"] == "allowed"
    assert ok(api.reject(agent, held_too))["decision"] == "denied"
    after = scrape(api)

    def delta(decision: str, reason: str) -> float:
        name = "guard_decisions_total"
        return value(after, name, decision=decision, reason=reason) - value(
            before, name, decision=decision, reason=reason
        )

    assert delta("allowed", "") == 3  # two requests and one approval
    assert delta("denied", "tool_not_allowed") == 1
    assert delta("pending_approval", "") == 2
    assert delta("denied", "rejected") == 1


def test_request_latency_is_labelled_by_the_route_rule_not_the_path(api: Api) -> None:
    agent = api.create()
    before = scrape(api)
    for _ in range(3):
        ok(agent.act("search"))
    after = scrape(api)
    name = "guard_request_duration_seconds_count"
    labels = {"route": ACTIONS_ROUTE, "method": "POST"}
    assert value(after, name, **labels) - value(before, name, **labels) == 3
    assert value(after, "guard_request_duration_seconds_sum", **labels) > 0
    routes = {dict(key[1]).get("route") for key in after if key[0] == name}
    assert not any(agent.agent_id in str(route) for route in routes)


def test_unmatched_paths_and_made_up_methods_share_one_label_each(api: Api) -> None:
    for path in ("/no/such/path", "/another/one"):
        assert_error(api.admin.get(path), 404, "not_found")
    api.http.request("BREW", "/coffee")
    samples = scrape(api)
    name = "guard_request_duration_seconds_count"
    assert value(samples, name, route="unmatched", method="GET") >= 2
    assert value(samples, name, route="unmatched", method="other") >= 1
    assert not any("BREW" in str(key) or "/no/such" in str(key) for key in samples)


def test_pending_approvals_and_agents_by_state_are_read_at_scrape_time(api: Api) -> None:
    waiting, ended = api.create(), api.create()
    for _ in range(2):
        ok(waiting.act("send_email"))
    ok(api.admin.post(f"{ended.path}/terminate", json={"reason": "done", "by": "alice"}))
    samples = scrape(api)
    listed = ok(api.admin.get("/v1/agents"))["agents"]
    active = [e["status"] for e in listed if e["state"] == "active"]
    assert value(samples, "guard_pending_approvals") == sum(s["actions_pending"] for s in active)
    assert value(samples, "guard_pending_approvals") >= 2
    assert value(samples, "guard_agents", state="active") == sum(s["alive"] for s in active)
    assert value(samples, "guard_agents", state="terminated") == sum(not s["alive"] for s in active)
    assert value(samples, "guard_agents", state="terminated") >= 1
    assert value(samples, "guard_agents", state="quarantined") == 1


def test_each_commit_is_observed_once_with_its_records_write_and_fsync(api: Api) -> None:
    agent = api.create()
    before = scrape(api)
    for _ in range(4):  # one after another: a batch each, of 2 records
        ok(agent.act("search"))
    after = scrape(api)

    def delta(name: str) -> float:
        return value(after, name) - value(before, name)

    assert delta("guard_commit_batch_records_count") == 4
    assert delta("guard_commit_batch_records_sum") == 8
    assert (
        value(after, "guard_commit_batch_records_bucket", le="2.0")
        - value(before, "guard_commit_batch_records_bucket", le="2.0")
        == 4
    )
    for io in ("write", "fsync"):
        assert delta(f"guard_log_{io}_seconds_count") == 4
        assert delta(f"guard_log_{io}_seconds_sum") > 0


def test_log_bytes_is_the_size_of_every_log_quarantined_included(api: Api) -> None:
    agent = api.create()
    ok(agent.act("search"))
    logs = list((api.server.data_dir / "agents").glob("*.jsonl"))
    assert "tampered.jsonl" in {p.name for p in logs}
    assert value(scrape(api), "guard_log_bytes") == sum(p.stat().st_size for p in logs)


def test_a_scrape_counts_a_quarantined_log_as_it_was_without_reading_the_store(
    api: Api,
) -> None:
    before = value(scrape(api), "guard_log_bytes")
    # Grown under guardd: the scrape counts the size it had when quarantined
    # (found at start, in one request), not what the store holds now.
    tampered = api.server.data_dir / "agents" / "tampered.jsonl"
    size = tampered.stat().st_size
    with tampered.open("ab") as fh:
        fh.write(b"x" * 100)
    try:
        assert value(scrape(api), "guard_log_bytes") == before
    finally:
        with tampered.open("r+b") as fh:
            fh.truncate(size)


# -- the metrics listener -----------------------------------------------------------


def test_metrics_listener_serves_metrics_without_a_token(metered: tuple[Api, int]) -> None:
    api, port = metered
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10.0)
    assert response.status_code == 200
    samples = parse(response.text)
    assert value(samples, "guard_agents", state="quarantined") == 1
    # The same counts as the main port's /metrics.
    assert value(samples, "guard_log_bytes") == value(scrape(api), "guard_log_bytes")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("GET", "/v1/agents", id="list-agents"),
        pytest.param("POST", "/v1/agents", id="create-agent"),
        pytest.param("GET", "/healthz", id="healthz"),
        pytest.param("GET", "/", id="console"),
    ],
)
def test_metrics_listener_serves_nothing_of_the_api(
    metered: tuple[Api, int], method: str, path: str
) -> None:
    api, port = metered
    headers = {"Authorization": f"Bearer {api.server.admin_token}"}
    response = httpx.request(
        method, f"http://127.0.0.1:{port}{path}", headers=headers, json={}, timeout=10.0
    )
    assert_error(response, 404, "not_found")


def test_main_port_keeps_metrics_for_the_admin_token_beside_the_listener(api: Api) -> None:
    assert_error(api.client().get("/metrics"), 401, "unauthorized")
    assert scrape(api)


def test_a_metrics_address_in_use_stops_guardd_before_it_creates_anything(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = GuardServer(
            tmp_path / "guard-data", args=["--metrics-listen", f"127.0.0.1:{port}"]
        )
        with pytest.raises(RuntimeError, match="exited with 1") as failed:
            server.start()
        server.kill()  # closes its output file
    assert (
        f"guardd: cannot listen on 127.0.0.1:{port} (--metrics-listen): Address already in use"
        in str(failed.value)
    )
    assert "Traceback" not in str(failed.value)
    # Bound before anything is loaded: no keys, no agents dir, only the lock.
    assert sorted(p.name for p in (tmp_path / "guard-data").iterdir()) == ["lock"]


# -- turned off -------------------------------------------------------------------


@pytest.mark.parametrize(
    "how",
    [
        pytest.param({"args": ["--no-metrics"]}, id="flag"),
        pytest.param({"env": {"GUARD_METRICS": "off"}}, id="environment"),
    ],
)
def test_no_metrics_answers_404_on_metrics(tmp_path: Path, how: dict[str, Any]) -> None:
    server = GuardServer(tmp_path / "guard-data", **how).start()
    api = Api(server)
    try:
        assert_error(api.admin.get("/metrics"), 404, "not_found")
        agent: Agent = api.create()
        assert ok(agent.act("search"))["decision"] == "allowed"
    finally:
        api.close()
        server.kill()


# -- settings -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(
            ["--metrics-listen", "9300"], {}, "--metrics-listen must be HOST:PORT, not '9300'",
            id="no-host",
        ),
        pytest.param(
            ["--metrics-listen", "127.0.0.1:70000"], {},
            "--metrics-listen port must be 1 to 65535, not 70000", id="port-range",
        ),
        pytest.param(
            ["--no-metrics", "--metrics-listen", "127.0.0.1:9300"], {},
            "--metrics-listen serves metrics, which --no-metrics turns off", id="both",
        ),
        pytest.param(
            [], {"GUARD_METRICS": "maybe"}, "GUARD_METRICS must be on or off, not 'maybe'",
            id="env-value",
        ),
    ],
)  # fmt: skip
def test_bad_metrics_settings_are_refused(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=f"^{re.escape(message)}$"):
        parse_settings(argv, env)


def test_metrics_settings_from_flags_and_environment() -> None:
    assert parse_settings([], {}).metrics is True
    assert parse_settings(["--no-metrics"], {}).metrics is False
    assert parse_settings([], {"GUARD_METRICS": "OFF"}).metrics is False
    listen = parse_settings([], {"GUARD_METRICS_LISTEN": "[::1]:9300"}).metrics_listen
    assert listen == ("::1", 9300)
