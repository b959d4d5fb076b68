"""Load for the kill -9 test: drives a guardd with concurrent action requests,
approvals, rejections, outcomes and scars over many agents, and appends one
JSON line (flushed) to the acknowledgements file for every answer that
reports a state change. A dropped connection or a 5xx is not an answer: the
client notes it and goes on, against the restarted server on the same port.

Run: python load_client.py <config.json> <acks.jsonl> <stats.json>
The config holds ``url``, ``admin_token``, ``tokens`` (agent ID -> token),
``concurrency``, ``seed``, ``max_seconds``, ``pause_file`` and ``stop_file``.
While the pause file exists the client starts no new request (the test checks
the server in quiet); it stops when the stop file exists or after
``max_seconds``, then writes its stats.
Standard library and httpx only: no project imports.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx

TIMEOUT = 5.0


class Load:
    def __init__(self, config: dict[str, Any], acks: Path) -> None:
        self.url: str = config["url"]
        self.admin = {"Authorization": f"Bearer {config['admin_token']}"}
        self.tokens: dict[str, str] = config["tokens"]
        self.agents = sorted(self.tokens)
        self.rng = random.Random(config["seed"])
        self.deadline = time.monotonic() + config["max_seconds"]
        self.stop_file = Path(config["stop_file"])
        self.pause_file = Path(config["pause_file"])
        self.concurrency: int = config["concurrency"]
        self.acks = acks.open("a", encoding="utf-8")
        self.allowed: dict[str, list[str]] = {a: [] for a in self.agents}
        self.pending: dict[str, list[str]] = {a: [] for a in self.agents}
        self.stats = {"acks": 0, "transport_errors": 0, "server_errors": 0, "client_errors": 0}
        self.client_errors: list[str] = []
        self.scars = 0

    def done(self) -> bool:
        return time.monotonic() > self.deadline or self.stop_file.exists()

    def ack(self, entry: dict[str, Any]) -> None:
        self.acks.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self.acks.flush()
        self.stats["acks"] += 1

    async def call(
        self, client: httpx.AsyncClient, method: str, path: str, headers: dict[str, str], body: Any
    ) -> Any | None:
        """The JSON answer of a 2xx, or None (after noting why) for anything else."""
        try:
            response = await client.request(method, path, json=body, headers=headers)
        except httpx.TransportError:
            self.stats["transport_errors"] += 1
            await asyncio.sleep(0.1)
            return None
        if response.status_code >= 500:
            self.stats["server_errors"] += 1
            await asyncio.sleep(0.1)
            return None
        if response.status_code >= 400:
            self.stats["client_errors"] += 1
            self.client_errors.append(f"{method} {path}: {response.status_code} {response.text}")
            return None
        return json.loads(response.content)

    async def step(self, client: httpx.AsyncClient) -> None:
        rng = self.rng
        agent = rng.choice(self.agents)
        base = f"/v1/agents/{agent}"
        mine = {"Authorization": f"Bearer {self.tokens[agent]}"}
        roll = rng.random()
        if roll < 0.45:
            body = {"tool": "work", "input": {"r": rng.randrange(10**6)}, "cost": rng.randint(1, 3)}
            self.record_decision(
                agent, await self.call(client, "POST", f"{base}/actions", mine, body)
            )
        elif roll < 0.60:
            body = {"tool": "send", "input": {"to": f"u{rng.randrange(100)}"}}
            self.record_decision(
                agent, await self.call(client, "POST", f"{base}/actions", mine, body)
            )
        elif roll < 0.63:
            body = {"tool": "unlisted", "input": None}
            self.record_decision(
                agent, await self.call(client, "POST", f"{base}/actions", mine, body)
            )
        elif roll < 0.75 and self.pending[agent]:
            action_id = self.pending[agent].pop(rng.randrange(len(self.pending[agent])))
            if rng.random() < 0.7:
                path, body = (
                    f"{base}/actions/{action_id}/approve",
                    {"approver": "load", "note": "ok"},
                )
                answer = await self.call(client, "POST", path, self.admin, body)
                if answer is not None:
                    self.ack({"op": "approve", "agent": agent, **answer})
                    if answer["decision"] == "allowed":
                        self.allowed[agent].append(action_id)
            else:
                path = f"{base}/actions/{action_id}/reject"
                body = {"approver": "load", "reason": "no", "scar": "minor"}
                answer = await self.call(client, "POST", path, self.admin, body)
                if answer is not None:
                    self.ack({"op": "reject", "agent": agent, **answer})
        elif roll < 0.92 and self.allowed[agent]:
            action_id = self.allowed[agent].pop(rng.randrange(len(self.allowed[agent])))
            outcome = "success" if rng.random() < 0.8 else "failure"
            path = f"{base}/actions/{action_id}/outcome"
            answer = await self.call(client, "POST", path, mine, {"status": outcome})
            if answer is not None:
                self.ack(
                    {"op": "outcome", "agent": agent, "action_id": action_id, "outcome": outcome}
                )
        else:
            self.scars += 1
            reason = f"load scar {self.scars}"
            body = {"severity": "minor", "reason": reason}
            if await self.call(client, "POST", f"{base}/scars", self.admin, body) is not None:
                self.ack({"op": "scar", "agent": agent, "reason": reason})

    def record_decision(self, agent: str, answer: Any | None) -> None:
        if answer is None:
            return
        self.ack({"op": "request", "agent": agent, **answer})
        if answer["decision"] == "allowed":
            self.allowed[agent].append(answer["action_id"])
        elif answer["decision"] == "pending_approval":
            self.pending[agent].append(answer["action_id"])

    async def worker(self, client: httpx.AsyncClient) -> None:
        while not self.done():
            if self.pause_file.exists():
                await asyncio.sleep(0.02)
                continue
            await self.step(client)

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=self.concurrency)
        async with httpx.AsyncClient(base_url=self.url, timeout=TIMEOUT, limits=limits) as client:
            await asyncio.gather(*(self.worker(client) for _ in range(self.concurrency)))
        self.acks.close()


def main(argv: list[str]) -> int:
    config_path, acks_path, stats_path = (Path(arg) for arg in argv)
    load = Load(json.loads(config_path.read_text()), acks_path)
    asyncio.run(load.run())
    stats = dict(load.stats, client_error_samples=load.client_errors[:20])
    stats_path.write_text(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
