"""Rounds: the first request starts a round at once, those that arrive
meanwhile go together into the next; each caller gets its own answer or
error."""

from __future__ import annotations

import asyncio

import pytest

from agents_runtime.log.postgres.rounds import Rounds


async def test_requests_that_arrive_during_a_round_share_the_next() -> None:
    seen: list[list[int]] = []
    release = asyncio.Event()

    async def run(asks: list[int]) -> list[int | BaseException]:
        seen.append(asks)
        if len(seen) == 1:
            await release.wait()
        return [ValueError(n) if n == 3 else n * 10 for n in asks]

    rounds: Rounds[int, int] = Rounds(run)
    first = asyncio.ensure_future(rounds.ask(1))
    await asyncio.sleep(0)
    later = [asyncio.ensure_future(rounds.ask(n)) for n in (2, 3, 4)]
    await asyncio.sleep(0)
    release.set()
    assert await first == 10
    results = await asyncio.gather(*later, return_exceptions=True)
    assert seen == [[1], [2, 3, 4]]
    assert results[0] == 20
    assert isinstance(results[1], ValueError)
    assert results[2] == 40


async def test_a_round_that_fails_tells_every_caller_and_the_next_round_runs() -> None:
    calls = 0

    async def run(asks: list[int]) -> list[int | BaseException]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return list(asks)

    rounds: Rounds[int, int] = Rounds(run)
    with pytest.raises(RuntimeError, match="boom"):
        await rounds.ask(1)
    assert await rounds.ask(2) == 2
