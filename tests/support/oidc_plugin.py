"""pytest fixtures for a real OpenID provider (tests/support/oidc_provider.py):
one per test session on a free loopback port, stopped by its PID.

Without Node.js or the provider's npm packages the tests that ask for it
skip, with the reason; under ``CI=true`` they fail instead, so a CI run never
passes without having run them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.oidc_provider import OidcProvider, ProviderUnavailable


def start_or_skip(provider: OidcProvider) -> OidcProvider:
    try:
        return provider.start()
    except ProviderUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"CI=true and the test OpenID provider is unusable: {exc}", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[OidcProvider]:
    """The session's OpenID provider; a test may rotate its keys, never stop it."""
    provider = start_or_skip(OidcProvider())
    try:
        yield provider
    finally:
        provider.stop()
