"""What the routes of guardd share: the service they act for, the blueprint
that hands it to them, who is calling, and the parsers of query parameters.

Each view takes the app's ``Service`` as its first argument. ``ServiceBlueprint``
binds it once, when the blueprint is registered
(``app.register_blueprint(blueprint, service=service)``), with
``functools.partial``: a request then finds the service as cheaply as a
closure would, with no lookup of ``current_app`` on the decision path, and a
test can build an app with one blueprint around a service of its own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import attrs
from quart import Blueprint, request
from quart.blueprints import BlueprintSetupState

from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.keys import KeyRing
from agents_runtime.runtime.actor import AgentRef
from agents_runtime.runtime.registry import Registry
from guardd.auth import Authenticator, Caller, require_admin, require_agent_or_admin
from guardd.errors import BadRequest
from guardd.metrics import Metrics
from guardd.readiness import Readiness

# What the routes accept; guardd.openapi documents the same numbers.
MAX_WAIT = 60  # seconds a long-poll may wait
LOG_LIMIT_DEFAULT = 500  # records a log read returns unless told
LOG_LIMIT_MAX = 5000  # a larger limit counts as this
MAX_IDEMPOTENCY_KEY = 128  # characters


@attrs.define
class Guard:
    """What the app serves: the registry of agents and the keys."""

    data_dir: DataDir
    ring: KeyRing
    registry: Registry
    auth: Authenticator


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
    they are off) and its readiness."""

    guard: Guard
    meter: Metrics | None = None
    readiness: Readiness = attrs.field(default=attrs.Factory(_readiness, takes_self=True))


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
            endpoint = endpoint or view_func.__name__  # a partial has no name
            view_func = functools.partial(view_func, service)
        super().add_url_rule(rule, endpoint, view_func, **options)


class ServiceBlueprint(Blueprint):
    """A blueprint whose views take the ``Service`` given at registration as
    their first argument."""

    def make_setup_state(
        self, app: Any, options: dict[str, Any], first_registration: bool = False
    ) -> BlueprintSetupState:
        return _BindingSetupState(self, app, options, first_registration)


def caller(service: Service) -> Caller:
    return service.guard.auth.caller(request.headers.get("Authorization"))


def agent(service: Service, agent_id: str, *, admin_only: bool = False) -> tuple[Caller, AgentRef]:
    """The caller, checked against the agent's path, and the agent's actor."""
    who = caller(service)
    if admin_only:
        require_admin(who)
    else:
        require_agent_or_admin(who, agent_id)
    return who, service.guard.registry.ref(agent_id)


_INTEGER = re.compile(r"-?[0-9]+")
_NUMBER = re.compile(r"-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def wait_param(text: str | None) -> float:
    if text is None:
        return 0.0
    # float() alone would also take " 5", "1_0" and non-ASCII digits such as "٥".
    wait = float(text) if _NUMBER.fullmatch(text) else -1.0
    if not 0 <= wait <= MAX_WAIT:  # also false for NaN
        raise BadRequest(f"wait must be a number of seconds from 0 to {MAX_WAIT}")
    return wait


def int_param(name: str, text: str | None, *, default: int, minimum: int) -> int:
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
