"""A Quart app with only the blueprints a test names, around a real,
started Registry on a temp data dir: each route module tested alone."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
from quart import Blueprint, Quart
from quart.typing import TestClientProtocol

from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.keys import agent_token
from guardd.auth import Authenticator
from guardd.errors import register_error_handlers
from guardd.metrics import Metrics
from guardd.operators import Operators
from guardd.routes.common import Guard, Service
from tests.agents_runtime.support import policy, running_registry

__all__ = ["Served", "policy", "served"]


@attrs.frozen
class Served:
    app: Quart
    service: Service

    @property
    def client(self) -> TestClientProtocol:
        return self.app.test_client()

    @property
    def admin(self) -> dict[str, str]:
        """The admin's Authorization header."""
        return {"Authorization": f"Bearer {self.service.guard.auth.admin_token}"}

    def agent(self, agent_id: str) -> dict[str, str]:
        """The Authorization header of ``agent_id``'s own token."""
        token = agent_token(self.service.guard.ring.token_key, agent_id)
        return {"Authorization": f"Bearer {token}"}


@contextlib.asynccontextmanager
async def served(
    root: Path, *blueprints: Blueprint, metrics: bool = False
) -> AsyncIterator[Served]:
    async with running_registry(root) as registry:
        ring = registry.ring
        assert ring.admin_token is not None
        operators = Operators(registry.store.operators_log(), ring, follow=False)
        operators.load()
        auth = Authenticator(ring.admin_token, ring.token_key, operators)
        guard = Guard(DataDir(root), ring, registry, auth, operators)
        service = Service(guard, Metrics(registry) if metrics else None)
        app = Quart("guardd-routes-test", static_folder=None)
        register_error_handlers(app)
        for blueprint in blueprints:
            app.register_blueprint(blueprint, service=service)
        yield Served(app, service)
