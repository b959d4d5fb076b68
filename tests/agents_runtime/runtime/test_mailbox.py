"""The actor's mailbox: first in, first out, bounded, one reader taking what
is waiting in one go; senders that find it full wait their turn."""

from __future__ import annotations

import asyncio

import pytest

from agents_runtime.runtime.mailbox import Mailbox


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_mailbox_holds_at_least_one_item() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Mailbox(0)


async def test_take_returns_what_is_waiting_oldest_first() -> None:
    box: Mailbox[int] = Mailbox(8)
    for n in range(5):
        box.offer(n)
    assert await box.take(10) == [0, 1, 2, 3, 4]
    assert len(box) == 0


async def test_take_takes_at_most_most_and_leaves_the_rest_in_order() -> None:
    box: Mailbox[int] = Mailbox(8)
    for n in range(5):
        box.offer(n)
    assert await box.take(2) == [0, 1]
    assert await box.take(2) == [2, 3]
    assert await box.take(2) == [4]


async def test_take_waits_for_the_first_item() -> None:
    box: Mailbox[str] = Mailbox(2)
    reader = asyncio.ensure_future(box.take(10))
    await _settle()
    assert not reader.done()
    box.offer("a")
    box.offer("b")
    assert await reader == ["a", "b"]


async def test_a_cancelled_reader_leaves_the_mailbox_usable() -> None:
    box: Mailbox[str] = Mailbox(2)
    reader = asyncio.ensure_future(box.take(10))
    await _settle()
    reader.cancel()
    await _settle()
    box.offer("a")
    assert await box.take(10) == ["a"]


async def test_offer_adds_only_while_there_is_room() -> None:
    box: Mailbox[int] = Mailbox(2)
    assert box.offer(1)
    assert not box.full()
    assert box.offer(2)
    assert box.full()
    assert not box.offer(3)
    assert await box.take(10) == [1, 2]


async def test_put_waits_while_full_and_senders_keep_their_order() -> None:
    box: Mailbox[int] = Mailbox(2)
    box.offer(0)
    box.offer(1)
    senders = [asyncio.ensure_future(box.put(n)) for n in (2, 3, 4)]
    await _settle()
    assert not any(s.done() for s in senders)
    assert await box.take(1) == [0]
    await _settle()
    assert [s.done() for s in senders] == [True, False, False]
    assert len(box) == 2
    taken = await box.take(10)
    await _settle()
    assert taken == [1, 2]
    assert all(s.done() for s in senders)
    assert await box.take(10) == [3, 4]


async def test_a_cancelled_sender_passes_its_turn_on() -> None:
    box: Mailbox[int] = Mailbox(1)
    box.offer(0)
    first = asyncio.ensure_future(box.put(1))
    second = asyncio.ensure_future(box.put(2))
    await _settle()
    first.cancel()
    await _settle()
    assert await box.take(10) == [0]
    await _settle()
    assert second.done()
    assert await box.take(10) == [2]


async def test_a_sender_cancelled_after_its_wake_up_passes_the_room_on() -> None:
    box: Mailbox[int] = Mailbox(1)
    box.offer(0)
    first = asyncio.ensure_future(box.put(1))
    second = asyncio.ensure_future(box.put(2))
    await _settle()
    assert await box.take(10) == [0]  # wakes first, which has not run yet
    first.cancel()
    await _settle()
    assert first.cancelled()
    assert second.done()
    assert await box.take(10) == [2]


async def test_take_nowait_empties_the_mailbox_and_wakes_senders() -> None:
    box: Mailbox[int] = Mailbox(1)
    box.offer(0)
    sender = asyncio.ensure_future(box.put(1))
    await _settle()
    assert box.take_nowait() == [0]
    await _settle()
    assert sender.done()
    assert box.take_nowait() == [1]
    assert box.take_nowait() == []
