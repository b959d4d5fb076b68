"""Rounds: what many actors ask of the database at one moment, in one
statement.

The first request starts a round at once; requests that arrive while it is
under way wait and go together into the next. So under load one round trip
serves every agent waiting (as the file store's committer shares one flush),
and alone a request waits for nothing. The store has one of these for the
reads of what other nodes appended and one for appends.

A ``Rounds`` owns the one task that runs its rounds: started by the first
request when none runs, it ends by itself once nobody waits, and ``aclose``
(the store's, at shutdown) ends it by cancellation, waiting a bounded time;
whoever still waits is cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

Ask = TypeVar("Ask")
Answer = TypeVar("Answer")

# Runs one round: an answer, or the exception to raise, for each request in order.
RoundRunner = Callable[[list[Ask]], Awaitable[list[Answer | BaseException]]]


class Rounds(Generic[Ask, Answer]):
    def __init__(self, run: RoundRunner[Ask, Answer]) -> None:
        self._run = run
        self._waiting: list[tuple[Ask, asyncio.Future[Answer]]] = []
        self._task: asyncio.Task[None] | None = None

    async def ask(self, request: Ask) -> Answer:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, future))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._rounds(), name="store-round")
        return await future

    async def _rounds(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                answers = await self._run([request for request, _ in batch])
            except asyncio.CancelledError:  # at shutdown
                for _, future in batch + self._waiting:
                    future.cancel()
                self._waiting = []
                raise
            except Exception as exc:  # a bug: every caller learns it, the rounds go on
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), answer in zip(batch, answers, strict=True):
                if future.done():  # its caller was cancelled
                    continue
                if isinstance(answer, BaseException):
                    future.set_exception(answer)
                else:
                    future.set_result(answer)

    def cancel(self) -> asyncio.Task[None] | None:
        """End the rounds: whoever still waits is cancelled. The task that
        ran them, if it has yet to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        for _, future in self._waiting:
            future.cancel()
        self._waiting = []
        return None if task is None or task.done() else task

    async def aclose(self, within: float) -> None:
        """``cancel``, then wait for the task to end, ``within`` seconds at
        most (a round in a statement ends when the driver lets it go)."""
        task = self.cancel()
        if task is not None:
            await asyncio.wait([task], timeout=within)
