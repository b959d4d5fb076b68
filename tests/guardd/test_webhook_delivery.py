"""Webhook delivery against receivers that are slow, failing or gone: each
event is retried on its own, first attempts keep log order per agent, a
position only moves past events delivered or given up, 410 disables, and
the metrics and the banner show it (docs/webhooks.md)."""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from guardd.webhooks import webhook_id
from tests.guardd.conftest import Api, ok
from tests.support.receiver import SECRET, Answer, Post, Receiver, accept
from tests.support.server import GuardServer

POLICY = {
    "budget": 100,
    "scar_limit": 10,
    "tools": {"search": {"cost": 1}, "send_email": {"cost": 5, "requires_approval": True}},
}
# Short times, so that a test sees attempts time out and events given up
# within seconds (the real ones are in docs/webhooks.md).
QUICK = "post_timeout=1,first_backoff=0.2,max_backoff=0.5"

Start = Callable[..., Api]


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for receiver in made:
        receiver.stop()


def receiver_of(receivers: list[Receiver], answer: Callable[[Post], Answer] = accept) -> Receiver:
    receiver = Receiver(answer).start()
    receivers.append(receiver)
    return receiver


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start guardd on this test's data dir, posting to ``hooks``."""
    apis: list[Api] = []

    def run(*hooks: Receiver, timing: str = QUICK, args: tuple[str, ...] = ()) -> Api:
        flags = [f for hook in hooks for f in ("--webhook", hook.url)]
        server = GuardServer(
            tmp_path / "guard-data",
            args=[*flags, "--webhook-secret", SECRET, *args],
            env={"GUARD_TEST_WEBHOOK_TIMING": timing},
        ).start()
        api = Api(server)
        apis.append(api)
        return api

    yield run
    for api in apis:
        api.close()
        api.server.kill()


def metric(api: Api, name: str, receiver: Receiver) -> float:
    text = ok_text(api)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"webhook": webhook_id(receiver.url)}:
                return float(sample.value)
    raise AssertionError(f"no {name} for {receiver.url} in:\n{text}")


def ok_text(api: Api) -> str:
    response = api.admin.get("/metrics")
    assert response.status_code == 200, response.text
    return response.text


def first_attempts(receiver: Receiver) -> list[str]:
    seen: list[str] = []
    for event_id in receiver.ids():
        if event_id not in seen:
            seen.append(event_id)
    return seen


def positions(api: Api, receiver: Receiver) -> dict[str, int]:
    path = api.server.data_dir / "webhooks" / f"{webhook_id(receiver.url)}.position"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_a_receiver_slower_than_the_post_timeout_does_not_stop_later_events_being_tried(
    start: Start, receivers: list[Receiver]
) -> None:
    slow = receiver_of(receivers, lambda post: Answer(204, hold=30))
    api = start(slow)
    first = api.create("first", POLICY)
    second = api.create("second", POLICY)
    ok(first.act("send_email"))  # evt_first_3
    ok(first.act("send_email"))  # evt_first_5
    ok(second.act("send_email"))  # evt_second_3
    # Each is tried while none is answered: the other agent's at once, the
    # same agent's once the attempt before it has timed out.
    slow.wait_until(lambda: {"evt_first_3", "evt_first_5", "evt_second_3"} <= set(slow.ids()))
    slow.wait_until(lambda: metric(api, "guard_webhook_retrying", slow) >= 1)
    assert metric(api, "guard_webhook_sent_total", slow) == 0
    assert metric(api, "guard_webhook_failed_total", slow) >= 1
    assert metric(api, "guard_webhook_oldest_undelivered_seconds", slow) > 0
    assert first_attempts(slow).index("evt_first_3") < first_attempts(slow).index("evt_first_5")


def test_an_event_failing_for_ever_holds_its_position_but_not_later_events(
    start: Start, receivers: list[Receiver]
) -> None:
    def refuse_the_first(post: Post) -> Answer:
        return Answer(500) if post.id == "evt_bot_3" else Answer(204)

    receiver = receiver_of(receivers, refuse_the_first)
    api = start(receiver)
    bot = api.create("bot", POLICY)
    ok(bot.act("send_email"))  # evt_bot_3: refused for as long as guardd runs
    ok(bot.client.post(f"{bot.path}/actions/act-1/cancel", json={}))  # evt_bot_4
    ok(api.admin.post(f"{bot.path}/terminate", json={"reason": "done", "by": "ops"}))  # _5
    receiver.wait_until(lambda: {"evt_bot_4", "evt_bot_5"} <= {p.id for p in receiver.got})
    receiver.wait_until(lambda: receiver.ids().count("evt_bot_3") >= 3)  # retried on its own
    assert first_attempts(receiver) == ["evt_bot_3", "evt_bot_4", "evt_bot_5"]
    assert metric(api, "guard_webhook_sent_total", receiver) == 2
    # The position stays before the undelivered event: a restart sends it
    # again (and the two after it, which receivers drop by their ids).
    assert api.server.stop() == 0
    assert positions(api, receiver)["bot"] == 2
    receiver.answer = accept
    before = len(receiver.got)
    restarted = start(receiver)
    receiver.wait_until(lambda: len(receiver.got) >= before + 3)
    assert [p.id for p in receiver.got[before:]] == ["evt_bot_3", "evt_bot_4", "evt_bot_5"]
    assert metric(restarted, "guard_webhook_sent_total", receiver) == 3
    receiver.wait_until(lambda: positions(restarted, receiver)["bot"] == 5)


def test_an_event_retried_past_the_give_up_time_is_dropped_logged_and_counted(
    start: Start, receivers: list[Receiver]
) -> None:
    receiver = receiver_of(receivers, lambda post: Answer(500 if post.id == "evt_bot_3" else 204))
    api = start(receiver, timing=QUICK + ",give_up_after=2")
    bot = api.create("bot", POLICY)
    ok(bot.act("send_email"))  # evt_bot_3, never accepted
    receiver.wait_until(lambda: metric(api, "guard_webhook_given_up_total", receiver) == 1)
    receiver.wait_until(lambda: positions(api, receiver).get("bot") == 3)
    assert metric(api, "guard_webhook_retrying", receiver) == 0
    assert api.server.stop() == 0
    assert "evt_bot_3 given up after" in api.server.read_output()
    # Given up is for good: a restart does not send it again.
    receiver.answer = accept
    posted = len(receiver.posts)
    restarted = start(receiver)
    ok(restarted.admin.post(f"{bot.path}/actions/act-1/cancel", json={}))  # evt_bot_4
    receiver.wait_for(1)
    assert receiver.ids()[posted:] == ["evt_bot_4"]


def test_410_gone_disables_that_webhook_only_with_a_log_line_and_a_metric(
    start: Start, receivers: list[Receiver]
) -> None:
    gone = receiver_of(receivers, lambda post: Answer(410))
    fine = receiver_of(receivers)
    api = start(gone, fine)
    bot = api.create("bot", POLICY)
    ok(bot.act("send_email"))  # evt_bot_3
    gone.wait_until(lambda: metric(api, "guard_webhook_disabled", gone) == 1)
    ok(bot.client.post(f"{bot.path}/actions/act-1/cancel", json={}))  # evt_bot_4
    fine.wait_for(2)
    assert [p.id for p in fine.got] == ["evt_bot_3", "evt_bot_4"]
    assert gone.ids() == ["evt_bot_3"]  # once, never again
    assert metric(api, "guard_webhook_disabled", fine) == 0
    assert metric(api, "guard_webhook_sent_total", fine) == 2
    assert api.server.stop() == 0
    shown = gone.url  # no credentials or query to hide here
    assert f"webhook {shown} answered 410 Gone: disabled until guardd restarts" in (
        api.server.read_output()
    )


def test_first_attempts_of_each_agent_keep_log_order_while_agents_interleave(
    start: Start, receivers: list[Receiver]
) -> None:
    rng = random.Random(33)
    receiver = receiver_of(receivers, lambda post: Answer(204, hold=rng.uniform(0, 0.05)))
    api = start(receiver)
    agents = [api.create(name, POLICY) for name in ("a", "b", "c")]
    for _ in range(8):
        for agent in agents:
            ok(agent.act("send_email"))
    got = receiver.wait_for(24)
    for agent in agents:
        seqs = [int(p.id.rsplit("_", 1)[1]) for p in got if p.agent_id == agent.agent_id]
        assert seqs == [3 + 2 * n for n in range(8)]
    assert len(receiver.posts) == 24  # nothing failed, nothing repeated
    assert metric(api, "guard_webhook_sent_total", receiver) == 24
    assert metric(api, "guard_webhook_oldest_undelivered_seconds", receiver) == 0


def test_the_banner_shows_each_webhook_without_credentials_query_or_token(tmp_path: Path) -> None:
    hidden = "http://ops:pa55word@127.0.0.1:1/hook?token=s3cret#part"
    slack = "http://127.0.0.1:1/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
    server = GuardServer(
        tmp_path / "guard-data",
        args=["--webhook", hidden, "--webhook", slack, "--webhook-secret", SECRET],
    ).start()
    try:
        server.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        assert server.proc.wait(15) == 0  # type: ignore[union-attr]
    finally:
        server.kill()
    banner = server.read_output()
    assert f"webhook: http://127.0.0.1:1/hook (standard, signed; id {webhook_id(hidden)})" in banner
    shown = "http://127.0.0.1:1/services/T00000000/B00000000/XXXX…"
    assert f"webhook: {shown} (standard, signed; id {webhook_id(slack)})" in banner
    for secret in ("pa55word", "s3cret", "ops:", "XXXXXXXXXXXXXXXXXXXXXXXX"):
        assert secret not in banner


def test_a_position_file_that_cannot_be_read_sends_events_again_and_loses_none(
    start: Start, receivers: list[Receiver]
) -> None:
    receiver = receiver_of(receivers)
    api = start(receiver)
    bot = api.create("bot", POLICY)
    ok(bot.act("send_email"))
    receiver.wait_for(1)
    assert api.server.stop() == 0
    path = api.server.data_dir / "webhooks" / f"{webhook_id(receiver.url)}.position"
    path.write_text('{"bot": "three"}')
    restarted = start(receiver)
    assert [p.id for p in receiver.wait_for(2)] == ["evt_bot_3", "evt_bot_3"]
    receiver.wait_until(lambda: positions(restarted, receiver) == {"bot": 3})
    assert restarted.server.stop() == 0
    output = restarted.server.read_output()
    assert "is not a JSON object of seqs: every event is sent again" in output
    assert "Traceback" not in output


def test_a_receiver_refusing_everything_makes_guardd_hold_at_most_256_events(
    start: Start, receivers: list[Receiver]
) -> None:
    refusing = True
    receiver = receiver_of(receivers, lambda post: Answer(500 if refusing else 204))
    api = start(receiver, timing="first_backoff=2,max_backoff=4")
    agents = [api.create(name, POLICY) for name in ("a", "b")]
    for _ in range(150):
        for agent in agents:
            ok(agent.act("send_email"))
    receiver.wait_until(lambda: len(set(receiver.ids())) >= 256, timeout=60)
    receiver.wait_until(lambda: metric(api, "guard_webhook_retrying", receiver) >= 200)
    # The rest wait unread in the logs until some of the 256 are delivered.
    assert len(set(receiver.ids())) == 256
    assert metric(api, "guard_webhook_retrying", receiver) <= 256
    refusing = False
    receiver.wait_until(lambda: len({p.id for p in receiver.got}) == 300, timeout=60)
    assert metric(api, "guard_webhook_sent_total", receiver) == 300
    receiver.wait_until(lambda: positions(api, receiver) == {"a": 301, "b": 301})


def test_no_log_line_shows_a_webhook_url_whole(start: Start, receivers: list[Receiver]) -> None:
    failing = receiver_of(receivers, lambda post: Answer(500))
    fine = receiver_of(receivers)
    for receiver in (failing, fine):
        receiver.path = "/hook?token=s3cret"
    api = start(failing, fine)
    bot = api.create("bot", POLICY)
    ok(bot.act("send_email"))
    fine.wait_for(1)
    failing.wait_until(lambda: len(failing.posts) >= 2)
    assert api.server.stop() == 0
    output = api.server.read_output()
    shown = f"http://127.0.0.1:{failing.port}/hook"
    assert f"webhook {shown}: evt_bot_3 not delivered (HTTP 500); retrying" in output
    assert "s3cret" not in output
