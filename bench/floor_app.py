"""The floor for the HTTP benchmark: a bare Quart app on guardd's own
Hypercorn settings and event loop, with routes shaped like guardd's.

Each POST route parses the JSON body and answers a JSON body of the size
guardd answered to the same request; ``GET /v1/agents/<id>`` answers a body
of the size of an agent status. No auth, no actor, no signing, no disk: what
any Python JSON service on this stack pays per request. The benchmark sets
the sizes through ``PUT /_sizes`` before a round, from guardd's real answers.

    python -m bench.floor_app --port 9300
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from hypercorn.asyncio import serve
from quart import Quart, request

from guardd.__main__ import hypercorn_config, run_event_loop

DEFAULT_SIZES = {"decision": 96, "status": 400}


def create_floor_app() -> Quart:
    app = Quart("floor", static_folder=None)
    bodies: dict[str, dict[str, Any]] = {}

    def padded(name: str, size: int) -> dict[str, Any]:
        """A JSON object whose response body is exactly ``size`` bytes."""
        body: dict[str, Any] = {"ok": True, "pad": ""}
        empty = len(app.json.dumps(body)) + 1  # Quart's JSON provider ends with a newline
        body["pad"] = "x" * max(0, size - empty)
        return body

    def set_sizes(sizes: dict[str, int]) -> None:
        for name, size in sizes.items():
            bodies[name] = padded(name, int(size))

    set_sizes(DEFAULT_SIZES)

    @app.put("/_sizes")
    async def sizes() -> dict[str, Any]:
        set_sizes(await request.get_json())
        return {"sizes": {name: len(app.json.dumps(b)) + 1 for name, b in bodies.items()}}

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"ok": True}

    @app.post("/v1/agents/<agent_id>/actions")
    async def request_action(agent_id: str) -> dict[str, Any]:
        await request.get_json()
        return bodies["decision"]

    @app.post("/v1/agents/<agent_id>/actions/<action_id>/outcome")
    async def outcome(agent_id: str, action_id: str) -> dict[str, Any]:
        await request.get_json()
        return bodies["status"]

    @app.get("/v1/agents/<agent_id>")
    async def status(agent_id: str) -> dict[str, Any]:
        return bodies["status"]

    return app


async def _serve(host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(create_floor_app(), hypercorn_config(host, port), shutdown_trigger=stop.wait)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor_app", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9300)
    args = parser.parse_args(argv)
    print(f"floor listening on http://{args.host}:{args.port}", flush=True)
    run_event_loop(_serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
