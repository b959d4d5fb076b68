"""Concurrency: 50 agents, 40 concurrent action requests each, all at once,
while another client approves, rejects and terminates.

Whatever the interleaving: no agent ever spends past its budget (not in any
answer, not at any point of its log), nothing is allowed after termination,
each agent's action IDs are act-1..act-40 with no gap and no repeat, its
counters are what its log says, and every log verifies.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import resource
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.reliability.support import aread_log, assert_status_matches_log, exact, ok_json
from tests.support.server import GuardServer

AGENTS = [f"c-{n:02d}" for n in range(50)]
REQUESTS_PER_AGENT = 40
BUDGET = 30
STOPPED_BUDGET = 1000
TERMINATED_BY_OPERATOR = 10
POLICY = {
    "budget": BUDGET,
    "scar_limit": 1000,
    "tools": {"work": {"cost": 1}, "send": {"cost": 2, "requires_approval": True}},
}


def _body(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.25:
        return {"tool": "send", "input": {"to": rng.randrange(100)}}
    return {"tool": "work", "input": {"n": rng.randrange(1000)}, "cost": rng.choice([1, 1, 2])}


class Operator:
    """The other client: approves or rejects what is pending, terminates some agents."""

    def __init__(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        self.client = client
        self.rng = rng
        self.decisions: list[tuple[str, dict[str, Any]]] = []
        self.done = asyncio.Event()

    async def decide_pending(self) -> None:
        while not self.done.is_set():
            listed = ok_json(await self.client.get("/v1/agents"))["agents"]
            waiting = [a["agent_id"] for a in listed if a["status"]["actions_pending"]]
            for agent in waiting:
                pending = ok_json(await self.client.get(f"/v1/agents/{agent}/actions/pending"))
                for entry in pending["pending"]:
                    action_id = entry["action"]["action_id"]
                    base = f"/v1/agents/{agent}/actions/{action_id}"
                    if self.rng.random() < 0.7:
                        answer = await self.client.post(f"{base}/approve", json={"approver": "op"})
                    else:
                        body = {"approver": "op", "reason": "no"}
                        answer = await self.client.post(f"{base}/reject", json=body)
                    self.decisions.append((agent, exact(answer)))
                    assert answer.status_code == 200, answer.text
            await asyncio.sleep(0.01)

    async def terminate(self, agent: str) -> dict[str, Any]:
        answer = await self.client.post(
            f"/v1/agents/{agent}/terminate", json={"reason": "operator stop", "by": "op"}
        )
        assert answer.status_code == 200, answer.text
        return {"terminated": agent}


def _check_log(agent: str, records: list[dict[str, Any]], budget: int) -> None:
    spent = Decimal(0)
    terminated = False
    for record in records:
        if record["kind"] == "action_allowed":
            assert not terminated, f"{agent}: allowed after termination: {record}"
            spent += Decimal(str(record["cost"]))
            assert spent <= budget, f"{agent}: spent {spent} past the budget at seq {record['seq']}"
        terminated = terminated or record["kind"] == "terminated"
    ids = [r["action_id"] for r in records if r["kind"] == "action_requested"]
    assert ids == [f"act-{n}" for n in range(1, REQUESTS_PER_AGENT + 1)], agent


@pytest.fixture(autouse=True)
def _enough_file_descriptors() -> Iterator[None]:
    """2000 connections at once, at both ends: raise the soft limit (guardd,
    started after this fixture, inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * len(AGENTS) * REQUESTS_PER_AGENT
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow
async def test_concurrent_requests_approvals_and_terminations_keep_every_invariant(
    guard_server: GuardServer,
) -> None:
    rng = random.Random(20251121)
    # The agents the operator stops have budget to spare, so it is the
    # operator who stops them, with some of their requests still to come.
    stopped = rng.sample(AGENTS, TERMINATED_BY_OPERATOR)
    budgets = {agent: STOPPED_BUDGET if agent in stopped else BUDGET for agent in AGENTS}
    url = guard_server.url
    admin_headers = {"Authorization": f"Bearer {guard_server.admin_token}"}
    async with contextlib.AsyncExitStack() as stack:
        admin = await stack.enter_async_context(
            httpx.AsyncClient(base_url=url, headers=admin_headers, timeout=60.0)
        )
        # One client per agent, one connection per request in flight: a single
        # pool with thousands of queued requests costs httpx quadratic time.
        clients = {}
        for agent in AGENTS:
            body = {"agent_id": agent, "policy": dict(POLICY, budget=budgets[agent])}
            token = ok_json(await admin.post("/v1/agents", json=body), 201)["token"]
            clients[agent] = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=url,
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=60.0,
                    limits=httpx.Limits(max_connections=REQUESTS_PER_AGENT),
                )
            )

        async def request(agent: str, body: dict[str, Any]) -> dict[str, Any]:
            answer = await clients[agent].post(f"/v1/agents/{agent}/actions", json=body)
            assert answer.status_code == 200, answer.text
            return exact(answer)

        operator = Operator(admin, rng)
        deciding = asyncio.create_task(operator.decide_pending())
        # Everything goes out at once in a random order, the operator's
        # terminations among the requests: each lands while its agent has
        # requests in flight (or just after its budget ran out: 409).
        calls: list[tuple[str, dict[str, Any] | None]] = [
            (agent, _body(rng)) for agent in AGENTS for _ in range(REQUESTS_PER_AGENT)
        ]
        calls += [(agent, None) for agent in stopped]
        rng.shuffle(calls)
        async with asyncio.timeout(120):
            results = await asyncio.gather(
                *(operator.terminate(a) if b is None else request(a, b) for a, b in calls)
            )
            operator.done.set()
            await deciding
        answers = [
            (agent, answer)
            for (agent, body), answer in zip(calls, results, strict=True)
            if body is not None
        ]

        seen = Counter()
        for agent, answer in [*answers, *operator.decisions]:
            reason = answer.get("reason")
            seen[answer["decision"], reason["code"] if reason else None] += 1
            if answer["decision"] == "allowed":
                assert answer["remaining"] >= 0, (agent, answer)
        # The run went through every path it is meant to race.
        for path in [
            ("allowed", None),
            ("pending_approval", None),
            ("denied", "insufficient_budget"),
            ("denied", "terminated"),
            ("denied", "rejected"),
        ]:
            assert seen[path], (path, seen)
        reasons = Counter()
        for agent in AGENTS:
            ids = sorted(int(a["action_id"][4:]) for who, a in answers if who == agent)
            assert ids == list(range(1, REQUESTS_PER_AGENT + 1)), agent
            status = ok_json(await admin.get(f"/v1/agents/{agent}"))
            records = await aread_log(admin, agent)
            _check_log(agent, records, budgets[agent])
            assert_status_matches_log(status, records)
            assert Decimal(0) <= Decimal(str(status["remaining"])) <= budgets[agent]
            reasons[status["termination_reason"]] += 1
            report = ok_json(await admin.get(f"/v1/agents/{agent}/verify"))
            assert report["ok"] is True, (agent, report)
        assert reasons["operator stop"] == TERMINATED_BY_OPERATOR, reasons
        assert reasons["budget_exhausted"] > 0, reasons
        assert set(reasons) <= {"operator stop", "budget_exhausted", None}, reasons
