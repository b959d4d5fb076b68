"""Sign-in with OpenID Connect: people are named by the issuer's signed JWTs.

guardd trusts one issuer (``--oidc-issuer``) for one audience
(``--oidc-client-id``). At start it reads the issuer's discovery document and
its keys (JWKS) and keeps them; a token signed with a key it does not know
(the issuer rotated its keys) makes it read the keys again, at most once a
minute. While the issuer cannot be reached and no keys are known, a token of
that issuer is answered 503 ``unavailable``; every other token still works.

A token is verified with joserfc, never by code of ours: the issuer's
asymmetric algorithms only (``none`` and the HMAC ones are refused: an
issuer's public key must not double as a shared secret), ``iss``, ``aud``,
``exp`` and ``nbf`` with 60 s leeway, and, for a token of several audiences
that names its authorized party (``azp``), that this party is guardd's
client ID (OpenID Connect Core 3.1.3.7: another client among the audiences
must not pass its token on as one issued to the console). The person is ``sub`` (stable), shown as
``email``, else ``name``, else ``sub``; their roles come from one claim
(``--oidc-roles-claim``, ``groups`` unless told) through ``--oidc-role
ROLE=VALUE``, and a role implies those below it (admin > approver > viewer).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx
from joserfc import jwt
from joserfc.errors import (
    ExpiredTokenError,
    InvalidClaimError,
    JoseError,
    MissingClaimError,
)
from joserfc.jwk import KeySet

from guardd.auth import ROLES, Operator
from guardd.bodies import MAX_NAME, _unwanted_in_name
from guardd.errors import ApiError, Unauthorized

log = logging.getLogger("guardd")

DEFAULT_ROLES_CLAIM = "groups"
DEFAULT_SCOPES = ("openid", "email", "profile")
# The issuer's own algorithms: RSA, RSA-PSS, ECDSA and EdDSA. Never "none",
# never HS*: with HMAC, whoever holds the public key could sign.
ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
LEEWAY = 60  # seconds of clock difference allowed on exp and nbf
REFETCH_EVERY = 60.0  # seconds between two reads of the keys for an unknown kid
RETRY_DOWN_EVERY = 1.0  # seconds between two tries while the issuer cannot be reached
FETCH_TIMEOUT = 5.0
_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})
MAX_SUBJECT = 255  # OpenID Connect's own bound on sub


class OidcConfigError(ValueError):
    pass


_LOOPBACK = ("127.0.0.1", "::1", "localhost")
# What an origin's host and port may hold: it goes into the console's CSP,
# where a space, ";" or "'" would add directives of the issuer's choosing.
_ORIGIN_NETLOC = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]+)?|\[[0-9A-Fa-f:.]+\](:[0-9]+)?")


def _secure_url(url: str) -> bool:
    """https://, or http:// on loopback: what may carry keys or tokens."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and parts.hostname in _LOOPBACK


class IssuerUnavailable(ApiError):
    """503: a token of the issuer, and no keys to check it with."""

    code = "unavailable"


@attrs.frozen
class OidcConfig:
    issuer: str
    client_id: str
    roles_claim: str = DEFAULT_ROLES_CLAIM
    # (role, claim value) pairs; a role may be given by several values
    role_values: tuple[tuple[str, str], ...] = ()
    scopes: tuple[str, ...] = DEFAULT_SCOPES

    @classmethod
    def parse(
        cls,
        issuer: str,
        client_id: str | None,
        roles_claim: str | None,
        roles: Iterable[str],
        scopes: str | None,
    ) -> OidcConfig:
        """From the settings' text; OidcConfigError says what is wrong."""
        parts = urlsplit(issuer)
        # Its origin goes into the console's CSP: a plain host and port only.
        plain = _ORIGIN_NETLOC.fullmatch(parts.netloc) and issuer.isprintable()
        if not _secure_url(issuer) or not plain or " " in issuer:
            raise OidcConfigError(
                f"--oidc-issuer must be an https:// URL (http:// on loopback only), not {issuer!r}"
            )
        if parts.query or parts.fragment:
            raise OidcConfigError("--oidc-issuer must have no query or fragment")
        if not client_id:
            raise OidcConfigError("--oidc-issuer needs --oidc-client-id: the audience to accept")
        pairs: list[tuple[str, str]] = []
        for item in roles:
            role, sep, value = item.partition("=")
            role, value = role.strip(), value.strip()
            if not sep or not value or role not in ROLES:
                raise OidcConfigError(
                    f"--oidc-role must be ROLE=VALUE with ROLE one of {', '.join(ROLES)}, "
                    f"not {item!r}"
                )
            pairs.append((role, value))
        scope_list = tuple(scopes.split()) if scopes else DEFAULT_SCOPES
        if "openid" not in scope_list:
            raise OidcConfigError("--oidc-scopes must include openid")
        return cls(
            issuer,
            client_id,
            roles_claim or DEFAULT_ROLES_CLAIM,
            tuple(pairs),
            scope_list,
        )

    def banner(self) -> str:
        """guardd's start-up line about single sign-on."""
        mapping = ", ".join(f"{role}={value}" for role, value in self.role_values)
        return (
            f"single sign-on: {self.issuer} (client {self.client_id}; "
            f"roles from {self.roles_claim}: {mapping or 'none mapped, nobody holds a role'})"
        )

    def roles_claim_of(self, claims: Mapping[str, Any]) -> object:
        """The roles claim's value: the claim of that name, else, for a name
        with dots, the path through nested objects (Keycloak's
        ``realm_access.roles``). A namespaced name such as
        ``https://example.com/roles`` is found as it is, first."""
        name = self.roles_claim
        if name in claims or "." not in name:
            return claims.get(name)
        value: object = claims
        for part in name.split("."):
            if not isinstance(value, Mapping):
                return None
            value = value.get(part)
        return value

    def roles_of(self, claim: object) -> frozenset[str]:
        """Every role the claim's values give, with the roles they imply."""
        if isinstance(claim, str):
            values = {claim}
        elif isinstance(claim, list):
            values = {v for v in claim if isinstance(v, str)}
        else:
            return frozenset()
        held = [ROLES.index(role) for role, value in self.role_values if value in values]
        return frozenset(ROLES[: max(held) + 1]) if held else frozenset()


@attrs.frozen
class OidcIdentity:
    """A person the issuer vouches for."""

    issuer: str
    subject: str
    display: str
    roles: frozenset[str]

    @property
    def by_id(self) -> str:
        return f"oidc:{self.issuer}#{self.subject}"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _segment(text: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The header and claims of a compact JWS, unchecked; None for anything else."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header, claims = _segment(parts[0]), _segment(parts[1])
    # JSON, base64 and UTF-8 errors are ValueErrors; JSON nested a few
    # thousand deep (it fits in a header) exhausts the decoder's recursion.
    except (ValueError, binascii.Error, RecursionError):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    return header, claims


class Oidc:
    """The issuer's keys, kept, and the one way in: ``identify``."""

    def __init__(
        self,
        config: OidcConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._clock = clock
        self._client: httpx.AsyncClient | None = None
        self._jwks_uri: str | None = None
        self._token_endpoint: str | None = None
        self._keys: KeySet | None = None
        self._kids: frozenset[str | None] = frozenset()
        self._fetched_at = -REFETCH_EVERY  # when the keys were last read (or tried)
        self._unreachable = False  # the last try to read them failed
        self._lock = asyncio.Lock()
        self._claims = jwt.JWTClaimsRegistry(
            leeway=LEEWAY,
            iss={"essential": True, "value": config.issuer},
            aud={"essential": True, "value": config.client_id},
            sub={"essential": True},
            exp={"essential": True},
        )

    @property
    def ready(self) -> bool:
        return self._keys is not None

    @property
    def browser_origins(self) -> tuple[str, ...]:
        """Where the console's page fetches from for sign-in: the issuer (its
        discovery document) and its token endpoint, once discovered."""
        origins = [_origin(self.config.issuer)]
        if self._token_endpoint is not None:
            origins.append(_origin(self._token_endpoint))
        return tuple(dict.fromkeys(origins))

    async def start(self) -> None:
        """Read discovery and the keys; an issuer that cannot be reached is
        logged, and tried again when one of its tokens arrives."""
        try:
            await self._fetch()
        except IssuerUnavailable as exc:
            log.warning("%s: its tokens are answered 503 until it is back", exc.message)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def operator(self, token: str) -> Operator:
        """The bearer resolver of single sign-on (``Authenticator.resolver``):
        the operator ``token`` names, with the roles their claims map to;
        401 for a token that is not this issuer's either."""
        identity = await self.identify(token)
        if identity is None:
            raise Unauthorized("invalid token")
        return Operator.from_oidc(
            identity.issuer, identity.subject, identity.display, identity.roles
        )

    async def identify(self, token: str) -> OidcIdentity | None:
        """The person ``token`` names. None when it is not a JWT of this
        issuer (another kind of token may be); Unauthorized when it is one
        and fails a check; IssuerUnavailable (503) when it cannot be checked
        because the issuer's keys cannot be read."""
        parsed = _unverified(token)
        if parsed is None:
            return None
        header, unverified = parsed
        if unverified.get("iss") != self.config.issuer:
            return None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise Unauthorized(
                f"OIDC token algorithm {alg!r} is refused: only the issuer's asymmetric "
                "keys are accepted"
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise Unauthorized("OIDC token's kid must be a string")
        if self._keys is None:
            await self._fetch_throttled(RETRY_DOWN_EVERY)
        if kid not in self._kids:
            await self._fetch_throttled(REFETCH_EVERY)
            if kid not in self._kids:
                raise Unauthorized("OIDC token is signed with a key the issuer does not publish")
        assert self._keys is not None
        try:
            verified = jwt.decode(token, self._keys, algorithms=ALGORITHMS)
        # joserfc raises TypeError and ValueError too on some malformed
        # headers (a crit that lists no names): the token is bad, not guardd.
        except (JoseError, TypeError, ValueError):
            raise Unauthorized("OIDC token signature does not verify") from None
        claims = verified.claims
        try:
            self._claims.validate(claims)
        except ExpiredTokenError:
            raise Unauthorized("OIDC token has expired") from None
        except MissingClaimError as exc:
            raise Unauthorized(f"OIDC token lacks the {exc.claim} claim") from None
        except InvalidClaimError as exc:
            if exc.claim in ("nbf", "iat") and isinstance(claims[exc.claim], int | float):
                raise Unauthorized(
                    f"OIDC token is not valid yet ({exc.claim} is in the future)"
                ) from None
            if exc.claim == "aud":
                raise Unauthorized(
                    f"OIDC token is for another audience: aud must name {self.config.client_id}"
                ) from None
            raise Unauthorized(f"OIDC token has an invalid claim: {exc.claim}") from None
        azp, audience = claims.get("azp"), claims["aud"]
        if azp is not None and isinstance(audience, list) and len(audience) > 1:
            if azp != self.config.client_id:
                raise Unauthorized(
                    "OIDC token was issued to another client: with several audiences, "
                    f"azp must be {self.config.client_id}"
                )
        if claims.get("email_verified") in (False, "false"):
            # An address the issuer has not checked could be anyone's: it
            # neither names the person nor, mapped by email, gives a role.
            claims = {k: v for k, v in claims.items() if k != "email"}
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise Unauthorized("OIDC token's sub must be a non-empty string")
        # sub goes into by_id and the display name into by: both reach the
        # signed log, so they follow the rule of the names a body gives
        # (guardd.bodies). A sub breaking it cannot be shown safely: refused.
        # An email or name breaking it (people often edit their own) is
        # passed over for the next, and sub comes last.
        if len(subject) > MAX_SUBJECT:
            raise Unauthorized(f"OIDC token's sub must be 1 to {MAX_SUBJECT} characters")
        unwanted = _unwanted_in_name(subject)
        if unwanted is not None:
            raise Unauthorized(f"OIDC token's sub must not contain {unwanted}")
        display = next(
            (
                v
                for v in (claims.get("email"), claims.get("name"))
                if isinstance(v, str) and 0 < len(v) <= MAX_NAME and _unwanted_in_name(v) is None
            ),
            subject,
        )
        roles = self.config.roles_of(self.config.roles_claim_of(claims))
        return OidcIdentity(self.config.issuer, subject, display, roles)

    async def _fetch_throttled(self, every: float) -> None:
        if self._lock.locked():
            # A read is under way, and may hang for FETCH_TIMEOUT: a token
            # needing it (which anyone can forge) is answered now rather than
            # queued behind it, holding a request in flight.
            raise IssuerUnavailable(
                f"the OIDC issuer {self.config.issuer} is being read for its keys: try again"
            )
        async with self._lock:
            if self._clock() - self._fetched_at < every:
                if self._unreachable:
                    raise IssuerUnavailable(f"the OIDC issuer {self.config.issuer} is unreachable")
                return
            await self._fetch()

    async def _fetch(self) -> None:
        self._fetched_at = self._clock()
        try:
            if self._jwks_uri is None:
                self._jwks_uri = self._discovered(await self._get_json(self._discovery_url))
            keys = self._keyset(await self._get_json(self._jwks_uri))
        except (httpx.HTTPError, ValueError, JoseError) as exc:
            # With keys kept, a token they verify still works; one signed with
            # a key they lack cannot be judged until the issuer answers: 503.
            self._unreachable = True
            raise IssuerUnavailable(
                f"the OIDC issuer {self.config.issuer} is unreachable: {exc}"
            ) from None
        self._unreachable = False
        self._keys = keys
        self._kids = frozenset(key.kid for key in keys.keys)

    @property
    def _discovery_url(self) -> str:
        return self.config.issuer.rstrip("/") + "/.well-known/openid-configuration"

    def _discovered(self, doc: Mapping[str, Any]) -> str:
        if doc.get("issuer") != self.config.issuer:
            raise ValueError(
                f"the discovery document names issuer {doc.get('issuer')!r}, "
                f"not {self.config.issuer!r}"
            )
        token_endpoint = doc.get("token_endpoint")
        # Only an endpoint a browser may safely post a code to joins the
        # console's connect-src; any other stays out of the policy.
        if (
            isinstance(token_endpoint, str)
            and _secure_url(token_endpoint)
            and _ORIGIN_NETLOC.fullmatch(urlsplit(token_endpoint).netloc)
        ):
            self._token_endpoint = token_endpoint
        uri = doc.get("jwks_uri")
        if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
            raise ValueError("the discovery document has no jwks_uri")
        if not _secure_url(uri):
            raise ValueError(
                "the discovery document's jwks_uri must be an https:// URL "
                f"(http:// on loopback only), not {uri!r}"
            )
        return uri

    @staticmethod
    def _keyset(doc: Mapping[str, Any]) -> KeySet:
        keys = doc.get("keys")
        if not isinstance(keys, list):
            raise ValueError("the JWKS has no keys list")
        usable = [
            k
            for k in keys
            if isinstance(k, dict) and k.get("kty") in _KEY_TYPES and k.get("use", "sig") == "sig"
        ]
        return KeySet.import_key_set({"keys": usable})

    async def _get_json(self, url: str) -> Any:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=FETCH_TIMEOUT)
        response = await self._client.get(url, headers={"Accept": "application/json"})
        response.raise_for_status()
        return response.json()
