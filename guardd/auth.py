"""Who is calling: the admin, an agent, or nobody.

Agent tokens are derived from ``keys/token.key`` and checked by recomputing
the HMAC; no token list is kept. Every comparison is constant-time.
"""

from __future__ import annotations

import hmac

import attrs

from agents_runtime.core.commands import ADMIN, AGENT
from agents_runtime.log.keys import agent_token_valid, token_agent_id
from guardd.errors import ApiForbidden, Unauthorized


@attrs.frozen
class Caller:
    role: str  # ADMIN or AGENT
    agent_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN


@attrs.frozen
class Authenticator:
    admin_token: str
    token_key: bytes

    def caller(self, header: str | None) -> Caller:
        if not header:
            raise Unauthorized("missing Authorization: Bearer <token> header")
        scheme, _, token = header.partition(" ")
        # RFC 6750: "Bearer" 1*SP token. Only ASCII space and tab are trimmed;
        # str.strip() would also drop \xa0, \x85 and \x1c-\x1f, accepting a
        # valid token with those bytes around it.
        token = token.strip(" \t")
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("Authorization header must be: Bearer <token>")
        if hmac.compare_digest(token.encode("utf-8", "replace"), self.admin_token.encode()):
            return Caller(ADMIN)
        if agent_token_valid(self.token_key, token):
            return Caller(AGENT, token_agent_id(token))
        raise Unauthorized("invalid token")


def require_admin(caller: Caller) -> None:
    if not caller.is_admin:
        raise ApiForbidden("this endpoint needs the admin token")


def require_agent(caller: Caller) -> str:
    """The agent an agent token names; 403 for the admin token."""
    if caller.agent_id is None:
        raise ApiForbidden("this endpoint needs an agent token: it acts on the token's agent")
    return caller.agent_id


def require_agent_or_admin(caller: Caller, agent_id: str) -> None:
    if not caller.is_admin and caller.agent_id != agent_id:
        raise ApiForbidden("an agent token may act on its own agent only")
