"""guard-mcp's errors.

GuardMcpError
├── ConfigError        a command line that cannot work (printed as one line, exit 2)
├── ListenError        --listen cannot serve at its address (printed as one line, exit 1)
└── UpstreamGone       the upstream server closed its connection or exited
"""

from __future__ import annotations


class GuardMcpError(Exception):
    """Base of every error guard-mcp raises on purpose."""


class ConfigError(GuardMcpError, ValueError):
    """The command line or the environment cannot make a working proxy."""


class ListenError(GuardMcpError):
    """The HTTP listener cannot serve (the address is taken, or not this machine's)."""


class UpstreamGone(GuardMcpError):
    """The upstream server is no longer connected; nothing more can reach it."""
