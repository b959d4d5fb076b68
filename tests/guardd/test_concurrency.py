"""Many clients at once: each agent's requests are serialized, so money,
limits, action IDs and idempotency hold exactly under concurrency."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.guardd.conftest import Agent, Api, ok

WORKERS = 8


def _in_parallel(api: Api, agent: Agent, bodies: list[dict[str, Any]], **kwargs: Any) -> list[Any]:
    headers = {"Authorization": f"Bearer {agent.token}"}
    with httpx.Client(base_url=api.server.url, headers=headers, timeout=30) as client:

        def post(body: dict[str, Any]) -> Any:
            extra = {"Idempotency-Key": body.pop("_key")} if "_key" in body else {}
            return ok(client.post(f"{agent.path}/actions", json=body, headers=extra))

        with ThreadPoolExecutor(WORKERS) as pool:
            return list(pool.map(post, [dict(b) for b in bodies]))


def test_concurrent_charges_never_overspend_and_exhaust_exactly(api: Api) -> None:
    agent = api.create(policy={"budget": 1, "scar_limit": 10, "tools": {"tick": {"cost": 0.1}}})
    decisions = _in_parallel(api, agent, [{"tool": "tick"}] * 20)
    allowed = [d for d in decisions if d["decision"] == "allowed"]
    denied = [d for d in decisions if d["decision"] == "denied"]
    assert (len(allowed), len(denied)) == (10, 10)
    assert sorted(d["remaining"] for d in allowed) == sorted(
        [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    )
    assert {d["reason"]["code"] for d in denied} == {"terminated"}
    ids = sorted(int(d["action_id"].removeprefix("act-")) for d in decisions)
    assert ids == list(range(1, 21))
    status = api.status(agent)
    assert (status["spent"], status["remaining"], status["termination_reason"]) == (
        1,
        0,
        "budget_exhausted",
    )


def test_concurrent_calls_respect_the_call_cap_and_rate_limit(api: Api) -> None:
    policy = {
        "budget": 100,
        "scar_limit": 1000,
        "tools": {"capped": {"max_calls": 3}},
        "default": {},
        "rate_limit": {"max_actions": 5, "window_secs": 3600},
    }
    agent = api.create(policy=policy)
    decisions = _in_parallel(api, agent, [{"tool": "capped"}] * 6 + [{"tool": "free"}] * 6)
    allowed = [d for d in decisions if d["decision"] == "allowed"]
    assert len(allowed) == 5
    assert api.status(agent)["actions_allowed"] == 5


def test_concurrent_repeats_of_one_idempotency_key_create_one_action(api: Api) -> None:
    agent = api.create(policy={"budget": 100, "scar_limit": 10, "tools": {"t": {"cost": 1}}})
    decisions = _in_parallel(api, agent, [{"tool": "t", "_key": "same"}] * 12)
    assert all(d == decisions[0] for d in decisions)
    status = api.status(agent)
    assert (status["actions_allowed"], status["spent"]) == (1, 1)


def test_concurrent_creates_of_one_id_make_one_agent(api: Api) -> None:
    agent_id = api.new_id("race")
    body = {"agent_id": agent_id, "policy": {"budget": 1, "scar_limit": 1, "tools": {}}}
    headers = {"Authorization": f"Bearer {api.server.admin_token}"}
    with httpx.Client(base_url=api.server.url, headers=headers, timeout=30) as client:
        with ThreadPoolExecutor(WORKERS) as pool:
            statuses = list(
                pool.map(lambda _: client.post("/v1/agents", json=body).status_code, range(8))
            )
    assert sorted(statuses) == [201] + [409] * 7


def test_every_acknowledged_record_is_in_the_file_when_the_answer_arrives(api: Api) -> None:
    agent = api.create(policy={"budget": 100, "scar_limit": 10, "tools": {"t": {"cost": 1}}})
    path = api.server.data_dir / "agents" / f"{agent.agent_id}.jsonl"
    for _ in range(5):
        decision = ok(agent.act("t"))
        last = path.read_bytes().split(b"\n")[-2]
        assert f'"action_id":"{decision["action_id"]}"'.encode() in last
        assert last.endswith(b"}")
