"""The service itself: liveness, readiness, the public key, how the console
signs in, the OpenAPI document and, when metrics are on, ``/metrics`` (a blueprint of its own, so
that without metrics the path does not exist at all: 404, never 405)."""

from __future__ import annotations

from quart import Response

from guardd import replies, views
from guardd.auth import VIEWER
from guardd.endpoints import OPERATOR, PUBLIC, Reply
from guardd.errors import ApiNotFound, error_response
from guardd.jsonio import json_response
from guardd.metrics import metrics_response
from guardd.openapi import document
from guardd.routes.common import Service, ServiceBlueprint

blueprint = ServiceBlueprint("meta", __name__, tag="service")
metrics_blueprint = ServiceBlueprint("metrics", __name__, tag="service")


@blueprint.endpoint("GET", "/healthz", "Liveness", caller=PUBLIC, reply=Reply(replies.Ok, "Up."))
async def healthz(service: Service) -> Response:
    return json_response(views.OK)


@blueprint.endpoint(
    "GET",
    "/readyz",
    "Readiness: whether this node can decide now",
    caller=PUBLIC,
    reply=Reply(replies.Ok, "Ready: agents loaded, the log store takes writes."),
    errors=("unavailable",),
)
async def readyz(service: Service) -> Response:
    reason = await service.readiness.reason()
    if reason is not None:
        return error_response("unavailable", f"not ready: {reason}")
    return json_response(views.OK)


@blueprint.endpoint(
    "GET",
    "/v1/public-key",
    "The Ed25519 key that signs every log",
    caller=PUBLIC,
    reply=Reply(replies.PublicKey, "The public key."),
)
async def public_key(service: Service) -> Response:
    return json_response(views.public_key(service.guard.ring.public_key_hex))


@blueprint.endpoint(
    "GET",
    "/v1/auth/config",
    "How the console signs people in (OpenID Connect)",
    caller=PUBLIC,
    reply=Reply(replies.AuthConfig, "The issuer, the console's client ID and the scopes."),
    errors=("not_found",),
    description="Absent (404 not_found) unless guardd runs with --oidc-issuer. The console "
    "signs in with the Authorization Code flow and PKCE as a public client, straight "
    "against the issuer, and sends the ID token as its bearer token.",
)
async def auth_config(service: Service) -> Response:
    oidc = service.guard.oidc
    if oidc is None:
        raise ApiNotFound("single sign-on is not configured (guardd runs without --oidc-issuer)")
    config = oidc.config
    return json_response(views.auth_config(config.issuer, config.client_id, config.scopes))


@blueprint.endpoint(
    "GET",
    "/v1/openapi.json",
    "This document",
    caller=PUBLIC,
    reply=Reply(dict[str, object], "OpenAPI 3.1."),
)
async def openapi(service: Service) -> Response:
    return json_response(document(service.endpoints))


@metrics_blueprint.endpoint(
    "GET",
    "/metrics",
    "Metrics in the Prometheus text format (admin token only)",
    caller=OPERATOR,
    role=VIEWER,
    reply=Reply(str, "Prometheus text format 0.0.4.", media=("text/plain",)),
    errors=("not_found",),
    description="Absent (404 not_found) when guardd runs with --no-metrics. "
    "A --metrics-listen address serves the same text without a token.",
)
async def metrics_page(service: Service) -> Response:
    assert service.meter is not None, "registered only when metrics are on"
    return metrics_response(service.meter)
