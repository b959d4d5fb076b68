"""A real MCP server for guard-mcp's tests, written with the SDK's server API.

Every tool call it receives is appended as one JSON line (tool, arguments,
and for ``echo`` the guard's receipt when its ``_meta`` carries one) to
the file named by ``UPSTREAM_CALLS``, so a test counts what reached it; its PID
goes to ``UPSTREAM_PID`` so a test can check that no process is left, and the
names of its ``GUARD_*`` variables to ``upstream-env.json`` beside it. It serves
stdio, or streamable HTTP on ``127.0.0.1:<port>`` with ``--http PORT``.

``UPSTREAM_NAMES=loose`` makes it a server that finds its tools loosely, as
some do: a called name is taken in NFKC and lower case, so ``WRITE_FILE`` and
the fullwidth ``ｗｒｉｔｅ_ｆｉｌｅ`` run ``write_file`` (listed only then).
``UPSTREAM_NAMES=twins`` does the same and lists ``Write_File`` too.
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from pathlib import Path

import anyio
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


@server.tool(description="Never answers: it waits until the call is cancelled.")
async def stall() -> str:
    _count("stall", {})
    await anyio.sleep_forever()
    return "never"


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


def write_file(path: str, text: str) -> str:
    _count("write_file", {"path": path, "text": text})
    return f"wrote {len(text)} characters to {path}"


def write_file_twin(path: str, text: str) -> str:
    _count("Write_File", {"path": path, "text": text})
    return f"wrote {len(text)} characters to {path}"


def _find_tools_loosely() -> None:
    tools = server._tool_manager
    exact = tools.get_tool

    def loose(name: str):  # type: ignore[no-untyped-def]
        return exact(unicodedata.normalize("NFKC", name).lower())

    tools.get_tool = loose  # type: ignore[method-assign]


NAMES = os.environ.get("UPSTREAM_NAMES")
if NAMES in ("loose", "twins"):
    server.add_tool(write_file, description="Write a file.")
    _find_tools_loosely()
if NAMES == "twins":
    server.add_tool(write_file_twin, name="Write_File", description="Write a file too.")


if __name__ == "__main__":
    pid_file = Path(os.environ["UPSTREAM_PID"])
    guard_variables = sorted(k for k in os.environ if k.startswith("GUARD_"))
    pid_file.with_name("upstream-env.json").write_text(json.dumps(guard_variables))
    pid_file.write_text(str(os.getpid()))
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run()
