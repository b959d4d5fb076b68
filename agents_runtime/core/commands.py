"""The commands guardd's routes build, by name (``c.RequestAction(...)``),
and ``Command``, the base every command derives from, for annotations.

Each command is a frozen attrs class declared in its concept module, beside
its handler and the record kinds it writes (``actions``, ``decisions``,
``scars``, ``termination``, ``agent``, ``grants``); ``behaviour.COMMANDS``
holds their entries and refuses to build without one for every command.
This module only re-exports them: a new command is imported from its own
module, and need not be added here.
"""

from agents_runtime.core.actions import (
    FindAction,
    GetAction,
    ReportOutcome,
    RequestAction,
    WatchAction,
)
from agents_runtime.core.agent import GetLogView, GetPolicy, GetStatus, SetPolicy
from agents_runtime.core.decisions import ApprovalSubject, Approve, Cancel, ListPending, Reject
from agents_runtime.core.entries import Command
from agents_runtime.core.grants import IssueGrant, ListGrants, RevokeGrant
from agents_runtime.core.scars import AddScar
from agents_runtime.core.shadow import ClearShadow, GetShadow, SetShadow
from agents_runtime.core.termination import Terminate
from agents_runtime.core.vocabulary import ADMIN, AGENT

__all__ = [
    "ADMIN",
    "AGENT",
    "AddScar",
    "ApprovalSubject",
    "Approve",
    "Cancel",
    "ClearShadow",
    "Command",
    "FindAction",
    "GetAction",
    "GetLogView",
    "GetPolicy",
    "GetShadow",
    "GetStatus",
    "IssueGrant",
    "ListGrants",
    "ListPending",
    "Reject",
    "ReportOutcome",
    "RequestAction",
    "RevokeGrant",
    "SetPolicy",
    "SetShadow",
    "Terminate",
    "WatchAction",
]
