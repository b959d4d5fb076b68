"""The service itself: liveness, readiness, the public key, the OpenAPI
document and, when metrics are on, ``/metrics`` (a blueprint of its own, so
that without metrics the path does not exist at all: 404, never 405)."""

from __future__ import annotations

from quart import Response

from guardd.auth import require_admin
from guardd.errors import error_response
from guardd.jsonio import json_response
from guardd.metrics import metrics_response
from guardd.openapi import document
from guardd.routes.common import Service, ServiceBlueprint, caller

blueprint = ServiceBlueprint("meta", __name__)
metrics_blueprint = ServiceBlueprint("metrics", __name__)


@blueprint.get("/healthz")
async def healthz(service: Service) -> Response:
    return json_response({"ok": True})


@blueprint.get("/readyz")
async def readyz(service: Service) -> Response:
    reason = await service.readiness.reason()
    if reason is not None:
        return error_response("unavailable", f"not ready: {reason}")
    return json_response({"ok": True})


@blueprint.get("/v1/public-key")
async def public_key(service: Service) -> Response:
    ring = service.guard.ring
    return json_response({"public_key": ring.public_key_hex, "algorithm": "ed25519"})


@blueprint.get("/v1/openapi.json")
async def openapi(service: Service) -> Response:
    return json_response(document())


@metrics_blueprint.get("/metrics")
async def metrics_page(service: Service) -> Response:
    require_admin(caller(service))
    assert service.meter is not None, "registered only when metrics are on"
    return metrics_response(service.meter)
