"""The MCP server side: what the client sees, forwarded to the upstream.

``tools/list`` is filtered and annotated from the agent's policy (read again
on every listing, since an operator may change it at any time); ``tools/call``
goes through the guard (``guard.Gate``); resources, prompts and completions
are forwarded unchanged, and so are the upstream's notifications.
"""

from __future__ import annotations

import logging
from decimal import Decimal, InvalidOperation
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.session import ServerSession
from mcp_types import INTERNAL_ERROR

from client_sdk import GuardError, Policy
from guard_mcp.config import Settings
from guard_mcp.errors import UpstreamGone
from guard_mcp.guard import RECEIPT_META_KEY, Gate, rule_note, tool_error
from guard_mcp.upstream import Upstream

log = logging.getLogger("guard_mcp")

Context = ServerRequestContext[Any]


class Proxy:
    """Handlers of the MCP server guard-mcp presents, bound to one upstream."""

    def __init__(self, settings: Settings, gate: Gate) -> None:
        self.settings = settings
        self.gate = gate
        self._upstream: Upstream | None = None
        # Where the upstream's notifications go: the client that spoke last.
        # Over stdio that is the only client.
        self._client: ServerSession | None = None

    @property
    def upstream(self) -> Upstream:
        assert self._upstream is not None, "bind() an upstream first"
        return self._upstream

    def bind(self, upstream: Upstream) -> None:
        self._upstream = upstream

    async def notify(self, notification: types.ServerNotification) -> None:
        """An upstream notification, passed on unchanged to the client."""
        client = self._client
        if client is None:
            return
        try:
            await client.send_notification(notification)
        except Exception as exc:  # a client gone away must not stop the upstream's reader
            log.warning("could not pass on %s: %s", type(notification).__name__, exc)

    def _seen(self, ctx: Context) -> None:
        self._client = ctx.session

    async def _forward(
        self, ctx: Context, request: types.ClientRequest | types.Request[Any, Any], result: Any
    ) -> Any:
        self._seen(ctx)
        try:
            return await self.upstream.request(request, result)
        except UpstreamGone as exc:
            raise MCPError(INTERNAL_ERROR, str(exc)) from None

    # -- tools -------------------------------------------------------------------

    def _upstream_name(self, tool: str) -> str | None:
        prefix = self.settings.tool_prefix
        return tool[len(prefix) :] if tool.startswith(prefix) else None

    async def list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed: types.ListToolsResult = await self._forward(
            ctx, types.ListToolsRequest(params=params), types.ListToolsResult
        )
        try:
            policy = await self.gate.policy()
        except GuardError as exc:
            # Fail closed: without the policy no tool can be described truly.
            raise MCPError(INTERNAL_ERROR, f"guard-mcp cannot list tools: {exc}") from None
        tools = [t for tool in listed.tools if (t := self._shown(tool, policy)) is not None]
        return listed.model_copy(update={"tools": tools})

    def _shown(self, tool: types.Tool, policy: Policy) -> types.Tool | None:
        name = self.settings.tool_prefix + tool.name
        rule = policy.rule_for(name)
        if rule is None:
            if not self.settings.show_denied:
                return None
            note = "[guard: the agent's policy never allows this tool]"
        else:
            note = rule_note(rule, self.settings.cost_argument(name, tool.name))
        description = tool.description or ""
        if note:
            description = f"{description}\n\n{note}" if description else note
        return tool.model_copy(update={"name": name, "description": description or None})

    async def call_tool(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self._seen(ctx)
        tool = params.name
        arguments = dict(params.arguments or {})
        upstream_name = self._upstream_name(tool)
        if upstream_name is None:
            return tool_error(
                f"unknown tool {tool!r}: every tool here is named "
                f"{self.settings.tool_prefix!r} + its name; the call was not run."
            )
        try:
            self.upstream.check()
        except UpstreamGone as exc:
            raise MCPError(INTERNAL_ERROR, str(exc)) from None
        cost: Decimal | None = None
        argument = self.settings.cost_argument(tool, upstream_name)
        if argument is not None:
            cost = _price(arguments.get(argument))
            if cost is None:
                return tool_error(
                    f"{tool} is priced by its {argument!r} argument, which must be a "
                    f"non-negative number, not {arguments.get(argument)!r}; the call was not run."
                )

        async def progress(done: float, total: float | None, message: str) -> None:
            await ctx.session.report_progress(done, total, message)

        async def relay(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)

        async def forward(receipt: tuple[str, ...] | None) -> types.CallToolResult:
            # Unchanged but for the name (the upstream knows its tools
            # unprefixed) and the receipt: only the guard's goes upstream.
            meta = dict(params.meta or {})
            meta.pop(RECEIPT_META_KEY, None)
            if self.settings.receipts and receipt is not None:
                meta[RECEIPT_META_KEY] = list(receipt)
            update: dict[str, Any] = {"name": upstream_name}
            if meta or params.meta is not None:
                update["meta"] = meta or None
            request = types.CallToolRequest(params=params.model_copy(update=update))
            try:
                result: types.CallToolResult = await self.upstream.request(
                    request, types.CallToolResult, progress=relay
                )
            except UpstreamGone as exc:
                raise MCPError(INTERNAL_ERROR, f"{tool} failed: {exc}") from None
            return result

        return await self.gate.call(tool, arguments, cost, forward, progress)

    # -- everything else, unchanged ----------------------------------------------

    async def list_resources(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        request = types.ListResourcesRequest(params=params)
        result: types.ListResourcesResult = await self._forward(
            ctx, request, types.ListResourcesResult
        )
        return result

    async def list_resource_templates(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        request = types.ListResourceTemplatesRequest(params=params)
        result: types.ListResourceTemplatesResult = await self._forward(
            ctx, request, types.ListResourceTemplatesResult
        )
        return result

    async def read_resource(
        self, ctx: Context, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        request = types.ReadResourceRequest(params=params)
        result: types.ReadResourceResult = await self._forward(
            ctx, request, types.ReadResourceResult
        )
        return result

    async def list_prompts(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        request = types.ListPromptsRequest(params=params)
        result: types.ListPromptsResult = await self._forward(ctx, request, types.ListPromptsResult)
        return result

    async def get_prompt(
        self, ctx: Context, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        request = types.GetPromptRequest(params=params)
        result: types.GetPromptResult = await self._forward(ctx, request, types.GetPromptResult)
        return result

    async def complete(
        self, ctx: Context, params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        request = types.CompleteRequest(params=params)
        result: types.CompleteResult = await self._forward(ctx, request, types.CompleteResult)
        return result

    # -- the server ----------------------------------------------------------------

    def server(self) -> tuple[Server[Any], NotificationOptions]:
        """The MCP server, offering what the upstream offers."""
        caps = self.upstream.capabilities
        info = self.upstream.init.server_info
        handlers: dict[str, Any] = {
            "on_list_tools": self.list_tools,
            "on_call_tool": self.call_tool,
        }
        if caps.resources is not None:
            handlers["on_list_resources"] = self.list_resources
            handlers["on_list_resource_templates"] = self.list_resource_templates
            handlers["on_read_resource"] = self.read_resource
        if caps.prompts is not None:
            handlers["on_list_prompts"] = self.list_prompts
            handlers["on_get_prompt"] = self.get_prompt
        if caps.completions is not None:
            handlers["on_completion"] = self.complete
        server: Server[Any] = Server(
            f"guard-mcp ({info.name})",
            version=info.version,
            instructions=self.upstream.init.instructions,
            **handlers,
        )
        options = NotificationOptions(
            prompts_changed=bool(caps.prompts and caps.prompts.list_changed),
            resources_changed=bool(caps.resources and caps.resources.list_changed),
            tools_changed=bool(caps.tools and caps.tools.list_changed),
        )
        return server, options


def _price(value: Any) -> Decimal | None:
    """A call's price from its argument: a finite non-negative number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        price = Decimal(str(value))
    except InvalidOperation:
        return None
    return price if price.is_finite() and price >= 0 else None
