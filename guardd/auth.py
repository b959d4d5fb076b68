"""Who is calling: the admin, an agent, a person signed in with OpenID
Connect, or nobody.

Agent tokens are derived from ``keys/token.key`` and checked by recomputing
the HMAC; no token list is kept. Every comparison is constant-time. The admin
and agent tokens are checked without awaiting anything (the decision path);
only a token that is neither goes on to ``Authenticator.identify``, which
asks ``guardd.oidc`` when an issuer is configured.
"""

from __future__ import annotations

import hmac

import attrs

from agents_runtime.core.commands import ADMIN, AGENT
from agents_runtime.log.keys import agent_token_valid, token_agent_id
from guardd.errors import ApiForbidden, Unauthorized
from guardd.oidc import Oidc, OidcIdentity


@attrs.frozen
class Caller:
    role: str  # ADMIN or AGENT
    agent_id: str | None = None
    # Who signed in, when the caller is a person of the OIDC issuer.
    identity: OidcIdentity | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN


class UnknownToken(Unauthorized):
    """401 for a token that is neither the admin's nor an agent's; with
    an OIDC issuer configured, ``Authenticator.identify`` looks further."""

    def __init__(self, token: str) -> None:
        super().__init__("invalid token")
        self.token = token


@attrs.frozen
class Authenticator:
    admin_token: str
    token_key: bytes
    oidc: Oidc | None = None

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
        raise UnknownToken(token)

    async def identify(self, unknown: UnknownToken) -> Caller:
        """The caller of a token ``caller`` did not know: a person of the
        OIDC issuer, or 401. Until operators' roles reach every endpoint, a
        person holding ``admin`` acts as the admin token does, and anyone
        else is 403 naming the role they lack."""
        if self.oidc is None:
            raise unknown
        identity = await self.oidc.identify(unknown.token)
        if identity is None:
            raise unknown
        if "admin" not in identity.roles:
            held = ", ".join(sorted(identity.roles)) or "no role"
            raise ApiForbidden(
                f"this endpoint needs the admin role; {identity.display} holds {held}"
            )
        return Caller(ADMIN, identity=identity)


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
