"""The HTTP API: builds the app around a Guard. The routes are blueprints in
guardd.routes (one module per resource), each route declared as an endpoint
(guardd.endpoints) that is authenticated, parsed and handed to it; a route
forwards one command to the agent's actor and answers its reply; errors are
answered by guardd.errors. ``document()`` is the service's OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from quart import Quart, Response, g, request
from quart.sessions import NullSession, SecureCookieSessionInterface, SessionMixin
from quart.wrappers import BaseRequestWebsocket, Body

from agents_runtime.runtime.actor import Renders
from guardd import views
from guardd.config import DEFAULT_HOOK_WAIT
from guardd.errors import register_error_handlers
from guardd.jsonio import MAX_BODY, SECURITY_HEADERS
from guardd.limits import BODY_DEADLINE, Limits
from guardd.metrics import Metrics, TimedQuart
from guardd.openapi import document as openapi_document
from guardd.routes import (
    actions,
    agents,
    console,
    grants,
    hooks,
    log,
    meta,
    operators,
    passkeys,
    policies,
    shadow,
)
from guardd.routes.common import Guard, Service, ServiceBlueprint

if TYPE_CHECKING:
    from guardd.tracing import Tracer

__all__ = ["BLUEPRINTS", "BY_COMMAND", "Guard", "NoSessions", "create_app", "document"]

# Every blueprint of the service, in the order the app registers them; the
# metrics' own last, and only when metrics are on.
BLUEPRINTS: tuple[ServiceBlueprint, ...] = (
    meta.blueprint,
    console.blueprint,
    agents.blueprint,
    actions.blueprint,
    grants.blueprint,
    policies.blueprint,
    shadow.blueprint,
    log.blueprint,
    hooks.blueprint,
    operators.blueprint,
    passkeys.blueprint,
    meta.metrics_blueprint,
)

# Each command's reply view, as the endpoints that send the commands declare
# it: handed to the registry, whose actors render replies in their turn.
BY_COMMAND: Renders = views.in_turn(
    declared for blueprint in BLUEPRINTS for declared in blueprint.declared.values()
)


def document() -> dict[str, Any]:
    """The OpenAPI document of the whole service (metrics on): what
    ``GET /v1/openapi.json`` serves, built from every endpoint's declaration."""
    return openapi_document(
        declared for blueprint in BLUEPRINTS for declared in blueprint.declared.values()
    )


class NoSessions(SecureCookieSessionInterface):
    """guardd keeps no sessions: hand every request one shared null session
    instead of building an empty one per request."""

    _null = NullSession()

    async def open_session(self, app: Quart, request: BaseRequestWebsocket) -> NullSession:
        return self._null

    async def save_session(self, app: Quart, session: SessionMixin, response: object) -> None:
        pass


def create_app(
    guard: Guard,
    *,
    metrics: bool = True,
    hook_wait: float = DEFAULT_HOOK_WAIT,
    tracer: Tracer | None = None,
) -> Quart:
    """The app; with ``metrics`` a TimedQuart whose ``metrics`` it keeps,
    otherwise a plain Quart that times nothing and has no /metrics.
    ``hook_wait``: seconds a Claude Code hook waits for an operator;
    ``tracer``: where its spans go (None: no traces)."""
    meter = Metrics(guard.registry) if metrics else None
    if meter is None:
        app = Quart("guardd", static_folder=None)
    else:
        app = TimedQuart("guardd", static_folder=None)
        app.metrics = meter
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.config["BODY_TIMEOUT"] = BODY_DEADLINE
    # Counts what requests in flight may buffer; refuses beyond guardd.limits.
    app.asgi_app = Limits(app.asgi_app)  # type: ignore[method-assign]  # Quart's middleware hook
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    app.session_interface = NoSessions()
    register_error_handlers(app)
    service = Service(guard, meter, hook_wait=hook_wait, tracer=tracer)
    registry = guard.registry
    oidc = guard.oidc

    @app.while_serving
    async def _actors() -> AsyncGenerator[None, None]:
        await registry.start()
        await guard.operators.start()
        if oidc is not None:
            await oidc.start()
        yield
        service.readiness.stopping = True
        await guard.operators.stop()
        await registry.stop()
        if oidc is not None:
            await oidc.aclose()

    @app.after_request
    async def _finish(response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():  # present already in json_response's
            response.headers.setdefault(name, value)
        if not g.get("body_read") and _body_pending(request.body):
            # An answer given before the body has arrived (401, 403, 404, 413,
            # a body too slow, ...): it goes at once and the rest of the body
            # is never read, so a client without a token cannot make guardd
            # hold its body. Hypercorn then closes the connection (the next
            # request on it could not be told from the rest of this body);
            # the answer says so, and the client's next request opens a new one.
            response.headers["Connection"] = "close"
        return response

    for blueprint in BLUEPRINTS:
        if blueprint is not meta.metrics_blueprint or meter is not None:
            app.register_blueprint(blueprint, service=service)
    return app


def _body_pending(body: Body) -> bool:
    """True while some of ``body`` has yet to arrive, or when Quart stopped
    taking it (too large). Quart keeps these two facts in private fields."""
    return not body._complete.is_set() or body._must_raise is not None
