"""``verify_receipt`` on receipts a real guardd handed out over HTTP: a good
one is accepted; a tampered one, one for another input, tool or agent, an
expired one and one signed by another guard's key are each refused with
their reason; and any single-byte change to a receipt is refused."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import nacl.signing
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_sdk import (
    AdminClient,
    CreatedAgent,
    Decision,
    GuardClient,
    ReceiptError,
    verify_receipt,
)
from tests.client_sdk.conftest import FAST_RETRY
from tests.support.server import GuardServer

INPUT = {"to": "ops@example.com", "amount": 12.5, "tags": ["é", "😀"], "n": 3}


@pytest.fixture
def public_key(admin: AdminClient) -> str:
    return admin.public_key()


@pytest.fixture
def allowed(
    new_agent: Callable[..., CreatedAgent], connect: Callable[[CreatedAgent], GuardClient]
) -> tuple[CreatedAgent, Decision]:
    created = new_agent()
    decision = connect(created).request_action("search", INPUT)
    assert decision.allowed
    assert decision.receipt is not None
    return created, decision


def check(receipt: Any, public_key: str, agent_id: str, **overrides: Any) -> str:
    fields: dict[str, Any] = {
        "agent_id": agent_id,
        "tool": "search",
        "input": INPUT,
        "max_age_secs": 300,
    }
    return verify_receipt(receipt, public_key, **(fields | overrides))


def refused(reason: str, receipt: Any, public_key: str, agent_id: str, **overrides: Any) -> None:
    with pytest.raises(ReceiptError, match=f"^receipt refused: {re.escape(reason)}$") as caught:
        check(receipt, public_key, agent_id, **overrides)
    assert caught.value.reason == reason


def test_a_good_receipt_is_accepted_and_names_the_action(
    allowed: tuple[CreatedAgent, Decision], public_key: str
) -> None:
    created, decision = allowed
    assert check(decision.receipt, public_key, created.agent_id) == decision.action_id
    # the same values written another way are the same input (canonical form)
    same = {"n": 3.0, "tags": ("é", "😀"), "amount": 12.50, "to": "ops@example.com"}
    assert check(decision.receipt, public_key, created.agent_id, input=same) == "act-1"


def test_the_receipt_is_the_two_lines_of_the_log(
    allowed: tuple[CreatedAgent, Decision], server: GuardServer
) -> None:
    created, decision = allowed
    log = (server.data_dir / "agents" / f"{created.agent_id}.jsonl").read_bytes()
    assert decision.receipt == tuple(log.decode().splitlines()[2:4])


def test_a_receipt_for_another_input_is_refused(
    allowed: tuple[CreatedAgent, Decision], public_key: str
) -> None:
    created, decision = allowed
    other = INPUT | {"to": "eve@example.com"}
    refused(
        "receipt is for another input", decision.receipt, public_key, created.agent_id, input=other
    )
    refused(
        "receipt is for tool 'search', not 'send_email'",
        decision.receipt,
        public_key,
        created.agent_id,
        tool="send_email",
    )


def test_another_agents_receipt_is_refused(
    allowed: tuple[CreatedAgent, Decision], public_key: str
) -> None:
    created, decision = allowed
    reason = f"receipt is for agent {created.agent_id!r}, not 'someone-else'"
    refused(reason, decision.receipt, public_key, "someone-else")


def test_an_expired_receipt_is_refused(
    allowed: tuple[CreatedAgent, Decision], public_key: str
) -> None:
    created, decision = allowed
    assert decision.receipt is not None
    ts = json.loads(decision.receipt[1])["ts"]
    at = datetime.fromisoformat(ts).timestamp()
    reason = f"receipt expired: allowed at {ts}, more than 60 seconds ago"
    refused(reason, decision.receipt, public_key, created.agent_id, max_age_secs=60, now=at + 61)
    assert check(decision.receipt, public_key, created.agent_id, max_age_secs=60, now=at + 60)


def test_a_receipt_from_another_guard_key_is_refused(
    allowed: tuple[CreatedAgent, Decision],
) -> None:
    created, decision = allowed
    other = bytes(nacl.signing.SigningKey.generate().verify_key).hex()
    refused("line 1: signature does not verify", decision.receipt, other, created.agent_id)


def _reseal(record: dict[str, Any], key: nacl.signing.SigningKey) -> str:

    body = {k: v for k, v in record.items() if k not in ("hash", "sig")}
    digest = hashlib.sha256(rfc8785.dumps(body)).hexdigest()
    sig = key.sign(b"guard-log/1 record\n" + bytes.fromhex(digest)).signature.hex()
    return rfc8785.dumps(body | {"hash": digest, "sig": sig}).decode()


def test_a_tampered_receipt_is_refused(
    allowed: tuple[CreatedAgent, Decision], public_key: str
) -> None:
    created, decision = allowed
    assert decision.receipt is not None
    requested, allowance = (json.loads(line) for line in decision.receipt)
    # the input changed, hash left as it was
    forged = rfc8785.dumps(requested | {"input": INPUT | {"to": "eve"}}).decode()
    refused(
        "line 1: hash does not match content",
        [forged, decision.receipt[1]],
        public_key,
        created.agent_id,
    )
    # the input changed and the hash recomputed: only the signature can tell
    body = {k: v for k, v in requested.items() if k not in ("hash", "sig")}
    body["input"] = INPUT | {"to": "eve"}

    body["hash"] = hashlib.sha256(rfc8785.dumps(body)).hexdigest()
    body["sig"] = requested["sig"]
    refused(
        "line 1: signature does not verify",
        [rfc8785.dumps(body).decode(), decision.receipt[1]],
        public_key,
        created.agent_id,
    )
    # not in canonical form, though the same JSON
    spaced = decision.receipt[0].replace('{"', '{ "', 1)
    refused(
        "line 1 is not canonical JSON", [spaced, decision.receipt[1]], public_key, created.agent_id
    )
    # the lines swapped, one missing
    refused(
        "line 1 is action_allowed, not action_requested",
        list(decision.receipt[::-1]),
        public_key,
        created.agent_id,
    )
    refused(
        "a receipt is a list of two record lines",
        [decision.receipt[0]],
        public_key,
        created.agent_id,
    )
    refused(
        "a receipt is a list of two record lines",
        "".join(decision.receipt),
        public_key,
        created.agent_id,
    )
    assert allowance["request_hash"] == requested["hash"]


def test_an_allowance_paired_with_another_request_is_refused(
    allowed: tuple[CreatedAgent, Decision],
    connect: Callable[[CreatedAgent], GuardClient],
    public_key: str,
) -> None:
    created, decision = allowed
    assert decision.receipt is not None
    client = connect(created)
    second = client.request_action("search", INPUT)
    assert second.receipt is not None
    # each line genuinely signed, but the allowance is of act-2, the request act-1's
    mixed = [decision.receipt[0], second.receipt[1]]
    refused("the allowance is for another request", mixed, public_key, created.agent_id)
    # a receipt is single-use only by the executor's own check: the ID tells them apart
    assert check(second.receipt, public_key, created.agent_id) == "act-2"


def test_an_approved_action_has_a_receipt_pairing_its_original_request(
    new_agent: Callable[..., CreatedAgent],
    connect: Callable[[CreatedAgent], GuardClient],
    admin: AdminClient,
    public_key: str,
) -> None:
    created = new_agent()
    client = connect(created)
    held = client.request_action("send_email", INPUT)
    assert held.pending
    assert held.receipt is None
    client.request_action("search", {})  # a record between the request and the approval
    approved = admin.approve(created.agent_id, held.action_id, approver="alice")
    assert approved.receipt is not None
    assert json.loads(approved.receipt[0])["seq"] == 2
    got = check(approved.receipt, public_key, created.agent_id, tool="send_email")
    assert got == held.action_id
    # the action view carries the same receipt
    assert client.get_action(held.action_id).receipt == approved.receipt


def test_a_repeated_idempotency_key_answers_the_first_receipt(
    new_agent: Callable[..., CreatedAgent],
    server: GuardServer,
) -> None:

    created = new_agent()
    url = f"{server.url}/v1/agents/{created.agent_id}/actions"
    headers = {"Authorization": f"Bearer {created.token}", "Idempotency-Key": "once"}
    with httpx.Client(timeout=30) as http:
        first = http.post(url, json={"tool": "search", "input": INPUT}, headers=headers)
        again = http.post(url, json={"tool": "search", "input": INPUT}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert len(first.json()["receipt"]) == 2


def test_denied_and_pending_decisions_carry_no_receipt(
    new_agent: Callable[..., CreatedAgent], connect: Callable[[CreatedAgent], GuardClient]
) -> None:
    created = new_agent()
    client = connect(created)
    assert client.request_action("send_email", {}).receipt is None
    assert client.request_action("unknown", {}).receipt is None
    assert client.get_action("act-2").receipt is None


def test_arguments_that_are_not_a_key_or_an_age_are_value_errors(
    allowed: tuple[CreatedAgent, Decision], public_key: str
) -> None:
    created, decision = allowed
    with pytest.raises(ValueError, match=r"^public_key must be 64 lowercase hex"):
        check(decision.receipt, public_key.upper(), created.agent_id)
    with pytest.raises(ValueError, match=r"^max_age_secs must be a number >= 0"):
        check(decision.receipt, public_key, created.agent_id, max_age_secs=-1)


# -- any single-byte change --------------------------------------------------------


@pytest.fixture(scope="module")
def good_receipt(server: GuardServer) -> tuple[list[bytes], str, str]:
    with AdminClient(server.admin_token, base_url=server.url, retry=FAST_RETRY) as admin:
        created = admin.create_agent(
            "byte-flips", {"budget": 10, "scar_limit": 5, "tools": {"search": {}}}
        )
        key = admin.public_key()
    with GuardClient(created.token, base_url=server.url, retry=FAST_RETRY) as client:
        decision = client.request_action("search", INPUT)
    assert decision.receipt is not None
    return [line.encode() for line in decision.receipt], key, created.agent_id


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_single_byte_change_is_refused(
    good_receipt: tuple[list[bytes], str, str], data: st.DataObject
) -> None:
    lines, key, agent_id = good_receipt
    which = data.draw(st.integers(0, 1), label="line")
    line = bytearray(lines[which])
    at = data.draw(st.integers(0, len(line) - 1), label="at")
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != line[at]), label="byte")
    line[at] = byte
    changed = [bytes(line) if i == which else lines[i] for i in range(2)]
    try:
        texts = [c.decode() for c in changed]
    except UnicodeDecodeError:
        return  # not text: a receipt is strings, so it cannot even be handed over
    with pytest.raises(ReceiptError):
        check(texts, key, agent_id, now=time.time())


# -- guarded hands the receipt to a tool that asks for it ---------------------------


def test_guarded_passes_the_receipt_to_a_tool_that_declares_guard_receipt(
    new_agent: Callable[..., CreatedAgent],
    connect: Callable[[CreatedAgent], GuardClient],
    public_key: str,
) -> None:
    created = new_agent()
    client = connect(created)
    seen: list[str] = []

    @client.guarded
    def search(query: str, *, guard_receipt: tuple[str, ...] | None = None) -> str:
        # the executor checks the permission itself, before it acts
        seen.append(
            verify_receipt(
                guard_receipt or (),
                public_key,
                agent_id=created.agent_id,
                tool="search",
                input={"query": query},
                max_age_secs=60,
            )
        )
        return query.upper()

    assert search("guard") == "GUARD"
    assert seen == ["act-1"]
    # the receipt is no part of the input, and the caller cannot hand one in
    assert client.get_action("act-1").input == {"query": "guard"}
    with pytest.raises(TypeError, match="guard_receipt"):
        search("x", guard_receipt=("forged", "receipt"))


def test_guarded_passes_the_receipt_of_an_approval(
    new_agent: Callable[..., CreatedAgent],
    connect: Callable[[CreatedAgent], GuardClient],
    admin: AdminClient,
    public_key: str,
) -> None:
    import threading

    created = new_agent()
    client = connect(created)
    got: list[tuple[str, ...] | None] = []

    @client.guarded(approval_timeout=10)
    def send_email(to: str, guard_receipt: tuple[str, ...] | None) -> None:
        got.append(guard_receipt)

    def operate() -> None:
        deadline = time.monotonic() + 10
        while not admin.list_pending(created.agent_id):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        admin.approve(created.agent_id, "act-1", approver="alice")

    operator = threading.Thread(target=operate)
    operator.start()
    send_email("ops@example.com")
    operator.join()
    (receipt,) = got
    action_id = verify_receipt(
        receipt or (),
        public_key,
        agent_id=created.agent_id,
        tool="send_email",
        input={"to": "ops@example.com"},
        max_age_secs=60,
    )
    assert action_id == "act-1"


def test_guarded_refuses_a_receipt_parameter_positional_arguments_would_fill() -> None:
    from client_sdk import GuardClient as Client

    client = Client("agt_x.y", base_url="http://127.0.0.1:9")

    def tool(guard_receipt: Any, query: str) -> None:
        pass

    with pytest.raises(TypeError, match=r"^'tool': declare guard_receipt keyword-only"):
        client.guarded(tool)
    client.close()


async def test_async_guarded_passes_the_receipt(
    new_agent: Callable[..., CreatedAgent], server: GuardServer, public_key: str
) -> None:
    from client_sdk import AsyncGuardClient

    created = new_agent()
    async with AsyncGuardClient(created.token, base_url=server.url, retry=FAST_RETRY) as client:

        @client.guarded
        async def search(query: str, *, guard_receipt: tuple[str, ...]) -> str:
            return verify_receipt(
                guard_receipt,
                public_key,
                agent_id=created.agent_id,
                tool="search",
                input={"query": query},
                max_age_secs=60,
            )

        assert await search("x") == "act-1"
