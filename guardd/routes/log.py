"""An agent's signed log: read its records, verify its chain and signatures.

The actor hands out what is committed (a ``LogView``); reading it back from
the store happens off the event loop."""

from __future__ import annotations

import asyncio

from quart import Response, request

from agents_runtime.core import commands as c
from agents_runtime.log.readback import read_records, verify_committed
from agents_runtime.runtime.actor import LogView
from guardd.jsonio import json_response
from guardd.routes.common import (
    LOG_LIMIT_DEFAULT,
    LOG_LIMIT_MAX,
    Service,
    ServiceBlueprint,
    agent,
    int_param,
)

blueprint = ServiceBlueprint("log", __name__)


@blueprint.get("/v1/agents/<agent_id>/log")
async def read_log(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    after = int_param("after", request.args.get("after"), default=-1, minimum=-1)
    limit = int_param("limit", request.args.get("limit"), default=LOG_LIMIT_DEFAULT, minimum=1)
    limit = min(limit, LOG_LIMIT_MAX)
    view: LogView = await ref.ask(c.GetLogView())
    records = await asyncio.to_thread(read_records, view.log, view.committed, after, limit)
    return json_response({"records": records, "head": view.head.to_json()})


@blueprint.get("/v1/agents/<agent_id>/verify")
async def verify(service: Service, agent_id: str) -> Response:
    _, ref = agent(service, agent_id, admin_only=True)
    view: LogView = await ref.ask(c.GetLogView())
    public_key = service.guard.ring.public_key
    report = await asyncio.to_thread(
        verify_committed, view.log, view.committed, public_key, fenced=view.fenced
    )
    if report.ok:
        assert report.head is not None
        return json_response(
            {
                "ok": True,
                "records": report.records,
                "public_key": report.public_key,
                "head": report.head.to_json(),
            }
        )
    assert report.failure is not None
    return json_response(
        {"ok": False, "records": report.records, "failure": report.failure.to_json()}
    )
