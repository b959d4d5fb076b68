"""guard-mcp's errors.

GuardMcpError
├── ConfigError        a command line that cannot work (printed as one line, exit 2)
└── UpstreamGone       the upstream server closed its connection or exited
"""

from __future__ import annotations


class GuardMcpError(Exception):
    """Base of every error guard-mcp raises on purpose."""


class ConfigError(GuardMcpError, ValueError):
    """The command line or the environment cannot make a working proxy."""


class UpstreamGone(GuardMcpError):
    """The upstream server is no longer connected; nothing more can reach it."""
