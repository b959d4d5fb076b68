"""The words request bodies and replies are made of: value types with rules
beyond their JSON type, and how a model's field says more about itself.

A model (a request body in ``guardd.bodies``, a reply in ``guardd.replies``)
is a plain attrs class whose field types are these, the core's StrEnums,
``Literal`` for a fixed word, other models, or plain ``str``, ``int``,
``bool``, ``Any``. ``guardd.openapi`` gives each type its JSON schema once;
``guardd.bodies`` gives the request types their parsers. One rule reads a
field: ``X | None`` may be null; a field with a default may be left out.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, NewType

import attrs

# -- in requests and replies ----------------------------------------------------

Name = NewType("Name", str)  # who: approver, operator (1-128 characters)
Operator = NewType("Operator", str)  # a Name other than "system"
Text = NewType("Text", str)  # reasons and notes (1-4096 characters)
Tool = NewType("Tool", str)
AgentId = NewType("AgentId", str)
PolicyName = NewType("PolicyName", str)  # a named (fleet) policy: as an agent ID
Count = NewType("Count", int)  # a whole number from 1
Quorum = NewType("Quorum", int)  # approvals a held call needs: 1 to 10
Seconds = NewType("Seconds", Decimal)  # a positive duration
Timestamp = NewType("Timestamp", str)  # ISO 8601 with an offset, as a record ts (UTC)
InputMatch = NewType("InputMatch", dict)  # type: ignore[type-arg]

# -- in replies -----------------------------------------------------------------

Whole = NewType("Whole", int)  # 0 and up: a seq, a tally
HeadSeq = NewType("HeadSeq", int)  # a head's seq: -1 for an empty log
Hex64 = NewType("Hex64", str)  # a SHA-256 hash or an Ed25519 public key, hex
Signature = NewType("Signature", str)  # an Ed25519 signature, hex
ActionId = NewType("ActionId", str)  # act-<n>
GrantId = NewType("GrantId", str)  # grt-<n>
Amount = NewType("Amount", Decimal)  # money the service writes: 0 and up
Balance = NewType("Balance", Decimal)  # money that may be negative (remaining)
Positive = NewType("Positive", Decimal)  # above 0, within the limits of money
Receipt = NewType("Receipt", list)  # type: ignore[type-arg]  # two signed log lines
AgentToken = NewType("AgentToken", str)  # agt_<agent_id>.<mac>
ErrorCode = NewType("ErrorCode", str)  # one of guardd.errors.STATUS
CallId = NewType("CallId", str)  # a tool call's ID, used as its Idempotency-Key

# What guardd.openapi reads off a field beside its type: its description.
DESCRIPTION = "description"


def doc(description: str) -> Any:
    """A field that must be there, with its description."""
    return attrs.field(metadata={DESCRIPTION: description})


def optional(description: str | None = None) -> Any:
    """A field that may be left out (``None`` when it is), with its description."""
    metadata = {} if description is None else {DESCRIPTION: description}
    return attrs.field(default=None, metadata=metadata)
