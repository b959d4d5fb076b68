"""The HTTP API. Handlers only parse, authenticate, forward one command to
the agent's actor and map the reply; errors are answered by guardd.errors."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from pathlib import Path

import attrs
from quart import Quart, Response, g, request
from quart.sessions import NullSession, SecureCookieSessionInterface, SessionMixin
from quart.wrappers import BaseRequestWebsocket, Body

import console
from agents_runtime.core import commands as c
from agents_runtime.core.vocabulary import ActionStatus
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.keys import KeyRing, agent_token
from agents_runtime.log.readback import read_records, verify_committed
from agents_runtime.runtime.actor import AgentRef, LogView
from agents_runtime.runtime.registry import Registry
from guardd import bodies
from guardd.auth import Authenticator, Caller, require_admin, require_agent_or_admin
from guardd.errors import BadRequest, error_response, register_error_handlers
from guardd.jsonio import MAX_BODY, SECURITY_HEADERS, json_response, read_json
from guardd.limits import BODY_DEADLINE, Limits
from guardd.metrics import Metrics, TimedQuart, metrics_response
from guardd.readiness import Readiness

MAX_WAIT = 60
LOG_LIMIT_DEFAULT = 500
LOG_LIMIT_MAX = 5000
MAX_IDEMPOTENCY_KEY = 128

CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
CONSOLE_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}


@attrs.define
class Guard:
    """What the app serves: the registry of agents and the keys."""

    data_dir: DataDir
    ring: KeyRing
    registry: Registry
    auth: Authenticator


class NoSessions(SecureCookieSessionInterface):
    """guardd keeps no sessions: hand every request one shared null session
    instead of building an empty one per request."""

    _null = NullSession()

    async def open_session(self, app: Quart, request: BaseRequestWebsocket) -> NullSession:
        return self._null

    async def save_session(self, app: Quart, session: SessionMixin, response: object) -> None:
        pass


def create_app(guard: Guard, *, metrics: bool = True) -> Quart:
    """The app; with ``metrics`` a TimedQuart whose ``metrics`` it keeps,
    otherwise a plain Quart that times nothing and has no /metrics."""
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
    registry = guard.registry
    readiness = Readiness(guard.data_dir.root, read_only=guard.ring.read_only)

    @app.while_serving
    async def _actors() -> AsyncGenerator[None, None]:
        await registry.start()
        yield
        readiness.stopping = True
        await registry.stop()

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

    def caller() -> Caller:
        return guard.auth.caller(request.headers.get("Authorization"))

    def agent(agent_id: str, *, admin_only: bool = False) -> tuple[Caller, AgentRef]:
        who = caller()
        if admin_only:
            require_admin(who)
        else:
            require_agent_or_admin(who, agent_id)
        return who, registry.ref(agent_id)

    # -- unauthenticated -------------------------------------------------------

    @app.get("/healthz")
    async def healthz() -> Response:
        return json_response({"ok": True})

    if meter is not None:

        @app.get("/metrics")
        async def metrics_page() -> Response:
            require_admin(caller())
            return metrics_response(meter)

    @app.get("/readyz")
    async def readyz() -> Response:
        reason = await readiness.reason()
        if reason is not None:
            return error_response("unavailable", f"not ready: {reason}")
        return json_response({"ok": True})

    @app.get("/v1/public-key")
    async def public_key() -> Response:
        return json_response({"public_key": guard.ring.public_key_hex, "algorithm": "ed25519"})

    @app.get("/v1/openapi.json")
    async def openapi() -> Response:
        from guardd.openapi import document

        return json_response(document())

    @app.get("/")
    async def console_index() -> Response:
        return _console_file("index.html")

    @app.get("/console/<name>")
    async def console_asset(name: str) -> Response:
        return _console_file(name)

    # -- agents ----------------------------------------------------------------

    @app.post("/v1/agents")
    async def create_agent() -> Response:
        require_admin(caller())
        body = bodies.parse_body(await read_json(), bodies.CreateAgent)
        policy = bodies.parse_policy_body(body.policy, "$.policy")
        status = await registry.create(body.agent_id, policy)
        token = agent_token(guard.ring.token_key, body.agent_id)
        return json_response({"agent": status, "token": token}, 201)

    @app.get("/v1/agents")
    async def list_agents() -> Response:
        require_admin(caller())
        return json_response({"agents": await registry.list()})

    @app.get("/v1/agents/<agent_id>")
    async def agent_status(agent_id: str) -> Response:
        _, ref = agent(agent_id)
        return json_response(await ref.ask(c.GetStatus()))

    @app.get("/v1/agents/<agent_id>/token")
    async def reissue_token(agent_id: str) -> Response:
        agent(agent_id, admin_only=True)
        return json_response({"token": agent_token(guard.ring.token_key, agent_id)})

    @app.get("/v1/agents/<agent_id>/policy")
    async def get_policy(agent_id: str) -> Response:
        _, ref = agent(agent_id)
        return json_response(await ref.ask(c.GetPolicy()))

    @app.put("/v1/agents/<agent_id>/policy")
    async def set_policy(agent_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        policy = bodies.parse_policy_body(await read_json())
        return json_response(await ref.ask(c.SetPolicy(policy)))

    # -- actions ---------------------------------------------------------------

    @app.post("/v1/agents/<agent_id>/actions")
    async def request_action(agent_id: str) -> Response:
        _, ref = agent(agent_id)
        # getlist, unlike get, finds no key without raising and catching an error.
        keys = request.headers.getlist("Idempotency-Key")
        key = _idempotency_key(keys) if keys else None
        body = bodies.parse_body(await read_json(), bodies.ActionRequest)
        command = c.RequestAction(body.tool, body.input, body.cost, key)
        reply = await ref.ask(command)
        if meter is not None:
            meter.decision(reply)
        return json_response(reply)

    @app.get("/v1/agents/<agent_id>/actions/pending")
    async def pending(agent_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        return json_response(await ref.ask(c.ListPending()))

    @app.get("/v1/agents/<agent_id>/actions/<action_id>")
    async def get_action(agent_id: str, action_id: str) -> Response:
        _, ref = agent(agent_id)
        wait = _wait_param(request.args.get("wait"))
        action = await ref.ask(c.GetAction(action_id))
        if wait and action["status"] == ActionStatus.PENDING_APPROVAL:
            changed = await ref.ask(c.WatchAction(action_id))
            await asyncio.wait({changed}, timeout=wait)
            if not changed.done():
                changed.cancel()
            action = await ref.ask(c.GetAction(action_id))
        return json_response(action)

    @app.post("/v1/agents/<agent_id>/actions/<action_id>/outcome")
    async def outcome(agent_id: str, action_id: str) -> Response:
        who, ref = agent(agent_id)
        body = bodies.parse_body(await read_json(), bodies.OutcomeReport)
        command = c.ReportOutcome(action_id, body.status, who.role, body.detail)
        return json_response(await ref.ask(command))

    @app.post("/v1/agents/<agent_id>/actions/<action_id>/approve")
    async def approve(agent_id: str, action_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        body = bodies.parse_body(await read_json(), bodies.ApproveBody)
        reply = await ref.ask(c.Approve(action_id, body.approver, body.note))
        if meter is not None:
            meter.decision(reply)
        return json_response(reply)

    @app.post("/v1/agents/<agent_id>/actions/<action_id>/reject")
    async def reject(agent_id: str, action_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        body = bodies.parse_body(await read_json(), bodies.RejectBody)
        command = c.Reject(action_id, body.approver, body.reason, body.scar)
        reply = await ref.ask(command)
        if meter is not None:
            meter.decision(reply)
        return json_response(reply)

    @app.post("/v1/agents/<agent_id>/actions/<action_id>/cancel")
    async def cancel(agent_id: str, action_id: str) -> Response:
        who, ref = agent(agent_id)
        body = bodies.parse_body(await read_json(), bodies.CancelBody)
        return json_response(await ref.ask(c.Cancel(action_id, who.role, body.reason)))

    # -- operator steps --------------------------------------------------------

    @app.post("/v1/agents/<agent_id>/scars")
    async def add_scar(agent_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        body = bodies.parse_body(await read_json(), bodies.ScarBody)
        command = c.AddScar(body.severity, body.reason, body.action_id, body.by)
        return json_response(await ref.ask(command))

    @app.post("/v1/agents/<agent_id>/terminate")
    async def terminate(agent_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        body = bodies.parse_body(await read_json(), bodies.TerminateBody)
        return json_response(await ref.ask(c.Terminate(body.reason, body.by)))

    # -- grants ------------------------------------------------------------------

    @app.post("/v1/agents/<agent_id>/grants")
    async def issue_grant(agent_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        body = bodies.parse_grant_body(await read_json())
        command = c.IssueGrant(
            tool=body.tool,
            by=body.by,
            max_calls=body.max_calls,
            max_cost=body.max_cost,
            ttl_secs=body.ttl_secs,
            expires_at=body.expires_at,
            input_match=body.input_match,
            note=body.note,
        )
        return json_response(await ref.ask(command), 201)

    @app.get("/v1/agents/<agent_id>/grants")
    async def list_grants(agent_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        return json_response(await ref.ask(c.ListGrants()))

    @app.post("/v1/agents/<agent_id>/grants/<grant_id>/revoke")
    async def revoke_grant(agent_id: str, grant_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        body = bodies.parse_body(await read_json(), bodies.RevokeGrantBody)
        return json_response(await ref.ask(c.RevokeGrant(grant_id, body.by, body.reason)))

    # -- the log ---------------------------------------------------------------

    @app.get("/v1/agents/<agent_id>/log")
    async def read_log(agent_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        after = _int_param("after", request.args.get("after"), default=-1, minimum=-1)
        limit = _int_param("limit", request.args.get("limit"), default=LOG_LIMIT_DEFAULT, minimum=1)
        limit = min(limit, LOG_LIMIT_MAX)
        view: LogView = await ref.ask(c.GetLogView())
        records = await asyncio.to_thread(read_records, view.log, view.committed, after, limit)
        return json_response({"records": records, "head": view.head.to_json()})

    @app.get("/v1/agents/<agent_id>/verify")
    async def verify(agent_id: str) -> Response:
        _, ref = agent(agent_id, admin_only=True)
        view: LogView = await ref.ask(c.GetLogView())
        report = await asyncio.to_thread(
            verify_committed, view.log, view.committed, guard.ring.public_key, fenced=view.fenced
        )
        if report.ok:
            assert report.head is not None
            return json_response(
                {
                    "ok": True,
                    "records": report.records,
                    "public_key": report.public_key,
                    "head": report.head.to_json(),
                }
            )
        assert report.failure is not None
        return json_response(
            {"ok": False, "records": report.records, "failure": report.failure.to_json()}
        )

    return app


def _body_pending(body: Body) -> bool:
    """True while some of ``body`` has yet to arrive, or when Quart stopped
    taking it (too large). Quart keeps these two facts in private fields."""
    return not body._complete.is_set() or body._must_raise is not None


def _console_file(name: str) -> Response:
    from guardd.errors import ApiNotFound

    path = Path(console.STATIC_DIR, name)
    content_type = CONSOLE_TYPES.get(path.suffix)
    if content_type is None or "/" in name or name.startswith(".") or not _is_file(path):
        raise ApiNotFound("no such path")
    response = Response(path.read_bytes(), content_type=content_type)
    response.headers["Content-Security-Policy"] = CONSOLE_CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Cache-Control"] = "no-cache"
    return response


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # e.g. ENAMETOOLONG: no file can have that name
        return False


def _idempotency_key(keys: list[str]) -> str:
    if len(keys) > 1:
        # Which one would the repeat be matched on? Neither: refuse.
        raise BadRequest("one Idempotency-Key header at most")
    key = keys[0]
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise BadRequest(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
    # Header bytes arrive decoded as Latin-1, so a non-ASCII byte is a char above 127.
    if not (key.isascii() and key.isprintable()):
        raise BadRequest("Idempotency-Key must be printable ASCII (no tab, no other bytes)")
    return key


_INTEGER = re.compile(r"-?[0-9]+")
_NUMBER = re.compile(r"-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _wait_param(text: str | None) -> float:
    if text is None:
        return 0.0
    # float() alone would also take " 5", "1_0" and non-ASCII digits such as "٥".
    wait = float(text) if _NUMBER.fullmatch(text) else -1.0
    if not 0 <= wait <= MAX_WAIT:  # also false for NaN
        raise BadRequest(f"wait must be a number of seconds from 0 to {MAX_WAIT}")
    return wait


def _int_param(name: str, text: str | None, *, default: int, minimum: int) -> int:
    if text is None:
        return default
    try:
        if not _INTEGER.fullmatch(text):  # int() alone takes " 5", "1_0", "٥"
            raise ValueError(text)
        value = int(text)  # ValueError past 4300 digits too
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None
    if value < minimum:
        raise BadRequest(f"{name} must be at least {minimum}")
    return value
