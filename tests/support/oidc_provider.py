"""A real OpenID provider for tests: tests/oidc_provider/server.mjs, which runs
oidc-provider (the OpenID Certified Node.js implementation) on a free
loopback port, with users in groups and a login page.

``sign_in`` drives that login page with httpx through the Authorization Code
flow with PKCE, exactly as a browser would, and returns the provider's
tokens; ``sign`` has the provider sign claims that no sign-in would give
(expired, another audience); ``rotate`` replaces the provider's signing key.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from tests.support.server import free_port

PACKAGE = Path(__file__).resolve().parents[1] / "oidc_provider"
CLIENT_ID = "guard-console"
# The callback sign_in names; never served: the code is read from the redirect.
TEST_REDIRECT = "http://127.0.0.1:9/callback"
# Every user's password is <name>-pw; their groups, as server.mjs declares them.
USERS = {
    "alice": ("guard-admins",),
    "bob": ("guard-approvers",),
    "carol": ("guard-viewers",),
    "dave": (),
    "erin": ("guard-admins",),  # her email holds U+202E: she is shown by name
    "frank": ("guard-admins",),  # says he is alice@example.test, unverified: shown by name
}
ROLES = "admin=guard-admins,approver=guard-approvers,viewer=guard-viewers"


class ProviderUnavailable(RuntimeError):
    pass


class OidcProvider:
    """Start, stop and drive the test provider (by PID, never by name)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.output = b""

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> OidcProvider:
        node = shutil.which("node")
        if node is None:
            raise ProviderUnavailable("Node.js is not installed (make test installs it)")
        if not (PACKAGE / "node_modules" / "oidc-provider").is_dir():
            raise ProviderUnavailable(
                "tests/oidc_provider has no node_modules: run 'make test', or npm ci there"
            )
        self.proc = subprocess.Popen(
            [node, "server.mjs", str(self.port)],
            cwd=PACKAGE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out = self.proc.stdout.read() if self.proc.stdout else b""
                raise ProviderUnavailable(
                    f"the test provider exited: {out.decode(errors='replace')}"
                )
            try:
                url = f"{self.issuer}/.well-known/openid-configuration"
                if httpx.get(url, timeout=0.5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise ProviderUnavailable(f"the test provider did not answer within {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(f"{self.issuer}{path}", json=body, timeout=10)
        response.raise_for_status()
        return dict(response.json())

    def sign(self, claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
        """A JWT of ``claims`` signed with the provider's current key."""
        return str(self._post("/test/sign", {"claims": claims, "header": header or {}})["token"])

    def rotate(self) -> str:
        """A new signing key replaces the old; returns its kid."""
        return str(self._post("/test/rotate", {})["kid"])

    def allow_redirect(self, uri: str) -> None:
        self._post("/test/redirect", {"uri": uri})

    def jwks(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.issuer}/jwks", timeout=10).json())

    def sign_in(
        self, user: str, password: str | None = None, scope: str = "openid email profile"
    ) -> dict[str, Any]:
        """The provider's token answer (``id_token``, ...) for ``user``, signed
        in through the login page with the Authorization Code flow and PKCE."""
        self.allow_redirect(TEST_REDIRECT)
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        params = {
            "client_id": CLIENT_ID,
            "redirect_uri": TEST_REDIRECT,
            "response_type": "code",
            "scope": scope,
            "state": secrets.token_urlsafe(16),
            "code_challenge": challenge.rstrip(b"=").decode(),
            "code_challenge_method": "S256",
        }
        with httpx.Client(base_url=self.issuer, timeout=10) as client:
            response = client.get("/auth", params=params)
            location = response.headers["location"]
            form = {"login": user, "password": password or f"{user}-pw"}
            for _ in range(10):  # the login page, then consent, then the callback
                if location.startswith(TEST_REDIRECT):
                    break
                path = urlsplit(urljoin(self.issuer, location)).path
                if path.startswith("/interaction/") and form:
                    page = client.get(path)
                    if "<form" in page.text:
                        response = client.post(f"{path}/login", data=form)
                        form = {}
                    else:
                        response = page
                else:
                    response = client.get(path + "?" + urlsplit(location).query)
                if response.status_code not in (302, 303):
                    raise ProviderUnavailable(f"sign-in stopped at {path}: {response.text[:300]}")
                location = response.headers["location"]
            query = parse_qs(urlsplit(location).query)
            if "code" not in query:
                raise ProviderUnavailable(f"sign-in ended without a code: {location}")
            tokens = client.post(
                "/token",
                data={
                    "grant_type": "authorization_code",
                    "code": query["code"][0],
                    "redirect_uri": TEST_REDIRECT,
                    "client_id": CLIENT_ID,
                    "code_verifier": verifier,
                },
            )
            tokens.raise_for_status()
            return dict(tokens.json())

    def id_token(self, user: str) -> str:
        return str(self.sign_in(user)["id_token"])
