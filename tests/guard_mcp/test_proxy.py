"""guard-mcp over stdio on both sides: each guard outcome as the MCP client sees it."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import MCPError

from client_sdk import AdminClient
from tests.client_sdk.proxy import Proxy as DroppingProxy
from tests.guard_mcp.conftest import (
    TEST_TIMEOUT,
    Upstream,
    guard_mcp_stdio,
    process_gone,
    stderr_of_guard_mcp,
    wait_for,
)
from tests.support.server import GuardServer, free_port


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def actions(admin: AdminClient, agent_id: str, kind: str) -> list[dict[str, Any]]:
    return [r for r in admin.log(agent_id) if r["kind"] == kind]


async def test_allowed_call_reaches_the_upstream_and_its_outcome_is_logged(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"cost": 1}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            result = await client.call_tool("echo", {"text": "hi"})
    assert (result.is_error, text(result)) == (False, "echo: hi")
    assert upstream.calls == [{"tool": "echo", "arguments": {"text": "hi"}}]
    [requested] = actions(admin, agent.agent_id, "action_requested")
    assert (requested["tool"], requested["input"]) == ("echo", {"text": "hi"})
    [outcome] = actions(admin, agent.agent_id, "outcome")
    assert (outcome["action_id"], outcome["outcome"]) == (requested["action_id"], "success")
    assert admin.agent_status(agent.agent_id).spent == 1


async def test_denied_call_never_reaches_the_upstream_and_the_model_reads_why(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"cost": 3}}, budget=Decimal("1.5"))
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            result = await client.call_tool("echo", {"text": "hi"})
    assert result.is_error is True
    assert text(result) == (
        "denied by guard: insufficient_budget (needs 3, 1.5 left); action act-1; "
        "the call was not run."
    )
    assert upstream.calls == []


async def test_a_call_waiting_for_approval_shows_progress_and_runs_once_approved(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"requires_approval": True}})
    progress: list[str | None] = []

    async def seen(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            results: list[types.CallToolResult] = []

            async def call() -> None:
                results.append(
                    await client.call_tool("echo", {"text": "later"}, progress_callback=seen)
                )

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call)
                await wait_for(lambda: admin.list_pending(agent.agent_id))
                await wait_for(lambda: progress)
                assert upstream.calls == []  # held, not forwarded
                admin.approve(agent.agent_id, "act-1", approver="ann")
    [result] = results
    assert (result.is_error, text(result)) == (False, "echo: later")
    assert upstream.calls == [{"tool": "echo", "arguments": {"text": "later"}}]
    assert progress[0] is not None
    assert "echo (act-1) waits for a person's approval at the guard console" in progress[0]
    assert f"{server.url}/" in progress[0]
    assert actions(admin, agent.agent_id, "outcome")[0]["outcome"] == "success"


async def test_a_rejected_call_is_not_run_and_says_who_rejected_it_and_why(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"requires_approval": True}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            results: list[types.CallToolResult] = []

            async def call() -> None:
                results.append(await client.call_tool("echo", {"text": "no"}))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call)
                await wait_for(lambda: admin.list_pending(agent.agent_id))
                admin.reject(agent.agent_id, "act-1", approver="ann", reason="not today")
    [result] = results
    assert result.is_error is True
    assert text(result) == (
        "denied by guard: rejected (rejected by ann: not today); action act-1; "
        "the call was not run."
    )
    assert upstream.calls == []


async def test_no_decision_in_time_is_a_timeout_and_the_action_is_withdrawn(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"requires_approval": True}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(
            tmp_path, upstream, agent.token, server.url, "--approval-timeout", "1"
        ) as client:
            result = await client.call_tool("echo", {"text": "late"})
    assert result.is_error is True
    assert text(result) == (
        "timed out after 1 s waiting for approval of act-1 (echo); the call was not run. "
        "The action was withdrawn on guardd: act-1 is cancelled, never charged."
    )
    assert upstream.calls == []
    assert admin.list_pending(agent.agent_id) == []
    assert admin.get_action(agent.agent_id, "act-1").status == "cancelled"
    assert admin.agent_status(agent.agent_id).spent == 0


async def test_a_call_the_client_cancels_is_never_run_and_its_action_is_withdrawn(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"requires_approval": True}, "pay": {}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            async with anyio.create_task_group() as tasks:
                # Cancelling the task makes the SDK send notifications/cancelled.
                tasks.start_soon(client.call_tool, "echo", {"text": "never"})
                await wait_for(lambda: admin.list_pending(agent.agent_id))
                tasks.cancel_scope.cancel()
            await wait_for(lambda: "cancelled by the client" in stderr_of_guard_mcp(tmp_path))
            # guard-mcp serves on.
            assert text(await client.call_tool("pay", {"to": "bob", "amount": 1})).startswith(
                "paid"
            )
    assert "act-1 cancelled by the client; withdrawn on guardd" in stderr_of_guard_mcp(tmp_path)
    assert [c["tool"] for c in upstream.calls] == ["pay"]
    assert admin.list_pending(agent.agent_id) == []
    cancelled = admin.get_action(agent.agent_id, "act-1")
    assert (cancelled.status, cancelled.reason) == (
        "cancelled",
        {"code": "cancelled", "by": "agent", "reason": "guard-mcp: cancelled by the client"},
    )


async def test_guard_down_fails_closed_naming_the_address_tried(
    new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {}})
    nowhere = f"http://127.0.0.1:{free_port()}"
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, nowhere) as client:
            result = await client.call_tool("echo", {"text": "hi"})
            with pytest.raises(MCPError, match="cannot list tools: cannot reach guardd at"):
                await client.list_tools()
    assert result.is_error is True
    assert text(result).startswith(
        f"guard unreachable, the call was not run (fail closed): cannot reach guardd at {nowhere}"
    )
    assert upstream.calls == []


async def test_tool_list_leaves_out_what_the_policy_never_allows_and_notes_approval_and_cost(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"cost": 1}, "pay": {"requires_approval": True}, "fail": {}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            listed = {t.name: t.description for t in (await client.list_tools()).tools}
            assert listed == {
                "echo": "Say the text back.\n\n[guard: costs 1 of the agent's budget]",
                "fail": "Always fails.",
                "pay": "Pay someone.\n\n[guard: each call waits for a person's approval]",
            }
            # The policy is read again on each listing.
            admin.set_policy(
                agent.agent_id,
                {"budget": 10, "scar_limit": 100, "tools": {}, "default": {"cost": 2}},
            )
            again = {t.name for t in (await client.list_tools()).tools}
            assert again == {"echo", "fail", "pay", "crash", "stall", "never_allowed"}
        async with guard_mcp_stdio(
            tmp_path, upstream, agent.token, server.url, "--show-denied"
        ) as client:
            admin.set_policy(agent.agent_id, {"budget": 10, "scar_limit": 100, "tools": {}})
            shown = {t.name: t.description for t in (await client.list_tools()).tools}
    assert shown["never_allowed"] == "[guard: the agent's policy never allows this tool]"
    assert len(shown) == 6


async def test_tool_list_notes_that_a_policy_rule_may_hold_a_call(
    server: GuardServer, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    big = {"name": "big", "when": "double(input.amount) > 100.0", "effect": "require_approval"}
    agent = new_agent({"pay": {"rules": [big]}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            listed = {t.name: t.description for t in (await client.list_tools()).tools}
    assert listed["pay"] == "Pay someone.\n\n[guard: a call may need a person's approval]"


async def test_tool_prefix_names_tools_for_the_client_and_the_policy(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"fs.echo": {}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(
            tmp_path, upstream, agent.token, server.url, "--tool-prefix", "fs."
        ) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["fs.echo"]
            result = await client.call_tool("fs.echo", {"text": "x"})
            unprefixed = await client.call_tool("echo", {"text": "x"})
    assert text(result) == "echo: x"
    assert unprefixed.is_error is True
    assert text(unprefixed).startswith("unknown tool 'echo'")
    assert upstream.calls == [{"tool": "echo", "arguments": {"text": "x"}}]
    [requested] = actions(admin, agent.agent_id, "action_requested")
    assert requested["tool"] == "fs.echo"


async def test_cost_from_charges_the_argument_and_the_log_has_the_exact_arguments(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"pay": {"cost": Decimal("0.5")}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(
            tmp_path, upstream, agent.token, server.url, "--cost-from", "pay=amount"
        ) as client:
            [tool] = (await client.list_tools()).tools
            paid = await client.call_tool("pay", {"to": "bob", "amount": 2.25})
            unpriced = await client.call_tool("pay", {"to": "bob", "amount": "lots"})
    assert tool.description == (
        "Pay someone.\n\n[guard: costs the number in its 'amount' argument (at least 0.5)]"
    )
    assert text(paid) == "paid 2.25 to bob"
    assert unpriced.is_error is True
    assert "priced by its 'amount' argument" in text(unpriced)
    assert len(upstream.calls) == 1
    assert admin.agent_status(agent.agent_id).spent == Decimal("2.25")
    [requested] = actions(admin, agent.agent_id, "action_requested")
    assert (requested["tool"], requested["input"]) == ("pay", {"to": "bob", "amount": 2.25})


async def test_an_upstream_tool_error_is_returned_unchanged_and_logged_as_failure(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"fail": {}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            result = await client.call_tool("fail", {"why": "bad input"})
    assert result.is_error is True
    assert text(result) == "Error executing tool fail: failed on purpose: bad input"
    assert actions(admin, agent.agent_id, "outcome")[0]["outcome"] == "failure"


async def test_an_upstream_that_exits_mid_call_is_an_mcp_error_and_a_failure(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"crash": {}, "echo": {}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            with pytest.raises(MCPError, match=r"crash failed: the upstream server \(.*\) closed"):
                await client.call_tool("crash", {})
            with pytest.raises(MCPError, match="closed the connection or exited"):
                await client.call_tool("echo", {"text": "after"})
    [outcome] = actions(admin, agent.agent_id, "outcome")
    assert outcome["outcome"] == "failure"
    assert "upstream failed" in outcome["detail"]
    # The call after the exit was never asked: nothing could have run it.
    assert len(actions(admin, agent.agent_id, "action_requested")) == 1
    assert [c["tool"] for c in upstream.calls] == ["crash"]


async def test_the_upstream_command_given_as_one_string_runs_the_same_upstream(
    server: GuardServer, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {}})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(
            tmp_path, upstream, agent.token, server.url, command_option=True
        ) as client:
            result = await client.call_tool("echo", {"text": "one string"})
    assert text(result) == "echo: one string"
    assert upstream.calls == [{"tool": "echo", "arguments": {"text": "one string"}}]


async def test_resources_and_prompts_pass_through_unchanged(
    server: GuardServer, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            resources = await client.list_resources()
            read = await client.read_resource("data://greeting")
            prompts = await client.list_prompts()
            prompt = await client.get_prompt("review", {"topic": "the guard"})
    assert [str(r.uri) for r in resources.resources] == ["data://greeting"]
    [content] = read.contents
    assert isinstance(content, types.TextResourceContents)
    assert content.text == "hello from upstream"
    assert [p.name for p in prompts.prompts] == ["review"]
    [message] = prompt.messages
    assert isinstance(message.content, types.TextContent)
    assert message.content.text == "Please review the guard."


async def test_no_upstream_process_is_left_after_the_client_goes_away(
    server: GuardServer, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            await client.list_tools()
            pid = upstream.pid
            assert pid is not None
            assert not process_gone(pid, timeout=0.2)
    assert process_gone(pid)


async def test_a_retry_after_a_dropped_guard_connection_charges_once(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"cost": 1}})
    with DroppingProxy(server.port, plan=["drop"]) as proxy, anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, proxy.url) as client:
            result = await client.call_tool("echo", {"text": "once"})
    assert text(result) == "echo: once"
    asks = [r for r in proxy.requests if r.path.endswith("/actions")]
    assert len(asks) == 2  # the answer to the first was lost
    assert len({r.headers["idempotency-key"] for r in asks}) == 1
    assert admin.agent_status(agent.agent_id).spent == 1
    assert len(actions(admin, agent.agent_id, "action_requested")) == 1
    assert len(upstream.calls) == 1


async def test_receipts_puts_the_guards_receipt_in_the_forwarded_meta(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    from client_sdk import verify_receipt

    agent = new_agent({"echo": {"cost": 1}})
    forged = {"agent-action-guard/receipt": ["not", "the guard's"], "other": 1}
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(
            tmp_path, upstream, agent.token, server.url, "--receipts"
        ) as client:
            result = await client.call_tool("echo", {"text": "hi"}, meta=forged)
    assert text(result) == "echo: hi"
    [call] = upstream.calls
    action_id = verify_receipt(
        call["receipt"],
        admin.public_key(),
        agent_id=agent.agent_id,
        tool="echo",
        input={"text": "hi"},
        max_age_secs=60,
    )
    assert action_id == "act-1"


async def test_without_receipts_no_receipt_goes_upstream_not_even_the_clients(
    server: GuardServer, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"cost": 1}})
    forged = {"agent-action-guard/receipt": ["not", "the guard's"]}
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            result = await client.call_tool("echo", {"text": "hi"}, meta=forged)
    assert text(result) == "echo: hi"
    assert upstream.calls == [{"tool": "echo", "arguments": {"text": "hi"}}]


# A policy that holds write_file for approval and lets any other tool run free:
# the shape in which a name variant, decided by the default rule, used to run
# write_file upstream with no approval and no charge.
HELD_WRITE = {"write_file": {"requires_approval": True, "cost": 1}}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("Write_File", id="title-case"),
        pytest.param("WRITE_FILE", id="upper-case"),
        pytest.param(
            "\uff57\uff52\uff49\uff54\uff45\uff3f\uff46\uff49\uff4c\uff45", id="fullwidth"
        ),
        pytest.param("write_\uff46ile", id="one-fullwidth-letter"),
    ],
)
async def test_a_name_variant_of_a_tool_held_for_approval_is_refused_without_asking_the_guard(
    server: GuardServer,
    admin: AdminClient,
    new_agent,
    upstream: Upstream,
    tmp_path: Path,
    name: str,
) -> None:
    upstream.names = "loose"  # the upstream would run write_file under this name
    agent = new_agent(HELD_WRITE, default={})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            result = await client.call_tool(name, {"path": "/etc/x", "text": "owned"})
    assert result.is_error is True
    assert text(result) == (
        f"unknown tool {name!r}: the upstream server lists no tool of that name, only "
        "'write_file' (names must match exactly, in case and Unicode form); the call was not run."
    )
    assert upstream.calls == []
    assert actions(admin, agent.agent_id, "action_requested") == []
    assert admin.agent_status(agent.agent_id).spent == 0


async def test_only_the_listed_name_goes_to_the_guard_and_an_unlisted_one_never_does(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.names = "loose"
    agent = new_agent(HELD_WRITE, default={})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            unlisted = await client.call_tool("delete_everything", {})
            results: list[types.CallToolResult] = []

            async def call() -> None:
                results.append(await client.call_tool("write_file", {"path": "a", "text": "b"}))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call)
                await wait_for(lambda: admin.list_pending(agent.agent_id))
                assert upstream.calls == []  # held, as the policy says
                admin.approve(agent.agent_id, "act-1", approver="ann")
    assert text(unlisted) == (
        "unknown tool 'delete_everything': the upstream server lists no tool of that name; "
        "the call was not run."
    )
    assert text(results[0]) == "wrote 1 characters to a"
    [requested] = actions(admin, agent.agent_id, "action_requested")
    assert requested["tool"] == "write_file"
    assert upstream.calls == [{"tool": "write_file", "arguments": {"path": "a", "text": "b"}}]
    assert admin.agent_status(agent.agent_id).spent == 1


async def test_listed_names_that_differ_only_by_case_are_neither_offered_nor_callable(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    upstream.names = "twins"  # lists write_file and Write_File, runs write_file for both
    agent = new_agent({"fs.write_file": {"requires_approval": True}}, default={})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(
            tmp_path, upstream, agent.token, server.url, "--tool-prefix", "fs."
        ) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            twin = await client.call_tool("fs.Write_File", {"path": "a", "text": "b"})
            held = await client.call_tool("fs.write_file", {"path": "a", "text": "b"})
            variant = await client.call_tool("fs.WRITE_FILE", {"path": "a", "text": "b"})
    assert listed == {
        "fs.echo",
        "fs.fail",
        "fs.pay",
        "fs.crash",
        "fs.stall",
        "fs.never_allowed",
    }
    assert text(twin) == (
        "tool 'fs.Write_File' is withheld: the upstream server also lists 'fs.write_file', "
        "which differs from it only in case or Unicode form and may be the same tool; "
        "the call was not run."
    )
    assert text(held).startswith("tool 'fs.write_file' is withheld: the upstream server also ")
    assert text(variant) == (
        "unknown tool 'fs.WRITE_FILE': the upstream server lists no tool of that name, only "
        "'fs.Write_File' and 'fs.write_file' (names must match exactly, in case and Unicode "
        "form); the call was not run."
    )
    assert upstream.calls == []
    assert actions(admin, agent.agent_id, "action_requested") == []
    assert (
        "the upstream lists tools whose names differ only in case or Unicode form: "
        "'fs.Write_File', 'fs.write_file'; none of them is offered or callable"
    ) in stderr_of_guard_mcp(tmp_path)


async def test_a_terminated_agent_is_offered_no_tool_and_its_calls_are_denied(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {}}, default={})
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(
            tmp_path, upstream, agent.token, server.url, "--show-denied"
        ) as client:
            before = (await client.list_tools()).tools
            admin.terminate(agent.agent_id, reason="caught lying", by="ann")
            after = (await client.list_tools()).tools
            result = await client.call_tool("echo", {"text": "hi"})
    assert len(before) == 6
    assert after == []
    assert text(result) == (
        "denied by guard: terminated (the agent is terminated: caught lying); action act-1; "
        "the call was not run."
    )
    assert upstream.calls == []


async def test_two_tools_outside_the_docs_example_policy_terminate_the_agent(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    # docs/mcp.md's policy: scar_limit 5, no default. A tool the upstream
    # lists but the policy leaves out is a moderate scar (3): two reach 6.
    agent = new_agent({"echo": {}}, budget=20, scar_limit=5)
    with anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, server.url) as client:
            first = await client.call_tool("never_allowed", {})
            assert [t.name for t in (await client.list_tools()).tools] == ["echo"]
            second = await client.call_tool("pay", {"to": "bob", "amount": 1})
            listed = (await client.list_tools()).tools
            echo = await client.call_tool("echo", {"text": "hi"})
    assert text(first).startswith("denied by guard: tool_not_allowed")
    assert text(second).startswith("denied by guard: tool_not_allowed")
    status = admin.agent_status(agent.agent_id)
    assert (status.alive, status.termination_reason, status.scar_score) == (False, "scar_limit", 6)
    assert listed == []
    assert text(echo).startswith(
        "denied by guard: terminated (the agent is terminated: scar_limit)"
    )
    assert upstream.calls == []


async def test_a_call_cancelled_while_its_held_ask_is_unanswered_has_that_action_withdrawn(
    server: GuardServer, admin: AdminClient, new_agent, upstream: Upstream, tmp_path: Path
) -> None:
    agent = new_agent({"echo": {"requires_approval": True}, "pay": {}})
    # guardd holds act-1, but its answer never reaches guard-mcp.
    with DroppingProxy(server.port, plan=["hold"]) as proxy, anyio.fail_after(TEST_TIMEOUT):
        async with guard_mcp_stdio(tmp_path, upstream, agent.token, proxy.url) as client:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(client.call_tool, "echo", {"text": "never"})
                await wait_for(lambda: admin.list_pending(agent.agent_id))
                tasks.cancel_scope.cancel()
            await wait_for(lambda: "withdrawn on guardd" in stderr_of_guard_mcp(tmp_path))
            assert text(await client.call_tool("pay", {"to": "bob", "amount": 1})).startswith(
                "paid"
            )
    assert "act-1 cancelled by the client; withdrawn on guardd" in stderr_of_guard_mcp(tmp_path)
    cancelled = admin.get_action(agent.agent_id, "act-1")
    assert (cancelled.status, cancelled.reason) == (
        "cancelled",
        {"code": "cancelled", "by": "agent", "reason": "guard-mcp: cancelled by the client"},
    )
    assert admin.list_pending(agent.agent_id) == []
    assert len(actions(admin, agent.agent_id, "action_requested")) == 2  # echo, then pay
    assert [c["tool"] for c in upstream.calls] == ["pay"]
