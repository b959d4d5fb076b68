"""The decision core: pure, no I/O, no clock (``now`` is passed in).

Checks run in this order; the first failure wins:
terminated, tool_not_allowed, the tool's rules (policy_rule, or policy_error
when a ``when`` cannot be evaluated), the ``cost_from`` amount
(policy_error), tool_call_limit, rate_limited, insufficient_budget. Then the
effect: the first rule whose ``when`` was true (allow, or require_approval),
else the tool's ``requires_approval``.
"""

from __future__ import annotations

from bisect import bisect_right
from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.core.conditions import bind, evaluate, json_value, timestamp
from agents_runtime.core.policy import Rule, Rules, charge_for
from agents_runtime.core.state import AgentState
from agents_runtime.core.vocabulary import Decision, Effect, ReasonCode, Severity

# Scar severity that each deny reason adds (None: no scar).
DENY_SCARS: dict[str, Severity | None] = {
    ReasonCode.TERMINATED: None,
    ReasonCode.TOOL_NOT_ALLOWED: Severity.MODERATE,
    ReasonCode.POLICY_RULE: None,  # the rule chooses (its ``scar``, in the reason)
    ReasonCode.POLICY_ERROR: None,  # the policy's fault, not the agent's
    ReasonCode.TOOL_CALL_LIMIT: Severity.MINOR,
    ReasonCode.RATE_LIMITED: Severity.MINOR,
    ReasonCode.INSUFFICIENT_BUDGET: None,
    ReasonCode.REJECTED: None,  # the operator chooses
    ReasonCode.APPROVAL_EXPIRED: None,  # nobody decided in time: not the agent's fault
}

# The verdicts of a request that passes every check, made per request: aliases
# spare the lookup of a member on its enum class.
_ALLOWED = Decision.ALLOWED
_PENDING = Decision.PENDING_APPROVAL
_DENY = Effect.DENY
_REQUIRE_APPROVAL = Effect.REQUIRE_APPROVAL


@attrs.define(slots=True)
class Verdict:
    """A value, never changed once made; not frozen for the reason given at
    ``record.Head``: one is made for every request."""

    decision: Decision
    charge: Decimal
    reason: dict[str, Any] | None = None
    rule: str | None = None  # the name of the policy rule that decided it


def decide(
    state: AgentState,
    tool: str,
    requested_cost: Decimal | None,
    now: float,
    tool_input: Any = None,
    *,
    approving: bool = False,
) -> Verdict:
    """Decide a request (or, with ``approving``, an approval of a held one)."""
    policy = state.policy
    rule = policy.rule_for(tool) if policy is not None else None
    charge, amount_error = charge_for(rule, requested_cost, tool_input)
    if not state.alive:
        reason: dict[str, Any] = {"code": ReasonCode.TERMINATED, "reason": state.termination_reason}
        return Verdict(Decision.DENIED, charge, reason)
    if rule is None or policy is None:
        return Verdict(Decision.DENIED, charge, {"code": ReasonCode.TOOL_NOT_ALLOWED, "tool": tool})
    matched: Rule | None = None
    if rule.rules:
        matched, failed = _first_true(state, rule.rules, tool, tool_input, now)
        if failed is not None:
            assert matched is not None
            reason = {"code": ReasonCode.POLICY_ERROR, "rule": matched.name, "message": failed}
            return Verdict(Decision.DENIED, charge, reason, matched.name)
        if matched is not None and matched.effect == _DENY:
            reason = {
                "code": ReasonCode.POLICY_RULE,
                "rule": matched.name,
                "message": matched.message or f"denied by rule {matched.name}",
            }
            if matched.scar is not None:
                reason["scar"] = matched.scar
            return Verdict(Decision.DENIED, charge, reason, matched.name)
    if amount_error is not None:
        reason = {"code": ReasonCode.POLICY_ERROR, "cost_from": rule.cost_from}
        reason["message"] = amount_error
        return Verdict(Decision.DENIED, charge, reason)
    if rule.max_calls is not None and state.tool_calls.get(tool, 0) >= rule.max_calls:
        reason = {"code": ReasonCode.TOOL_CALL_LIMIT, "tool": tool, "max_calls": rule.max_calls}
        return Verdict(Decision.DENIED, charge, reason)
    limit = policy.rate_limit
    if limit is not None:
        times = state.allowed_times
        recent = len(times) - bisect_right(times, now - float(limit.window_secs))
        if recent >= limit.max_actions:
            reason = {
                "code": ReasonCode.RATE_LIMITED,
                "max_actions": limit.max_actions,
                "window_secs": limit.window_secs,
            }
            return Verdict(Decision.DENIED, charge, reason)
    if charge > state.remaining:
        reason = {
            "code": ReasonCode.INSUFFICIENT_BUDGET,
            "cost": charge,
            "remaining": state.remaining,
        }
        return Verdict(Decision.DENIED, charge, reason)
    if matched is not None:
        # require_approval holds the call (an approval satisfies it); allow
        # allows it even when the tool's requires_approval is true.
        if matched.effect == _REQUIRE_APPROVAL and not approving:
            return Verdict(_PENDING, charge, None, matched.name)
        return Verdict(_ALLOWED, charge, None, matched.name)
    if rule.requires_approval and not approving:
        return Verdict(_PENDING, charge)
    return Verdict(_ALLOWED, charge)


def _first_true(
    state: AgentState, rules: Rules, tool: str, tool_input: Any, now: float
) -> tuple[Rule | None, str | None]:
    """The first rule whose ``when`` is true (None: none is), or the first
    that cannot be evaluated with why (the rules after either are not)."""
    facts = bind(_facts(state, rules, tool, tool_input, now))
    for rule in rules:
        result = evaluate(rule.when, facts)
        if result is True:
            return rule, None
        if result is not False:
            return rule, result
    return None, None


def _facts(
    state: AgentState, rules: Rules, tool: str, tool_input: Any, now: float
) -> dict[str, Any]:
    """What the tool's rules read, built once for all of them: only the
    variables one of them names."""
    reads = rules.reads
    facts: dict[str, Any] = {}
    if reads.tool:
        facts["tool"] = tool
    if reads.input:
        facts["input"] = json_value(tool_input)
    if reads.now:
        facts["now"] = timestamp(now)
    if reads.agent:
        budget, remaining = state.budget, state.remaining
        facts["agent.budget"] = float(budget)
        facts["agent.spent"] = float(budget - remaining)
        facts["agent.remaining"] = float(remaining)
        facts["agent.scar_score"] = state.scar_score
        facts["agent.actions_allowed"] = state.actions_allowed
    if reads.history:
        last_used = state.tag_last_used
        facts["history.tags_used"] = list(last_used)
        facts["history.tag_last_used"] = last_used if last_used else {}
        facts["history.calls"] = state.tool_calls
    return facts
