"""Named (fleet) policies over HTTP: stored signed with the logs, followed by
agents whose logs each hold every version, fanned out before the PUT answers,
and finished at the next start after a crash halfway."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agents_runtime.log import canonical
from agents_runtime.log.policies import verify_versions
from tests.guardd.conftest import POLICY, Api, assert_error, ok
from tests.support.server import GuardServer

V2 = {**POLICY, "budget": 200}
FLEET = 1_000  # followers of one named policy: a fleet of a thousand agents


def _follow(api: Api, name: str, ids: list[str]) -> None:
    """Create the agents of ``ids`` following ``name``, a few at a time."""

    def create(agent_id: str) -> None:
        ok(api.admin.post("/v1/agents", json={"agent_id": agent_id, "policy_ref": name}), 201)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, ids))


def _policy_records(api: Api, agent_id: str) -> list[dict[str, Any]]:
    path = api.server.data_dir / "agents" / f"{agent_id}.jsonl"
    records = [canonical.loads(line) for line in path.read_bytes().splitlines()]
    return [r for r in records if r["kind"] == "policy"]


def test_a_named_policy_is_stored_signed_and_shown_with_its_followers(api: Api) -> None:
    name = api.new_id("fleet")
    put = ok(api.admin.put(f"/v1/policies/{name}", json=POLICY))
    assert (put["name"], put["version"], put["agents"]) == (name, 1, [])
    assert put["policy"]["budget"] == 100
    agent_id = api.new_id()
    created = ok(api.admin.post("/v1/agents", json={"agent_id": agent_id, "policy_ref": name}), 201)
    assert created["agent"]["budget"] == 100
    shown = ok(api.admin.get(f"/v1/policies/{name}"))
    assert shown["agents"] == [agent_id]
    listed = ok(api.admin.get("/v1/policies"))["policies"]
    assert [p["name"] for p in listed if p["name"] == name] == [name]
    (first,) = _policy_records(api, agent_id)
    assert (first["policy_ref"], first["version"]) == (name, 1)
    lines = (api.server.data_dir / "policies" / f"{name}.jsonl").read_bytes().splitlines()
    key = bytes.fromhex(api.server.public_key)
    assert [v.version for v in verify_versions(name, lines, key)] == [1]


def test_a_new_version_is_in_every_followers_log_when_the_put_answers(api: Api) -> None:
    name = api.new_id("fleet")
    ok(api.admin.put(f"/v1/policies/{name}", json=POLICY))
    ids = [api.new_id("follower") for _ in range(FLEET)]
    _follow(api, name, ids)
    put = ok(api.admin.put(f"/v1/policies/{name}", json=V2))
    assert put["version"] == 2
    assert put["agents"] == sorted(ids)
    for agent_id in ids:
        newest = _policy_records(api, agent_id)[-1]
        assert (newest["policy_ref"], newest["version"]) == (name, 2)
        assert newest["policy"]["budget"] == 200


def test_an_agent_switched_to_a_named_policy_follows_it_until_given_its_own(api: Api) -> None:
    name = api.new_id("fleet")
    ok(api.admin.put(f"/v1/policies/{name}", json=V2))
    agent = api.create()
    status = ok(api.admin.put(f"{agent.path}/policy", json={"policy_ref": name}))
    assert status["budget"] == 200
    assert ok(api.admin.get(f"/v1/policies/{name}"))["agents"] == [agent.agent_id]
    ok(api.admin.put(f"{agent.path}/policy", json=POLICY))
    assert ok(api.admin.get(f"/v1/policies/{name}"))["agents"] == []
    ok(api.admin.put(f"/v1/policies/{name}", json=POLICY))
    assert _policy_records(api, agent.agent_id)[-1].get("policy_ref") is None


def test_delete_is_refused_while_agents_follow_and_unknown_names_are_not_found(api: Api) -> None:
    name = api.new_id("fleet")
    ok(api.admin.put(f"/v1/policies/{name}", json=POLICY))
    agent_id = api.new_id()
    ok(api.admin.post("/v1/agents", json={"agent_id": agent_id, "policy_ref": name}), 201)
    assert_error(api.admin.request("DELETE", f"/v1/policies/{name}"), 409, "invalid_state")
    ok(api.admin.put(f"/v1/agents/{agent_id}/policy", json=POLICY))
    assert ok(api.admin.request("DELETE", f"/v1/policies/{name}")) == {"ok": True}
    assert_error(api.admin.get(f"/v1/policies/{name}"), 404, "not_found")
    assert_error(api.admin.request("DELETE", f"/v1/policies/{name}"), 404, "not_found")
    body = {"agent_id": api.new_id(), "policy_ref": name}
    assert_error(api.admin.post("/v1/agents", json=body), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        pytest.param("PUT", "/v1/policies/bad.name", POLICY, 400, "bad_request", id="put-bad-name"),
        pytest.param("GET", "/v1/policies/bad.name", None, 404, "not_found", id="get-bad-name"),
        pytest.param("PUT", "/v1/policies/ok", {"budget": 1}, 400, "bad_request", id="bad-policy"),
        pytest.param(
            "POST",
            "/v1/agents",
            {"agent_id": "x", "policy": POLICY, "policy_ref": "ok"},
            400,
            "bad_request",
            id="both-policy-and-ref",
        ),
        pytest.param(
            "POST",
            "/v1/agents",
            {"agent_id": "x", "policy_ref": "a b"},
            400,
            "bad_request",
            id="bad-ref",
        ),
    ],
)
def test_bad_names_and_bodies_are_refused(
    api: Api, method: str, path: str, body: Any, status: int, code: str
) -> None:
    assert_error(api.admin.request(method, path, json=body), status, code)


def test_only_the_admin_may_store_a_named_policy(api: Api) -> None:
    agent = api.create()
    assert_error(agent.client.put("/v1/policies/mine", json=POLICY), 403, "forbidden")


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[GuardServer]:
    server = GuardServer(tmp_path / "guard-data")
    yield server
    server.kill()


def test_a_fan_out_cut_short_by_a_crash_finishes_at_the_next_start(faulty: GuardServer) -> None:
    # Half the followers' appends fail after their creation (an append each):
    # the PUT stores version 2, reaches the other half, and is not answered
    # 200; guardd is then killed (-9) and started again without faults.
    ids = [f"f-{n}" for n in range(FLEET)]
    half = FLEET // 2
    faults = ",".join(f"{agent_id}:eio_write:1" for agent_id in ids[half:])
    faulty.extra_env["GUARD_TEST_FAULTS"] = faults
    faulty.start()
    api = Api(faulty)
    try:
        ok(api.admin.put("/v1/policies/fleet", json=POLICY))
        _follow(api, "fleet", ids)
        response = api.admin.put("/v1/policies/fleet", json=V2)
        assert response.status_code == 500, response.text
        versions = [_policy_records(api, agent_id)[-1]["version"] for agent_id in ids]
        assert versions == [2] * half + [1] * half
        faulty.kill()
        del faulty.extra_env["GUARD_TEST_FAULTS"]
        faulty.start()
        versions = [_policy_records(api, agent_id)[-1]["version"] for agent_id in ids]
        assert versions == [2] * FLEET
        shown = ok(api.admin.get("/v1/policies/fleet"))
        assert (shown["version"], len(shown["agents"])) == (2, FLEET)
    finally:
        api.close()


def test_a_tampered_named_policy_stops_guardd_at_start(faulty: GuardServer) -> None:
    faulty.start()
    api = Api(faulty)
    try:
        ok(api.admin.put("/v1/policies/fleet", json=POLICY))
    finally:
        api.close()
    faulty.stop()
    path = faulty.data_dir / "policies" / "fleet.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"budget":100', b'"budget":999'))
    with pytest.raises(RuntimeError, match="hash does not match content"):
        faulty.start(timeout=10)
