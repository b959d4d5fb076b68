"""guardd.routes.actions alone: the decision path and an action's view."""

from __future__ import annotations

from pathlib import Path

from guardd.routes import actions
from tests.guardd.routes.support import policy, served


async def test_ask_then_view_the_action(tmp_path: Path) -> None:
    async with served(tmp_path, actions.blueprint, metrics=True) as app:
        await app.service.guard.registry.create("a1", policy())
        own = app.agent("a1")
        asked = await app.client.post(
            "/v1/agents/a1/actions",
            json={"tool": "read", "input": {"q": 1}},
            headers={**own, "Idempotency-Key": "k-1"},
        )
        assert asked.status_code == 200
        decision = await asked.get_json()
        assert decision["decision"] == "allowed"
        again = await app.client.post(
            "/v1/agents/a1/actions",
            json={"tool": "read", "input": {"q": 1}},
            headers={**own, "Idempotency-Key": "k-1"},
        )
        assert await again.get_json() == decision
        viewed = await app.client.get(f"/v1/agents/a1/actions/{decision['action_id']}", headers=own)
        assert (await viewed.get_json())["status"] == "allowed"
        assert app.service.meter is not None
        assert b'decision="allowed"' in app.service.meter.exposition()


async def test_bad_query_and_header_are_400(tmp_path: Path) -> None:
    async with served(tmp_path, actions.blueprint) as app:
        await app.service.guard.registry.create("a1", policy())
        own = app.agent("a1")
        waited = await app.client.get("/v1/agents/a1/actions/act-1?wait=61", headers=own)
        assert (waited.status_code, (await waited.get_json())["code"]) == (400, "bad_request")
        keyed = await app.client.post(
            "/v1/agents/a1/actions", json={"tool": "read"}, headers={**own, "Idempotency-Key": ""}
        )
        assert keyed.status_code == 400
        assert "Idempotency-Key" in (await keyed.get_json())["error"]
