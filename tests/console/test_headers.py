"""guardd serves the console with a strict Content-Security-Policy and friends."""

from __future__ import annotations

import pytest

from tests.support.server import GuardServer


def csp_directives(header: str) -> dict[str, list[str]]:
    directives = {}
    for part in header.split(";"):
        name, *values = part.split()
        directives[name.lower()] = values
    return directives


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        pytest.param("/", "text/html", id="index"),
        pytest.param("/console/app.js", "javascript", id="app-js"),
        pytest.param("/console/style.css", "text/css", id="style-css"),
    ],
)
def test_console_responses_carry_the_security_headers(
    guard_server: GuardServer, path: str, content_type: str
) -> None:
    with guard_server.client() as client:
        response = client.get(path)
    assert response.status_code == 200
    assert content_type in response.headers["content-type"]
    csp = csp_directives(response.headers["content-security-policy"])
    assert csp["default-src"] == ["'none'"]
    assert csp["script-src"] == ["'self'"]
    assert "'unsafe-inline'" not in csp["script-src"]
    assert "'unsafe-eval'" not in csp["script-src"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
