"""guardd.routes.common: what a declared endpoint hands its route, in which
order it checks, and the declarations it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from quart import Response

from agents_runtime.runtime.actor import AgentRef
from guardd import bodies, replies
from guardd.auth import Caller
from guardd.endpoints import AGENT, OPERATOR, PUBLIC, WAIT, Reply
from guardd.jsonio import json_response
from guardd.routes.common import Service, ServiceBlueprint
from tests.guardd.routes.support import policy, served

OK = Reply(replies.Ok, "Done.")


def _probe() -> tuple[ServiceBlueprint, list[dict[str, Any]]]:
    """A blueprint whose one route records what it was handed."""
    probe = ServiceBlueprint("probe", __name__, tag="agents")
    handed: list[dict[str, Any]] = []

    @probe.endpoint(
        "POST",
        "/v1/agents/<agent_id>/probe/<action_id>",
        "Probe",
        caller=AGENT,
        role="viewer",
        query=(WAIT,),
        body=bodies.ApproveBody,
        reply=OK,
    )
    async def probe_route(
        service: Service,
        who: Caller,
        ref: AgentRef,
        action_id: str,
        wait: float,
        body: bodies.ApproveBody,
    ) -> Response:
        handed.append(
            {"who": who, "agent": ref.agent_id, "action_id": action_id, "wait": wait, "body": body}
        )
        return json_response({"ok": True})

    return probe, handed


async def test_a_route_is_handed_the_caller_its_agent_its_parameters_and_its_body(
    tmp_path: Path,
) -> None:
    probe, handed = _probe()
    async with served(tmp_path, probe) as app:
        await app.service.guard.registry.create("a1", policy())
        answer = await app.client.post(
            "/v1/agents/a1/probe/act-7?wait=1.5",
            json={"approver": "ann", "note": "n"},
            headers=app.agent("a1"),
        )
        assert answer.status_code == 200
    assert handed == [
        {
            "who": Caller("agent", "a1"),
            "agent": "a1",
            "action_id": "act-7",
            "wait": 1.5,
            "body": bodies.ApproveBody("ann", "n"),
        }
    ]


@pytest.mark.parametrize(
    ("path", "token", "status"),
    [
        pytest.param("/v1/agents/a1/probe/act-1", None, 401, id="no-token"),
        pytest.param("/v1/agents/a1/probe/act-1", "other", 403, id="another-agent"),
        pytest.param("/v1/agents/ghost/probe/act-1", "admin", 404, id="no-such-agent"),
        pytest.param("/v1/agents/a1/probe/act-1?wait=x", "own", 400, id="bad-query"),
    ],
)
async def test_who_may_call_and_the_query_are_checked_before_the_body(
    tmp_path: Path, path: str, token: str | None, status: int
) -> None:
    probe, handed = _probe()
    async with served(tmp_path, probe) as app:
        await app.service.guard.registry.create("a1", policy())
        headers = {
            None: {},
            "other": app.agent("a2"),
            "admin": app.admin,
            "own": app.agent("a1"),
        }[token]
        # Not JSON: a 400 for it would mean the body was read first.
        answer = await app.client.post(path, data=b"not json", headers=headers)
        assert answer.status_code == status
        assert "JSON" not in (await answer.get_json())["error"]
    assert handed == []


def _declare(**declaration: Any) -> Any:
    blueprint = ServiceBlueprint("bad", __name__, tag="agents")
    return blueprint.endpoint("GET", declaration.pop("rule"), "Bad", reply=OK, **declaration)


async def _takes_nothing(service: Service) -> Response:
    raise AssertionError


async def _takes_a_stranger(service: Service, ref: AgentRef, stranger: str) -> Response:
    raise AssertionError


async def _takes_no_service(ref: AgentRef) -> Response:
    raise AssertionError


@pytest.mark.parametrize(
    ("declaration", "route", "message"),
    [
        pytest.param(
            {"rule": "/v1/agents/<agent_id>", "caller": OPERATOR},
            _takes_a_stranger,
            r"^_takes_a_stranger: nothing hands it \['stranger'\]$",
            id="unknown-parameter",
        ),
        pytest.param(
            {"rule": "/v1/agents/<agent_id>", "caller": OPERATOR, "body": bodies.CancelBody},
            _takes_nothing,
            r"^_takes_nothing: it must take \['body'\]$",
            id="body-not-taken",
        ),
        pytest.param(
            {"rule": "/v1/things/<action_id>", "caller": PUBLIC, "query": (WAIT,)},
            _takes_nothing,
            r"^_takes_nothing: it must take \['action_id', 'wait'\]$",
            id="parameters-not-taken",
        ),
        pytest.param(
            {"rule": "/v1/things", "caller": AGENT},
            _takes_nothing,
            r"^_takes_nothing: an agent's own token needs a path that names the agent$",
            id="agent-token-without-agent",
        ),
        pytest.param(
            {"rule": "/v1/agents/<agent_id>", "caller": OPERATOR, "role": "owner"},
            _takes_nothing,
            r"^_takes_nothing: no such role 'owner'$",
            id="unknown-role",
        ),
        pytest.param(
            {"rule": "/v1/agents/<agent_id>", "caller": AGENT},
            _takes_nothing,
            r"^_takes_nothing: an agent's endpoint names the role an operator needs$",
            id="agent-endpoint-without-role",
        ),
        pytest.param(
            {"rule": "/v1/things", "caller": PUBLIC, "role": "viewer"},
            _takes_nothing,
            r"^_takes_nothing: only an operator's endpoint names a role$",
            id="public-endpoint-with-role",
        ),
        pytest.param(
            {"rule": "/v1/agents/<agent_id>", "caller": OPERATOR},
            _takes_no_service,
            r"^_takes_no_service: a route takes the service first$",
            id="no-service",
        ),
    ],
)
def test_a_route_that_cannot_take_what_it_declares_is_refused_at_import(
    declaration: dict[str, Any], route: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        _declare(**declaration)(route)
