"""What every MCP integration shares: the tools a server listed (and whether one changed), a tool result's text,
the result a blocked call gets, and one guarded MCP session (`McpSession`) that the proxy drives.

Framework-free and SDK-free: it reads the JSON shapes of the Model Context Protocol (``tools/list``'s
``Tool``, ``tools/call``'s ``CallToolResult``) by their documented fields, so AutoGen's workbench, LangChain's
MCP tools and ``guardrail mcp-proxy`` hold calls to the same rules.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from adapters.common import asafe_decision, call_action, log, with_problem
from adapters.steps import build_step, tool_event
from guardrail.core.events import Action, Decision, Finding, Result, Severity, Verdict

if TYPE_CHECKING:
    from guardrail.core.guard import Guard
    from guardrail.core.layer import EpisodeContext

__all__ = ["TOOL_CHANGED", "McpSession", "ToolListing", "blocked_result", "changed_tool_decision", "result_text",
           "visible_message"]

TOOL_CHANGED = "tool_definition_changed"
_MAX_TOOLS = 10_000  # tools remembered per session; a server listing more is not tracked past that
_MAX_SCHEMA_CHARS = 256 * 1024


def _fingerprint(tool: Mapping[str, Any]) -> tuple[str, str]:
    """(digest of the description, digest of the input schema): what the client's model was shown."""
    def digest(value: Any) -> str:
        try:
            text = json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError, RecursionError):
            text = repr(type(value))
        return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()

    schema = tool.get("inputSchema", tool.get("parameters"))
    return digest(tool.get("description")), digest(schema)


class ToolListing:
    """The tools a client was shown in this session, as first listed, and those whose definition changed since.

    A server that changes a tool's description or input schema after the client listed it (a "rug pull": the
    model agreed to one tool and is now calling another) is a finding on every later call to that tool.
    """

    def __init__(self) -> None:
        self.first: dict[str, tuple[str, str]] = {}
        self.schemas: dict[str, dict[str, Any]] = {}
        self.changed: dict[str, str] = {}  # tool name -> what changed ("description", "input schema")

    def observe(self, tools: Iterable[Any]) -> list[str]:
        """Record one listing (``Tool`` dicts or objects with ``name``/``description``/``inputSchema``); returns the
        names that changed in it. Schemas seen first are the ones declared to the gate."""
        newly: list[str] = []
        for tool in tools:
            entry = _as_mapping(tool)
            name = entry.get("name") if entry is not None else None
            if not isinstance(name, str) or not name:
                continue
            fingerprint = _fingerprint(entry)  # type: ignore[arg-type]
            known = self.first.get(name)
            if known is None:
                if len(self.first) >= _MAX_TOOLS:
                    continue
                self.first[name] = fingerprint
                schema = entry.get("inputSchema", entry.get("parameters"))  # type: ignore[union-attr]
                if isinstance(schema, Mapping) and len(json.dumps(schema, default=str)) <= _MAX_SCHEMA_CHARS:
                    self.schemas[name] = dict(schema)
                continue
            if known != fingerprint and name not in self.changed:
                parts = [what for what, a, b in (("description", known[0], fingerprint[0]),
                                                  ("input schema", known[1], fingerprint[1])) if a != b]
                self.changed[name] = " and ".join(parts)
                newly.append(name)
        return newly


def _as_mapping(tool: Any) -> Mapping[str, Any] | None:
    if isinstance(tool, Mapping):
        return tool
    name = getattr(tool, "name", None)
    if not isinstance(name, str):
        return None
    schema = getattr(tool, "inputSchema", None)
    if schema is None and isinstance(getattr(tool, "get", None), type(dict.get)):
        schema = tool.get("parameters")
    return {"name": name, "description": getattr(tool, "description", None), "inputSchema": schema}


def changed_tool_decision(guard: Guard, ctx: EpisodeContext, name: str, what: str) -> Decision:
    """The decision on a call to a tool whose definition changed after the client listed it: recorded on the
    episode, a block in intervene mode, a warning in report mode."""
    finding = Finding(layer="adapter", check=TOOL_CHANGED, severity=Severity.WARNING, blocking=True,
                      args=[name], step=ctx.step_index,
                      message=f"tool {name!r} changed its {what} after the client listed it: the call is not "
                              "the one the model was shown",
                      hint="list the tools again and review the new definition before calling it")
    with ctx.lock:
        ctx.findings.append(finding)
    verdict = Verdict.BLOCK if guard.mode == "intervene" else Verdict.WARN
    return Decision(verdict=verdict, hook="before_action", findings=[finding], episode_id=ctx.episode_id)


def visible_message(decision: Decision) -> str:
    """The decision's message as the other side may read it: the guard's own failures (exception texts) are
    replaced by one line saying the call could not be checked."""
    shown = [f if f.check != "internal_error" else f.model_copy(update={
        "message": "the guard could not check this call", "hint": None}) for f in decision.findings]
    return decision.model_copy(update={"findings": shown}).message() or "blocked by guardrail"


def result_text(result: Mapping[str, Any]) -> tuple[str, bool]:
    """A ``CallToolResult``'s text (its text items joined; other items named) and its ``isError`` flag."""
    parts = []
    content = result.get("content")
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif isinstance(item.get("type"), str):
            parts.append(f"[{item['type']}]")
    if not parts and result.get("structuredContent") is not None:
        try:
            parts.append(json.dumps(result["structuredContent"], default=str)[:20_000])
        except (TypeError, ValueError, RecursionError):
            pass
    return "\n".join(parts), result.get("isError") is True


def blocked_result(message: str) -> dict[str, Any]:
    """The ``CallToolResult`` a blocked call gets: the guard's message (and hint) as text, ``isError`` true."""
    return {"content": [{"type": "text", "text": message}], "isError": True}


class McpSession:
    """One MCP client session as one guard episode: every ``tools/call`` gated before it reaches the server, its
    result checked after, each call one step (the proxy sees no model text), the session's end the episode's.

    Drive it with `listed` (a ``tools/list`` result), `before_call` (None: forward the call; a dict: the
    ``CallToolResult`` to answer with instead), `after_call` and `close`.
    """

    def __init__(self, guard: Guard, *, task: str | None = None, meta: Mapping[str, Any] | None = None,
                 cwd: str | None = None) -> None:
        self.guard = guard
        self.cwd = cwd
        self.listing = ToolListing()
        self.ctx = guard.start_episode(task=task, framework="mcp", meta=dict(meta or {}))
        self.episode_id = self.ctx.episode_id
        self.decisions: list[Decision] = []
        self._calls: dict[str, tuple[Action, float]] = {}

    def listed(self, result: Mapping[str, Any]) -> None:
        """A ``tools/list`` result came back: declare its schemas, note the tools that changed."""
        tools = result.get("tools")
        if not isinstance(tools, list):
            return
        for name in self.listing.observe(tools):
            log.warning("guardrail: MCP tool %r changed its %s during the session", name[:200],
                        self.listing.changed[name])
        fresh = {name: schema for name, schema in self.listing.schemas.items() if name not in self.ctx.tool_schemas}
        if fresh:
            self.ctx.declare_tools(fresh)

    def _keep(self, decision: Decision) -> Decision:
        if decision.verdict is not Verdict.ALLOW:
            self.decisions.append(decision)
        return decision

    async def before_call(self, call_id: str, name: Any, arguments: Any) -> dict[str, Any] | None:
        """Gate one ``tools/call``: None to forward it, or the blocked ``CallToolResult`` to answer with."""
        action, problem = call_action(name, arguments if arguments is not None else {}, call_id, cwd=self.cwd)
        changed = self.listing.changed.get(action.tool or "")
        if changed:
            decision = self._keep(changed_tool_decision(self.guard, self.ctx, action.tool or "", changed))
            if decision.blocked:
                message = visible_message(decision)
                await self._step(action, Result(output="", is_error=True, call_id=call_id, blocked=True,
                                                guard_message=message))
                return blocked_result(message)
        decision = self._keep(with_problem(
            await asafe_decision("before_action", partial(self.guard.abefore_action, self.ctx, action)),
            problem, self.guard, self.ctx))
        if decision.blocked:
            message = visible_message(decision)
            await self._step(action, Result(output="", is_error=True, call_id=call_id, blocked=True,
                                            guard_message=message))
            return blocked_result(message)
        if len(self._calls) < _MAX_TOOLS:
            self._calls[call_id] = (action, time.perf_counter())
        return None

    async def after_call(self, call_id: str, result: Mapping[str, Any] | None, *,
                         error: str | None = None) -> dict[str, Any] | None:
        """The server answered a forwarded call (`result`, or a JSON-RPC `error` text): check it and feed the step.
        Returns a replacement ``CallToolResult`` when a layer refuses the result (intervene mode), else None."""
        pending = self._calls.pop(call_id, None)
        if pending is None:
            return None
        action, started = pending
        output, is_error = result_text(result) if result is not None else (error or "", True)
        outcome = Result(output=output, is_error=is_error, call_id=call_id,
                         latency_s=round(time.perf_counter() - started, 6))
        after = self._keep(await asafe_decision("after_result",
                                                partial(self.guard.aafter_result, self.ctx, action, outcome)))
        replacement = None
        if after.blocked and result is not None:
            warning = visible_message(after)
            outcome = outcome.model_copy(update={"is_error": True, "guard_message": warning})
            content = list(result.get("content") or []) if isinstance(result.get("content"), list) else []
            replacement = {**result, "content": [*content, {"type": "text", "text": warning}], "isError": True}
        await self._step(action, outcome)
        return replacement

    def forget(self, call_id: str) -> None:
        """A forwarded call the client cancelled: no result will come."""
        self._calls.pop(call_id, None)

    async def _step(self, action: Action, result: Result) -> None:
        event = tool_event(result.call_id, action.tool or "", action.args, None if result.blocked else result.output,
                           is_error=result.is_error, latency_s=result.latency_s, guard_message=result.guard_message)
        step = build_step(self.ctx.step_index, content="", events=[event], task=self.ctx.task)
        self._keep(await asafe_decision("on_step", partial(self.guard.aon_step, self.ctx, step)))

    async def close(self) -> Decision:
        """The session ended: close the episode (the end-of-run verifiers run, the run store records it)."""
        self._calls.clear()
        return self._keep(await asafe_decision("on_finish", partial(self.guard.aon_finish, self.ctx)))
