"""Every command an agent actor accepts, by name, for those who build them.

Each command is a frozen attrs class declared in its concept module, beside
its handler and the record kinds it writes (``actions``, ``decisions``,
``scars``, ``termination``, ``agent``, ``grants``); ``behaviour.COMMANDS``
holds their entries. This module only names them all in one place, so the
edge (guardd's routes) and the tests can write ``c.RequestAction(...)``,
and gives ``Command``, the base every one of them derives from, for
annotations. A new command can be imported from its own module; it does not
have to be listed here.
"""

from agents_runtime.core.actions import GetAction, ReportOutcome, RequestAction, WatchAction
from agents_runtime.core.agent import GetLogView, GetPolicy, GetStatus, SetPolicy
from agents_runtime.core.decisions import Approve, Cancel, ListPending, Reject
from agents_runtime.core.entries import Command
from agents_runtime.core.grants import IssueGrant, ListGrants, RevokeGrant
from agents_runtime.core.scars import AddScar
from agents_runtime.core.termination import Terminate
from agents_runtime.core.vocabulary import ADMIN, AGENT

__all__ = [
    "ADMIN",
    "AGENT",
    "AddScar",
    "Approve",
    "Cancel",
    "Command",
    "GetAction",
    "GetLogView",
    "GetPolicy",
    "GetStatus",
    "IssueGrant",
    "ListGrants",
    "ListPending",
    "Reject",
    "ReportOutcome",
    "RequestAction",
    "RevokeGrant",
    "SetPolicy",
    "Terminate",
    "WatchAction",
]
