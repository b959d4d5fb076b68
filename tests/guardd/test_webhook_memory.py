"""What webhooks cost in memory and reads, measured on a real guardd (its
resident set and the bytes it read, from /proc): actions that make no event
are not kept, a receiver's answer is not read beyond a few KB however large
it is, several webhooks following a large log read only its new records,
and a backlog is read a page at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from guardd.webhooks import webhook_id
from tests.guardd.conftest import Api, ok
from tests.support.receiver import SECRET, Answer, Post, Receiver
from tests.support.server import GuardServer

MB = 1024 * 1024
LARGE = "x" * 300_000  # an input of 300 KB
POLICY = {
    "budget": 1_000_000,
    "scar_limit": 1_000_000,  # every denial below scars
    "tools": {"search": {"cost": 0}, "send_email": {"cost": 0, "requires_approval": True}},
}
GROWTH = 30 * MB  # what the webhook may add at most; unbounded, it added 100 MB and more


def status(pid: int, field: str) -> int:
    """A size from /proc/<pid>/status (VmRSS: resident now; VmHWM: its peak), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")  # pragma: no cover


Start = Callable[..., Api]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    apis: list[Api] = []

    def run(*hooks: Receiver, timing: str = "") -> Api:
        flags = [f for hook in hooks for f in ("--webhook", hook.url)]
        env = {"GUARD_TEST_WEBHOOK_TIMING": timing} if timing else None
        server = GuardServer(
            tmp_path / "guard-data", args=[*flags, "--webhook-secret", SECRET], env=env
        )
        api = Api(server.start())
        apis.append(api)
        return api

    yield run
    for api in apis:
        api.close()
        api.server.kill()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for receiver in made:
        receiver.stop()


def read_chars(pid: int) -> int:
    """Bytes the process has read through read(2) and its kin, from any
    file, cached or not (/proc/<pid>/io rchar)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")  # pragma: no cover


def pid_of(api: Api) -> int:
    assert api.server.proc is not None
    return api.server.proc.pid


def sent(api: Api, receiver: Receiver) -> float:
    text = ok_text(api.admin.get("/metrics"))
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "guard_webhook_sent_total" and sample.labels == {
                "webhook": webhook_id(receiver.url)
            }:
                return float(sample.value)
    return 0.0


def ok_text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.text


def test_large_actions_that_make_no_event_are_not_kept_by_a_webhook(
    start: Start, receivers: list[Receiver]
) -> None:
    receiver = Receiver().start()
    receivers.append(receiver)
    api = start(receiver)
    agent = api.create("bot", POLICY)
    held = 0

    def caught_up() -> None:
        """An event after every record so far, delivered: the webhook has read them all."""
        nonlocal held
        held += 1
        assert ok(agent.act("send_email"))["decision"] == "pending_approval"
        receiver.wait_for(held, timeout=60)

    for _ in range(10):  # the allocator's pools warmed up with inputs of this size
        ok(agent.act("search", input={"data": LARGE}))
        ok(agent.act("not_in_policy", input={"data": LARGE}))
    caught_up()
    before = status(pid_of(api), "VmRSS")
    for _ in range(200):
        assert ok(agent.act("search", input={"data": LARGE}))["decision"] == "allowed"
        assert ok(agent.act("not_in_policy", input={"data": LARGE}))["decision"] == "denied"
    caught_up()
    grown = status(pid_of(api), "VmRSS") - before
    assert grown < GROWTH, f"RSS grew by {grown / MB:.0f} MB over 400 actions of 300 KB"


def test_a_huge_answer_is_read_no_further_than_a_few_kb_and_delivery_goes_on(
    start: Start, receivers: list[Receiver]
) -> None:
    huge = {"evt_bot_5", "evt_bot_7", "evt_bot_9"}

    def answer(post: Post) -> Answer:
        return Answer(200, body_size=200 * MB if post.id in huge else 0)

    receiver = Receiver(answer).start()
    receivers.append(receiver)
    api = start(receiver)
    agent = api.create("bot", POLICY)
    ok(agent.act("send_email"))  # evt_bot_3, answered with an empty body
    receiver.wait_for(1)
    peak = status(pid_of(api), "VmHWM")
    for _ in range(4):
        ok(agent.act("send_email"))
    # evt_bot_11's attempt starts once evt_bot_9's has ended (each agent's
    # first attempts go one after another): the huge answers are behind.
    receiver.wait_for(5, timeout=60)
    assert [p.id for p in receiver.got] == [
        "evt_bot_3",
        "evt_bot_5",
        "evt_bot_7",
        "evt_bot_9",
        "evt_bot_11",
    ]
    grown = status(pid_of(api), "VmHWM") - peak
    assert grown < GROWTH, f"peak RSS grew by {grown / MB:.0f} MB reading 3 answers of 200 MB"
    assert receiver.body_bytes_sent < 3 * 64 * MB  # guardd closed each early
    receiver.wait_until(lambda: sent(api, receiver) == 5)


def test_two_webhooks_following_a_large_log_read_about_each_new_record_once(
    start: Start, receivers: list[Receiver]
) -> None:
    standard, other = Receiver().start(), Receiver().start()
    receivers += [standard, other]
    api = start(standard, other)
    agent = api.create("bot", POLICY)
    for _ in range(100):  # a log of 30 MB, of records that make no event
        ok(agent.act("search", input={"data": LARGE}))
    ok(agent.act("send_email"))
    for receiver in (standard, other):
        receiver.wait_for(1, timeout=60)  # both have read the whole log
    before = read_chars(pid_of(api))
    for n in range(2, 12):
        assert ok(agent.act("send_email"))["decision"] == "pending_approval"
        for receiver in (standard, other):  # each event read on its own
            receiver.wait_for(n, timeout=60)
    read = read_chars(pid_of(api)) - before
    # Each webhook reads each new record of about 1 KB once. When one
    # webhook's read made the other's start from the top of the log, it was
    # 30 MB an event.
    assert read < 5 * MB, f"guardd read {read / MB:.0f} MB for 10 events"


def test_a_webhook_catching_up_a_large_backlog_holds_a_page_of_it_not_all(
    start: Start, receivers: list[Receiver]
) -> None:
    refusing = True
    receiver = Receiver(lambda post: Answer(500 if refusing else 204)).start()
    receivers.append(receiver)
    api = start(receiver, timing="first_backoff=2,max_backoff=4")
    agent = api.create("bot", POLICY)
    for _ in range(257):
        ok(agent.act("send_email"))
    # 256 events held undelivered: the webhook reads no further.
    receiver.wait_until(lambda: len(set(receiver.ids())) >= 256, timeout=60)
    for _ in range(300):  # 90 MB of records it has not read: a backlog
        assert ok(agent.act("search", input={"data": LARGE}))["decision"] == "allowed"
    ok(agent.act("send_email"))  # an event after the backlog
    peak = status(pid_of(api), "VmHWM")
    refusing = False
    receiver.wait_until(lambda: len({p.id for p in receiver.got}) == 258, timeout=120)
    grown = status(pid_of(api), "VmHWM") - peak
    # At most a page of 32 records of 300 KB and its lines (5 MB measured).
    # Read whole, the backlog took the peak 171 MB higher: its bytes and
    # its lines.
    assert grown < GROWTH, f"peak RSS grew by {grown / MB:.0f} MB catching up 90 MB"
