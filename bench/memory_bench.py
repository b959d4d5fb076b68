"""Memory benchmark: RSS of guardd with 10,000 idle agents, per agent above
an empty server.

Each agent has a small log written with the real behaviour (genesis, policy,
a few allowed and denied actions, an outcome: see ``startup_bench.LogBuilder``),
cached under ``bench/.cache/``. Two guardd processes are measured one after
the other, RSS read from ``/proc/<pid>/status`` (VmRSS) once the server
answers and has been idle for a moment:

  empty   guardd on a fresh data directory (keys only)
  loaded  guardd on the 10,000-agent data directory

With ``--served N``, agents as an API serves them instead: one guardd on a
fresh data directory, its RSS once idle (the floor, in the same run), then
N agents created over HTTP and each asked for one action, and its RSS once
idle again (past the keep-alive and a full collection): KiB per agent.

With ``--actions N``, one agent instead: one process (the real registry,
actor and file store, fsync on) asks for N allowed actions on one agent,
each with an Idempotency-Key of its own (all inside the default one-day
retention), 256 askers at a time; RSS is read after the first 1,000
actions (the floor, in the same run) and after all N. The ratio is the
figure: target <= 2x at N = 1,000,000.

    python -m bench.memory_bench
    python -m bench.memory_bench --agents 1000 --records 8
    python -m bench.memory_bench --actions 100000
    python -m bench.memory_bench --served 1000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.http_bench import DECIDE_BODY, Server, admin_token, create_agents, guardd_server
from bench.startup_bench import cached_data_dir, fingerprint, unchanged

TARGET_KIB_PER_AGENT = 32
SETTLE_SECONDS = 2.0
FLOOR_ACTIONS = 1_000
TARGET_ACTIONS_RATIO = 2.0
ASKERS = 256


def idle_rss(data_dir: Path, log_dir: Path) -> tuple[int, float]:
    """(VmRSS in KiB, seconds to ready) of guardd on ``data_dir`` once idle."""
    server: Server = guardd_server(data_dir)
    server.log_path = log_dir / f"guardd-{server.port}.out"
    try:
        server.start(timeout=900)
        time.sleep(SETTLE_SECONDS)
        return server.rss_kib(), server.ready_after
    finally:
        server.stop()


# Idle after the requests: past guardd's 15 s keep-alive and its full
# collection every 10 s, so what is left is what the agents keep.
SERVED_IDLE_SECONDS = 25.0


def served_agents(count: int) -> dict[str, Any]:
    """RSS of one guardd empty, then with ``count`` agents created over HTTP
    and each asked for one action."""
    with tempfile.TemporaryDirectory(prefix="guard-memory-bench-") as tmp:
        data_dir = Path(tmp) / "guard-data"
        server = guardd_server(data_dir)
        try:
            server.start()
            time.sleep(SETTLE_SECONDS)
            empty = server.rss_kib()
            ids = [f"served-{n:05d}" for n in range(count)]
            tokens = asyncio.run(create_agents(server.url, admin_token(data_dir), ids))

            async def ask_each() -> None:
                async with httpx.AsyncClient(base_url=server.url, timeout=60.0) as client:
                    for agent_id in ids:
                        headers = {"Authorization": f"Bearer {tokens[agent_id]}"}
                        url = f"/v1/agents/{agent_id}/actions"
                        response = await client.post(url, json=DECIDE_BODY, headers=headers)
                        response.raise_for_status()

            asyncio.run(ask_each())
            time.sleep(SERVED_IDLE_SECONDS)
            served = server.rss_kib()
        finally:
            server.stop()
    per_agent = (served - empty) / count
    print(
        f"\n| agents | empty RSS MiB | created and asked once, idle, MiB | KiB per agent |\n"
        f"|---|---|---|---|\n"
        f"| {count} | {empty / 1024:.1f} | {served / 1024:.1f} | {per_agent:.1f} |"
    )
    return {
        "agents": count,
        "empty_rss_mib": round(empty / 1024, 1),
        "served_rss_mib": round(served / 1024, 1),
        "kib_per_served_agent": round(per_agent, 2),
    }


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


async def _one_agent(root: Path, actions: int) -> dict[str, Any]:
    """In the child: RSS after FLOOR_ACTIONS actions and after ``actions``."""
    from agents_runtime.core import commands as c
    from agents_runtime.core.policy import parse_policy
    from agents_runtime.log.files.datadir import DataDir
    from agents_runtime.log.files.store import FileStore
    from agents_runtime.runtime.registry import Registry
    from bench.actor_bench import POLICY
    from guardd.__main__ import tune_gc
    from guardd.app import BY_COMMAND
    from guardd.limits import return_large_buffers_to_the_system

    # As guardd sets its allocator at start: the snapshots' buffers (tens of
    # MB at a million actions) go back to the system when freed.
    return_large_buffers_to_the_system()
    data_dir = DataDir(root)
    registry = Registry(FileStore(data_dir), data_dir.prepare(), render=BY_COMMAND)
    registry.load()
    await registry.start()
    await registry.create("agent-1", parse_policy(POLICY))
    tune_gc()
    ref = registry.ref("agent-1")
    asked = 0

    async def ask_until(count: int) -> None:
        nonlocal asked

        async def asker() -> None:
            nonlocal asked
            while asked < count:
                asked += 1
                key = f"bench-key-{asked:012d}"
                reply = await ref.ask(c.RequestAction("web_search", {"q": 1}, None, key))
                assert reply["decision"] == "allowed", reply

        await asyncio.gather(*(asker() for _ in range(ASKERS)))

    await ask_until(FLOOR_ACTIONS)
    gc.collect()
    floor = _rss_kib()
    await ask_until(actions)
    gc.collect()
    end = _rss_kib()
    state = registry.actors["agent-1"].state
    facts = {
        "floor_kib": floor,
        "end_kib": end,
        "actions": state.action_count,
        "latest_actions": len(state.action_seqs),
        "held": len(state.held),
        "recent_keys": len(state.idempotency),
        "keys_in_runs": sum(len(run) for run in state.old_keys),
        "runs": len(state.old_keys),
    }
    await registry.stop()
    return facts


def one_agent(actions: int) -> dict[str, Any]:
    """RSS of one agent's process after FLOOR_ACTIONS and after ``actions``
    actions, measured in a fresh child process."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.memory_bench", "--child-actions", str(actions)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    facts: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    ratio = facts["end_kib"] / facts["floor_kib"]
    verdict = "met" if ratio <= TARGET_ACTIONS_RATIO else "MISSED"
    print(
        f"memory_bench: one agent, {facts['actions']:,} actions with Idempotency-Keys"
        f" ({facts['recent_keys']:,} recent keys, {facts['keys_in_runs']:,} in"
        f" {facts['runs']} runs; {facts['latest_actions']:,} actions' seq and status"
        f" in memory, {facts['held']:,} held)\n"
        f"\n| actions | RSS after {FLOOR_ACTIONS:,} MiB | RSS after all MiB | ratio | target |\n"
        f"|---|---|---|---|---|\n"
        f"| {actions:,} | {facts['floor_kib'] / 1024:.1f} | {facts['end_kib'] / 1024:.1f}"
        f" | {ratio:.2f}x | <= {TARGET_ACTIONS_RATIO:g}x: {verdict} |"
    )
    return {
        "actions": actions,
        "floor_rss_mib": round(facts["floor_kib"] / 1024, 1),
        "end_rss_mib": round(facts["end_kib"] / 1024, 1),
        "ratio": round(ratio, 3),
        "target_ratio": TARGET_ACTIONS_RATIO,
        "pass": ratio <= TARGET_ACTIONS_RATIO,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; ``argv`` None means the defaults and BENCH_* variables."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--agents", type=int, default=int(os.environ.get("BENCH_MEMORY_AGENTS", 10000))
    )
    parser.add_argument("--records", type=int, default=8, help="records per log (default 8)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument(
        "--actions",
        type=int,
        help=f"measure one agent instead: RSS after {FLOOR_ACTIONS:,} and after this many actions",
    )
    parser.add_argument(
        "--served",
        type=int,
        help="measure agents created over HTTP and asked once instead: KiB per agent",
    )
    parser.add_argument("--child-actions", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args([] if argv is None else argv)
    if args.served is not None:
        result = served_agents(args.served)
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return result
    if args.child_actions is not None:
        with tempfile.TemporaryDirectory(prefix="guard-memory-bench-") as tmp:
            facts = asyncio.run(_one_agent(Path(tmp), args.child_actions))
        print(json.dumps(facts))
        return facts
    if args.actions is not None:
        if args.actions <= FLOOR_ACTIONS:
            parser.error(f"--actions must be above {FLOOR_ACTIONS:,}")
        result = one_agent(args.actions)
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return result

    root = cached_data_dir(args.agents, args.records)
    disk = sum(p.stat().st_size for p in (root / "agents").iterdir())
    print(
        f"memory_bench: {args.agents} agents x {args.records} records"
        f" ({disk / args.agents:,.0f} bytes of log each); load {os.getloadavg()[0]:.2f}"
    )
    empties: list[int] = []
    loadeds: list[int] = []
    with tempfile.TemporaryDirectory(prefix="guard-memory-bench-") as tmp:
        for k in range(args.rounds):
            empty, _ = idle_rss(Path(tmp) / f"empty-{k}" / "guard-data", Path(tmp))
            before = fingerprint(root)
            loaded, ready = idle_rss(root, Path(tmp))
            unchanged(root, before)
            empties.append(empty)
            loadeds.append(loaded)
            print(
                f"  round {k + 1}: empty {empty / 1024:.1f} MiB, loaded {loaded / 1024:.1f} MiB"
                f" (ready after {ready:.1f} s; load {os.getloadavg()[0]:.2f})"
            )
    empty, loaded = min(empties), min(loadeds)
    per_agent = (loaded - empty) / args.agents
    verdict = "met" if per_agent <= TARGET_KIB_PER_AGENT else "MISSED"
    print(
        f"\n| agents | empty RSS MiB | loaded RSS MiB | KiB per agent | target |\n"
        f"|---|---|---|---|---|\n"
        f"| {args.agents} x {args.records} records | {empty / 1024:.1f} | {loaded / 1024:.1f}"
        f" | {per_agent:.1f} | <= {TARGET_KIB_PER_AGENT}: {verdict} |"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"empty_kib": empties, "loaded_kib": loadeds, "kib_per_agent": per_agent}, indent=1
            )
        )
    return {
        "agents": args.agents,
        "records_per_agent": args.records,
        "empty_rss_mib": round(empty / 1024, 1),
        "loaded_rss_mib": round(loaded / 1024, 1),
        "kib_per_agent": round(per_agent, 2),
        "target_kib_per_agent": TARGET_KIB_PER_AGENT,
        "pass": per_agent <= TARGET_KIB_PER_AGENT,
    }


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]).get("pass") is not False else 1)
