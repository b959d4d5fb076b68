"""The tasks of one owner (the registry): each long-lived task it starts is
kept until it ends, and ends by cancellation at the owner's stop.

An ``asyncio.TaskGroup`` needs one ``async with`` block around the whole
life of its tasks, and cancels them all when one fails. The registry's
tasks live from ``Registry.start`` to ``Registry.stop``, two calls (Quart's
``while_serving`` hook, and tests), and one agent's actor failing must not
end the others: so the registry owns them through a ``Tasks``, which holds
every task it started, logs the error of one that fails, and at the stop
cancels those still running and waits for them a bounded time. A
``CancelledError`` of the owner itself is never swallowed. Each task runs
in an empty context, whoever started it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("agents_runtime.runtime.tasks")

# The context the end-of-task callbacks run in: they read no context
# variable, and without one given ``add_done_callback`` copies the current
# context for each task (128 bytes of every idle agent's actor).
_CALLBACKS = contextvars.Context()


class Tasks:
    """Tasks started by one owner and ended by it."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def start(
        self, coroutine: Coroutine[Any, Any, T], *, name: str, report: bool = True
    ) -> asyncio.Task[T]:
        """Run ``coroutine`` as a task of this owner. An error it ends with
        is logged, unless ``report`` is False (whoever awaits it gets it)."""
        # A context of its own, empty: a task started while a request is
        # served (an agent created or first used by it) would otherwise run
        # in a copy of that request's context, and so keep the request (its
        # headers, its body) for as long as it runs: an actor, for ever.
        task = asyncio.get_running_loop().create_task(
            coroutine, name=name, context=contextvars.Context()
        )
        self._running.add(task)
        task.add_done_callback(self._ended if report else self._ended_quietly, context=_CALLBACKS)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s ended with an error", task.get_name(), exc_info=task.exception())

    def _ended_quietly(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its awaiters have it, or nobody needs it

    def __len__(self) -> int:
        return len(self._running)

    def __contains__(self, task: object) -> bool:
        return task in self._running

    async def wait(
        self, tasks: Iterable[asyncio.Task[Any]], within: float
    ) -> set[asyncio.Task[Any]]:
        """Wait at most ``within`` seconds for ``tasks`` to end by
        themselves; those still running."""
        waiting = {task for task in tasks if not task.done()}
        if not waiting:
            return set()
        _, late = await asyncio.wait(waiting, timeout=within)
        return late

    async def cancel(
        self, tasks: Iterable[asyncio.Task[Any]] | None = None, *, within: float
    ) -> None:
        """Cancel ``tasks`` (default: every task still running) and wait at
        most ``within`` seconds for them to end; one that outlives it is
        logged (it holds something that ignores cancellation)."""
        chosen = list(self._running if tasks is None else tasks)
        for task in chosen:
            task.cancel()
        late = await self.wait(chosen, within)
        for task in late:
            log.error("%s did not end within %.1f s of its cancellation", task.get_name(), within)
