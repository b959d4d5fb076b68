"""What the reliability tests share: a policy, exact JSON, reading a whole log
over HTTP, and the counters a log implies."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from typing import Any

import attrs
import httpx

from agents_runtime.log.files.logfile import split_log
from agents_runtime.log.verify import Report, verify_lines

LOG_PAGE = 5000


def policy(budget: int = 1_000_000, scar_limit: int = 1_000_000) -> dict[str, Any]:
    """``work`` is allowed at cost 1 (or more), ``send`` needs approval (cost 2)."""
    return {
        "budget": budget,
        "scar_limit": scar_limit,
        "tools": {"work": {"cost": 1}, "send": {"cost": 2, "requires_approval": True}},
    }


def exact(response: httpx.Response) -> Any:
    """The JSON body with every non-integral number as a Decimal."""
    return json.loads(response.content, parse_float=Decimal)


def ok_json(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, (response.status_code, response.text)
    return exact(response)


def read_log(client: httpx.Client, agent_id: str) -> list[dict[str, Any]]:
    """Every record of an agent's log, through the log endpoint (admin client)."""
    records: list[dict[str, Any]] = []
    while True:
        after = records[-1]["seq"] if records else -1
        page = ok_json(client.get(f"/v1/agents/{agent_id}/log?after={after}&limit={LOG_PAGE}"))
        records.extend(page["records"])
        if len(page["records"]) < LOG_PAGE:
            return records


async def aread_log(client: httpx.AsyncClient, agent_id: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    while True:
        after = records[-1]["seq"] if records else -1
        url = f"/v1/agents/{agent_id}/log?after={after}&limit={LOG_PAGE}"
        page = ok_json(await client.get(url))
        records.extend(page["records"])
        if len(page["records"]) < LOG_PAGE:
            return records


@attrs.frozen
class LogFacts:
    """What a log says about an agent, counted from its records alone."""

    head_seq: int
    action_ids: list[str]  # in the order they were requested
    status: dict[str, str]  # action_id -> status the records imply
    cost: dict[str, Decimal]  # action_id -> charge of its allowed record
    outcome: dict[str, str]
    allowed_records: Counter[str]  # action_id -> number of action_allowed records
    allowed: int
    denied: int
    pending: int
    spent: Decimal
    scar_reasons: list[str]
    terminated: bool


def log_facts(records: list[dict[str, Any]]) -> LogFacts:
    status: dict[str, str] = {}
    cost: dict[str, Decimal] = {}
    outcome: dict[str, str] = {}
    allowed_records: Counter[str] = Counter()
    action_ids: list[str] = []
    spent = Decimal(0)
    denied = 0
    scars: list[str] = []
    terminated = False
    for record in records:
        kind = record["kind"]
        action_id = record.get("action_id")
        if kind == "action_requested":
            action_ids.append(action_id)
            status[action_id] = "requested"
        elif kind == "approval_required":
            status[action_id] = "pending_approval"
        elif kind == "action_allowed":
            status[action_id] = "allowed"
            cost[action_id] = Decimal(str(record["cost"]))
            allowed_records[action_id] += 1
            spent += cost[action_id]
        elif kind in ("action_denied", "action_rejected"):
            status[action_id] = "denied"
            denied += 1
        elif kind == "outcome":
            status[action_id] = "completed"
            outcome[action_id] = record["outcome"]
        elif kind == "scar":
            scars.append(record["reason"])
        elif kind == "terminated":
            terminated = True
    return LogFacts(
        head_seq=records[-1]["seq"] if records else -1,
        action_ids=action_ids,
        status=status,
        cost=cost,
        outcome=outcome,
        allowed_records=allowed_records,
        allowed=sum(allowed_records.values()),
        denied=denied,
        pending=sum(1 for s in status.values() if s == "pending_approval"),
        spent=spent,
        scar_reasons=scars,
        terminated=terminated,
    )


def assert_status_matches_log(status: dict[str, Any], records: list[dict[str, Any]]) -> LogFacts:
    """The agent status the service reports is what its log says, exactly."""
    facts = log_facts([r for r in records if r["seq"] <= status["head"]["seq"]])
    assert status["head"]["seq"] == facts.head_seq
    assert status["head"]["hash"] == records[facts.head_seq]["hash"]
    assert Decimal(str(status["spent"])) == facts.spent
    assert status["actions_allowed"] == facts.allowed
    assert status["actions_denied"] == facts.denied
    assert status["actions_pending"] == facts.pending
    assert [s["reason"] for s in status["scars"]] == facts.scar_reasons
    assert status["alive"] is not facts.terminated
    return facts


def verify_file(path: Any, public_key_hex: str, agent_id: str) -> Report:
    """Verify a log file on disk offline (complete lines only)."""
    with open(path, "rb") as fh:
        lines = split_log(fh.read()).lines
    return verify_lines(lines, public_key=bytes.fromhex(public_key_hex), log_id=agent_id)
