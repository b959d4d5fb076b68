"""guardd.routes.log alone: read records back and verify the chain."""

from __future__ import annotations

from pathlib import Path

from guardd.routes import log
from tests.guardd.routes.support import policy, served


async def test_read_and_verify(tmp_path: Path) -> None:
    async with served(tmp_path, log.blueprint) as app:
        await app.service.guard.registry.create("a1", policy())
        read = await app.client.get("/v1/agents/a1/log?after=-1&limit=1", headers=app.admin)
        assert read.status_code == 200
        body = await read.get_json()
        assert [r["seq"] for r in body["records"]] == [0]
        assert body["head"]["seq"] >= 0
        answer = await app.client.get("/v1/agents/a1/verify", headers=app.admin)
        verified = await answer.get_json()
        assert verified["ok"] is True
        assert verified["head"] == body["head"]


async def test_bad_limit_is_400(tmp_path: Path) -> None:
    async with served(tmp_path, log.blueprint) as app:
        await app.service.guard.registry.create("a1", policy())
        read = await app.client.get("/v1/agents/a1/log?limit=0", headers=app.admin)
        assert read.status_code == 400
        assert await read.get_json() == {"error": "limit must be at least 1", "code": "bad_request"}
