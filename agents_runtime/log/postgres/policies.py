"""The named policies in PostgreSQL: ``guard_policies`` (schema version 4),
one row per version holding its signed line (``log/policies.py``).

A version is one insert: the key ``(name, version)`` lets one of two nodes
writing the same version at once win, and the other is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from agents_runtime.log.policies import PolicyStoreError, Version


class PgPolicies:
    """The ``PolicyStore`` of a database. ``pool`` gives the serving loop's
    pool; ``blocking`` runs a query off the loop (startup)."""

    def __init__(
        self,
        pool: Callable[[], Awaitable[asyncpg.Pool]],
        blocking: Callable[..., list[asyncpg.Record]],
        errors: tuple[type[BaseException], ...],
    ) -> None:
        self._pool = pool
        self._blocking = blocking
        self._errors = errors

    def load(self) -> dict[str, list[bytes]]:
        rows = self._blocking("select name, line from guard_policies order by name, version")
        found: dict[str, list[bytes]] = {}
        for row in rows:
            found.setdefault(row["name"], []).append(bytes(row["line"]))
        return found

    async def put(self, version: Version) -> None:
        await self._run(
            f"writing named policy {version.name}",
            "insert into guard_policies (name, version, line) values ($1, $2, $3)",
            version.name,
            version.version,
            version.line,
        )

    async def delete(self, name: str) -> None:
        await self._run(
            f"removing named policy {name}", "delete from guard_policies where name = $1", name
        )

    async def _run(self, what: str, query: str, *args: Any) -> None:
        try:
            pool = await self._pool()
            await pool.execute(query, *args)
        except asyncpg.UniqueViolationError:
            raise PolicyStoreError(f"{what}: another node wrote that version first") from None
        except self._errors as exc:
            raise PolicyStoreError(f"{what} failed: {exc}") from exc
