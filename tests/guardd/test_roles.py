"""The role matrix: every endpoint x every role x every kind of credential,
generated from the served OpenAPI document (``x-guard-caller`` and
``x-guard-role``), so that an endpoint added later is in it by itself.

The kinds of credential: the admin token, an operator token of each role, an
ID token of the real test provider for a person of each role (their groups
map to it), and agent tokens. One guardd answers guardd's own tokens (the
module's ``api``), another, trusting the provider, the ID tokens; each
credential is made once for the module.

A caller who may call an endpoint passes authentication and the role check:
whatever comes next (a 400 for the empty body, a 404 for an action that is
not there, a 200) is no 401 and no 403. A caller who may not gets 403
``forbidden``, whose message names the role that is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from guardd.app import document
from guardd.auth import VIA_ADMIN_TOKEN, VIA_OIDC, VIA_OPERATOR_TOKEN
from tests.guardd.conftest import Agent, Api, Session, assert_error, ok
from tests.guardd.test_signin import oidc_env
from tests.support.oidc_provider import OidcProvider
from tests.support.server import GuardServer

ROLES = ("viewer", "approver", "admin")
# The test provider's people, by the role their groups map to.
PEOPLE = {"viewer": "carol", "approver": "bob", "admin": "alice"}


@attrs.frozen
class Credential:
    """How a caller authenticates: the admin token, an operator token holding
    ``role``, an ID token of a person holding ``role``, or an agent token
    (``own``: of the agent the path names)."""

    kind: str  # "admin_token", "operator_token", "oidc", "agent_token"
    role: str | None = None
    own: bool = False

    @property
    def id(self) -> str:
        if self.kind == "admin_token":
            return "admin-token"
        if self.kind == "operator_token":
            return f"{self.role}-operator-token"
        if self.kind == "oidc":
            return f"{self.role}-oidc"
        return "own-agent-token" if self.own else "other-agent-token"


CREDENTIALS = [
    Credential("admin_token"),
    *(Credential("operator_token", role) for role in ROLES),
    *(Credential("oidc", role) for role in ROLES),
    Credential("agent_token", own=True),
    Credential("agent_token", own=False),
]


@attrs.frozen
class Callers:
    """The callers of one guardd: two agents and operators' sessions by ``Credential.id``."""

    target: Agent
    other: Agent
    sessions: dict[str, Session]

    def session(self, credential: Credential) -> Session:
        if credential.kind == "agent_token":
            return (self.target if credential.own else self.other).client
        return self.sessions[credential.id]


def _operator_session(api: Api, role: str) -> Session:
    issued = api.admin.post("/v1/operators/tokens", json={"name": f"{role}-bot", "role": role})
    return api.client(ok(issued, 201)["token"])


@pytest.fixture(scope="module")
def callers(api: Api) -> Callers:
    sessions = {"admin-token": api.admin}
    sessions |= {f"{role}-operator-token": _operator_session(api, role) for role in ROLES}
    return Callers(api.create(), api.create(), sessions)


@pytest.fixture(scope="module")
def oidc_callers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callers]:
    """A guardd trusting the test provider, with an ID token of each role.
    Asked for lazily (the provider starts only for the cases that need it)."""
    provider: OidcProvider = request.getfixturevalue("oidc_provider")
    data_dir: Path = tmp_path_factory.mktemp("guardd-oidc") / "guard-data"
    server = GuardServer(data_dir, env=oidc_env(provider.issuer)).start()
    api = Api(server)
    try:
        sessions = {
            f"{role}-oidc": api.client(provider.id_token(person)) for role, person in PEOPLE.items()
        }
        yield Callers(api.create(), api.create(), sessions)
    finally:
        api.close()
        server.kill()


@pytest.fixture
def callers_of(request: pytest.FixtureRequest, credential: Credential, callers: Callers) -> Callers:
    """The callers of the guardd that knows ``credential``."""
    if credential.kind == "oidc":
        return request.getfixturevalue("oidc_callers")  # type: ignore[no-any-return]
    return callers


def _operations() -> Iterator[Any]:
    """Every operation of guardd's document that needs a token."""
    for path, operations in document()["paths"].items():
        for method, operation in operations.items():
            if operation["x-guard-caller"] != "public":
                yield pytest.param(
                    method.upper(),
                    path,
                    operation["x-guard-caller"],
                    operation.get("x-guard-role"),
                    operation.get("x-guard-person", False),
                    id=f"{method}-{path}",
                )


def _allowed(credential: Credential, caller: str, role: str | None, person: bool) -> bool:
    if person and credential.kind == "admin_token":
        return False  # no person: it holds no passkey
    if credential.kind == "agent_token":
        return caller == "agent" and credential.own  # token_agent: below
    if caller in ("agent", "operator"):
        top = len(ROLES) if credential.role is None else ROLES.index(credential.role) + 1
        held = ROLES[:top]
        return role is None or role in held
    return False


def _path(path: str, callers: Callers) -> str:
    values = {
        "agent_id": callers.target.agent_id,
        "action_id": "act-999999",
        "grant_id": "grt-999999",
        "token_id": "opt-999999",
        "policy_name": "no-such-policy",
        "credential_id": "never-registered",
    }
    return re.sub(r"\{([^}]+)\}", lambda m: values[m.group(1)], path)


@pytest.mark.parametrize("credential", [pytest.param(c, id=c.id) for c in CREDENTIALS])
@pytest.mark.parametrize(("method", "path", "caller", "role", "person"), list(_operations()))
def test_each_endpoint_admits_exactly_the_callers_its_declaration_names(
    callers_of: Callers,
    credential: Credential,
    method: str,
    path: str,
    caller: str,
    role: str | None,
    person: bool,
) -> None:
    url = _path(path, callers_of)
    body = {} if method in ("POST", "PUT") else None
    answer = callers_of.session(credential).request(method, url, json=body)
    if caller == "token_agent":
        # An agent token acts on its own agent: the other agent's token is as good.
        if credential.kind == "agent_token":
            assert answer.status_code not in (401, 403), answer.text
        else:
            assert_error(answer, 403, "forbidden")
        return
    if _allowed(credential, caller, role, person):
        assert answer.status_code not in (401, 403), answer.text
        return
    message = assert_error(answer, 403, "forbidden")["error"]
    if credential.kind == "agent_token" and caller == "agent":
        assert message == "an agent token may act on its own agent only"
    elif person and credential.kind == "admin_token":
        assert message.startswith("the admin token is no person")
    elif role is not None:
        assert f"the {role} role" in message


def test_the_matrix_holds_every_way_an_operator_authenticates_with_every_role() -> None:
    assert len({c.id for c in CREDENTIALS}) == len(CREDENTIALS)  # one session each
    kinds = {VIA_ADMIN_TOKEN, VIA_OPERATOR_TOKEN, VIA_OIDC}
    assert {c.kind for c in CREDENTIALS} == kinds | {"agent_token"}
    for kind in kinds - {VIA_ADMIN_TOKEN}:
        assert {c.role for c in CREDENTIALS if c.kind == kind} == set(ROLES)


def test_the_forbidden_answer_names_the_missing_role_and_what_is_held(
    api: Api, callers: Callers
) -> None:
    viewer = callers.sessions["viewer-operator-token"]
    answer = viewer.post(f"{callers.target.path}/terminate", json={"reason": "r"})
    message = assert_error(answer, 403, "forbidden")["error"]
    assert message == "this endpoint needs the admin role; viewer-bot holds viewer"


def test_an_agent_token_on_an_operators_endpoint_is_told_it_needs_an_operator(
    api: Api, callers: Callers
) -> None:
    answer = callers.target.client.get(f"{callers.target.path}/log")
    message = assert_error(answer, 403, "forbidden")["error"]
    assert message == "this endpoint needs an operator with the viewer role"


def test_me_describes_the_admin_token(api: Api) -> None:
    assert ok(api.admin.get("/v1/me")) == {
        "name": "admin",
        "id": "admin-token",
        "roles": ["admin", "approver", "viewer"],
        "via": "admin_token",
    }


def test_me_is_forbidden_to_an_agent_token(api: Api, callers: Callers) -> None:
    answer = callers.target.client.get("/v1/me")
    assert assert_error(answer, 403, "forbidden")["error"] == "this endpoint needs an operator"


def test_me_without_a_token_is_unauthorized(api: Api) -> None:
    assert_error(api.client().get("/v1/me"), 401, "unauthorized")


def test_every_operation_says_who_it_admits(api: Api) -> None:
    document = ok(api.admin.get("/v1/openapi.json"))
    for operations in document["paths"].values():
        for operation in operations.values():
            caller = operation["x-guard-caller"]
            assert caller in ("public", "operator", "agent", "token_agent")
            if caller == "agent":
                assert operation["x-guard-role"] in ROLES
            if caller in ("public", "token_agent"):
                assert "x-guard-role" not in operation
