"""A real MCP server for guard-mcp's tests, written with the SDK's server API.

Every tool call it receives is appended as one JSON line (tool, arguments,
and for ``echo`` the guard's receipt when its ``_meta`` carries one) to
the file named by ``UPSTREAM_CALLS``, so a test counts what reached it; its PID
goes to ``UPSTREAM_PID`` so a test can check that no process is left. It serves
stdio, or streamable HTTP on ``127.0.0.1:<port>`` with ``--http PORT``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("counting-upstream", instructions="A server that counts its calls.")


RECEIPT_META_KEY = "agent-action-guard/receipt"


def _count(tool: str, arguments: dict[str, object], receipt: object = None) -> None:
    call = {"tool": tool, "arguments": arguments}
    if receipt is not None:
        call["receipt"] = receipt
    with Path(os.environ["UPSTREAM_CALLS"]).open("a") as calls:
        calls.write(json.dumps(call) + "\n")


@server.tool(description="Say the text back.")
def echo(text: str, ctx: Context) -> str:
    meta = ctx.request_context.meta or {}
    _count("echo", {"text": text}, meta.get(RECEIPT_META_KEY))
    return f"echo: {text}"


@server.tool(description="Always fails.")
def fail(why: str) -> str:
    _count("fail", {"why": why})
    raise ToolError(f"failed on purpose: {why}")


@server.tool(description="Pay someone.")
def pay(to: str, amount: float) -> str:
    _count("pay", {"to": to, "amount": amount})
    return f"paid {amount:g} to {to}"


@server.tool(description="Exits the server in the middle of the call.")
def crash() -> str:
    _count("crash", {})
    os._exit(3)


@server.tool()
def never_allowed() -> str:
    _count("never_allowed", {})
    return "ran"


@server.resource("data://greeting", description="A greeting.")
def greeting() -> str:
    return "hello from upstream"


@server.prompt(description="Ask for a review.")
def review(topic: str) -> str:
    return f"Please review {topic}."


if __name__ == "__main__":
    Path(os.environ["UPSTREAM_PID"]).write_text(str(os.getpid()))
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run()
