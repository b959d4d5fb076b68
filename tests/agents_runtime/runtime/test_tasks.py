"""The registry's tasks: each is owned until it ends, an error logged, and
ended by cancellation within a bounded time at the stop, without swallowing
the owner's own cancellation; a registry leaves no task behind when it
stops, on either store."""

from __future__ import annotations

import asyncio
import gc
import weakref
from contextvars import ContextVar
from pathlib import Path

import pytest

from agents_runtime.core.commands import GetStatus
from agents_runtime.errors import NotFound
from agents_runtime.log.files.datadir import DataDir
from agents_runtime.log.stores import open_database
from agents_runtime.runtime.registry import Registry
from agents_runtime.runtime.tasks import Tasks
from guardd.app import BY_COMMAND
from tests.agents_runtime.support import policy, running_registry, write_test_keys


async def test_a_task_that_fails_is_logged_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = Tasks()
    release = asyncio.Event()

    async def fails() -> None:
        raise RuntimeError("boom")

    async def waits() -> None:
        await release.wait()

    failing = tasks.start(fails(), name="failing")
    waiting = tasks.start(waits(), name="waiting")
    await asyncio.wait([failing])
    await asyncio.sleep(0)
    assert "failing ended with an error" in caplog.text
    assert failing not in tasks
    assert waiting in tasks
    release.set()
    await waiting
    assert len(tasks) == 0


async def test_an_error_the_awaiter_gets_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    tasks = Tasks()

    async def not_found() -> None:
        raise LookupError("no such agent")

    task = tasks.start(not_found(), name="lookup", report=False)
    with pytest.raises(LookupError):
        await task
    assert "lookup" not in caplog.text


async def test_cancel_ends_every_task_and_waits_for_it() -> None:
    tasks = Tasks()
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    for name in ("a", "b"):
        tasks.start(forever(name), name=name)
    await asyncio.sleep(0)  # both are waiting
    await tasks.cancel(within=1.0)
    assert sorted(ended) == ["a", "b"]
    assert len(tasks) == 0


async def test_a_task_that_ignores_its_cancellation_is_given_up_on_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = Tasks()
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # what a task must never do

    task = tasks.start(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    await tasks.cancel(within=0.05)
    assert not task.done()
    assert "stubborn did not end within 0.1 s of its cancellation" in caplog.text
    release.set()
    await task


async def test_the_owner_cancelled_while_it_waits_is_cancelled_itself() -> None:
    tasks = Tasks()
    release = asyncio.Event()

    async def slow_to_end() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()  # holds on after its cancellation

    tasks.start(slow_to_end(), name="slow")
    await asyncio.sleep(0)
    stopping = asyncio.ensure_future(tasks.cancel(within=30.0))
    await asyncio.sleep(0.01)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    release.set()
    await asyncio.sleep(0)


class _Request:
    """Stands in for what a request handler holds in its context."""


_SERVING: ContextVar[_Request | None] = ContextVar("serving", default=None)


async def test_a_task_keeps_nothing_of_the_context_it_was_started_in() -> None:
    tasks = Tasks()
    request = _Request()
    gone = weakref.ref(request)
    token = _SERVING.set(request)
    seen: list[_Request | None] = []

    async def long_lived() -> None:
        seen.append(_SERVING.get())
        await asyncio.Event().wait()

    tasks.start(long_lived(), name="long-lived")
    _SERVING.reset(token)
    del request
    await asyncio.sleep(0)
    gc.collect()
    try:
        assert seen == [None]
        assert gone() is None  # the request is not kept alive by the task
    finally:
        await tasks.cancel(within=1)


async def test_an_agent_created_while_serving_a_request_keeps_nothing_of_it(
    tmp_path: Path,
) -> None:
    async with running_registry(tmp_path / "data") as registry:
        request = _Request()
        gone = weakref.ref(request)
        token = _SERVING.set(request)
        await registry.create("a", policy())  # its actor starts here
        _SERVING.reset(token)
        del request
        gc.collect()
        assert gone() is None


def _others() -> set[asyncio.Task[object]]:
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]


async def test_a_registry_on_files_leaves_no_task_behind(tmp_path: Path) -> None:
    async with running_registry(tmp_path / "data") as registry:
        await registry.create("a", policy())
        assert _others()  # the actor, the checkpoints
    assert _others() == set()


async def test_a_registry_on_postgresql_leaves_no_task_behind(
    postgres_dsn: str, tmp_path: Path
) -> None:
    data_dir = DataDir(tmp_path / "node")
    write_test_keys(data_dir.root)
    ring = data_dir.prepare()
    store = open_database(postgres_dsn, checkpoint_dir=tmp_path / "checkpoints")
    await asyncio.to_thread(store.prepare)
    registry = Registry(store, ring, render=BY_COMMAND)
    await asyncio.to_thread(registry.load)
    await registry.start()
    try:
        await registry.create("a", policy())
        assert (await registry.ref("a").ask(GetStatus()))["spent"] == 0  # a round of reads
        with pytest.raises(NotFound):
            await registry.ref("nobody").ask(GetStatus())  # a discovery that finds nothing
        assert any(t.get_name() == "follow" for t in _others())  # listening to other nodes
    finally:
        await registry.stop()
    assert _others() == set()
