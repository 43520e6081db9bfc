"""Predicates assumed by structured tool calls: editor tools, OpenHands actions, and any tool with a schema."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any

from guardrail.gate.extract_mcp import FILESYSTEM_TOOLS, GIT_TOOLS, extract_mcp
from guardrail.gate.extract_python import extract_python
from guardrail.gate.extract_shell import extract_shell
from guardrail.gate.predicates import Predicate
from guardrail.gate.scope import Scope
from guardrail.gate.tool_args import SchemaError, args_problems

__all__ = ["EDITOR_TOOLS", "ToolSchema", "checks_arguments_only", "extract_tool", "schema_problems", "tool_schema"]

EDITOR_TOOLS = {"str_replace_editor", "str_replace_based_edit_tool", "FileEditAction", "edit_file", "file_editor"}
SHELL_TOOLS = {"bash", "execute_bash", "CmdRunAction", "run", "shell", "terminal", "run_shell_command"}
PYTHON_TOOLS = {"execute_ipython_cell", "IPythonRunCellAction", "python", "python_repl", "run_python"}
READ_TOOLS = {"FileReadAction", "read_file", "view_file"}
# Every name `extract_tool` reads more than the arguments of: the workspace is probed for these calls.
_PROBED_TOOLS = frozenset(EDITOR_TOOLS | SHELL_TOOLS | PYTHON_TOOLS | READ_TOOLS | FILESYSTEM_TOOLS | GIT_TOOLS)
_EDITOR_COMMANDS = {"view", "create", "str_replace", "insert", "undo_edit"}

ToolSchema = dict[str, Any]  # a JSON schema of the arguments object ("parameters" of an OpenAI tool)


def tool_schema(tool: Mapping[str, Any] | Callable[..., Any]) -> ToolSchema:
    """A JSON schema for a tool given as a schema, an OpenAI-style tool dict, or a Python callable."""
    if isinstance(tool, Mapping):
        if "function" in tool and isinstance(tool["function"], Mapping):
            tool = tool["function"]
        if "parameters" in tool and isinstance(tool["parameters"], Mapping):
            return dict(tool["parameters"])
        if "input_schema" in tool and isinstance(tool["input_schema"], Mapping):
            return dict(tool["input_schema"])
        return dict(tool)
    signature = inspect.signature(tool)
    properties: dict[str, Any] = {}
    required: list[str] = []
    open_ended = False
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            open_ended = True
            continue
        if param.kind is param.VAR_POSITIONAL or param.name in ("self", "cls"):
            continue
        properties[param.name] = {}
        if param.default is param.empty:
            required.append(param.name)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": open_ended}


def schema_problems(args: Any, schema: ToolSchema, *, limit: int = 5) -> list[str]:
    """What is wrong with `args` under a tool's JSON schema (`guardrail.gate.tool_args`: required, types, enums,
    ranges); none when the schema itself cannot be used (an unusable contract is no reason to block)."""
    try:
        return args_problems(args, schema, limit=limit)
    except SchemaError:
        return []


def checks_arguments_only(tool: str) -> bool:
    """Whether a call to `tool` is checked against its schema alone, with nothing probed in the workspace (any
    tool but the shell, Python, editor, file-reading and reference MCP ones `extract_tool` knows)."""
    return tool not in _PROBED_TOOLS


def extract_tool(tool: str, args: dict[str, Any], scope: Scope, *, open_file: str | None,
                 schemas: Mapping[str, ToolSchema], python_version: tuple[int, ...] | None = None,
                 ) -> list[Predicate]:
    out: list[Predicate] = []
    schema = schemas.get(tool)
    if schema is not None:
        problems = schema_problems(args, schema)
        if problems:
            out.append(Predicate("tool_args_valid", (tool, problems[0]), True, "tool",
                                 verdict=(False, "; ".join(problems))))
            return out
    mcp = extract_mcp(tool, args, scope)  # the reference MCP servers' tools (filesystem, git)
    if mcp is not None:
        out.extend(mcp)
    elif tool in SHELL_TOOLS and isinstance(args.get("command"), str):
        out.extend(extract_shell(args["command"], scope, python_version=python_version))
    elif tool in PYTHON_TOOLS and isinstance(args.get("code"), str):
        out.extend(extract_python(args["code"], scope, search=(scope.cwd,), necessary=True, origin="tool code",
                                  target_version=python_version))
    elif tool in READ_TOOLS and isinstance(args.get("path"), str):
        out.append(Predicate("file_exists", (scope.resolve(args["path"]),), True, "tool", hedge=scope.hedge()))
    elif tool in EDITOR_TOOLS:
        out.extend(_editor(tool, args, scope))
    return out


def _editor(tool: str, args: dict[str, Any], scope: Scope) -> list[Predicate]:
    out: list[Predicate] = []

    def bad(why: str) -> list[Predicate]:
        out.append(Predicate("tool_args_valid", (tool, why), True, "tool", verdict=(False, why)))
        return out

    command = args.get("command")
    path = args.get("path")
    if command is None and isinstance(args.get("content"), str) and isinstance(path, str):
        command = "write"  # OpenHands FileEditAction(path, content): a whole-file write
    if not isinstance(command, str) or command not in _EDITOR_COMMANDS | {"write"}:
        return bad(f"command must be one of {sorted(_EDITOR_COMMANDS)}, got {command!r}")
    if not isinstance(path, str) or not path:
        return bad("path must be a non-empty string")
    if not os.path.isabs(path):
        return bad(f"path {path!r} is not absolute")
    path = os.path.normpath(path)
    hedge = scope.hedge()
    if command == "view":
        out.append(Predicate("path_exists", (path,), True, "tool", hedge=hedge))
        view_range = args.get("view_range")
        if view_range is not None:
            if (not isinstance(view_range, list | tuple) or len(view_range) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in view_range)):
                return bad(f"view_range must be two integers, got {view_range!r}")
            start, end = view_range
            if end != -1 and end < start:
                return bad(f"view_range end {end} is before start {start}")
            out.append(Predicate("editor_line_in_range", (path, start, "view"), True, "tool"))
            if end != -1:
                out.append(Predicate("editor_line_in_range", (path, end, "view"), True, "tool"))
    elif command in ("create", "write"):
        if command == "create" and not isinstance(args.get("file_text"), str):
            return bad("create needs file_text")
        out.append(Predicate("parent_dir_exists", (path,), True, "tool", hedge=hedge))
        if command == "create":
            out.append(Predicate("path_absent", (path,), False, "tool"))
        scope.create(path)
    elif command == "str_replace":
        old = args.get("old_str")
        if not isinstance(old, str) or not old:
            return bad("str_replace needs a non-empty old_str")
        out.append(Predicate("file_exists", (path,), True, "tool", hedge=hedge))
        out.append(Predicate("editor_text_present", (path, old), True, "tool", hedge=hedge))
    elif command == "insert":
        line = args.get("insert_line")
        if not isinstance(line, int) or isinstance(line, bool):
            return bad(f"insert_line must be an integer, got {line!r}")
        if not isinstance(args.get("new_str"), str):
            return bad("insert needs new_str")
        out.append(Predicate("file_exists", (path,), True, "tool", hedge=hedge))
        out.append(Predicate("editor_line_in_range", (path, line, "insert"), True, "tool"))
    elif command == "undo_edit":
        out.append(Predicate("file_exists", (path,), True, "tool", hedge=hedge))
    return out
