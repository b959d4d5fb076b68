"""guardd.routes.agents alone: create an agent, read it with its own token."""

from __future__ import annotations

from pathlib import Path

from guardd.routes import agents
from tests.guardd.routes.support import served

POLICY = {"budget": 10, "scar_limit": 5, "tools": {"read": {"cost": 1}}}


async def test_create_then_read_with_the_agent_token(tmp_path: Path) -> None:
    async with served(tmp_path, agents.blueprint) as app:
        client = app.client
        created = await client.post(
            "/v1/agents", json={"agent_id": "a1", "policy": POLICY}, headers=app.admin
        )
        assert created.status_code == 201
        body = await created.get_json()
        assert body["agent"]["agent_id"] == "a1"
        own = {"Authorization": f"Bearer {body['token']}"}
        status = await client.get("/v1/agents/a1", headers=own)
        assert status.status_code == 200
        assert (await status.get_json())["budget"] == 10
        assert (await client.get("/v1/agents/a1/policy", headers=own)).status_code == 200


async def test_errors_keep_their_codes_and_other_blueprints_are_absent(tmp_path: Path) -> None:
    async with served(tmp_path, agents.blueprint) as app:
        client = app.client
        listed = await client.get("/v1/agents", headers=app.agent("a1"))
        assert listed.status_code == 403
        assert (await listed.get_json())["code"] == "forbidden"
        missing = await client.get("/v1/agents/ghost", headers=app.admin)
        assert (missing.status_code, (await missing.get_json())["code"]) == (404, "not_found")
        # The actions blueprint is not registered here: its path is unknown.
        asked = await client.post("/v1/agents/a1/actions", json={}, headers=app.admin)
        assert asked.status_code == 404
