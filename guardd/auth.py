"""Who is calling: an operator (the admin token, an operator token, or a
person signed in elsewhere, as with OpenID Connect), an agent, or nobody.

Agent tokens are derived from ``keys/token.key`` and checked by recomputing
the HMAC; no token list is kept. Operator tokens (``opr_...``) are looked up
in the operators' tokens (``guardd.operators``), by a hash of the secret.
Every comparison of a secret is constant-time.

The order is fixed: the admin token, an agent token, an operator token, then
the pluggable bearer resolver (``Authenticator.resolver``; None unless single
sign-on is configured: ``guardd.oidc.Oidc.operator`` with an OIDC issuer).
The first three are plain computations, so the agent token's path (every
decision) awaits nothing; only a token none of them knows is handed to the
resolver, which may fetch keys and so is awaited.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Protocol

import attrs

from agents_runtime.core.commands import ADMIN, AGENT
from agents_runtime.core.vocabulary import ADMIN_TOKEN_ID as ADMIN_TOKEN_ID
from agents_runtime.log.keys import agent_token_valid, token_agent_id
from guardd.errors import ApiForbidden, BadRequest, Unauthorized


class Role(StrEnum):
    """An operator's role (docs/api.md, "Roles")."""

    VIEWER = "viewer"
    APPROVER = "approver"
    ADMIN = "admin"


# The roles, lowest first: each holds every role below it.
VIEWER, APPROVER, ADMIN_ROLE = Role.VIEWER.value, Role.APPROVER.value, Role.ADMIN.value
ROLES = (VIEWER, APPROVER, ADMIN_ROLE)

# How an operator authenticated (``GET /v1/me``'s ``via``).
VIA_OIDC = "oidc"
VIA_OPERATOR_TOKEN = "operator_token"  # noqa: S105  # a name, not a secret
VIA_ADMIN_TOKEN = "admin_token"  # noqa: S105
OPERATOR_TOKEN_PREFIX = "opr_"  # noqa: S105


def held(role: str) -> frozenset[str]:
    """Every role ``role`` holds: itself and those below it. ValueError for an unknown role."""
    return frozenset(ROLES[: ROLES.index(role) + 1])


def highest(roles: frozenset[str] | set[str]) -> frozenset[str]:
    """What a set of role names amounts to: the highest of them with those below it
    (names that are no role are ignored; none: no role at all)."""
    ranks = [ROLES.index(role) for role in roles if role in ROLES]
    return frozenset(ROLES[: max(ranks) + 1]) if ranks else frozenset()


@attrs.frozen
class Operator:
    """A person or a program acting as an operator.

    ``name`` is the display name records carry as ``by``; ``by_id`` the
    stable identity they carry beside it: ``oidc:<issuer>#<sub>``,
    ``token:<token_id>`` or ``admin-token``. ``roles`` holds every role held
    (a role implies those below it); ``via`` is how they authenticated."""

    name: str
    by_id: str
    roles: frozenset[str]
    via: str  # VIA_OIDC, VIA_OPERATOR_TOKEN or VIA_ADMIN_TOKEN

    @classmethod
    def from_oidc(cls, issuer: str, sub: str, name: str, roles: frozenset[str]) -> Operator:
        """A person signed in with OpenID Connect: ``roles`` the role names their
        claims map to (the highest counts, with those below it)."""
        return cls(name, f"oidc:{issuer}#{sub}", highest(roles), VIA_OIDC)

    @property
    def is_admin_token(self) -> bool:
        return self.via == VIA_ADMIN_TOKEN

    def role_list(self) -> list[str]:
        """The roles held, highest first (``GET /v1/me``)."""
        return [role for role in reversed(ROLES) if role in self.roles]


ADMIN_OPERATOR = Operator("admin", ADMIN_TOKEN_ID, frozenset(ROLES), VIA_ADMIN_TOKEN)


@attrs.frozen
class Caller:
    """Who calls. ``role`` is the core's word for them (``ADMIN`` for any
    operator, ``AGENT``); ``operator`` is set for an operator, ``agent_id``
    for an agent."""

    role: str  # ADMIN or AGENT
    agent_id: str | None = None
    operator: Operator | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN


ADMIN_CALLER = Caller(ADMIN, operator=ADMIN_OPERATOR)


def operator_caller(operator: Operator) -> Caller:
    return Caller(ADMIN, operator=operator)


# The bearer resolver: the hook single sign-on fills. It is handed a bearer
# token that is none of guardd's own (not the admin token, an agent token or
# an operator token) and returns the operator it proves, or raises
# guardd.errors.Unauthorized (not valid: expired, wrong issuer, bad signature,
# ...) or ApiError(..., "unavailable") (it cannot tell now: the provider is
# unreachable). Build the operator with Operator.from_oidc.
BearerResolver = Callable[[str], Awaitable[Operator]]


class OperatorTokens(Protocol):
    """The operators' tokens, as authentication needs them (``guardd.operators``)."""

    def operator(self, token: str) -> Operator | None:
        """The operator ``token`` names while it is live; None otherwise."""


@attrs.define
class Authenticator:
    admin_token: str
    token_key: bytes
    operators: OperatorTokens | None = None
    resolver: BearerResolver | None = None  # the single sign-on hook; None: off

    def token(self, header: str | None) -> str:
        """The bearer token of an Authorization header; 401 when there is none."""
        if not header:
            raise Unauthorized("missing Authorization: Bearer <token> header")
        scheme, _, token = header.partition(" ")
        # RFC 6750: "Bearer" 1*SP token. Only ASCII space and tab are trimmed;
        # str.strip() would also drop \xa0, \x85 and \x1c-\x1f, accepting a
        # valid token with those bytes around it.
        token = token.strip(" \t")
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("Authorization header must be: Bearer <token>")
        return token

    def known(self, header: str | None) -> Caller | None:
        """The caller, if the token is one of guardd's own; None when only the
        resolver can tell; 401 when nobody can."""
        token = self.token(header)
        if hmac.compare_digest(token.encode("utf-8", "replace"), self.admin_token.encode()):
            return ADMIN_CALLER
        if agent_token_valid(self.token_key, token):
            return Caller(AGENT, token_agent_id(token))
        if token.startswith(OPERATOR_TOKEN_PREFIX):
            operator = self.operators.operator(token) if self.operators is not None else None
            if operator is None:
                raise Unauthorized("invalid token: unknown, revoked or expired operator token")
            return operator_caller(operator)
        if self.resolver is None:
            raise Unauthorized("invalid token")
        return None

    async def resolve(self, header: str | None) -> Caller:
        """The caller of a token only the resolver knows (``known`` said None)."""
        assert self.resolver is not None, "known() answers None only with a resolver"
        return operator_caller(await self.resolver(self.token(header)))

    async def caller(self, header: str | None) -> Caller:
        return self.known(header) or await self.resolve(header)


def require_role(caller: Caller, role: str) -> Operator:
    """The operator calling, when they hold ``role`` (empty: any operator);
    403 naming it otherwise."""
    operator = caller.operator
    if operator is None:
        needs = f"an operator with the {role} role" if role else "an operator"
        raise ApiForbidden(f"this endpoint needs {needs}")
    if role and role not in operator.roles:
        raise ApiForbidden(
            f"this endpoint needs the {role} role; {operator.name} holds "
            f"{', '.join(operator.role_list()) or 'no role'}"
        )
    return operator


def require_agent(caller: Caller) -> str:
    """The agent an agent token names; 403 for an operator."""
    if caller.agent_id is None:
        raise ApiForbidden("this endpoint needs an agent token: it acts on the token's agent")
    return caller.agent_id


def require_agent_or_role(caller: Caller, agent_id: str, role: str) -> None:
    """An agent on its own path, or an operator holding ``role``."""
    if caller.agent_id is not None:
        if caller.agent_id != agent_id:
            raise ApiForbidden("an agent token may act on its own agent only")
        return
    require_role(caller, role)


@attrs.frozen
class Signature:
    """Who a record an operator causes names: ``by`` (display name) and ``by_id``."""

    by: str
    by_id: str


def signed(caller: Caller, given: str | None, key: str, *, required: bool) -> Signature:
    """Who the records of ``caller``'s step name. ``given`` is the body's
    ``key`` (``approver``, ``by``): the admin token's is recorded as given
    (400 when ``required`` and absent; absent otherwise: its name, ``admin``);
    any other operator's must be their display name (403 naming both), and
    absent is that name."""
    operator = caller.operator
    assert operator is not None, "an operator's step"
    if operator.is_admin_token:
        if given is None:
            if required:
                raise BadRequest(f"$.{key}: required with the admin token (who is it?)")
            return Signature(operator.name, operator.by_id)
        return Signature(given, operator.by_id)
    if given is not None and given != operator.name:
        raise ApiForbidden(
            f"{key} {given!r} is not you: you are signed in as {operator.name!r}"
            " (leave it out, or give your own name)"
        )
    return Signature(operator.name, operator.by_id)
