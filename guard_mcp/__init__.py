"""guard-mcp: an MCP proxy that asks guardd before every tool call.

Any MCP client talks to it as if it were the server; it forwards to the real
(upstream) server what the agent's policy allows, holds what needs a person's
approval, and answers a denial as a tool error the model can act on. It uses
only the SDK (``client_sdk``) to reach guardd and the official MCP SDK
(``mcp``) for both sides of the protocol. See docs/mcp.md.
"""
