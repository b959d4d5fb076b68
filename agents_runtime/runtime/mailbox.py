"""A bounded mailbox with one reader: the actor, which takes what is waiting
in one go.

``asyncio.Queue`` serves many readers and counts unfinished tasks; one item
in and out of it cost ~1.2 us more than this (bench/actor_bench.py's shape
of 256 askers and one actor, on the reference machine), about 6 % of the
actor's own work per command.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    """First in, first out; ``put`` waits while ``size`` items are waiting."""

    __slots__ = ("_items", "_putters", "_reader", "size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a mailbox holds at least one item")
        self.size = size
        self._items: collections.deque[T] = collections.deque()
        self._reader: asyncio.Future[None] | None = None
        self._putters: collections.deque[asyncio.Future[None]] = collections.deque()

    def __len__(self) -> int:
        return len(self._items)

    def full(self) -> bool:
        return len(self._items) >= self.size

    def offer(self, item: T) -> bool:
        """Add ``item`` if there is room now; False if the mailbox is full."""
        items = self._items
        if len(items) >= self.size:
            return False
        items.append(item)
        reader = self._reader
        if reader is not None:
            self._reader = None
            if not reader.done():
                reader.set_result(None)
        return True

    async def put(self, item: T) -> None:
        """Add ``item`` once there is room, in the order the senders came."""
        while self.full() or self._putters:
            room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._putters.append(room)
            try:
                await room
            except BaseException:
                if room in self._putters:
                    self._putters.remove(room)
                elif not self.full():
                    self._wake_putters()  # it was woken, then cancelled: pass the room on
                raise
            if not self.full():
                break
        self.offer(item)
        if not self.full():
            self._wake_putters()

    async def take(self, most: int, within: float | None = None) -> list[T]:
        """Wait until the mailbox holds something, then take up to ``most``
        items, oldest first. With ``within``, wait that many seconds at
        most and take nothing when it runs out (the actor's timer). A timer
        per wait, not asyncio.timeout: no task, and nothing when ``within`` is None."""
        items = self._items
        while not items:
            if within is not None and within <= 0:
                return []
            loop = asyncio.get_running_loop()
            reader: asyncio.Future[None] = loop.create_future()
            self._reader = reader
            timer = None if within is None else loop.call_later(within, _wake, reader)
            try:
                await reader
            finally:
                self._reader = None
                if timer is not None:
                    timer.cancel()
            if timer is not None and not items:
                return []
        if len(items) <= most:
            taken = list(items)
            items.clear()
        else:
            taken = [items.popleft() for _ in range(most)]
        if self._putters:
            self._wake_putters()
        return taken

    def take_nowait(self) -> list[T]:
        """Everything waiting, oldest first (at shutdown)."""
        taken = list(self._items)
        self._items.clear()
        if self._putters:
            self._wake_putters()
        return taken

    def _wake_putters(self) -> None:
        # Wake the oldest sender; each one woken wakes the next while there is room.
        putters = self._putters
        while putters:
            room = putters.popleft()
            if not room.done():
                room.set_result(None)
                return


def _wake(reader: asyncio.Future[None]) -> None:
    if not reader.done():
        reader.set_result(None)
