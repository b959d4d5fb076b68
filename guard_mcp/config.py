"""The command line: what to connect upstream, where to serve, how to guard.

``guard-mcp [options] -- COMMAND ARGS...`` runs an upstream server over stdio;
``--upstream-url`` reaches one over streamable HTTP instead. The guard's
address and the agent token are not options: the SDK finds them (``GUARD_URL``,
``GUARD_AGENT_TOKEN``, environment or ``.env``).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

import attrs

from guard_mcp.errors import ConfigError

DEFAULT_APPROVAL_TIMEOUT = 300.0
MCP_PATH = "/mcp"


@attrs.frozen
class Settings:
    command: tuple[str, ...]  # the upstream server's command line (stdio), or ()
    upstream_url: str | None  # the upstream's streamable HTTP endpoint, or None
    listen: tuple[str, int] | None  # serve streamable HTTP here; None serves stdio
    tool_prefix: str = ""
    cost_from: Mapping[str, str] = attrs.field(factory=dict)  # tool name -> argument
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT
    show_denied: bool = False
    receipts: bool = False  # put each allowed call's receipt in its _meta

    @property
    def upstream_label(self) -> str:
        """The upstream as the person reading an error knows it."""
        if self.upstream_url is not None:
            return self.upstream_url
        return " ".join(self.command)

    def cost_argument(self, tool: str, upstream_tool: str) -> str | None:
        """The argument that prices ``tool``, by its prefixed or its upstream name."""
        return self.cost_from.get(tool, self.cost_from.get(upstream_tool))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guard-mcp",
        usage="guard-mcp [options] -- COMMAND [ARGS...] | guard-mcp [options] --upstream-url URL",
        description=(
            "An MCP proxy that asks guardd before every tool call. The guard's address "
            "and the agent token come from GUARD_URL and GUARD_AGENT_TOKEN (environment "
            "or .env)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--upstream-url",
        metavar="URL",
        help="the upstream server's streamable HTTP endpoint (instead of a command after --)",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"serve streamable HTTP at http://HOST:PORT{MCP_PATH} instead of stdio",
    )
    parser.add_argument(
        "--tool-prefix",
        default="",
        metavar="PREFIX",
        help="name each tool PREFIX<tool> for the client and the policy (e.g. 'fs.')",
    )
    parser.add_argument(
        "--cost-from",
        action="append",
        default=[],
        metavar="TOOL=ARGUMENT",
        help="charge TOOL's calls the number in its ARGUMENT (repeatable)",
    )
    parser.add_argument(
        "--approval-timeout",
        type=float,
        default=DEFAULT_APPROVAL_TIMEOUT,
        metavar="SECONDS",
        help="how long a call waits for a person's approval",
    )
    parser.add_argument(
        "--show-denied",
        action="store_true",
        help="list the tools the policy can never allow too",
    )
    parser.add_argument(
        "--receipts",
        action="store_true",
        help="put the guard's receipt of each allowed call in the forwarded call's _meta "
        "under 'agent-action-guard/receipt', for the upstream to check",
    )
    return parser


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--listen must be HOST:PORT with a port in 1..65535, not {value!r}")
    return host.strip("[]"), int(port)


def _cost_from(values: Sequence[str]) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for value in values:
        tool, sep, argument = value.partition("=")
        if not sep or not tool or not argument:
            raise ConfigError(f"--cost-from must be TOOL=ARGUMENT, not {value!r}")
        mapping[tool] = argument
    return mapping


def parse(argv: Sequence[str]) -> Settings:
    """The settings of ``argv``; raises ConfigError for anything that cannot work.

    ``--help`` prints and exits (SystemExit) as argparse does.
    """
    argv = list(argv)
    if "--" in argv:
        split = argv.index("--")
        options, command = argv[:split], tuple(argv[split + 1 :])
    else:
        options, command = argv, ()
    parser = _parser()
    args, unknown = parser.parse_known_args(options)
    if unknown:
        raise ConfigError(
            f"unknown arguments {' '.join(unknown)!r}; the upstream command goes after --"
        )
    if bool(command) == bool(args.upstream_url):
        raise ConfigError(
            "give the upstream server either as a command after -- or as --upstream-url URL"
        )
    if args.upstream_url and not args.upstream_url.startswith(("http://", "https://")):
        raise ConfigError(f"--upstream-url must be an http(s) URL, not {args.upstream_url!r}")
    if not args.approval_timeout > 0:
        raise ConfigError(
            f"--approval-timeout must be a positive number of seconds, not {args.approval_timeout}"
        )
    return Settings(
        command=command,
        upstream_url=args.upstream_url,
        listen=_listen(args.listen) if args.listen else None,
        tool_prefix=args.tool_prefix,
        cost_from=_cost_from(args.cost_from),
        approval_timeout=args.approval_timeout,
        show_denied=args.show_denied,
        receipts=args.receipts,
    )
