"""Every answer of the API carries the security headers and no-store, errors
included, and a body left unread does not break the connection."""

from __future__ import annotations

import httpx
import pytest

from tests.guardd.conftest import Api


def _assert_guard_headers(response: httpx.Response) -> None:
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/healthz", 200, id="ok"),
        pytest.param("GET", "/v1/agents", 401, id="unauthorized"),
        pytest.param("GET", "/v1/nowhere", 404, id="not-found"),
        pytest.param("DELETE", "/healthz", 405, id="method-not-allowed"),
    ],
)
def test_answers_without_an_agent_carry_the_headers(
    api: Api, method: str, path: str, status: int
) -> None:
    response = api.http.request(method, path)
    assert response.status_code == status
    _assert_guard_headers(response)


def test_decisions_and_refusals_of_an_agent_carry_the_headers(api: Api) -> None:
    agent = api.create()
    body = {"tool": "search", "input": {"q": "x"}}
    _assert_guard_headers(agent.client.request("POST", f"{agent.path}/actions", json=body))
    bad = agent.client.request("POST", f"{agent.path}/actions", json={"tool": 5})
    assert bad.status_code == 400
    _assert_guard_headers(bad)


def test_a_body_sent_to_a_refused_request_does_not_break_the_next_request(api: Api) -> None:
    with httpx.Client(base_url=api.server.url, timeout=30.0) as client:
        refused = client.post("/v1/agents/nobody/actions", content=b'{"tool": "x"}' * 1000)
        assert refused.status_code == 401
        # The same connection when the body had arrived, else a new one (Connection: close)
        assert client.get("/healthz").status_code == 200
