"""What a decision answers with, as values: a request's, an approval's, a
rejection's, and an Idempotency-Key repeat's (the first decision again).

The core says what was decided; how an answer looks on the wire is the HTTP
layer's (``guardd.views`` renders these, inside the actor's turn). Every
other command answers with what it is about (the agent's state, an action's
number, a grant, the policy), listed in each concept module's handler.

Not frozen: one of these is made for every request and read once right
after, and a frozen attrs class costs about three times as much to make.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs


@attrs.define(slots=True)
class Allowed:
    action_id: str
    cost: Decimal
    remaining: Decimal
    # The lines of its action_requested and action_allowed records, as the
    # log has them (no newline): its receipt. None for an allowance written
    # before allowances named their request, which gives no receipt.
    receipt_lines: tuple[bytes, bytes] | None
    grant_id: str | None  # the grant it drew on in place of an approval
    rule: str | None = None  # the policy rule that decided it, if one did


@attrs.define(slots=True)
class Denied:
    action_id: str
    reason: dict[str, Any]  # the reason object, as its record has it
    rule: str | None = None  # the policy rule that decided it, if one did


@attrs.define(slots=True)
class Pending:
    """Held for an operator's approval."""

    action_id: str
    rule: str | None = None  # the policy rule that held it, if one did
    # An approval short of the quorum its tool's rule requires: the
    # approvals so far ({by, by_id, at}) and how many the rule requires.
    approvals: list[dict[str, Any]] | None = None
    approvals_required: int | None = None


Decided = Allowed | Denied | Pending
