"""What the routes of guardd share: the service they act for, and the
blueprint that declares each endpoint and hands a route what it declared.

A route is declared with ``@blueprint.endpoint(...)`` (``guardd.endpoints``
says what a declaration holds) and takes the app's ``Service`` as its first
argument, then what it names among:

- ``who``: the caller (``guardd.auth.Caller``), from the Authorization header;
- ``ref``: the ``AgentRef`` of the agent its path names, found once the
  caller may act on it;
- the path's own parameters (``agent_id``, ``action_id``, ...);
- each declared query parameter and header, parsed (``wait``,
  ``idempotency_key``, ...);
- ``body``: the declared body, parsed (``guardd.bodies.parser``).

``ServiceBlueprint`` binds each route to the service once, when the blueprint
is registered (``app.register_blueprint(blueprint, service=service)``): a
request then finds the service as cheaply as a closure would, with no lookup
of ``current_app`` on the decision path, and a test can build an app with one
blueprint around a service of its own. The bound function authenticates from
the headers before anything else and reads the body last, so that a refusal
goes before the body has arrived (docs/design.md, "Hostile clients").
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
from quart import Blueprint, Response, request
from quart.blueprints import BlueprintSetupState

from agents_runtime.core import commands as c
from agents_runtime.core.vocabulary import ActionStatus
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.keys import KeyRing
from agents_runtime.runtime.actor import AgentRef
from agents_runtime.runtime.registry import Registry
from guardd import bodies
from guardd.auth import ROLES, Authenticator, require_agent, require_agent_or_role, require_role
from guardd.config import DEFAULT_HOOK_WAIT
from guardd.endpoints import (
    AGENT,
    OPERATOR,
    PUBLIC,
    TOKEN_AGENT,
    Access,
    Endpoint,
    Header,
    Query,
    Reply,
)
from guardd.jsonio import json_response, read_json
from guardd.metrics import Metrics
from guardd.oidc import Oidc
from guardd.operators import Operators
from guardd.passkeys import Passkeys, person
from guardd.readiness import Readiness

if TYPE_CHECKING:
    # Imported only when traces are on: guardd.tracing imports OpenTelemetry.
    from guardd.tracing import Tracer


@attrs.define
class Guard:
    """What the app serves: the registry of agents and the keys."""

    data_dir: DataDir
    ring: KeyRing
    registry: Registry
    auth: Authenticator
    operators: Operators  # the operator tokens, from the operators log
    oidc: Oidc | None = None  # the OpenID Connect issuer, when single sign-on is on
    passkeys: Passkeys | None = None  # the operators' passkeys (None: not set up)


def _readiness(service: Service) -> Readiness:
    guard = service.guard
    store = guard.registry.store
    return Readiness(
        guard.data_dir.root,
        read_only=guard.ring.read_only,
        store=store.unready,
    )


@attrs.frozen
class Service:
    """What one app's views act for: the Guard, the app's metrics (None when
    they are off), its readiness, its endpoints, how long a Claude Code
    hook waits for an operator (``--hook-wait``), and its tracer (None when
    traces are off: a route then tests only that)."""

    guard: Guard
    meter: Metrics | None = None
    readiness: Readiness = attrs.field(default=attrs.Factory(_readiness, takes_self=True))
    # The endpoints registered for it, in order: what its OpenAPI document lists.
    endpoints: list[Endpoint] = attrs.field(factory=list, eq=False, repr=False)
    hook_wait: float = DEFAULT_HOOK_WAIT
    tracer: Tracer | None = None


class _BindingSetupState(BlueprintSetupState):
    def add_url_rule(
        self,
        rule: str,
        endpoint: str | None = None,
        view_func: Callable[..., Any] | None = None,
        **options: Any,
    ) -> None:
        if view_func is not None:
            service = self.options.get("service")
            if not isinstance(service, Service):
                raise TypeError(f"register blueprint {self.name!r} with service=<a guardd Service>")
            assert isinstance(self.blueprint, ServiceBlueprint)
            declared = self.blueprint.declared[view_func]
            service.endpoints.append(declared)
            endpoint = endpoint or view_func.__name__
            view_func = bind(declared, service)
        super().add_url_rule(rule, endpoint, view_func, **options)


class ServiceBlueprint(Blueprint):
    """A blueprint of declared endpoints, each bound to the ``Service`` given
    at registration. ``tag`` groups its endpoints in the document."""

    def __init__(self, name: str, import_name: str, *, tag: str) -> None:
        super().__init__(name, import_name)
        self.tag = tag
        self.declared: dict[Callable[..., Any], Endpoint] = {}

    def make_setup_state(
        self, app: Any, options: dict[str, Any], first_registration: bool = False
    ) -> BlueprintSetupState:
        return _BindingSetupState(self, app, options, first_registration)

    def endpoint(  # type: ignore[override]  # Blueprint.endpoint names a view; this declares one
        self,
        method: str,
        rule: str,
        summary: str,
        *,
        caller: Access,
        reply: Reply,
        role: str | None = None,
        body: Any = None,
        query: tuple[Query, ...] = (),
        headers: tuple[Header, ...] = (),
        errors: tuple[str, ...] = (),
        writes: bool = False,
        description: str | None = None,
        person: bool = False,
        sends: type | None = None,
    ) -> Callable[[Callable[..., Awaitable[Response]]], Callable[..., Awaitable[Response]]]:
        """Declare the route below as an endpoint (``guardd.endpoints.Endpoint``)."""

        def declare(
            view: Callable[..., Awaitable[Response]],
        ) -> Callable[..., Awaitable[Response]]:
            declared = Endpoint(
                method=method,
                rule=rule,
                summary=summary,
                caller=caller,
                reply=reply,
                view=view,
                tag=self.tag,
                role=role,
                body=body,
                query=query,
                headers=headers,
                errors=errors,
                writes=writes,
                description=description,
                person=person,
                sends=sends,
            )
            arguments(declared)  # a route that cannot take what it declares fails here
            self.declared[view] = declared
            self.add_url_rule(rule, view.__name__, view, methods=[method])
            return view

        return declare


def arguments(declared: Endpoint) -> frozenset[str]:
    """The names the route of ``declared`` takes after ``service``; TypeError
    unless it takes exactly what its declaration hands it."""
    name = declared.view.__name__
    params = list(inspect.signature(declared.view).parameters)
    if not params or params[0] != "service":
        raise TypeError(f"{name}: a route takes the service first")
    taken = frozenset(params[1:])
    given = {*declared.path_params, *(q.arg for q in declared.query)}
    given |= {h.arg for h in declared.headers}
    if declared.body is not None:
        given.add("body")
    if declared.caller is not PUBLIC:
        given.add("who")
    if declared.has_agent:
        given.add("ref")
    if declared.caller is AGENT and not declared.on_agent:
        raise TypeError(f"{name}: an agent's own token needs a path that names the agent")
    if declared.caller is TOKEN_AGENT and declared.on_agent:
        raise TypeError(f"{name}: the token names the agent: the path must not")
    if declared.role is not None and declared.role not in ROLES:
        raise TypeError(f"{name}: no such role {declared.role!r}")
    if declared.role is None and declared.caller is AGENT:
        raise TypeError(f"{name}: an agent's endpoint names the role an operator needs")
    if declared.role is not None and declared.caller not in (AGENT, OPERATOR):
        raise TypeError(f"{name}: only an operator's endpoint names a role")
    optional = {"who", "ref", "agent_id"}
    if taken - given:
        raise TypeError(f"{name}: nothing hands it {sorted(taken - given)}")
    if given - optional - taken:
        raise TypeError(f"{name}: it must take {sorted(given - optional - taken)}")
    return taken


def bind(declared: Endpoint, service: Service) -> Callable[..., Awaitable[Response]]:
    """What Quart calls for ``declared`` on ``service``: the caller from the
    headers, their right to this path, the agent, the query and headers,
    then the body, each handed to the route under its name."""
    view = declared.view
    taken = arguments(declared)
    known = service.guard.auth.known
    resolve = service.guard.auth.resolve
    find = service.guard.registry.ref
    token = declared.caller is not PUBLIC
    role = declared.role
    only_person = declared.person
    operator_only = declared.caller is OPERATOR
    on_agent = declared.on_agent
    token_agent = declared.caller is TOKEN_AGENT
    give_who = "who" in taken
    give_ref = "ref" in taken
    keep_agent_id = "agent_id" in taken
    query = declared.query
    headers = declared.headers
    parse = None if declared.body is None else bodies.parser(declared.body)

    async def serve(**args: Any) -> Response:
        if token:
            header = request.headers.get("Authorization")
            # Only a token none of guardd's own is awaited (single sign-on).
            who = known(header) or await resolve(header)
            if on_agent:
                agent_id = args["agent_id"] if keep_agent_id else args.pop("agent_id")
                if operator_only:
                    require_role(who, role or "")
                else:
                    require_agent_or_role(who, agent_id, role or "")
                ref = find(agent_id)  # 404, or 503 quarantined
                if give_ref:
                    args["ref"] = ref
            elif token_agent:
                ref = find(require_agent(who))  # 404, or 503 quarantined
                if give_ref:
                    args["ref"] = ref
            else:
                require_role(who, role or "")
            if only_person:
                person(who.operator)  # 403 for the admin token, before the body
            if give_who:
                args["who"] = who
        for param in query:
            args[param.arg] = param.parse(request.args.get(param.name))
        for header_ in headers:
            args[header_.arg] = header_.parse(request.headers.getlist(header_.name))
        if parse is not None:
            args["body"] = parse(await read_json())  # last: a refusal goes before it arrives
        response: Response = await view(service, **args)
        return response

    serve.__name__ = declared.view.__name__
    return serve


async def watch_action(
    service: Service, ref: AgentRef, action_id: str, wait: float
) -> dict[str, Any]:
    """The action, once it leaves pending_approval or after ``wait`` seconds
    (a long-poll; at once when ``wait`` is 0)."""
    action: dict[str, Any] = await ref.ask(c.GetAction(action_id))
    if not wait or action["status"] != ActionStatus.PENDING_APPROVAL:
        return action
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    # Another node may decide it and its notification be lost: each
    # GetAction reads the store, so poll as often as the store asks.
    poll = service.guard.registry.store.poll_interval or wait
    while True:
        changed = await ref.ask(c.WatchAction(action_id))
        await asyncio.wait({changed}, timeout=min(poll, deadline - loop.time()))
        woken = changed.done()
        if not woken:
            changed.cancel()
        action = await ref.ask(c.GetAction(action_id))
        if woken or action["status"] != ActionStatus.PENDING_APPROVAL:
            break
        if loop.time() >= deadline:
            break
    return action


def decision_response(service: Service, reply: dict[str, Any]) -> Response:
    """A decision (a request's, an approval's or a rejection's), counted."""
    meter = service.meter
    if meter is not None:
        meter.decision(reply)
    return json_response(reply)
