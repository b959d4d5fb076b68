"""The command line: what to connect upstream, where to serve, how to guard.

``guard-mcp [options] -- COMMAND ARGS...`` runs an upstream server over stdio,
and so does ``--upstream-command "COMMAND ARGS..."`` (one string, split as a
POSIX shell would, for launchers that keep the first ``--`` for themselves);
``--upstream-url`` reaches one over streamable HTTP instead. The guard's
address and the agent token are not options: the SDK finds them (``GUARD_URL``,
``GUARD_AGENT_TOKEN``, environment or ``.env``). Neither is the listener's
token (``GUARD_MCP_LISTEN_TOKEN``, looked up the same way), which an option
would show to everyone who can list the machine's processes.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
from dotenv import dotenv_values

from guard_mcp.errors import ConfigError

DEFAULT_APPROVAL_TIMEOUT = 300.0
MCP_PATH = "/mcp"
LISTEN_TOKEN_VARIABLE = "GUARD_MCP_LISTEN_TOKEN"  # noqa: S105 - a variable name, no secret
#: The shortest listener token accepted: 32 characters of ``token_urlsafe`` are 192 bits.
MIN_LISTEN_TOKEN = 32


@attrs.frozen
class Settings:
    command: tuple[str, ...]  # the upstream server's command line (stdio), or ()
    upstream_url: str | None  # the upstream's streamable HTTP endpoint, or None
    listen: tuple[str, int] | None  # serve streamable HTTP here; None serves stdio
    listen_token: str | None = attrs.field(default=None, repr=False)  # with listen only
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
        usage=(
            "guard-mcp [options] -- COMMAND [ARGS...] | "
            "guard-mcp [options] --upstream-command 'COMMAND [ARGS...]' | "
            "guard-mcp [options] --upstream-url URL"
        ),
        description=(
            "An MCP proxy that asks guardd before every tool call. The guard's address "
            "and the agent token come from GUARD_URL and GUARD_AGENT_TOKEN (environment "
            f"or .env); --listen's bearer token from {LISTEN_TOKEN_VARIABLE}."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--upstream-command",
        metavar="COMMAND",
        help="the upstream server's command line as one string, split as a POSIX shell "
        "would (instead of a command after --)",
    )
    parser.add_argument(
        "--upstream-url",
        metavar="URL",
        help="the upstream server's streamable HTTP endpoint (instead of a command after --)",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"serve streamable HTTP at http://HOST:PORT{MCP_PATH} instead of stdio; every "
        f"request needs 'Authorization: Bearer' with the token of {LISTEN_TOKEN_VARIABLE}",
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


def _upstream_command(value: str) -> tuple[str, ...]:
    try:
        command = tuple(shlex.split(value))
    except ValueError as exc:  # an unclosed quote, a lone escape
        raise ConfigError(f"--upstream-command cannot be split: {exc}: {value!r}") from None
    if not command:
        raise ConfigError("--upstream-command is empty")
    return command


def listen_token(environ: Mapping[str, str], cwd: Path) -> str:
    """The listener's bearer token: the environment first, then ``./.env``."""
    token = environ.get(LISTEN_TOKEN_VARIABLE, "").strip()
    dotenv = cwd / ".env"
    if not token and dotenv.is_file():
        token = (dotenv_values(dotenv).get(LISTEN_TOKEN_VARIABLE) or "").strip()
    if not token:
        raise ConfigError(
            f"--listen needs a bearer token in {LISTEN_TOKEN_VARIABLE} (environment or "
            f"{dotenv}), which every HTTP client must send; make one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if len(token) < MIN_LISTEN_TOKEN:
        raise ConfigError(
            f"{LISTEN_TOKEN_VARIABLE} is {len(token)} characters; it must be at least "
            f"{MIN_LISTEN_TOKEN}: make one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


def parse(
    argv: Sequence[str], environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Settings:
    """The settings of ``argv``; raises ConfigError for anything that cannot work.

    ``environ`` and ``cwd`` (default: this process's) are where ``--listen``'s
    token is looked up. ``--help`` prints and exits (SystemExit) as argparse does.
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
            f"unknown arguments {' '.join(unknown)!r}; the upstream command goes after -- "
            "or in --upstream-command"
        )
    if args.upstream_command is not None:
        if command:
            raise ConfigError(
                "give the upstream command once: after -- or as --upstream-command, not both"
            )
        command = _upstream_command(args.upstream_command)
    if bool(command) == bool(args.upstream_url):
        raise ConfigError(
            "give the upstream server either as a command (after -- or as "
            "--upstream-command) or as --upstream-url URL"
        )
    if args.upstream_url and not args.upstream_url.startswith(("http://", "https://")):
        raise ConfigError(f"--upstream-url must be an http(s) URL, not {args.upstream_url!r}")
    if not args.approval_timeout > 0:
        raise ConfigError(
            f"--approval-timeout must be a positive number of seconds, not {args.approval_timeout}"
        )
    listen = _listen(args.listen) if args.listen else None
    token = None
    if listen is not None:
        token = listen_token(
            os.environ if environ is None else environ, Path.cwd() if cwd is None else cwd
        )
    return Settings(
        command=command,
        upstream_url=args.upstream_url,
        listen=listen,
        listen_token=token,
        tool_prefix=args.tool_prefix,
        cost_from=_cost_from(args.cost_from),
        approval_timeout=args.approval_timeout,
        show_denied=args.show_denied,
        receipts=args.receipts,
    )
