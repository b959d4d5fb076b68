"""Fleet policies: named policies that many agents follow.

A named policy is kept by the store as a chain of signed versions
(``log/policies.py``). Which agents follow it is not kept anywhere else: an
agent follows the policy its newest ``policy`` record names
(``policy_ref``), so the logs stay the one source of truth and each log
holds every version its agent was under, for offline verification and
replay.

A new version is made durable in two steps, each durable before the next:

1. the version, signed, goes to the store (``PolicyStore.put``);
2. each follower's actor appends a ``policy`` record naming it
   (``SetPolicy`` with ``policy_ref`` and ``version``), all at once.

The ``PUT`` is answered once every follower's record is durable. A crash
between the steps, or halfway through the second, leaves followers whose
newest policy record names an older version than the store's: at the next
start (``catch_up``, before guardd serves) each of them gets its record; an
agent loaded on its first use (always on a shared store) gets it when it is
loaded, before it answers anything.

Which agents follow a policy is known only from their logs: before it
lists or updates a policy's followers, or removes a policy, the fleet has
every agent not loaded yet loaded (``Registry.discover_all``).
``SetPolicy`` writes nothing for an agent that already holds that version
or a newer one, so running a fan-out twice is harmless.

One lock per name orders what reads a version and writes it to logs (a new
version, an agent created with or switched to the policy, a delete), so no
follower is left on a version older than the newest.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agents_runtime.core.commands import SetPolicy
from agents_runtime.core.policy import Policy, parse_policy, policy_json
from agents_runtime.errors import InvalidState, LogReadError, NotFound, ReadOnly, StoreUnavailable
from agents_runtime.log.policies import (
    PolicyStore,
    PolicyStoreError,
    Version,
    seal_version,
    verify_versions,
)
from agents_runtime.log.store import UNREACHABLE

log = logging.getLogger("agents_runtime.runtime.fleet")


class Fleet:
    """The named policies of a registry's store, and their followers."""

    def __init__(self, registry: Any) -> None:
        # The registry (not imported: it imports this module) owns the actors.
        self.registry = registry
        self.store: PolicyStore = registry.store.policies
        self.versions: dict[str, Version] = {}  # name -> its newest version
        self._locks: dict[str, asyncio.Lock] = {}

    # -- startup ---------------------------------------------------------------

    def load(self) -> None:
        """Read and verify every named policy (blocking, before serving);
        PolicyStoreError when one fails verification: a tampered policy is
        never handed to a fleet."""
        public_key = self.registry.ring.public_key
        found: dict[str, Version] = {}
        for name, lines in self.store.load().items():
            versions = verify_versions(name, lines, public_key)
            if versions:
                found[name] = versions[-1]
        self.versions = found

    async def catch_up(self, actors: list[Any] | None = None) -> int:
        """Finish every fan-out a crash cut short: each follower (of
        ``actors``, default every loaded one) whose newest policy record
        names an older version than the store's gets the newest. Returns
        how many agents got one."""
        if self.registry.ring.read_only:
            return 0
        behind = [
            (actor, self.versions[state.policy_ref])
            for actor in (list(self.registry.actors.values()) if actors is None else actors)
            if (state := actor.state).alive
            and state.policy_ref in self.versions
            and (state.policy_version or 0) < self.versions[state.policy_ref].version
        ]
        if behind:
            log.warning("named policies: %d followers behind their policy; updating", len(behind))
            results = await asyncio.gather(
                *(actor.ref.ask(_set(v)) for actor, v in behind), return_exceptions=True
            )
            for (actor, version), result in zip(behind, results, strict=True):
                if isinstance(result, Exception):
                    log.error(
                        "agent %s: named policy %s version %d not written: %s",
                        actor.state.agent_id,
                        version.name,
                        version.version,
                        result,
                    )
        return len(behind)

    # -- reads -----------------------------------------------------------------

    def followers(self, name: str) -> list[str]:
        """The live agents whose newest policy record names ``name``."""
        return sorted(
            agent_id
            for agent_id, actor in self.registry.actors.items()
            if actor.state.policy_ref == name and actor.state.alive
        )

    async def show(self, name: str) -> dict[str, Any]:
        await self._refresh(followers=True)
        return self._view(self._newest(name))

    async def list(self) -> list[dict[str, Any]]:
        await self._refresh(followers=True)
        return [self._view(self.versions[name]) for name in sorted(self.versions)]

    def _view(self, version: Version) -> dict[str, Any]:
        return {
            "name": version.name,
            "version": version.version,
            "policy": policy_json(parse_policy(version.policy, recorded=True)),
            "agents": self.followers(version.name),
        }

    def _newest(self, name: str) -> Version:
        version = self.versions.get(name)
        if version is None:
            raise NotFound(f"no named policy {name}")
        return version

    async def _refresh(self, *, followers: bool = False) -> None:
        """On a store other nodes write too: their versions; with
        ``followers``, every agent not loaded yet loaded (on any store), so
        that ``followers`` names them all."""
        if self.registry.store.others_create_agents:
            await self._reread()
        if followers:
            await self.registry.discover_all()

    async def _reread(self) -> None:
        try:
            lines = await asyncio.to_thread(self.store.load)
        except LogReadError as exc:
            log.error("reading the named policies failed: %s", exc)
            raise StoreUnavailable(UNREACHABLE) from None
        public_key = self.registry.ring.public_key
        found: dict[str, Version] = {}
        for name, versions in lines.items():
            verified = verify_versions(name, versions, public_key)
            if verified:
                found[name] = verified[-1]
        self.versions = found

    # -- writes ----------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def put(
        self, name: str, policy: Policy, by: str | None = None, by_id: str | None = None
    ) -> dict[str, Any]:
        """Store a new version of ``name`` (signed), then write it into every
        follower's log, each record naming the operator who put it (``by``,
        ``by_id``); answer once all are durable."""
        signer = self.registry.ring.signer
        if signer is None:
            raise ReadOnly("guardd has no signing key (keys/audit.key): cannot store policies")
        async with self._lock(name):
            await self._refresh(followers=True)
            version = seal_version(
                name,
                policy_json(policy),
                after=self.versions.get(name),
                ts=self.registry.timestamp(),
                signer=signer,
            )
            await self._put(version)
            self.versions[name] = version
            await self._fan_out(version, by, by_id)
            return self._view(version)

    async def _put(self, version: Version) -> None:
        try:
            await self.store.put(version)
        except PolicyStoreError as exc:
            log.error("%s", exc)
            raise StoreUnavailable(f"the named policy could not be stored: {exc}") from None

    async def _fan_out(
        self, version: Version, by: str | None = None, by_id: str | None = None
    ) -> None:
        command = _set(version, by, by_id)
        actors = [self.registry.actors[agent_id] for agent_id in self.followers(version.name)]
        results = await asyncio.gather(
            *(actor.ref.ask(command) for actor in actors), return_exceptions=True
        )
        failed = [
            (actor.state.agent_id, result)
            for actor, result in zip(actors, results, strict=True)
            # Terminated meanwhile: termination is permanent, it follows nothing.
            if isinstance(result, BaseException) and not isinstance(result, InvalidState)
        ]
        if failed:
            agent_id, error = failed[0]
            log.error(
                "named policy %s version %d: %d followers not updated (first: %s: %s);"
                " the next start finishes it",
                version.name,
                version.version,
                len(failed),
                agent_id,
                error,
            )
            raise error

    async def delete(self, name: str) -> None:
        async with self._lock(name):
            await self._refresh(followers=True)
            self._newest(name)
            followers = self.followers(name)
            if followers:
                shown = ", ".join(followers[:5]) + (", ..." if len(followers) > 5 else "")
                raise InvalidState(
                    f"named policy {name} is followed by {len(followers)} agents ({shown})"
                )
            try:
                await self.store.delete(name)
            except PolicyStoreError as exc:
                log.error("%s", exc)
                raise StoreUnavailable(f"the named policy could not be removed: {exc}") from None
            self.versions.pop(name, None)

    async def create(
        self, agent_id: str, name: str, by: str | None = None, by_id: str | None = None
    ) -> dict[str, Any]:
        """Create an agent that follows ``name`` (its newest version)."""
        async with self._lock(name):
            await self._refresh()
            version = self._newest(name)
            return await self.registry.create(  # type: ignore[no-any-return]
                agent_id,
                parse_policy(version.policy, recorded=True),
                version.name,
                version.version,
                by=by,
                by_id=by_id,
            )

    async def follow(
        self, ref: Any, name: str, by: str | None = None, by_id: str | None = None
    ) -> Any:
        """Switch the agent of ``ref`` to ``name`` (its newest version)."""
        async with self._lock(name):
            await self._refresh()
            return await ref.ask(_set(self._newest(name), by, by_id))

    async def newest(self, name: str) -> Version:
        """The newest version of ``name``, or NotFound (a shadow takes it)."""
        await self._refresh()
        return self._newest(name)


def _set(version: Version, by: str | None = None, by_id: str | None = None) -> SetPolicy:
    """The record of ``version`` in a follower's log; ``by``, ``by_id``: the
    operator whose PUT caused it (none when a start finishes a fan-out)."""
    return SetPolicy(
        parse_policy(version.policy, recorded=True),
        by=by,
        by_id=by_id,
        policy_ref=version.name,
        version=version.version,
    )
