"""Fault injection for the reliability tests. TEST-ONLY: never set it in production.

guardd reads the environment variable ``GUARD_TEST_FAULTS`` once at startup.
When it is set, the log of each agent it names is written through a
``FaultyIO`` instead of the real ``FileIO``, so the tests can prove what the
service does when a disk fails (docs/design.md, "Write failures fence the
agent": the request gets 500 ``internal``, the agent accepts no more writes
until restart, its state never runs ahead of its file). Unset or empty, nothing changes.

The value is a comma-separated list of ``<agent_id>:<fault>[:<after>]``:

- ``fault`` is one of

  - ``short_write``: the first write of the failing append writes only the
    first half of its first line, the next write fails with ``EIO`` (a partial
    line is left on disk, as a crash in the middle of a write leaves one);
  - ``eio_write``: every write fails with ``EIO``, nothing reaches the file;
  - ``eio_fsync``: writes succeed, the flush that makes them durable fails
    with ``EIO``: the log's own fsync when it is written alone (agent
    creation), or the one flush shared by every batch of a commit round
    (``logfile.sync_logs``). That flush is one step for all of them, so
    every agent with a batch in that round fails and is fenced too, as a
    real flush failing would fail them;

- ``after`` (default 0) is how many appends of this process succeed before
  the fault strikes. An append is the writes and the flush of one group
  commit; writing a new log (agent creation) counts as one.

Example: ``GUARD_TEST_FAULTS="agent-7:eio_fsync:3,agent-9:short_write"``.

``GUARD_TEST_SLOW_FLUSH_MS`` (a whole number of milliseconds, also read once
at startup) makes every flush of the logs (an fsync or a round's shared
flush) wait that long before it starts: a slow disk, so that the batches of
many agents gather in each round (the crash test kills guardd in such
rounds). The logs of agents without a fault then share one ``SlowIO``, so a
round still makes one flush.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Mapping

import attrs

from agents_runtime.log.files.logfile import DEFAULT_IO, FileIO
from agents_runtime.log.ids import valid_agent_id

log = logging.getLogger("agents_runtime.log.files.faults")

ENV_VAR = "GUARD_TEST_FAULTS"
SLOW_FLUSH_VAR = "GUARD_TEST_SLOW_FLUSH_MS"
SHORT_WRITE = "short_write"
EIO_WRITE = "eio_write"
EIO_FSYNC = "eio_fsync"
FAULTS = (SHORT_WRITE, EIO_WRITE, EIO_FSYNC)

IoFor = Callable[[str], FileIO]


class FaultSpecError(ValueError):
    """``GUARD_TEST_FAULTS`` does not follow the format above."""


@attrs.frozen
class Fault:
    agent_id: str
    kind: str  # one of FAULTS
    after: int = 0  # appends that succeed first


class FaultyIO(FileIO):
    """A FileIO that fails as its Fault says once ``after`` appends succeeded."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.appends = 0  # appends completed (fsync returned)
        self._short_written = False

    @property
    def armed(self) -> bool:
        return self.appends >= self.fault.after

    def _eio(self, call: str) -> OSError:
        return OSError(errno.EIO, f"{os.strerror(errno.EIO)} (injected {call} fault)")

    def write(self, fd: int, data: memoryview) -> int:
        if self.armed and self.fault.kind == EIO_WRITE:
            raise self._eio("write")
        if self.armed and self.fault.kind == SHORT_WRITE:
            if self._short_written:
                raise self._eio("write")
            self._short_written = True
            newline = bytes(data).find(b"\n")
            line_length = newline if newline >= 0 else len(data)
            return super().write(fd, data[: max(1, line_length // 2)])
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.armed and self.fault.kind == EIO_FSYNC:
            raise self._eio("fsync")
        super().fsync(fd)
        self.appends += 1

    def sync_fs(self, fd: int) -> None:
        """The shared flush of a round holding this log's batch."""
        if self.armed and self.fault.kind == EIO_FSYNC:
            raise self._eio("fsync")
        super().sync_fs(fd)
        self.appends += 1


class SlowIO(FileIO):
    """The real FileIO whose flushes first wait ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def fsync(self, fd: int) -> None:
        time.sleep(self.delay)
        super().fsync(fd)

    def sync_fs(self, fd: int) -> None:
        time.sleep(self.delay)
        super().sync_fs(fd)


def parse_faults(text: str) -> list[Fault]:
    """Parse the value of ``GUARD_TEST_FAULTS``; raise FaultSpecError."""
    faults: list[Fault] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        fields = item.split(":")
        if len(fields) not in (2, 3):
            raise FaultSpecError(f"{ENV_VAR}: {item!r} is not <agent_id>:<fault>[:<after>]")
        agent_id, kind = fields[0], fields[1]
        if not valid_agent_id(agent_id):
            raise FaultSpecError(f"{ENV_VAR}: {agent_id!r} is not an agent ID")
        if kind not in FAULTS:
            raise FaultSpecError(f"{ENV_VAR}: fault {kind!r} is not one of {', '.join(FAULTS)}")
        after = fields[2] if len(fields) == 3 else "0"
        if not after.isdigit():
            raise FaultSpecError(f"{ENV_VAR}: after {after!r} is not a whole number")
        faults.append(Fault(agent_id, kind, int(after)))
    return faults


def io_for_faults(faults: list[Fault], every: FileIO = DEFAULT_IO) -> IoFor:
    """The ``io_for`` hook of the Registry: a fresh FaultyIO for each log opened
    for a named agent, ``every`` (one instance, the real FileIO by default)
    for every other."""
    by_agent = {fault.agent_id: fault for fault in faults}

    def io_for(agent_id: str) -> FileIO:
        fault = by_agent.get(agent_id)
        return every if fault is None else FaultyIO(fault)

    return io_for


def parse_slow_flush(text: str) -> float:
    """Seconds from the value of ``GUARD_TEST_SLOW_FLUSH_MS`` (empty: 0)."""
    text = text.strip()
    if not text:
        return 0.0
    if not text.isdigit():
        raise FaultSpecError(f"{SLOW_FLUSH_VAR}: {text!r} is not a whole number of milliseconds")
    return int(text) / 1000


def io_for_from_env(env: Mapping[str, str]) -> IoFor | None:
    """The hook ``GUARD_TEST_FAULTS`` and ``GUARD_TEST_SLOW_FLUSH_MS`` ask
    for, or None when both are unset or empty."""
    faults = parse_faults(env.get(ENV_VAR, ""))
    delay = parse_slow_flush(env.get(SLOW_FLUSH_VAR, ""))
    if not faults and not delay:
        return None
    if delay:
        log.warning(
            "TEST FAULT INJECTION (%s): every flush of the logs waits %g ms first",
            SLOW_FLUSH_VAR,
            delay * 1000,
        )
    for fault in faults:
        log.warning(
            "TEST FAULT INJECTION (%s): the log of agent %s fails with %s after %d appends",
            ENV_VAR,
            fault.agent_id,
            fault.kind,
            fault.after,
        )
    return io_for_faults(faults, SlowIO(delay) if delay else DEFAULT_IO)
