"""guardd's collector settings: old garbage does not pile up under load."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref

from guardd.__main__ import collect_old_garbage


class Node:
    other: Node | None = None


async def test_a_cycle_that_died_in_the_old_generation_is_freed_by_the_periodic_collection() -> (
    None
):
    node = Node()
    node.other = node  # a reference cycle: only the collector can free it
    ref = weakref.ref(node)
    gc.collect(1)  # survives the young generations: now in the oldest
    del node
    gc.collect(1)
    assert ref() is not None  # young collections do not look at it
    task = asyncio.create_task(collect_old_garbage(every=0.01))
    try:
        for _ in range(200):
            await asyncio.sleep(0.01)
            if ref() is None:
                break
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert ref() is None
