"""guardd.routes.meta alone: health, readiness, the key, the document, and
/metrics only where its blueprint is registered."""

from __future__ import annotations

from pathlib import Path

import pytest
from quart import Quart

from guardd.openapi import document
from guardd.routes import meta
from tests.guardd.routes.support import served


async def test_service_routes(tmp_path: Path) -> None:
    async with served(tmp_path, meta.blueprint) as app:
        assert await (await app.client.get("/healthz")).get_json() == {"ok": True}
        assert (await app.client.get("/readyz")).status_code == 200
        key = await (await app.client.get("/v1/public-key")).get_json()
        assert key["public_key"] == app.service.guard.ring.public_key_hex
        # The document of this app: its one blueprint's endpoints.
        answered = await (await app.client.get("/v1/openapi.json")).get_json()
        assert answered == document(meta.blueprint.declared.values())
        assert set(answered["paths"]) == {
            "/healthz",
            "/readyz",
            "/v1/public-key",
            "/v1/openapi.json",
            "/v1/auth/config",
        }
        assert (await app.client.get("/metrics", headers=app.admin)).status_code == 404


async def test_metrics_needs_the_admin_token(tmp_path: Path) -> None:
    async with served(tmp_path, meta.metrics_blueprint, metrics=True) as app:
        assert (await app.client.get("/metrics")).status_code == 401
        page = await app.client.get("/metrics", headers=app.admin)
        assert page.status_code == 200
        assert page.headers["Content-Type"].startswith("text/plain")


def test_a_blueprint_registered_without_a_service_is_refused() -> None:
    with pytest.raises(TypeError, match="service="):
        Quart("bare").register_blueprint(meta.blueprint)
