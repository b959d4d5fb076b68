"""SIGTERM: stop accepting, let the actors finish and fsync, exit 0 within 10 s,
also with a long-poll in flight."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from guardd.webhooks import webhook_id
from tests.guardd.conftest import Api, ok
from tests.guardd.test_longpoll import POLICY, Waiter
from tests.support.receiver import SECRET, Answer, Receiver
from tests.support.server import GuardServer

EXIT_WITHIN = 10.0


def _sigterm_and_wait(api: Api) -> tuple[int, float]:
    proc = api.server.proc
    assert proc is not None
    begin = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(EXIT_WITHIN + 5)
    return code, time.monotonic() - begin


def test_sigterm_exits_0_promptly_and_keeps_every_acknowledged_record(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create(policy=POLICY | {"tools": {"t": {"cost": 1}}})
    for _ in range(5):
        ok(agent.act("t"))
    status = api.status(agent)
    code, elapsed = _sigterm_and_wait(api)
    assert (code, elapsed < EXIT_WITHIN) == (0, True)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{api.server.url}/healthz", timeout=2)
    api.server.stop()
    api.server.start()
    assert api.status(agent) == status
    assert ok(api.admin.get(f"{agent.path}/verify"))["ok"] is True


def test_sigterm_with_a_long_poll_in_flight_exits_0_within_10_s(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create(policy=POLICY)
    ok(agent.act("send_email"))
    waiter = Waiter(api, agent, "act-1", wait=60)
    waiter.start()
    assert waiter.started.wait(10)
    time.sleep(0.3)
    code, elapsed = _sigterm_and_wait(api)
    assert (code, elapsed < EXIT_WITHIN) == (0, True)
    # The long-poll is answered, not cut: the action as it stands, still pending.
    action = waiter.outcome()
    assert action["status"] == "pending_approval"
    api.server.stop()
    api.server.start()
    assert ok(api.admin.get(f"{agent.path}/actions/pending"))["pending"][0]["action"][
        "action_id"
    ] == ("act-1")


def test_sigterm_under_load_loses_no_acknowledged_action(fresh_api: Api) -> None:
    api = fresh_api
    agent = api.create(policy=POLICY | {"tools": {"t": {"cost": 0}}})
    acknowledged: list[str] = []
    odd_answers: list[str] = []

    def work() -> None:
        headers = {"Authorization": f"Bearer {agent.token}"}
        with httpx.Client(base_url=api.server.url, headers=headers, timeout=10) as client:
            while True:
                try:
                    response = client.post(f"{agent.path}/actions", json={"tool": "t"})
                except httpx.TransportError:
                    return  # the server has stopped listening
                if response.status_code == 200:
                    acknowledged.append(response.json()["action_id"])
                elif set(response.json()) != {"error", "code"}:
                    odd_answers.append(response.text)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(4)]
    for worker in workers:
        worker.start()
    time.sleep(0.5)
    code, elapsed = _sigterm_and_wait(api)
    for worker in workers:
        worker.join(10)
    assert (code, elapsed < EXIT_WITHIN) == (0, True)
    assert acknowledged
    assert odd_answers == []
    api.server.stop()
    api.server.start()
    for action_id in acknowledged:
        assert ok(api.admin.get(f"{agent.path}/actions/{action_id}"))["status"] == "allowed"
    assert api.status(agent)["actions_allowed"] >= len(acknowledged)


def test_sigterm_with_webhook_posts_in_flight_and_retrying_exits_0_within_10_s(
    tmp_path: Path,
) -> None:
    """One receiver never answers, one always fails: guardd stops its
    deliveries by cancelling them and keeps every position it had."""
    silent = Receiver(lambda post: Answer(204, hold=60)).start()
    failing = Receiver(lambda post: Answer(503)).start()
    args = ["--webhook", silent.url, "--webhook", failing.url, "--webhook-secret", SECRET]
    api = Api(GuardServer(tmp_path / "guard-data", args=args).start())
    try:
        agent = api.create(policy=POLICY)
        ok(agent.act("send_email"))
        silent.wait_until(lambda: len(silent.posts) == 1)
        failing.wait_until(lambda: len(failing.posts) >= 2)  # retrying
        code, elapsed = _sigterm_and_wait(api)
        assert (code, elapsed < EXIT_WITHIN) == (0, True)
        assert "Traceback" not in api.server.read_output()
        for hook in (silent, failing):
            path = api.server.data_dir / "webhooks" / f"{webhook_id(hook.url)}.position"
            assert json.loads(path.read_text()) == {agent.agent_id: 2}  # the event is not lost
    finally:
        api.close()
        api.server.kill()
        silent.stop()
        failing.stop()
