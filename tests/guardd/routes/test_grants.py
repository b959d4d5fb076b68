"""guardd.routes.grants alone: issue, list and revoke a grant."""

from __future__ import annotations

from pathlib import Path

from guardd.routes import grants
from tests.guardd.routes.support import policy, served


async def test_issue_list_revoke(tmp_path: Path) -> None:
    async with served(tmp_path, grants.blueprint) as app:
        await app.service.guard.registry.create("a1", policy())
        base = "/v1/agents/a1/grants"
        grant = {"tool": "read", "by": "ann", "max_calls": 2, "ttl_secs": 60}
        issued = await app.client.post(base, json=grant, headers=app.admin)
        assert issued.status_code == 201
        grant_id = (await issued.get_json())["grant_id"]
        listed = await (await app.client.get(base, headers=app.admin)).get_json()
        assert [g["grant_id"] for g in listed["grants"]] == [grant_id]
        revoked = await app.client.post(
            f"{base}/{grant_id}/revoke", json={"by": "ann"}, headers=app.admin
        )
        assert (await revoked.get_json())["status"] == "revoked"
        by_agent = await app.client.get(base, headers=app.agent("a1"))
        assert by_agent.status_code == 403
