"""A guarded AutoGen workbench around any other workbench (``McpWorkbench`` above all): what
``AutoGenGuard.workbench(workbench)`` returns.

    async with McpWorkbench(StdioServerParams(command="mcp-server-git", args=["-r", repo])) as server:
        agent = AssistantAgent("a", model_client=guarded.model_client(client), workbench=guarded.workbench(server))

Every ``call_tool`` goes through the same path as a static workbench's (`adapters.autogen.GuardedWorkbench`):
gated before it reaches the server, a block returned as ``ToolResult(is_error=True)`` with the guard's message
and hint, the result checked after, the step fed once the model output's calls are all back. The schemas the
server declares in ``list_tools()`` are declared to the episode (the gate's ``tool_args_valid``), and a tool
whose description or schema changes after the agent listed it is a finding on every later call to it
(a block in intervene mode).
"""

from __future__ import annotations

from adapters.extras import require

require("autogen", __name__)

from collections.abc import Mapping
from typing import Any

from autogen_core import CancellationToken
from autogen_core.tools import StaticWorkbench, TextResultContent, ToolResult, ToolSchema, Workbench

from adapters.autogen import AutoGenGuard, GuardedWorkbench, ObservedWorkbench
from adapters.mcp_guard import ToolListing, changed_tool_decision
from guardrail.core.events import Result
from guardrail.core.guard import Guard

__all__ = ["GuardedMcpWorkbench"]


class _Forwarding(StaticWorkbench):
    """Sits under `GuardedWorkbench` in the method order: the call it lets through goes to the wrapped workbench."""

    inner: Workbench

    def __init__(self, tools: list[Any], tool_overrides: Any = None) -> None:
        super().__init__([], tool_overrides=None)

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None,
                        cancellation_token: CancellationToken | None = None, call_id: str | None = None) -> ToolResult:
        return await self.inner.call_tool(name, arguments, cancellation_token, call_id)


class GuardedMcpWorkbench(GuardedWorkbench, _Forwarding):
    """Any `Workbench` (an ``McpWorkbench``...) whose every call goes through the guard; delegates the rest."""

    def __init__(self, inner: Workbench, guarded: AutoGenGuard | Guard) -> None:
        self.inner = inner
        super().__init__([], guarded)
        self.listing = ToolListing()

    def __getattr__(self, name: str) -> Any:  # list_prompts, read_resource...: the wrapped workbench's own
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def list_tools(self) -> list[ToolSchema]:
        tools = await self.inner.list_tools()
        self.listing.observe(tools)
        self.schemas.update({k: v for k, v in self.listing.schemas.items() if k not in self.schemas})
        return tools

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None,
                        cancellation_token: CancellationToken | None = None, call_id: str | None = None) -> ToolResult:
        if not self.listing.first:  # a call before any listing: learn the declared schemas first
            await self.list_tools()
        changed = self.listing.changed.get(name)
        if changed:
            guarded = self.guarded
            decision = guarded._record(changed_tool_decision(guarded.guard, guarded.context, name, changed))
            if decision.blocked:
                message = decision.message()
                await guarded.on_tool_result(call_id, name, Result(output="", is_error=True, call_id=call_id,
                                                                    blocked=True, guard_message=message))
                return ToolResult(name=name, result=[TextResultContent(content=message)], is_error=True)
        return await super().call_tool(name, arguments, cancellation_token, call_id)

    # start, stop, reset and the state go to the wrapped workbench, as an observed one's do
    start = ObservedWorkbench.start
    stop = ObservedWorkbench.stop
    reset = ObservedWorkbench.reset
    save_state = ObservedWorkbench.save_state
    load_state = ObservedWorkbench.load_state
