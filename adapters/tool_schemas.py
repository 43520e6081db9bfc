"""The JSON schema of each tool an agent declares, read from whatever form the tool comes in.

LangChain tools (``@tool``, ``StructuredTool``, any ``BaseTool``), AutoGen tools (``FunctionTool``,
any ``BaseTool``, a workbench's ``ToolSchema``), MCP tools (``mcp.types.Tool``: ``inputSchema``),
OpenAI / Anthropic tool dicts, bare JSON schemas and plain Python callables all become
``{name: schema of the arguments}``: what the gate's ``tool_args_valid`` holds every call to.
Frameworks are recognised by the attributes they document, so this module imports none of them
unless a LangChain tool is actually given.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SchemaCache", "ToolSchemaError", "schema_of", "tool_schemas"]

_log = logging.getLogger("guardrail.adapters")


class ToolSchemaError(TypeError):
    """A tool whose argument schema cannot be read (the message says what was given)."""


def _langchain_schema(tool: Any) -> dict[str, Any]:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return dict(convert_to_openai_tool(tool)["function"].get("parameters") or {"type": "object", "properties": {}})


def _from_mapping(name: str | None, tool: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    if isinstance(tool.get("function"), Mapping):  # OpenAI: {"type": "function", "function": {...}}
        tool = tool["function"]
    for key in ("parameters", "input_schema", "inputSchema"):  # OpenAI, Anthropic, MCP as a dict
        if isinstance(tool.get(key), Mapping):
            found = tool.get("name")
            return (found if isinstance(found, str) else name), dict(tool[key])
    return name, dict(tool)  # a bare JSON schema of the arguments


def schema_of(tool: Any, name: str | None = None) -> tuple[str, dict[str, Any]]:
    """(tool name, JSON schema of its arguments) for one tool in any supported form; `name` overrides."""
    if isinstance(tool, Mapping):
        found, schema = _from_mapping(name, tool)
        if not found:
            raise ToolSchemaError("a tool given as a dict needs a name (use a mapping name -> schema)")
        return name or found, schema
    input_schema = getattr(tool, "inputSchema", None)  # an MCP Tool
    if isinstance(input_schema, Mapping) and isinstance(getattr(tool, "name", None), str):
        return name or str(tool.name), dict(input_schema)
    autogen_schema = getattr(tool, "schema", None)  # an AutoGen BaseTool: schema is a ToolSchema dict
    if isinstance(autogen_schema, Mapping) and isinstance(autogen_schema.get("name"), str) \
            and not hasattr(tool, "args_schema"):
        parameters = autogen_schema.get("parameters")
        return name or autogen_schema["name"], dict(parameters) if isinstance(parameters, Mapping) else \
            {"type": "object", "properties": {}}
    if hasattr(tool, "args_schema") and callable(getattr(tool, "invoke", None)):  # a LangChain BaseTool
        return name or str(tool.name), _langchain_schema(tool)
    if callable(tool):
        from guardrail.gate.extract_tool import tool_schema

        return name or str(getattr(tool, "__name__", "tool")), tool_schema(tool)
    raise ToolSchemaError(f"cannot read a tool schema from a {type(tool).__name__}: give a LangChain or AutoGen "
                          "tool, an MCP Tool, an OpenAI-style tool dict, a JSON schema or a callable")


def tool_schemas(tools: Mapping[str, Any] | Iterable[Any] | None) -> dict[str, dict[str, Any]]:
    """``{name: schema}`` for `tools`: a mapping name -> tool (any form) or a list of tools (any form)."""
    if tools is None:
        return {}
    if isinstance(tools, Mapping):
        return dict(schema_of(tool, str(name)) for name, tool in tools.items())
    return dict(schema_of(tool) for tool in tools)


class SchemaCache:
    """Schemas read once per tool object (reading a LangChain tool's schema costs far more than a gate check)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, str, dict[str, Any] | None]] = {}

    def get(self, tool: Any) -> tuple[str, dict[str, Any]] | None:
        """(name, schema) of `tool`, or None when its schema cannot be read (logged once per tool)."""
        key = id(tool)
        cached = self._by_id.get(key)
        if cached is None or cached[0] is not tool:
            try:
                name, schema = schema_of(tool)
                cached = (tool, name, schema)
            except Exception as exc:  # noqa: BLE001 - an unreadable tool schema leaves that tool unchecked
                _log.warning("guardrail: cannot read the schema of tool %r: %s: %s", getattr(tool, "name", tool),
                             type(exc).__name__, str(exc)[:200])
                cached = (tool, str(getattr(tool, "name", "")), None)
            if len(self._by_id) > 4096:
                self._by_id.clear()
            self._by_id[key] = cached
        return None if cached[2] is None else (cached[1], cached[2])
