"""The OpenAPI document: complete, valid OpenAPI 3.1, and true of real answers.

Three kinds of checks:

- the document and the Quart app list the same paths and methods;
- the document validates against the OpenAPI 3.1 meta-schema, and each of its
  schemas against the JSON Schema Draft 2020-12 meta-schema (jsonschema_rs,
  which schemathesis brings; openapi_spec_validator is not installed);
- a walk through the main flows against a real guardd validates every answer
  (status documented, JSON content type, body matching the schema).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import jsonschema_rs
import orjson
import pytest
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from agents_runtime.core.policy import Policy, RateLimit, Rule, ToolRule
from agents_runtime.log import canonical
from guardd import bodies, replies
from guardd.__main__ import build
from guardd.app import create_app, document
from guardd.bodies import BODIES, NAMES
from guardd.config import Settings
from guardd.errors import BadRequest
from tests.support.authenticator import Authenticator
from tests.support.server import GuardServer

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
ALL_CODES = [
    "bad_request",
    "unauthorized",
    "forbidden",
    "not_found",
    "unknown_action",
    "method_not_allowed",
    "agent_exists",
    "invalid_state",
    "already_terminated",
    "idempotency_conflict",
    "too_large",
    "internal",
    "quarantined",
    "read_only",
    "unavailable",
]
PUBLIC = {
    "/healthz",
    "/readyz",
    "/v1/public-key",
    "/v1/auth/config",
    "/v1/openapi.json",
    "/",
    "/console/{name}",
}
METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}
POLICY: dict[str, Any] = {
    "budget": 10,
    "scar_limit": 5,
    "tools": {
        "search": {"cost": 1, "max_calls": 3},
        "send_email": {"cost": 2, "requires_approval": True},
    },
    "default": {"cost": 0.5},
    "rate_limit": {"max_actions": 100, "window_secs": 60},
}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return document()


def _operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


# -- the document against the app --------------------------------------------


def _app_routes(tmp_path: Path) -> set[tuple[str, str]]:
    guard, _, _ = build(Settings("127.0.0.1", 9200, tmp_path / "guard-data", None))
    return _app_routes_of(create_app(guard))


def _app_routes_of(app: Any) -> set[tuple[str, str]]:
    routes = set()
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        # HEAD is answered automatically for every GET; the document says so once.
        for method in rule.methods or ():
            if method not in {"HEAD", "OPTIONS"}:
                routes.add((path, method.lower()))
    return routes


def test_every_route_of_the_app_is_documented_and_nothing_else(
    tmp_path: Path, doc: dict[str, Any]
) -> None:
    documented = {(path, method) for path, method, _ in _operations(doc)}
    app = _app_routes(tmp_path)
    assert app - documented == set(), "routes missing from the document"
    assert documented - app == set(), "documented operations the app does not have"


@pytest.mark.parametrize("metrics", [True, False], ids=["metrics", "no-metrics"])
async def test_the_served_document_is_that_of_the_apps_own_routes(
    tmp_path: Path, metrics: bool
) -> None:
    guard, _, _ = build(Settings("127.0.0.1", 9200, tmp_path / "guard-data", None))
    app = create_app(guard, metrics=metrics)
    served = await (await app.test_client().get("/v1/openapi.json")).get_json()
    documented = {(path, method) for path, method, _ in _operations(served)}
    assert documented == _app_routes_of(app)
    assert (("/metrics", "get") in documented) is metrics
    if metrics:
        assert served == orjson.loads(orjson.dumps(document()))


# -- the document is valid ----------------------------------------------------


def test_document_is_valid_openapi_3_1(doc: dict[str, Any]) -> None:
    errors = [str(error) for error in OPENAPI_31_VALIDATOR.iter_errors(doc)]
    assert errors == []
    assert doc["openapi"].startswith("3.1.")


def test_the_meta_schema_check_does_catch_a_broken_document(doc: dict[str, Any]) -> None:
    broken = document()
    broken["paths"]["/healthz"]["get"]["responses"]["200"] = {"content": {}}  # no description
    assert not OPENAPI_31_VALIDATOR.is_valid(broken)


@pytest.mark.parametrize("name", sorted(document()["components"]["schemas"]))
def test_each_schema_is_valid_json_schema_2020_12(doc: dict[str, Any], name: str) -> None:
    schema = doc["components"]["schemas"][name]
    jsonschema_rs.meta.validate({"$schema": DRAFT_2020_12, **schema})


def _refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref":
                yield item
            else:
                yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def test_every_ref_resolves_and_every_schema_is_used(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    refs = set(_refs(doc))
    names = {ref.removeprefix("#/components/schemas/") for ref in refs}
    assert all(ref.startswith("#/components/schemas/") for ref in refs)
    assert names - set(schemas) == set()
    assert set(schemas) - names == set()


def test_error_schema_lists_every_code(doc: dict[str, Any]) -> None:
    error = doc["components"]["schemas"]["Error"]
    assert error["required"] == ["error", "code"]
    assert error["additionalProperties"] is False
    assert sorted(error["properties"]["code"]["enum"]) == sorted(ALL_CODES)


def test_security_is_bearer_except_on_public_operations(doc: dict[str, Any]) -> None:
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"],
    }
    assert doc["security"] == [{"bearer": []}]
    for path, method, operation in _operations(doc):
        if path in PUBLIC:
            assert operation.get("security") == [], (path, method)
        else:
            assert path.startswith("/v1/") or path == "/metrics", path  # /metrics: as /healthz
            assert "security" not in operation, (path, method)  # inherits bearer
            assert {"401", "403"} <= set(operation["responses"]), (path, method)


def test_every_error_response_uses_the_error_schema(doc: dict[str, Any]) -> None:
    for path, _method, operation in _operations(doc):
        for status, response in operation["responses"].items():
            if int(status) < 400:
                continue
            schema = response["content"]["application/json"]["schema"]
            assert schema["allOf"] == [{"$ref": "#/components/schemas/Error"}], (path, status)
            assert operation["responses"][status]["description"]
            for code in schema["properties"]["code"]["enum"]:
                assert code in ALL_CODES


def test_operations_with_a_body_document_400_and_413(doc: dict[str, Any]) -> None:
    for path, method, operation in _operations(doc):
        if "requestBody" in operation:
            assert {"400", "413"} <= set(operation["responses"]), (path, method)
            schema = operation["requestBody"]["content"]["application/json"]["schema"]
            # One body model, or one of several (a policy, or a named policy's ref).
            for each in schema.get("oneOf", [schema]):
                name = each["$ref"].rsplit("/", 1)[1]
                body = doc["components"]["schemas"][name]
                if getattr(BODIES[name], "more_keys", False):  # a hook's input, which grows
                    assert "additionalProperties" not in body, name
                else:
                    assert body["additionalProperties"] is False, name


def test_every_body_model_is_documented_under_its_name(doc: dict[str, Any]) -> None:
    models = {
        value
        for value in vars(bodies).values()
        if isinstance(value, type) and attrs.has(value) and value.__module__ == bodies.__name__
    }
    assert set(NAMES) == models
    bodies_used = {
        each["$ref"].rsplit("/")[-1]
        for _, _, operation in _operations(doc)
        if "requestBody" in operation
        for each in (lambda schema: schema.get("oneOf", [schema]))(
            operation["requestBody"]["content"]["application/json"]["schema"]
        )
    }
    assert bodies_used == set(BODIES)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_each_body_schema_has_its_models_fields(doc: dict[str, Any], name: str) -> None:
    schema = doc["components"]["schemas"][name]
    fields = attrs.fields(BODIES[name])
    assert list(schema["properties"]) == [field.name for field in fields]
    assert schema["required"] == [f.name for f in fields if f.default is attrs.NOTHING]
    more_keys = getattr(BODIES[name], "more_keys", False)  # a hook's input, which grows
    assert schema.get("additionalProperties") is (None if more_keys else False)


AGREEMENT = [
    (bodies.ActionRequest, {"tool": "search"}, True),
    (bodies.ActionRequest, {"tool": "search", "input": [1], "cost": 0.5}, True),
    (bodies.ActionRequest, {"tool": "search", "cost": None}, True),
    (bodies.ActionRequest, {"tool": ""}, False),
    (bodies.ActionRequest, {"tool": "search", "extra": 1}, False),
    (bodies.ActionRequest, {"tool": "search", "cost": -1}, False),
    (bodies.ActionRequest, {}, False),
    (bodies.OutcomeReport, {"status": "success", "detail": "done"}, True),
    (bodies.OutcomeReport, {"status": "fine"}, False),
    (bodies.ApproveBody, {"approver": "ann"}, True),
    (bodies.ApproveBody, {"approver": "a" * 129}, False),
    (bodies.RejectBody, {"approver": "ann", "reason": "no", "scar": "minor"}, True),
    (bodies.RejectBody, {"approver": "ann", "reason": "no", "scar": "mild"}, False),
    (bodies.CancelBody, {}, True),
    (bodies.ScarBody, {"severity": "fatal", "reason": "r", "by": None}, True),
    (bodies.ScarBody, {"severity": "fatal", "reason": "r", "by": "system"}, False),
    (bodies.TerminateBody, {"reason": "r", "by": "ann"}, True),
    (bodies.TerminateBody, {"reason": "r"}, True),  # `by`: required with the admin token only
    (bodies.TerminateBody, {"by": "ann"}, False),
    (bodies.GrantBody, {"tool": "t", "by": "ann", "max_calls": 1, "ttl_secs": 60}, True),
    (bodies.GrantBody, {"tool": "t", "by": "ann", "max_calls": 0}, False),
    (bodies.GrantBody, {"tool": "t", "by": "ann", "input_match": []}, False),
    (bodies.RevokeGrantBody, {"by": "ann", "reason": None}, True),
    (bodies.CreateAgent, {"agent_id": "a-1", "policy": POLICY}, True),
    (bodies.CreateAgent, {"agent_id": "a 1", "policy": POLICY}, False),
]


@pytest.mark.parametrize(("model", "body", "accepted"), AGREEMENT)
def test_the_body_schemas_and_the_parser_agree(
    doc: dict[str, Any], model: type[Any], body: dict[str, Any], accepted: bool
) -> None:
    name = {cls: name for name, cls in BODIES.items()}[model]
    valid = _validator(doc, {"$ref": f"#/components/schemas/{name}"})
    assert valid.is_valid(body) is accepted
    try:
        # As read_json hands it over: numbers as decimals, never floats.
        bodies.parse_body(canonical.loads(orjson.dumps(body)), model)
    except BadRequest:
        assert not accepted
    else:
        assert accepted


def test_policy_schema_is_strict_and_complete(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    policy = schemas["Policy"]
    assert set(policy["properties"]) == {
        "budget",
        "scar_limit",
        "tools",
        "default",
        "rate_limit",
        "approval_timeout_secs",
    }
    assert policy["required"] == ["budget", "scar_limit", "tools"]
    assert set(schemas["ToolRule"]["properties"]) == {
        "cost",
        "requires_approval",
        "max_calls",
        "approval_timeout_secs",
        "rules",
        "tags",
        "cost_from",
        "approvals_required",
        "approval_passkey",
    }
    assert set(schemas["Rule"]["properties"]) == {
        "name",
        "when",
        "effect",
        "message",
        "scar",
        "approval_passkey",
    }
    assert set(schemas["RateLimit"]["properties"]) == {"max_actions", "window_secs"}
    for name in ("Policy", "ToolRule", "RateLimit"):
        assert schemas[name]["additionalProperties"] is False
    budget = policy["properties"]["budget"]
    assert budget["type"] == "number"
    assert budget["minimum"] == 0
    assert "6 decimal places" in budget["description"]
    assert "1000000000" in budget["description"]
    valid = _validator(doc, {"$ref": "#/components/schemas/Policy"})
    assert valid.is_valid(POLICY)
    assert not valid.is_valid({**POLICY, "tools": {"x": {"requires_aproval": True}}})
    assert not valid.is_valid({**POLICY, "budget": -1})


@pytest.mark.parametrize(
    ("documented", "core", "every_key_answered"),
    [
        pytest.param(bodies.PolicyBody, Policy, False, id="policy"),
        pytest.param(bodies.ToolRuleBody, ToolRule, False, id="tool-rule"),
        pytest.param(bodies.RateLimitBody, RateLimit, False, id="rate-limit"),
        pytest.param(bodies.RuleBody, Rule, False, id="rule"),
        pytest.param(replies.PolicyInForce, Policy, True, id="policy-in-force"),
        pytest.param(replies.ToolRuleInForce, ToolRule, True, id="tool-rule-in-force"),
    ],
)
def test_the_documented_policy_is_the_one_the_core_parses(
    documented: type, core: type, every_key_answered: bool
) -> None:
    """The policy's classes in guardd document what the core's strict parser
    takes (the same keys, the same ones required) and what the policy in
    force is answered as (every key but the timeouts, approvals_required and
    approval_passkey, which only when set)."""
    assert [f.name for f in attrs.fields(documented)] == [f.name for f in attrs.fields(core)]
    required = [f.name for f in attrs.fields(documented) if f.default is attrs.NOTHING]
    if every_key_answered:
        assert required == [f.name for f in attrs.fields(core)][: len(required)]
        assert [f.name for f in attrs.fields(documented)][len(required) :] in (
            ["approval_timeout_secs"],
            [
                "approval_timeout_secs",
                "rules",
                "tags",
                "cost_from",
                "approvals_required",
                "approval_passkey",
            ],
        )
    else:
        assert required == [f.name for f in attrs.fields(core) if f.default is attrs.NOTHING]


def test_documented_limits_match_the_server(doc: dict[str, Any]) -> None:
    text = doc["info"]["description"]
    assert "nesting at most 64 levels" in text
    assert "1048576 bytes" in text
    log = doc["paths"]["/v1/agents/{agent_id}/log"]["get"]["parameters"]
    assert [p["name"] for p in log] == ["agent_id", "after", "limit"]
    wait = doc["paths"]["/v1/agents/{agent_id}/actions/{action_id}"]["get"]["parameters"][2]
    assert wait["schema"] == {"type": "number", "minimum": 0, "maximum": 60}


# -- real answers against the document ------------------------------------------


def _validator(doc: dict[str, Any], schema: dict[str, Any]) -> jsonschema_rs.Validator:
    # The components ride along under an unknown keyword so "#/components/..." resolves.
    return jsonschema_rs.Draft202012Validator(
        {**schema, "components": doc["components"]}, validate_formats=True
    )


class Conformance:
    """Checks each answer against the operation it came from; remembers
    which (path, method, status) were seen."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.seen: set[tuple[str, str, str]] = set()
        self._templates = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"), path)
            for path in doc["paths"]
        ]

    def template(self, path: str) -> str:
        # As in OpenAPI, a concrete segment (".../actions/pending") wins over a template.
        matches = [template for pattern, template in self._templates if pattern.match(path)]
        assert matches, path
        return min(matches, key=lambda template: template.count("{"))

    def check(self, response: httpx.Response) -> Any:
        path = self.template(response.request.url.path)
        method = response.request.method.lower()
        operation = self.doc["paths"][path][method]
        status = str(response.status_code)
        assert response.status_code != 500, (method, path, response.text)
        assert status in operation["responses"], (method, path, status, response.text)
        documented = operation["responses"][status]
        media = response.headers["content-type"].split(";")[0]
        assert media in documented["content"], (method, path, status, media)
        self.seen.add((path, method, status))
        if media != "application/json":
            return response.text
        body = response.json()
        validator = _validator(self.doc, documented["content"][media]["schema"])
        errors = [str(e) for e in validator.iter_errors(body)]
        assert errors == [], (method, path, status, body)
        return body


def _passkey_flow(server: GuardServer, admin: Any, ck: Any) -> None:
    """Register a passkey, sign an approval with it, revoke it (docs/api.md, "Passkeys")."""
    issued = ck(admin.post("/v1/operators/tokens", json={"name": "pk", "role": "approver"}))
    key = Authenticator(f"http://localhost:{server.port}")
    with server.client(issued["token"]) as person:
        ck(admin.post("/v1/operators/passkeys/options"))  # 403: the admin token
        options = ck(person.post("/v1/operators/passkeys/options"))
        ck(person.post("/v1/operators/passkeys", json=key.register(options)))
        ck(person.post("/v1/operators/passkeys", json=key.register(options)))  # 403: used
        ck(person.post("/v1/operators/passkeys", json={"id": 1}))  # 400
        ck(person.get("/v1/operators/passkeys"))
        ck(admin.get("/v1/operators/passkeys"))
        policy = {**POLICY, "tools": {"pay": {"requires_approval": True, "approval_passkey": True}}}
        ck(admin.post("/v1/agents", json={"agent_id": "signed", "policy": policy}))
        held = ck(admin.post("/v1/agents/signed/actions", json={"tool": "pay"}))["action_id"]
        base = f"/v1/agents/signed/actions/{held}"
        ck(person.get(f"{base}/approval-options", params={"decision": "maybe"}))  # 400
        request = ck(person.get(f"{base}/approval-options"))
        ck(person.post(f"{base}/approve", json={}))  # 403: no passkey
        ck(person.post(f"{base}/approve", json={"passkey": key.assertion(request["challenge"])}))
        ck(person.get(f"{base}/approval-options"))  # 409: no longer pending
    ck(admin.post(f"/v1/operators/passkeys/{key.id}/revoke"))
    ck(admin.post(f"/v1/operators/passkeys/{key.id}/revoke"))  # 409
    ck(admin.post("/v1/operators/passkeys/none/revoke"))  # 404


def test_answers_of_the_main_flows_match_the_document(
    guard_server: GuardServer, doc: dict[str, Any]
) -> None:
    server = guard_server
    conf = Conformance(doc)
    with (
        server.client(server.admin_token) as admin,
        server.client() as anonymous,
    ):
        ck = conf.check
        ck(anonymous.get("/healthz"))
        ck(anonymous.get("/readyz"))
        ck(anonymous.get("/v1/public-key"))
        assert ck(anonymous.get("/v1/openapi.json")) == doc
        ck(anonymous.get("/"))
        ck(anonymous.get("/console/app.js"))
        ck(anonymous.get("/console/style.css"))
        ck(anonymous.get("/console/nothing.js"))
        ck(anonymous.get("/v1/agents"))
        ck(admin.get("/metrics"))
        ck(anonymous.get("/metrics"))  # 401

        created = ck(admin.post("/v1/agents", json={"agent_id": "walk", "policy": POLICY}))
        ck(admin.post("/v1/agents", json={"agent_id": "walk", "policy": POLICY}))  # 409
        ck(admin.post("/v1/agents", json={"agent_id": "bad id", "policy": POLICY}))  # 400
        ck(admin.post("/v1/agents", json={"agent_id": "other", "policy": POLICY}))
        ck(admin.get("/v1/agents"))
        with server.client(created["token"]) as agent:
            base = "/v1/agents/walk"
            ck(agent.get(base))
            ck(agent.get("/v1/agents/other"))  # 403
            ck(agent.get("/v1/agents"))  # 403
            ck(admin.get(f"{base}/token"))
            ck(agent.get(f"{base}/policy"))
            ck(agent.get("/v1/agents/other/policy"))  # 403
            ck(admin.get("/v1/agents/ghost"))  # 404
            allowed = ck(agent.post(f"{base}/actions", json={"tool": "search", "input": [1]}))
            assert allowed["decision"] == "allowed"
            hook = "/v1/hooks/claude-code"
            pre = {"hook_event_name": "PreToolUse", "tool_name": "search", "tool_use_id": "t-1"}
            said = ck(agent.post(hook, json={**pre, "tool_input": {"q": 1}, "cwd": "/"}))
            assert said["hookSpecificOutput"]["permissionDecision"] == "allow"
            ck(agent.post(hook, json={**pre, "tool_name": "nope", "tool_use_id": "t-2"}))
            ck(
                agent.post(
                    hook, json={**pre, "hook_event_name": "PostToolUse", "tool_input": {"q": 1}}
                )
            )
            ck(agent.post(hook, json={**pre, "hook_event_name": "Stop"}))  # 400
            ck(admin.post(hook, json=pre))  # 403
            key = {"Idempotency-Key": "k-1"}
            ck(agent.post(f"{base}/actions", json={"tool": "search", "cost": 1.5}, headers=key))
            ck(agent.post(f"{base}/actions", json={"tool": "search", "cost": 1.5}, headers=key))
            ck(agent.post(f"{base}/actions", json={"tool": "search"}, headers=key))  # 409
            pending = ck(agent.post(f"{base}/actions", json={"tool": "send_email"}))
            assert pending["decision"] == "pending_approval"
            held = pending["action_id"]
            ck(agent.get(f"{base}/actions/{held}", params={"wait": "0.1"}))
            ck(agent.get(f"{base}/actions/{held}", params={"wait": "61"}))  # 400
            ck(agent.get(f"{base}/actions/act-999"))  # 404 unknown_action
            ck(admin.get(f"{base}/actions/pending"))
            ck(agent.get(f"{base}/actions/pending"))  # 403
            ck(admin.post(f"{base}/actions/{held}/approve", json={"approver": "ann", "note": "ok"}))
            ck(agent.get(f"{base}/actions/{held}"))
            ck(admin.post(f"{base}/actions/{held}/approve", json={"approver": "ann"}))  # 409
            second = ck(agent.post(f"{base}/actions", json={"tool": "send_email"}))["action_id"]
            ck(admin.post(f"{base}/actions/{second}/reject", json={"approver": "ann"}))  # 400
            ck(
                admin.post(
                    f"{base}/actions/{second}/reject",
                    json={"approver": "ann", "reason": "no", "scar": "minor"},
                )
            )
            ck(agent.get(f"{base}/actions/{second}"))
            third = ck(agent.post(f"{base}/actions", json={"tool": "send_email"}))["action_id"]
            ck(agent.post(f"{base}/actions/{third}/cancel", json={"why": "x"}))  # 400
            ck(agent.post(f"{base}/actions/{third}/cancel", json={"reason": "gave up"}))
            ck(agent.post(f"{base}/actions/{third}/cancel", json={}))  # 409
            ck(admin.post(f"{base}/actions/{third}/approve", json={"approver": "ann"}))  # 409
            ck(agent.get(f"{base}/actions/{third}"))
            grant = {"tool": "send_email", "by": "ann", "max_calls": 1, "ttl_secs": 60}
            ck(admin.post(f"{base}/grants", json=grant))
            ck(admin.post(f"{base}/grants", json={"tool": "send_email", "by": "ann"}))  # 400
            drawn = ck(agent.post(f"{base}/actions", json={"tool": "send_email"}))
            assert drawn["grant_id"] == "grt-1"
            ck(agent.get(f"{base}/actions/{drawn['action_id']}"))
            ck(admin.get(f"{base}/grants"))
            ck(admin.post(f"{base}/grants/grt-1/revoke", json={"by": "ann", "reason": "done"}))
            ck(admin.post(f"{base}/grants/grt-1/revoke", json={"by": "ann"}))  # 409
            ck(admin.post(f"{base}/grants/grt-9/revoke", json={"by": "ann"}))  # 404
            ck(agent.post(f"{base}/actions/{allowed['action_id']}/outcome", json={"status": "x"}))
            ck(
                agent.post(
                    f"{base}/actions/{allowed['action_id']}/outcome", json={"status": "harmful"}
                )
            )
            ck(
                agent.post(
                    f"{base}/actions/{allowed['action_id']}/outcome", json={"status": "success"}
                )
            )
            ck(
                agent.post(
                    f"{base}/actions/{allowed['action_id']}/outcome", json={"status": "success"}
                )
            )
            ck(agent.post(f"{base}/actions", json={"tool": "unknown_tool"}))  # default rule
            ck(admin.put(f"{base}/policy", json={**POLICY, "default": None}))
            denied = ck(agent.post(f"{base}/actions", json={"tool": "unknown_tool"}))
            assert denied["reason"]["code"] == "tool_not_allowed"
            ck(agent.get(f"{base}/actions/{denied['action_id']}"))
            ck(admin.put(f"{base}/policy", json={**POLICY, "budgett": 1}))  # 400
            ck(admin.put("/v1/policies/fleet", json=POLICY))
            ck(admin.put("/v1/policies/fleet", json={"budget": 1}))  # 400
            ck(admin.get("/v1/policies"))
            ck(admin.put(f"{base}/policy", json={"policy_ref": "fleet"}))
            ck(admin.get("/v1/policies/fleet"))
            ck(admin.get("/v1/policies/ghost"))  # 404
            ck(admin.request("DELETE", "/v1/policies/fleet"))  # 409
            ck(admin.put(f"{base}/policy", json={**POLICY, "default": None}))
            ck(admin.request("DELETE", "/v1/policies/fleet"))
            ck(admin.get(f"{base}/shadow"))  # 404
            ck(admin.put(f"{base}/shadow", json={"budget": 1}))  # 400
            ck(admin.put(f"{base}/shadow", json=POLICY))
            ck(agent.post(f"{base}/actions", json={"tool": "search"}))
            ck(admin.get(f"{base}/shadow"))
            ck(admin.request("DELETE", f"{base}/shadow"))
            ck(admin.request("DELETE", f"{base}/shadow"))  # 404
            ck(
                admin.post(
                    f"{base}/scars", json={"severity": "minor", "reason": "r", "action_id": "act-1"}
                )
            )
            ck(
                admin.post(
                    f"{base}/scars",
                    json={"severity": "minor", "reason": "r", "action_id": "act-99"},
                )
            )
            ck(agent.post(f"{base}/scars", json={"severity": "minor", "reason": "r"}))  # 403
            ck(admin.get(f"{base}/log"))
            ck(admin.get(f"{base}/log", params={"after": 3, "limit": 2}))
            ck(admin.get(f"{base}/log", params={"limit": 0}))  # 400
            ck(admin.get(f"{base}/verify"))
            held = ck(agent.post(f"{base}/actions", json={"tool": "send_email"}))["action_id"]
            ck(admin.post(f"{base}/terminate", json={"reason": "done", "by": "ann"}))
            ck(admin.post(f"{base}/terminate", json={"reason": "done", "by": "ann"}))  # 409
            ck(admin.post(f"{base}/actions/{held}/approve", json={"approver": "ann"}))  # terminated
            ck(agent.post(f"{base}/actions", json={"tool": "search"}))  # terminated
            ck(admin.put(f"{base}/policy", json=POLICY))  # 409
            ck(agent.get(base))
        ck(admin.post("/v1/agents", content=b"x" * (1024 * 1024 + 1)))  # 413
        ck(admin.post("/v1/agents", content=b"{"))  # 400
        ck(anonymous.post("/v1/agents", json={}))  # 401
        ck(admin.get("/v1/me"))
        issued = ck(admin.post("/v1/operators/tokens", json={"name": "bot", "role": "viewer"}))
        ck(admin.post("/v1/operators/tokens", json={"name": "bot", "role": "owner"}))  # 400
        ck(admin.get("/v1/operators/tokens"))
        ck(admin.post(f"/v1/operators/tokens/{issued['token_id']}/revoke"))
        ck(admin.post(f"/v1/operators/tokens/{issued['token_id']}/revoke"))  # 409
        ck(admin.post("/v1/operators/tokens/tok-none/revoke"))  # 404
        ck(anonymous.get("/v1/auth/config"))  # 404: no --oidc-issuer
        _passkey_flow(server, admin, ck)

        # budget exhausted by an allowed action: still `allowed`, then terminated
        ck(
            admin.post(
                "/v1/agents", json={"agent_id": "spender", "policy": {**POLICY, "budget": 1}}
            )
        )
        ck(admin.post("/v1/agents/spender/actions", json={"tool": "search"}))
        ck(admin.post("/v1/agents/spender/actions", json={"tool": "search"}))  # terminated
        # a fatal scar
        ck(admin.post("/v1/agents/other/scars", json={"severity": "fatal", "reason": "r"}))
        ck(admin.post("/v1/agents/other/actions", json={"tool": "search"}))

        # a tampered log: verify fails; after a restart the agent is quarantined
        log_path = server.data_dir / "agents" / "walk.jsonl"
        lines = log_path.read_bytes().split(b"\n")
        lines[2] = lines[2].replace(b'"search"', b'"seArch"', 1)
        log_path.write_bytes(b"\n".join(lines))
        report = ck(admin.get("/v1/agents/walk/verify"))
        assert report["ok"] is False
    server.restart()
    with server.client(server.admin_token) as admin:
        listed = ck(admin.get("/v1/agents"))
        assert {e["agent_id"]: e["state"] for e in listed["agents"]}["walk"] == "quarantined"
        ck(admin.get("/v1/agents/walk"))  # 503 quarantined
        ck(admin.get("/v1/agents/walk/policy"))  # 503 quarantined
        ck(admin.post("/v1/agents/walk/actions", json={"tool": "search"}))
    # without the signing key the service is read-only
    server.stop()
    (server.data_dir / "keys" / "audit.key").unlink()
    server.start()
    with server.client(server.admin_token) as admin:
        ck(admin.post("/v1/agents", json={"agent_id": "late", "policy": POLICY}))  # 503
        ck(admin.post("/v1/agents/spender/scars", json={"severity": "minor", "reason": "r"}))
        ck(admin.get("/v1/agents/spender/verify"))

    statuses = {status for _, _, status in conf.seen}
    assert {"200", "201", "400", "401", "403", "404", "409", "413", "503"} <= statuses
    operations = {(path, method) for path, method, _ in conf.seen}
    assert operations == {(path, method) for path, method, _ in _operations(doc)}
