"""What the service answers, as plain frozen classes (parsed in ``_core``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs


@attrs.frozen
class Decision:
    """The answer to an action request, an approval or a rejection.

    ``decision`` is ``allowed``, ``denied`` or ``pending_approval``. ``cost`` and
    ``remaining`` are set when allowed; ``reason`` (``{code, ...}``) when denied.
    """

    decision: str
    action_id: str
    cost: Decimal | None = None
    remaining: Decimal | None = None
    reason: dict[str, Any] | None = None

    @property
    def allowed(self) -> bool:
        return self.decision == "allowed"

    @property
    def denied(self) -> bool:
        return self.decision == "denied"

    @property
    def pending(self) -> bool:
        return self.decision == "pending_approval"


@attrs.frozen
class Action:
    """One action as the service holds it.

    ``status`` is ``pending_approval``, ``allowed``, ``denied`` or ``completed``;
    ``outcome`` is None until reported. ``reason`` is set when denied;
    ``approved_by`` and ``note`` when an operator approved it.
    """

    action_id: str
    tool: str
    input: Any
    cost: Decimal
    status: str
    outcome: str | None = None
    reason: dict[str, Any] | None = None
    approved_by: str | None = None
    note: str | None = None


@attrs.frozen
class CreatedAgent:
    """A new agent: its status object and its token (``agt_<agent_id>.<mac>``)."""

    agent: dict[str, Any]
    token: str

    @property
    def agent_id(self) -> str:
        return str(self.agent["agent_id"])
