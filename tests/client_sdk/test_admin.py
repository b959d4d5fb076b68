"""AdminClient / AsyncAdminClient against a real guardd: every admin endpoint."""

from __future__ import annotations

from decimal import Decimal

import pytest

from client_sdk import (
    AdminClient,
    AgentExists,
    AgentListEntry,
    AgentStatus,
    AlreadyTerminated,
    AsyncAdminClient,
    AsyncGuardClient,
    BadRequest,
    Forbidden,
    GuardClient,
    InvalidState,
    LogPage,
    PendingAction,
    PendingEntry,
    Policy,
    RateLimit,
    ToolRule,
    Unauthorized,
    UnknownAction,
    VerifyReport,
)
from tests.client_sdk.conftest import policy


def test_create_agent_returns_its_status_and_token(admin):
    created = admin.create_agent("mail-bot", policy(budget=Decimal("12.5")))
    assert created.agent_id == "mail-bot"
    assert created.token.startswith("agt_mail-bot.")
    agent = created.agent
    assert isinstance(agent, AgentStatus)
    assert (agent.alive, agent.budget, agent.spent, agent.remaining) == (
        True,
        Decimal("12.5"),
        Decimal(0),
        Decimal("12.5"),
    )
    assert all(type(m) is Decimal for m in (agent.budget, agent.spent, agent.remaining))
    assert (agent.scars, agent.head.seq, agent.scar_limit) == ((), 1, Decimal(10))
    assert admin.reissue_token("mail-bot") == created.token


def test_create_agent_errors_map_to_their_exceptions(admin):
    admin.create_agent("bot", policy())
    with pytest.raises(AgentExists) as exists:
        admin.create_agent("bot", policy())
    assert (exists.value.status, exists.value.code) == (409, "agent_exists")
    with pytest.raises(BadRequest) as bad:
        admin.create_agent("no spaces allowed", policy())
    assert bad.value.code == "bad_request"
    with pytest.raises(BadRequest, match="requires_aproval"):
        admin.create_agent("typo", policy(tools={"t": {"requires_aproval": True}}))


def test_list_agents_and_agent_status(admin, new_agent):
    created = new_agent()
    [entry] = [a for a in admin.list_agents() if a.agent_id == created.agent_id]
    assert isinstance(entry, AgentListEntry)
    assert (entry.state, entry.error, entry.failure) == ("active", None, None)
    assert entry.status == admin.agent_status(created.agent_id)


def test_policy_is_read_typed_by_the_agent_and_the_admin(admin, new_agent, server):
    created = new_agent()
    admin.set_policy(
        created.agent_id,
        policy(
            default={"cost": Decimal("0.25"), "max_calls": 3},
            rate_limit={"max_actions": 5, "window_secs": 60},
        ),
    )
    with GuardClient(created.token, base_url=server.url) as agent:
        own = agent.policy()
    assert own == admin.policy(created.agent_id)
    assert own == Policy(
        budget=Decimal(100),
        scar_limit=Decimal(10),
        tools={
            "search": ToolRule(cost=Decimal(1), requires_approval=False, max_calls=None),
            "send_email": ToolRule(cost=Decimal(5), requires_approval=True, max_calls=None),
        },
        default=ToolRule(cost=Decimal("0.25"), requires_approval=False, max_calls=3),
        rate_limit=RateLimit(max_actions=5, window_secs=Decimal(60)),
    )
    assert own.rule_for("send_email") == own.tools["send_email"]
    assert own.rule_for("anything") == own.default
    assert Policy(Decimal(1), Decimal(1), {}, None, None).rule_for("anything") is None


async def test_async_agent_client_reads_its_policy(server, new_agent):
    created = new_agent()
    async with AsyncGuardClient(created.token, base_url=server.url) as agent:
        own = await agent.policy()
    assert (own.default, sorted(own.tools)) == (None, ["search", "send_email"])


def test_set_policy_replaces_the_policy_of_a_live_agent(admin, new_agent):
    created = new_agent()
    status = admin.set_policy(created.agent_id, policy(budget=Decimal("0.5")))
    assert (status.budget, status.remaining) == (Decimal("0.5"), Decimal("0.5"))
    decision = admin.request_action(created.agent_id, "search")
    assert decision.reason == {
        "code": "insufficient_budget",
        "cost": Decimal(1),
        "remaining": Decimal("0.5"),
    }


def test_pending_approve_and_reject(admin, new_agent):
    created = new_agent()
    agent_id = created.agent_id
    first = admin.request_action(agent_id, "send_email", {"to": "a@example.com"})
    second = admin.request_action(agent_id, "send_email", {"to": "b@example.com"})
    assert (first.pending, second.pending) == (True, True)
    pending = admin.list_pending(agent_id)
    assert [p.action for p in pending] == [
        PendingAction("act-1", "send_email", {"to": "a@example.com"}, Decimal(5)),
        PendingAction("act-2", "send_email", {"to": "b@example.com"}, Decimal(5)),
    ]
    assert all(isinstance(p, PendingEntry) for p in pending)
    assert all(isinstance(p.seq, int) and p.requested_at.endswith("Z") for p in pending)
    approved = admin.approve(agent_id, "act-1", approver="alice", note="fine")
    assert (approved.decision, approved.cost, approved.remaining) == (
        "allowed",
        Decimal(5),
        Decimal(95),
    )
    rejected = admin.reject(agent_id, "act-2", approver="alice", reason="no", scar="moderate")
    assert rejected.reason == {"code": "rejected", "by": "alice", "reason": "no"}
    assert admin.list_pending(agent_id) == []
    with pytest.raises(InvalidState):
        admin.approve(agent_id, "act-1", approver="alice")
    action = admin.get_action(agent_id, "act-1", wait=5)  # not pending: answers at once
    assert (action.status, action.approved_by, action.note) == ("allowed", "alice", "fine")


def test_admin_reports_harmful_and_adds_scars(admin, new_agent):
    created = new_agent(scar_limit=100)
    agent_id = created.agent_id
    admin.request_action(agent_id, "search")
    status = admin.report_outcome(agent_id, "act-1", "harmful", detail="leaked a secret")
    assert status.scar_score == 10
    status = admin.add_scar(
        agent_id, severity="minor", reason="slow", action_id="act-1", by="carol"
    )
    assert [(s.severity, s.action_id) for s in status.scars] == [
        ("severe", "act-1"),
        ("minor", "act-1"),
    ]
    assert admin.log_page(agent_id).records[-1]["by"] == "carol"
    with pytest.raises(UnknownAction) as info:
        admin.add_scar(agent_id, severity="minor", reason="x", action_id="act-99")
    assert (info.value.status, info.value.code) == (404, "unknown_action")


def test_terminate_and_terminate_again(admin, new_agent):
    created = new_agent()
    status = admin.terminate(created.agent_id, reason="retired", by="alice")
    assert (status.alive, status.termination_reason) == (False, "retired")
    with pytest.raises(AlreadyTerminated) as info:
        admin.terminate(created.agent_id, reason="again", by="alice")
    assert (info.value.status, info.value.code) == (409, "already_terminated")


def test_log_iterates_over_every_record_page_by_page(admin, new_agent):
    created = new_agent()
    for _ in range(4):
        admin.request_action(created.agent_id, "search")
    whole = admin.log_page(created.agent_id, limit=5000)
    records = list(admin.log(created.agent_id, limit=2))
    assert isinstance(whole, LogPage)
    assert tuple(records) == whole.records
    assert [r["seq"] for r in records] == list(range(whole.head.seq + 1))
    assert [r["kind"] for r in records[:2]] == ["genesis", "policy"]
    assert [r["seq"] for r in admin.log(created.agent_id, after=3, limit=3)] == list(
        range(4, whole.head.seq + 1)
    )
    with pytest.raises(ValueError, match="limit"):
        admin.log(created.agent_id, limit=0)


def test_verify_and_public_key(admin, new_agent, server):
    created = new_agent()
    report = admin.verify(created.agent_id)
    assert isinstance(report, VerifyReport)
    assert (report.ok, report.failure) == (True, None)
    assert report.public_key == admin.public_key() == server.public_key
    assert report.head == admin.agent_status(created.agent_id).head
    assert report.records == report.head.seq + 1


def test_wrong_token_is_unauthorized_and_agent_token_is_forbidden(server, new_agent):
    created = new_agent()
    with (
        AdminClient("not-the-admin-token", base_url=server.url) as stranger,
        pytest.raises(Unauthorized) as info,
    ):
        stranger.list_agents()
    assert (info.value.status, info.value.code) == (401, "unauthorized")
    with (
        AdminClient(created.token, base_url=server.url) as agent_as_admin,
        pytest.raises(Forbidden),
    ):
        agent_as_admin.list_agents()
    other = new_agent()
    with (
        GuardClient(created.token, agent_id=other.agent_id, base_url=server.url) as wrong,
        pytest.raises(Forbidden),
    ):
        wrong.status()


async def test_async_admin_covers_the_same_endpoints(server):
    async with AsyncAdminClient(server.admin_token, base_url=server.url) as admin:
        created = await admin.create_agent("async-bot", policy())
        assert await admin.reissue_token("async-bot") == created.token
        assert "async-bot" in [a.agent_id for a in await admin.list_agents()]
        assert (await admin.set_policy("async-bot", policy(budget=50))).budget == Decimal(50)
        assert (await admin.policy("async-bot")).budget == Decimal(50)
        assert (await admin.request_action("async-bot", "send_email")).pending
        assert (await admin.request_action("async-bot", "send_email")).pending
        assert [p.action.action_id for p in await admin.list_pending("async-bot")] == [
            "act-1",
            "act-2",
        ]
        assert (await admin.approve("async-bot", "act-1", approver="bob")).allowed
        assert (await admin.reject("async-bot", "act-2", approver="bob", reason="no")).denied
        status = await admin.report_outcome("async-bot", "act-1", "harmful")
        assert status.scar_score == 10
        assert status.alive is False  # severe scar reached scar_limit 10
        assert (await admin.get_action("async-bot", "act-1")).outcome == "harmful"
        with pytest.raises(AlreadyTerminated):
            await admin.terminate("async-bot", reason="x", by="bob")
        status = await admin.add_scar(
            "async-bot", severity="minor", reason="after the end", by="bob"
        )
        assert status.alive is False
        assert (await admin.log_page("async-bot")).records[-1]["by"] == "bob"
        records = [r async for r in admin.log("async-bot", limit=3)]
        assert [r["seq"] for r in records] == list(range(len(records)))
        assert records[-1]["seq"] == (await admin.log_page("async-bot")).head.seq
        assert (await admin.verify("async-bot")).ok is True
        assert await admin.public_key() == server.public_key
        assert (await admin.agent_status("async-bot")).termination_reason == "scar_limit"
