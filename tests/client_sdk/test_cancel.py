"""``cancel`` on GuardClient, AsyncGuardClient, AdminClient and AsyncAdminClient:
a pending action is withdrawn (``status`` ``cancelled``), never charged."""

from __future__ import annotations

from decimal import Decimal

import pytest

from client_sdk import AsyncAdminClient, AsyncGuardClient, GuardClient, InvalidState


def test_agent_client_cancels_its_pending_action(server, admin, new_agent):
    created = new_agent()
    with GuardClient(created.token, base_url=server.url) as agent:
        decision = agent.request_action("send_email", {"to": "a"})
        action = agent.cancel(decision.action_id, reason="user left")
        assert (action.status, action.reason) == (
            "cancelled",
            {"code": "cancelled", "by": "agent", "reason": "user left"},
        )
        assert agent.get_action(decision.action_id).status == "cancelled"
        with pytest.raises(InvalidState, match=r"was cancelled by agent at .*: user left"):
            admin.approve(created.agent_id, decision.action_id, approver="alice")
        with pytest.raises(InvalidState):
            agent.cancel(decision.action_id)
        status = agent.status()
    assert (status.spent, status.actions_pending, status.actions_denied) == (Decimal(0), 0, 0)


def test_admin_client_cancels_on_the_agents_behalf(admin, new_agent):
    created = new_agent()
    decision = admin.request_action(created.agent_id, "send_email")
    action = admin.cancel(created.agent_id, decision.action_id)
    assert (action.status, action.reason) == ("cancelled", {"code": "cancelled", "by": "admin"})
    assert admin.list_pending(created.agent_id) == []


async def test_async_clients_cancel(server, new_agent):
    first, second = new_agent(), new_agent()
    async with AsyncGuardClient(first.token, base_url=server.url) as agent:
        decision = await agent.request_action("send_email")
        action = await agent.cancel(decision.action_id, "gave up")
        assert action.status == "cancelled"
    async with AsyncAdminClient(server.admin_token, base_url=server.url) as admin:
        decision = await admin.request_action(second.agent_id, "send_email")
        action = await admin.cancel(second.agent_id, decision.action_id)
        assert action.reason == {"code": "cancelled", "by": "admin"}
        with pytest.raises(InvalidState):
            await admin.cancel(second.agent_id, decision.action_id)
