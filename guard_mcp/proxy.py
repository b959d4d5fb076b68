"""The MCP server side: what the client sees, forwarded to the upstream.

``tools/list`` is filtered and annotated from the agent's policy and status
(read again on every listing, since an operator may change either at any
time: a terminated agent is offered no tool); ``tools/call`` of a name the
upstream listed (``names``) goes through the guard (``guard.Gate``), any
other name is refused here; resources, prompts and completions are forwarded
unchanged, and so are the upstream's notifications.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.session import ServerSession
from mcp_types import INTERNAL_ERROR

from client_sdk import GuardError, Policy
from guard_mcp.config import Settings
from guard_mcp.errors import UpstreamGone
from guard_mcp.guard import RECEIPT_META_KEY, Gate, rule_note, tool_error
from guard_mcp.names import Catalogue
from guard_mcp.upstream import Upstream

log = logging.getLogger("guard_mcp")

Context = ServerRequestContext[Any]

#: Pages of the upstream's tool list read at most, against a cursor without end.
MAX_TOOL_PAGES = 1000


class Proxy:
    """Handlers of the MCP server guard-mcp presents, bound to one upstream."""

    def __init__(self, settings: Settings, gate: Gate) -> None:
        self.settings = settings
        self.gate = gate
        self._upstream: Upstream | None = None
        # Where the upstream's notifications go: the client that spoke last.
        # Over stdio that is the only client.
        self._client: ServerSession | None = None
        # The upstream's tool names, from its last complete list; None: to be
        # read (at the first call, or after it said its list changed).
        self._catalogue: Catalogue | None = None
        self._listings = 0  # complete lists read so far
        self._listing = anyio.Lock()
        self._warned: set[tuple[str, ...]] = set()

    @property
    def upstream(self) -> Upstream:
        assert self._upstream is not None, "bind() an upstream first"
        return self._upstream

    def bind(self, upstream: Upstream) -> None:
        self._upstream = upstream

    async def notify(self, notification: types.ServerNotification) -> None:
        """An upstream notification, passed on unchanged to the client."""
        if isinstance(notification, types.ToolListChangedNotification):
            self._catalogue = None
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

    def _learn(self, tools: Sequence[types.Tool]) -> Catalogue:
        """Take ``tools`` as the upstream's complete list."""
        catalogue = Catalogue.of(tool.name for tool in tools)
        for names in catalogue.ambiguous:
            if names not in self._warned:
                self._warned.add(names)
                log.warning(
                    "the upstream lists tools whose names differ only in case or Unicode "
                    "form: %s; none of them is offered or callable",
                    ", ".join(repr(self.settings.tool_prefix + n) for n in names),
                )
        self._catalogue = catalogue
        self._listings += 1
        return catalogue

    async def _relist(self) -> Catalogue:
        """Read the upstream's complete tool list again (every page)."""
        seen = self._listings
        async with self._listing:
            if self._listings != seen and self._catalogue is not None:
                return self._catalogue  # read by another caller while this one waited
            if self.upstream.capabilities.tools is None:
                return self._learn(())
            tools: list[types.Tool] = []
            cursor: str | None = None
            for _ in range(MAX_TOOL_PAGES):
                params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
                page: types.ListToolsResult = await self.upstream.request(
                    types.ListToolsRequest(params=params), types.ListToolsResult
                )
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    return self._learn(tools)
            raise MCPError(
                INTERNAL_ERROR, f"the upstream's tool list has more than {MAX_TOOL_PAGES} pages"
            )

    async def list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._seen(ctx)
        try:
            status = await self.gate.client.status()
            policy = await self.gate.policy()
        except GuardError as exc:
            # Fail closed: without the policy no tool can be described truly.
            raise MCPError(INTERNAL_ERROR, f"guard-mcp cannot list tools: {exc}") from None
        if not status.alive:
            # Every call would be denied, for good: nothing to offer.
            return types.ListToolsResult(tools=[])
        listed: types.ListToolsResult = await self._forward(
            ctx, types.ListToolsRequest(params=params), types.ListToolsResult
        )
        catalogue = self._catalogue
        if (params is None or params.cursor is None) and listed.next_cursor is None:
            catalogue = self._learn(listed.tools)  # one page: the complete list
        elif catalogue is None or not all(catalogue.lists(t.name) for t in listed.tools):
            try:
                catalogue = await self._relist()
            except UpstreamGone as exc:
                raise MCPError(INTERNAL_ERROR, str(exc)) from None
        tools = [
            shown
            for tool in listed.tools
            if tool.name in catalogue.callable and (shown := self._shown(tool, policy)) is not None
        ]
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
            refusal = await self._refusal(upstream_name)
        except UpstreamGone as exc:
            raise MCPError(INTERNAL_ERROR, str(exc)) from None
        except MCPError as exc:  # the upstream's own error answer to tools/list
            return tool_error(
                f"{tool} cannot be checked against the upstream server's tool list "
                f"({exc}); the call was not run."
            )
        if refusal is not None:
            # guardd is not asked: the name is no tool the agent could run.
            return tool_error(f"{refusal}; the call was not run.")
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

    async def _refusal(self, name: str) -> str | None:
        """Why ``name`` (unprefixed) may not be called, from the upstream's list,
        read again when the name is not in the list known."""
        catalogue = self._catalogue
        if catalogue is None or catalogue.refusal(name) is not None:
            catalogue = await self._relist()
        return catalogue.refusal(name, self.settings.tool_prefix)

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
