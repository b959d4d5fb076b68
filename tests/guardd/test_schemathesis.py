"""Schemathesis against a real guardd, driven by the served OpenAPI document.

One guardd for the module. A few agents are created first (tools that need
approval, a call cap, a default rule, a rate limit) and given some actions, so
that generated requests reach real agents and real actions, not only 404s.
Every operation is then fuzzed in several passes:

- a token that is not one (401 everywhere);
- admin token, everything generated (mostly unknown agents and bad bodies);
- admin token on a real agent, money values rounded to 6 decimals so most
  bodies are accepted and change state;
- an agent token on its own agent, likewise;
- admin token on a real agent with negative data (schema-breaking input),
  which must be refused with a 4xx.

Each response must pass schemathesis' checks (no 5xx, status code documented,
content type documented, body matching the documented schema, negative data
refused) and, when it is an error, be exactly ``{error, code}`` with the status
of that code. At least MIN_REQUESTS requests are sent; the count is asserted.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from guardd.errors import STATUS
from tests.support.server import GuardServer

pytestmark = pytest.mark.slow

MIN_REQUESTS = 3000
# Long-polls on pending actions are cut short so that no request can hold the
# run for up to 60 s; the `wait` parameter is still sent and validated.
MAX_WAIT_IN_RUN = 0.05
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
]
POLICY: dict[str, Any] = {
    "budget": 100000,
    "scar_limit": 1000,
    "tools": {
        "search": {"cost": 0.5},
        "send_email": {"cost": 1, "requires_approval": True},
        "capped": {"max_calls": 2},
    },
    "default": {"cost": 0},
    "rate_limit": {"max_actions": 10000, "window_secs": 60},
}
# Answers that show the runs reached real agents and actions (not only 404s):
# each operation must have given one of these statuses at least once.
REACHED = {
    "PUT /v1/agents/{agent_id}/policy": {200},
    "POST /v1/agents/{agent_id}/actions": {200},
    "GET /v1/agents/{agent_id}/actions/{action_id}": {200},
    "POST /v1/agents/{agent_id}/actions/{action_id}/outcome": {200},
    "POST /v1/agents/{agent_id}/actions/{action_id}/approve": {200, 409},
    "POST /v1/agents/{agent_id}/actions/{action_id}/reject": {200, 409},
    "POST /v1/agents/{agent_id}/scars": {200},
    "POST /v1/agents/{agent_id}/terminate": {200, 409},
    "GET /v1/agents/{agent_id}/log": {200},
}
# Any string is a valid console file name, a valid operator token ID and a valid
# passkey credential ID to look up (an unknown one is 404): there is no invalid
# input to generate.
NO_NEGATIVE = {
    "GET /console/{name}",
    "POST /v1/operators/tokens/{token_id}/revoke",
    "POST /v1/operators/passkeys/{credential_id}/revoke",
}
ADMIN_AGENT = "fuzz-admin"
OWN_AGENT = "fuzz-own"
SPARE_AGENT = "fuzz-spare"


class Fuzz:
    """The server, its schema, one HTTP session and the request count."""

    def __init__(self, server: GuardServer, agent_token: str) -> None:
        self.server = server
        self.agent_token = agent_token
        config = schemathesis.Config.from_dict(
            {"checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}}}
        )
        self.schema = schemathesis.openapi.from_url(
            f"{server.url}/v1/openapi.json", config=config, timeout=10
        )
        self.session = requests.Session()
        self.requests: Counter[tuple[str, int]] = Counter()

    def run(
        self,
        token: str,
        *,
        agent_id: str | None = None,
        mode: GenerationMode = GenerationMode.POSITIVE,
        round_money: bool = False,
        max_examples: int,
    ) -> None:
        """Fuzz every operation once with these settings."""
        headers = {"Authorization": f"Bearer {token}"}
        for result in self.schema.get_all_operations():
            operation = result.ok()
            path_parameters = None
            if agent_id is not None and "{agent_id}" in operation.path:
                path_parameters = {"agent_id": agent_id}
            fixed = {**headers, **(path_parameters or {})}
            if mode.is_negative and not _free_inputs(operation, fixed):
                continue  # nothing left to make invalid
            if mode.is_negative and operation.label in NO_NEGATIVE:
                continue
            strategy = operation.as_strategy(
                generation_mode=mode, headers=headers, path_parameters=path_parameters
            )
            self._fuzz(operation.label, strategy, round_money, max_examples)

    def _fuzz(self, label: str, strategy: Any, round_money: bool, max_examples: int) -> None:
        @settings(
            max_examples=max_examples,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def fuzz(case: schemathesis.Case) -> None:
            _shorten_wait(case)
            if round_money:
                case.body = _round_money(case.body)
            response = case.call(session=self.session, timeout=15)
            self.requests[label, response.status_code] += 1
            case.validate_response(response)
            _assert_error_shape(response)

        fuzz()

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def close(self) -> None:
        self.session.close()


def _free_inputs(operation: schemathesis.APIOperation, fixed: dict[str, Any]) -> list[str]:
    """The inputs of an operation that the run generates (not fixed)."""
    names = [
        parameter.name
        for location in (operation.path_parameters, operation.query, operation.headers)
        for parameter in location
        if parameter.name not in fixed
    ]
    return names + ["body"] * len(list(operation.body))


def _shorten_wait(case: schemathesis.Case) -> None:
    wait = (case.query or {}).get("wait")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 <= wait <= 60:
        case.query["wait"] = min(wait, MAX_WAIT_IN_RUN)


def _round_money(value: Any) -> Any:
    """Floats rounded to 6 decimal places (the money rule), recursively."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {key: _round_money(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_round_money(item) for item in value]
    return value


def _assert_error_shape(response: schemathesis.Response) -> None:
    if response.status_code < 400:
        return
    assert response.headers["content-type"] == ["application/json"], response.headers
    body = response.json()
    assert isinstance(body, dict), body
    assert set(body) == {"error", "code"}, body
    assert isinstance(body["error"], str), body
    assert body["error"], body
    assert STATUS.get(body["code"]) == response.status_code, body


def _seed(server: GuardServer) -> str:
    """Create the agents the runs aim at, each with allowed, denied and many
    pending actions (act-1 to act-30); return the agent token of OWN_AGENT."""
    tools = ["search", "capped", "capped", "capped", "nope"] + ["send_email"] * 25
    tokens = {}
    with server.client(server.admin_token) as admin:
        for agent_id in (ADMIN_AGENT, OWN_AGENT, SPARE_AGENT):
            created = admin.post("/v1/agents", json={"agent_id": agent_id, "policy": POLICY})
            assert created.status_code == 201, created.text
            tokens[agent_id] = created.json()["token"]
            for tool in tools:
                answer = admin.post(f"/v1/agents/{agent_id}/actions", json={"tool": tool})
                assert answer.status_code == 200, answer.text
    return tokens[OWN_AGENT]


def _approver_token(server: GuardServer) -> str:
    with server.client(server.admin_token) as admin:
        issued = admin.post("/v1/operators/tokens", json={"name": "fuzz", "role": "approver"})
        assert issued.status_code == 201, issued.text
        return issued.json()["token"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardServer]:
    server = GuardServer(tmp_path_factory.mktemp("schemathesis") / "guard-data").start()
    try:
        yield server
    finally:
        server.kill()


def test_generated_requests_conform_to_the_document(fuzz_server: GuardServer) -> None:
    fuzz = Fuzz(fuzz_server, _seed(fuzz_server))
    admin = fuzz_server.admin_token
    started = time.monotonic()
    try:
        fuzz.run("not-a-token", max_examples=10)
        fuzz.run(admin, max_examples=50)
        fuzz.run(admin, agent_id=ADMIN_AGENT, round_money=True, max_examples=100)
        fuzz.run(fuzz.agent_token, agent_id=OWN_AGENT, round_money=True, max_examples=80)
        fuzz.run(admin, agent_id=SPARE_AGENT, mode=GenerationMode.NEGATIVE, max_examples=50)
        # An approver's token needs no approver name in the body (the admin
        # token does): its approvals and rejections reach the held actions.
        fuzz.run(_approver_token(fuzz_server), agent_id=ADMIN_AGENT, max_examples=60)
    finally:
        fuzz.close()
    elapsed = time.monotonic() - started
    statuses: Counter[int] = Counter()
    for (_, status), count in fuzz.requests.items():
        statuses[status] += count
    print(f"schemathesis: {fuzz.total} requests in {elapsed:.1f} s; statuses {dict(statuses)}")
    assert fuzz.total >= MIN_REQUESTS
    for label, status in sorted(fuzz.requests):
        print(f"  {label} {status}: {fuzz.requests[label, status]}")
    # The runs reached real agents and actions, not only 404s.
    assert {200, 201, 400, 401, 403, 404, 409} <= set(statuses)
    for label, wanted in REACHED.items():
        assert any(fuzz.requests[label, status] for status in wanted), label
    assert httpx.get(f"{fuzz_server.url}/healthz").status_code == 200


def test_no_file_outside_agents_was_written(fuzz_server: GuardServer) -> None:
    data_dir = fuzz_server.data_dir
    top = {path.name for path in data_dir.iterdir()}
    # policies/: the named policies the fuzzed PUT /v1/policies/<name> stored;
    # operators.jsonl: the operators log, written when the run issues an operator token.
    assert top - {"policies", "operators.jsonl"} == {"keys", "agents", "checkpoints", "lock"}
    for path in Path(data_dir / "policies").glob("*"):
        assert path.suffix == ".jsonl", path
    assert {path.name for path in (data_dir / "keys").iterdir()} == {
        "audit.key",
        "audit.pub",
        "token.key",
        "admin.token",
    }
    for path in Path(data_dir / "agents").iterdir():
        assert path.suffix == ".jsonl", path
