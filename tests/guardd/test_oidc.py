"""guardd.oidc against a real OpenID provider (tests/oidc_provider): tokens
from its sign-in page, and tokens it signs with claims no sign-in would give."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from joserfc.jwk import OKPKey, RSAKey

from guardd.errors import Unauthorized
from guardd.oidc import IssuerUnavailable, Oidc, OidcConfig, OidcIdentity
from tests.support.oidc_plugin import start_or_skip
from tests.support.oidc_provider import CLIENT_ID, ROLES, OidcProvider
from tests.support.server import free_port


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def segment(token: str, index: int) -> dict[str, Any]:
    part = token.split(".")[index]
    return dict(json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))))


class Clock:
    """Monotonic seconds the test moves by hand: the refetch limits count on it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def config_for(issuer: str) -> OidcConfig:
    return OidcConfig.parse(issuer, CLIENT_ID, None, ROLES.split(","), None)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def oidc(oidc_provider: OidcProvider, clock: Clock) -> AsyncIterator[Oidc]:
    oidc = Oidc(config_for(oidc_provider.issuer), clock=clock)
    await oidc.start()
    assert oidc.ready
    yield oidc
    await oidc.aclose()


@pytest.fixture
def claims(oidc_provider: OidcProvider) -> Callable[..., dict[str, Any]]:
    """Claims of a valid ID token for alice, changed by keyword."""

    def make(**changes: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {
            "iss": oidc_provider.issuer,
            "aud": CLIENT_ID,
            "sub": "alice",
            "email": "alice@example.test",
            "groups": ["guard-admins"],
            "iat": now,
            "exp": now + 300,
        }
        return {k: v for k, v in (base | changes).items() if v is not None}

    return make


async def refused(oidc: Oidc, token: str) -> str:
    with pytest.raises(Unauthorized) as caught:
        await oidc.identify(token)
    return caught.value.message


# -- who a token names -------------------------------------------------------------


async def test_a_signed_in_admin_is_named_by_subject_shown_by_email_with_every_role(
    oidc: Oidc, oidc_provider: OidcProvider
) -> None:
    identity = await oidc.identify(oidc_provider.id_token("alice"))
    assert identity == OidcIdentity(
        oidc_provider.issuer,
        "alice",
        "alice@example.test",
        frozenset({"admin", "approver", "viewer"}),
    )
    assert identity.by_id == f"oidc:{oidc_provider.issuer}#alice"


@pytest.mark.parametrize(
    ("user", "display", "roles"),
    [
        pytest.param("bob", "bob@example.test", {"approver", "viewer"}, id="approver"),
        pytest.param("carol", "carol@example.test", {"viewer"}, id="viewer"),
        pytest.param("dave", "Dave Nogroup", set(), id="no-group-no-email-shown-by-name"),
    ],
)
async def test_roles_come_from_the_groups_claim_and_imply_those_below(
    oidc: Oidc, oidc_provider: OidcProvider, user: str, display: str, roles: set[str]
) -> None:
    identity = await oidc.identify(oidc_provider.id_token(user))
    assert identity is not None
    assert (identity.subject, identity.display, identity.roles) == (user, display, roles)


async def test_without_email_or_name_the_subject_is_shown(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    identity = await oidc.identify(oidc_provider.sign(claims(sub="u-42", email=None)))
    assert identity is not None
    assert identity.display == "u-42"


@pytest.mark.parametrize(
    ("email", "name", "display"),
    [
        pytest.param("eve\u202e@example.test", "Eve", "Eve", id="bidi-override-in-email"),
        pytest.param("eve@example.test\x1b[31m", "Eve", "Eve", id="escape-in-email"),
        pytest.param(None, "Ev\u200be", "u-7", id="zero-width-in-name"),
        pytest.param(None, "Eve\nAdmin", "u-7", id="line-feed-in-name"),
        pytest.param("e" * 129, "Eve", "Eve", id="email-longer-than-a-name"),
    ],
)
async def test_a_display_name_that_no_body_could_give_falls_back_to_the_next(
    oidc: Oidc,
    oidc_provider: OidcProvider,
    claims: Callable[..., dict[str, Any]],
    email: str | None,
    name: str,
    display: str,
) -> None:
    # The display name is what the signed log records as who decided: it
    # follows the rule of every operator name a body gives (no control,
    # invisible or bidirectional characters, at most 128 characters).
    token = oidc_provider.sign(claims(sub="u-7", email=email, name=name))
    identity = await oidc.identify(token)
    assert identity is not None
    assert identity.display == display


@pytest.mark.parametrize("verified", [False, "false"])  # some issuers send it as a string
async def test_an_email_the_issuer_says_is_unverified_neither_names_nor_gives_roles(
    oidc_provider: OidcProvider,
    claims: Callable[..., dict[str, Any]],
    clock: Clock,
    verified: object,
) -> None:
    # Anyone may type alice's address at a provider that lets people sign up:
    # mapped by email, it would make them admin; shown, it would make them alice.
    config = OidcConfig.parse(
        oidc_provider.issuer, CLIENT_ID, "email", ["admin=alice@example.test"], None
    )
    oidc = Oidc(config, clock=clock)
    try:
        await oidc.start()
        unverified = claims(name="Mallory", email_verified=verified)
        identity = await oidc.identify(oidc_provider.sign(unverified))
        assert identity is not None
        assert (identity.display, identity.roles) == ("Mallory", frozenset())
        verified_claims = claims(name="Alice", email_verified=True)
        identity = await oidc.identify(oidc_provider.sign(verified_claims))
        assert identity is not None
        assert (identity.display, identity.roles) == (
            "alice@example.test",
            {"admin", "approver", "viewer"},
        )
    finally:
        await oidc.aclose()


@pytest.mark.parametrize(
    ("sub", "message"),
    [
        pytest.param("al\x00ice", "OIDC token's sub must not contain control characters (U+0000)",
                     id="nul"),
        pytest.param("ali\u202ece", "OIDC token's sub must not contain invisible or "
                     "bidirectional format characters (U+202E)", id="bidi-override"),
        pytest.param("s" * 256, "OIDC token's sub must be 1 to 255 characters", id="too-long"),
    ],
)  # fmt: skip
async def test_a_subject_that_could_not_name_a_person_in_the_log_is_refused(
    oidc: Oidc,
    oidc_provider: OidcProvider,
    claims: Callable[..., dict[str, Any]],
    sub: str,
    message: str,
) -> None:
    assert await refused(oidc, oidc_provider.sign(claims(sub=sub))) == message


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("gat_agent.abcdef", id="agent-token"),
        pytest.param("x" * 43, id="admin-shaped"),
        pytest.param("a.b.c", id="three-parts-not-json"),
    ],
)
async def test_a_token_that_is_no_jwt_is_left_to_other_kinds(oidc: Oidc, token: str) -> None:
    assert await oidc.identify(token) is None


async def test_a_jwt_of_another_issuer_is_left_to_other_kinds(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    token = oidc_provider.sign(claims(iss="https://elsewhere.example"))
    assert await oidc.identify(token) is None


# -- what is refused -----------------------------------------------------------------


async def test_an_expired_token_is_refused(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    now = int(time.time())
    token = oidc_provider.sign(claims(iat=now - 900, exp=now - 120))
    assert await refused(oidc, token) == "OIDC token has expired"


async def test_a_token_expired_within_the_leeway_is_accepted(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    now = int(time.time())
    token = oidc_provider.sign(claims(iat=now - 900, exp=now - 20))
    assert await oidc.identify(token) is not None


async def test_a_token_not_yet_valid_is_refused(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    now = int(time.time())
    token = oidc_provider.sign(claims(nbf=now + 600, exp=now + 900))
    assert await refused(oidc, token) == "OIDC token is not valid yet (nbf is in the future)"


@pytest.mark.parametrize("claim", ["nbf", "iat"])
async def test_a_time_claim_that_is_no_number_is_invalid_not_in_the_future(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]], claim: str
) -> None:
    token = oidc_provider.sign(claims(**{claim: "tomorrow"}))
    assert await refused(oidc, token) == f"OIDC token has an invalid claim: {claim}"


async def test_a_token_for_another_audience_is_refused(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    token = oidc_provider.sign(claims(aud="another-app"))
    message = await refused(oidc, token)
    assert message == "OIDC token is for another audience: aud must name guard-console"


async def test_a_token_naming_the_audience_among_others_is_accepted(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    token = oidc_provider.sign(claims(aud=["another-app", CLIENT_ID]))
    assert await oidc.identify(token) is not None


@pytest.mark.parametrize(
    "azp",
    [pytest.param("another-app", id="another-client"), pytest.param(["x"], id="not-a-string")],
)
async def test_a_token_of_several_audiences_issued_to_another_client_is_refused(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]], azp: Any
) -> None:
    token = oidc_provider.sign(claims(aud=["another-app", CLIENT_ID], azp=azp))
    message = await refused(oidc, token)
    assert message == (
        "OIDC token was issued to another client: with several audiences, azp must be guard-console"
    )


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"aud": ["another-app", CLIENT_ID], "azp": CLIENT_ID}, id="several-to-us"),
        pytest.param({"aud": CLIENT_ID, "azp": "another-app"}, id="one-audience"),
        pytest.param({"aud": [CLIENT_ID], "azp": "another-app"}, id="a-list-of-one"),
    ],
)
async def test_azp_is_checked_only_among_several_audiences(
    oidc: Oidc,
    oidc_provider: OidcProvider,
    claims: Callable[..., dict[str, Any]],
    changes: dict[str, Any],
) -> None:
    # With guardd the only audience the token was meant for guardd, whoever asked for it.
    token = oidc_provider.sign(claims(**changes))
    assert await oidc.identify(token) is not None


async def test_a_token_without_exp_is_refused(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    token = oidc_provider.sign(claims(exp=None))
    assert await refused(oidc, token) == "OIDC token lacks the exp claim"


async def test_alg_none_is_refused(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    header = b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    token = f"{header}.{b64(json.dumps(claims()).encode())}."
    message = await refused(oidc, token)
    assert message == (
        "OIDC token algorithm 'none' is refused: only the issuer's asymmetric keys are accepted"
    )


async def test_hs256_signed_with_the_issuers_public_key_as_secret_is_refused(
    oidc: Oidc, oidc_provider: OidcProvider, claims: Callable[..., dict[str, Any]]
) -> None:
    # The classic confusion: a verifier that takes the alg from the token
    # would check this HMAC with the public key, which everyone has.
    jwk = oidc_provider.jwks()["keys"][0]
    secret = RSAKey.import_key(jwk).as_pem(private=False)
    header = {"alg": "HS256", "typ": "JWT", "kid": jwk["kid"]}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims()).encode())}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    message = await refused(oidc, f"{signing_input}.{b64(mac)}")
    assert message == (
        "OIDC token algorithm 'HS256' is refused: only the issuer's asymmetric keys are accepted"
    )


async def test_a_tampered_payload_is_refused(oidc: Oidc, oidc_provider: OidcProvider) -> None:
    header, payload, signature = oidc_provider.id_token("carol").split(".")
    claims = segment(f"{header}.{payload}", 1) | {"groups": ["guard-admins"]}
    token = f"{header}.{b64(json.dumps(claims).encode())}.{signature}"
    assert await refused(oidc, token) == "OIDC token signature does not verify"


# -- the issuer's keys -----------------------------------------------------------------


async def test_a_key_rotated_at_the_issuer_is_fetched_once_then_at_most_once_a_minute(
    oidc: Oidc, oidc_provider: OidcProvider, clock: Clock
) -> None:
    assert await oidc.identify(oidc_provider.id_token("alice")) is not None
    clock.now += 61
    oidc_provider.rotate()
    rotated = oidc_provider.id_token("alice")  # an unknown kid: the keys are read again
    assert await oidc.identify(rotated) is not None
    clock.now += 30
    oidc_provider.rotate()
    again = oidc_provider.id_token("alice")  # within the minute: not read again
    assert (
        await refused(oidc, again) == "OIDC token is signed with a key the issuer does not publish"
    )
    assert await oidc.identify(rotated) is not None  # the known key still serves
    clock.now += 31
    assert await oidc.identify(again) is not None


async def test_an_issuer_down_at_start_answers_unavailable_until_it_is_back(
    clock: Clock, claims: Callable[..., dict[str, Any]]
) -> None:
    port = free_port()
    provider = OidcProvider(port)
    oidc = Oidc(config_for(provider.issuer), clock=clock)
    try:
        await oidc.start()  # logs, does not raise
        assert not oidc.ready
        shaped = "eyJhbGciOiJSUzI1NiJ9." + b64(json.dumps(claims(iss=provider.issuer)).encode())
        with pytest.raises(IssuerUnavailable) as caught:
            await oidc.identify(shaped + ".c2ln")
        assert caught.value.status == 503
        assert caught.value.message.startswith(f"the OIDC issuer {provider.issuer} is unreachable")
        start_or_skip(provider)
        with pytest.raises(IssuerUnavailable):  # tried again at most once a second
            await oidc.identify(shaped + ".c2ln")
        clock.now += 1
        identity = await oidc.identify(provider.id_token("bob"))
        assert identity is not None
        assert identity.roles == {"approver", "viewer"}
    finally:
        provider.stop()
        await oidc.aclose()


async def test_an_unknown_kid_while_the_issuer_is_down_is_unavailable_not_refused(
    clock: Clock,
) -> None:
    provider = OidcProvider(free_port())
    oidc = Oidc(config_for(provider.issuer), clock=clock)
    try:
        start_or_skip(provider)
        await oidc.start()
        known = provider.id_token("alice")
        provider.stop()
        start_or_skip(provider)  # started again: new keys
        unknown = provider.id_token("alice")
        provider.stop()
        clock.now += 61
        with pytest.raises(IssuerUnavailable):
            await oidc.identify(unknown)
        with pytest.raises(IssuerUnavailable):  # within the minute too: it cannot be judged
            await oidc.identify(unknown)
        assert await oidc.identify(known) is not None  # the kept keys still serve
    finally:
        provider.stop()
        await oidc.aclose()


class FakeIssuer:
    """A loopback issuer serving a discovery document the test writes, and a
    JWKS of one key: for what a real provider would never publish."""

    def __init__(
        self,
        discovery: Callable[[str], dict[str, Any]],
        hold_keys: threading.Event | None = None,
    ) -> None:
        outer = self
        jwks = {"keys": [OKPKey.generate_key("Ed25519").as_dict(private=False)]}
        self.hold_keys = hold_keys
        self.asked_keys = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if hold_keys is not None and "well-known" not in self.path:
                    outer.asked_keys.set()
                    hold_keys.wait(30)  # the JWKS answers once the test lets it
                doc = discovery(outer.issuer) if "well-known" in self.path else jwks
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeIssuer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.hold_keys is not None:
            self.hold_keys.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


async def test_a_jwks_uri_in_plain_http_beyond_loopback_is_refused(clock: Clock) -> None:
    # Keys read in the clear could be swapped on the way: the same rule as the issuer's.
    def discovery(issuer: str) -> dict[str, Any]:
        return {"issuer": issuer, "jwks_uri": "http://keys.example/jwks"}

    with FakeIssuer(discovery) as issuer:
        oidc = Oidc(config_for(issuer.issuer), clock=clock)
        try:
            await oidc.start()
            assert not oidc.ready
            clock.now += 1  # a token of the issuer makes guardd try again, and say why
            claims = {"iss": issuer.issuer, "aud": CLIENT_ID, "sub": "alice"}
            shaped = f"eyJhbGciOiJSUzI1NiJ9.{b64(json.dumps(claims).encode())}.c2ln"
            with pytest.raises(IssuerUnavailable) as caught:
                await oidc.identify(shaped)
            assert caught.value.message == (
                f"the OIDC issuer {issuer.issuer} is unreachable: the discovery document's "
                "jwks_uri must be an https:// URL (http:// on loopback only), "
                "not 'http://keys.example/jwks'"
            )
        finally:
            await oidc.aclose()


async def test_while_the_keys_are_being_read_other_tokens_needing_them_do_not_queue(
    clock: Clock,
) -> None:
    # An issuer that hangs holds a read of its keys for the whole timeout:
    # tokens naming it, which anyone can forge, must not pile up behind it.
    def discovery(issuer: str) -> dict[str, Any]:
        return {"issuer": issuer, "jwks_uri": f"{issuer}/jwks"}

    with FakeIssuer(discovery, hold_keys=threading.Event()) as issuer:
        assert issuer.hold_keys is not None
        oidc = Oidc(config_for(issuer.issuer), clock=clock)
        claims = {"iss": issuer.issuer, "aud": CLIENT_ID, "sub": "mallory"}
        forged = f"eyJhbGciOiJSUzI1NiJ9.{b64(json.dumps(claims).encode())}.c2ln"
        try:
            reading = asyncio.create_task(oidc.identify(forged))
            assert await asyncio.to_thread(issuer.asked_keys.wait, 10)  # the read hangs
            with pytest.raises(IssuerUnavailable) as caught:
                await oidc.identify(forged)
            assert caught.value.message == (
                f"the OIDC issuer {issuer.issuer} is being read for its keys: try again"
            )
            assert not reading.done()  # answered while the read still hangs
            issuer.hold_keys.set()
            with pytest.raises(Unauthorized):
                await reading
        finally:
            await oidc.aclose()


@pytest.mark.parametrize(
    "token_endpoint",
    [
        pytest.param("https://idp.example;script-src 'unsafe-inline'/token", id="csp-injection"),
        pytest.param("http://idp.example/token", id="plain-http-beyond-loopback"),
        pytest.param("javascript:alert(1)", id="not-http"),
    ],
)
async def test_a_token_endpoint_no_browser_should_reach_is_kept_out_of_the_console_policy(
    clock: Clock, token_endpoint: str
) -> None:
    def discovery(issuer: str) -> dict[str, Any]:
        return {"issuer": issuer, "jwks_uri": f"{issuer}/jwks", "token_endpoint": token_endpoint}

    with FakeIssuer(discovery) as issuer:
        oidc = Oidc(config_for(issuer.issuer), clock=clock)
        try:
            await oidc.start()
            assert oidc.ready
            assert oidc.browser_origins == (issuer.issuer,)
        finally:
            await oidc.aclose()


# -- settings -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("issuer", "client_id", "roles", "scopes", "message"),
    [
        pytest.param(
            "http://idp.example", "c", [], None,
            "--oidc-issuer must be an https:// URL (http:// on loopback only), "
            "not 'http://idp.example'",
            id="plain-http-beyond-loopback",
        ),
        pytest.param(
            "https:///realm", "c", [], None,
            "--oidc-issuer must be an https:// URL (http:// on loopback only), "
            "not 'https:///realm'",
            id="no-host",
        ),
        pytest.param(
            "https://idp.example;sandbox", "c", [], None,
            "--oidc-issuer must be an https:// URL (http:// on loopback only), "
            "not 'https://idp.example;sandbox'",
            id="host-no-origin-could-be",
        ),
        pytest.param(
            "https://idp.example/realm ", "c", [], None,
            "--oidc-issuer must be an https:// URL (http:// on loopback only), "
            "not 'https://idp.example/realm '",
            id="trailing-space",
        ),
        pytest.param(
            "https://idp.example", None, [], None,
            "--oidc-issuer needs --oidc-client-id: the audience to accept",
            id="no-client-id",
        ),
        pytest.param(
            "https://idp.example", "c", ["owner=x"], None,
            "--oidc-role must be ROLE=VALUE with ROLE one of viewer, approver, admin, "
            "not 'owner=x'",
            id="unknown-role",
        ),
        pytest.param(
            "https://idp.example", "c", ["admin"], None,
            "--oidc-role must be ROLE=VALUE with ROLE one of viewer, approver, admin, "
            "not 'admin'",
            id="no-value",
        ),
        pytest.param(
            "https://idp.example", "c", [], "email profile",
            "--oidc-scopes must include openid",
            id="no-openid-scope",
        ),
    ],
)  # fmt: skip
def test_bad_settings_say_what_is_wrong(
    issuer: str, client_id: str | None, roles: list[str], scopes: str | None, message: str
) -> None:
    from guardd.oidc import OidcConfigError

    with pytest.raises(OidcConfigError) as caught:
        OidcConfig.parse(issuer, client_id, None, roles, scopes)
    assert str(caught.value) == message


def test_several_values_may_give_one_role_and_the_highest_role_wins() -> None:
    config = OidcConfig.parse(
        "https://idp.example", "c", "roles", ["approver=ops", "approver=sre", "admin=root"], None
    )
    assert config.roles_of(["sre"]) == {"approver", "viewer"}
    assert config.roles_of(["ops", "root"]) == {"admin", "approver", "viewer"}
    assert config.roles_of("root") == {"admin", "approver", "viewer"}
    assert config.roles_of(["nobody"]) == frozenset()
    assert config.roles_of(None) == frozenset()


@pytest.mark.parametrize(
    ("claim", "claims", "value"),
    [
        pytest.param("groups", {"groups": ["a"]}, ["a"], id="top-level"),
        pytest.param(
            "realm_access.roles", {"realm_access": {"roles": ["a"]}}, ["a"], id="nested-path"
        ),
        pytest.param(
            "https://example.com/roles",
            {"https://example.com/roles": ["a"]},
            ["a"],
            id="namespaced-name-with-dots",
        ),
        pytest.param("realm_access.roles", {"realm_access": ["a"]}, None, id="path-through-list"),
        pytest.param("groups", {}, None, id="absent"),
    ],
)
def test_the_roles_claim_is_found_by_name_then_by_dotted_path(
    claim: str, claims: dict[str, Any], value: object
) -> None:
    config = OidcConfig.parse("https://idp.example", "c", claim, [], None)
    assert config.roles_claim_of(claims) == value


def test_settings_come_from_flags_or_the_environment() -> None:
    from guardd.config import parse_settings

    flags = parse_settings(
        [
            "--oidc-issuer=https://idp.example",
            "--oidc-client-id=guard",
            "--oidc-role=admin=ops",
            "--oidc-role=viewer=all",
        ],
        env={},
    )
    env = parse_settings(
        [],
        env={
            "GUARD_OIDC_ISSUER": "https://idp.example",
            "GUARD_OIDC_CLIENT_ID": "guard",
            "GUARD_OIDC_ROLES": "admin=ops, viewer=all",
            "GUARD_OIDC_ROLES_CLAIM": "roles",
            "GUARD_OIDC_SCOPES": "openid offline_access",
        },
    )
    assert flags.oidc == OidcConfig(
        "https://idp.example", "guard", "groups", (("admin", "ops"), ("viewer", "all"))
    )
    assert env.oidc == OidcConfig(
        "https://idp.example",
        "guard",
        "roles",
        (("admin", "ops"), ("viewer", "all")),
        ("openid", "offline_access"),
    )
    assert parse_settings([], env={}).oidc is None


def test_a_client_id_without_an_issuer_is_a_settings_error() -> None:
    from guardd.config import SettingsError, parse_settings

    with pytest.raises(
        SettingsError, match=r"^--oidc-client-id and --oidc-role need --oidc-issuer$"
    ):
        parse_settings(["--oidc-client-id=guard"], env={})
