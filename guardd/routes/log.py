"""An agent's signed log: read its records, verify its chain and signatures.

The actor hands out what is committed (a ``LogView``); reading it back from
the store happens off the event loop."""

from __future__ import annotations

import asyncio

from quart import Response

from agents_runtime.core import commands as c
from agents_runtime.log.readback import read_records, verify_committed
from agents_runtime.runtime.actor import AgentRef, LogView
from guardd import replies, views
from guardd.auth import VIEWER
from guardd.endpoints import AFTER, LIMIT, OPERATOR, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint

blueprint = ServiceBlueprint("log", __name__, tag="agents")


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/log",
    "Signed log records",
    caller=OPERATOR,
    role=VIEWER,
    query=(AFTER, LIMIT),
    reply=Reply(replies.LogPage, "Records with seq greater than `after`, and the head."),
)
async def read_log(service: Service, ref: AgentRef, after: int, limit: int) -> Response:
    view: LogView = await ref.ask(c.GetLogView())
    records = await asyncio.to_thread(read_records, view.log, view.committed, after, limit)
    return json_response(views.log_page(records, view.head))


@blueprint.endpoint(
    "GET",
    "/v1/agents/<agent_id>/verify",
    "Verify the log's chain and signatures",
    caller=OPERATOR,
    role=VIEWER,
    reply=Reply(replies.VerifyReport, "The verification report."),
    description="Checks against the server's public key.",
)
async def verify(service: Service, ref: AgentRef) -> Response:
    view: LogView = await ref.ask(c.GetLogView())
    public_key = service.guard.ring.public_key
    report = await asyncio.to_thread(
        verify_committed, view.log, view.committed, public_key, fenced=view.fenced
    )
    return json_response(views.verify_report(report))
