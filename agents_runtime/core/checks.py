"""The decision core: pure, no I/O, no clock (``now`` is passed in).

Checks run in this order; the first failure wins:
terminated, tool_not_allowed, tool_call_limit, rate_limited, insufficient_budget.
"""

from __future__ import annotations

from bisect import bisect_right
from decimal import Decimal
from typing import Any

import attrs

from agents_runtime.core.policy import charge_for
from agents_runtime.core.state import AgentState
from agents_runtime.core.vocabulary import Decision, ReasonCode, Severity

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


@attrs.define(slots=True)
class Verdict:
    """A value, never changed once made; not frozen for the reason given at
    ``record.Head``: one is made for every request."""

    decision: Decision
    charge: Decimal
    reason: dict[str, Any] | None = None


def decide(
    state: AgentState,
    tool: str,
    requested_cost: Decimal | None,
    now: float,
    *,
    approving: bool = False,
) -> Verdict:
    """Decide a request (or, with ``approving``, an approval of a held one)."""
    policy = state.policy
    rule = policy.rule_for(tool) if policy is not None else None
    charge = charge_for(rule, requested_cost)
    if not state.alive:
        reason: dict[str, Any] = {"code": ReasonCode.TERMINATED, "reason": state.termination_reason}
        return Verdict(Decision.DENIED, charge, reason)
    if rule is None or policy is None:
        return Verdict(Decision.DENIED, charge, {"code": ReasonCode.TOOL_NOT_ALLOWED, "tool": tool})
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
    if rule.requires_approval and not approving:
        return Verdict(_PENDING, charge)
    return Verdict(_ALLOWED, charge)
