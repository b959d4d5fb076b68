"""What the generated value classes (``_models.py``) have beside their
attributes: the few properties and methods written by hand. Each class here
is the base of the value class its name begins with."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client_sdk._models import AgentStatus, ToolRule


class CreatedAgentMembers:
    __slots__ = ()
    agent: AgentStatus

    @property
    def agent_id(self) -> str:
        return self.agent.agent_id


class PolicyMembers:
    __slots__ = ()
    tools: dict[str, ToolRule]
    default: ToolRule | None

    def rule_for(self, tool: str) -> ToolRule | None:
        """The rule ``tool`` is decided by, or None when it can never be allowed."""
        return self.tools.get(tool, self.default)
