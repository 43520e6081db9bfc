"""Normalization: any action form (dict, OpenHands action, ACI line, tool call) into an Action, then into predicates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from guardrail.core.events import Action, ActionKind
from guardrail.gate.extract_aci import extract_aci
from guardrail.gate.extract_python import extract_python
from guardrail.gate.extract_shell import extract_shell
from guardrail.gate.extract_tool import ToolSchema, extract_tool
from guardrail.gate.predicates import Predicate
from guardrail.gate.scope import Scope

__all__ = ["ActionError", "extract", "normalize_action"]

# OpenHands action classes -> the form they run in.
_OPENHANDS = {
    "CmdRunAction": ("shell", "command"),
    "IPythonRunCellAction": ("python", "code"),
    "FileReadAction": ("tool", None),
    "FileEditAction": ("tool", None),
    "FileWriteAction": ("tool", None),
}


class ActionError(ValueError):
    """The action cannot be understood; the message says which field is wrong."""


def normalize_action(raw: Action | Mapping[str, Any]) -> Action:
    """An Action from an Action, a batch-line dict ({"kind": ...}), or an OpenHands-style {"action": "CmdRunAction"}."""
    if isinstance(raw, Action):
        return raw
    if not isinstance(raw, Mapping):
        raise ActionError(f"action must be an object, got {type(raw).__name__}")
    data = dict(raw)
    openhands = data.get("action")
    if isinstance(openhands, str) and openhands in _OPENHANDS and "kind" not in data:
        kind, field_name = _OPENHANDS[openhands]
        nested = data.get("args")
        params: Mapping[str, Any] = nested if isinstance(nested, Mapping) else data
        if field_name is not None:
            fields: dict[str, Any] = {field_name: str(params.get(field_name, ""))}
            return Action(kind=ActionKind(kind), cwd=data.get("cwd"), **fields)
        args = {k: v for k, v in params.items() if k not in ("action", "cwd")}
        if openhands == "FileWriteAction":
            args.setdefault("content", args.pop("text", ""))
        return Action.tool_call(openhands if openhands != "FileWriteAction" else "FileEditAction", args)
    if "kind" not in data:
        raise ActionError("action needs a 'kind': shell, python, tool or swe_agent")
    try:
        action = Action.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "action"
        raise ActionError(f"bad action field {where!r}: {first.get('msg')}") from None
    if action.kind in (ActionKind.SHELL, ActionKind.SWE_AGENT) and not isinstance(action.command, str):
        raise ActionError(f"a {action.kind.value} action needs a 'command' string")
    if action.kind is ActionKind.PYTHON and not isinstance(action.code, str):
        raise ActionError("a python action needs a 'code' string")
    if action.kind is ActionKind.TOOL and not action.tool:
        raise ActionError("a tool action needs a 'tool' name")
    return action


def extract(action: Action, scope: Scope, *, open_file: str | None, schemas: Mapping[str, ToolSchema],
            python_version: tuple[int, ...] | None) -> list[Predicate]:
    """The predicates `action` assumes, with `scope` advanced past its effects."""
    if action.kind is ActionKind.SHELL:
        return extract_shell(action.command or "", scope, python_version=python_version)
    if action.kind is ActionKind.PYTHON:
        return extract_python(action.code or "", scope, search=(scope.cwd,), necessary=True, origin="python",
                              target_version=python_version)
    if action.kind is ActionKind.SWE_AGENT:
        # Tool schemas may carry a loaded bundle's command signatures (guardrail.gate.bundles.bundle_tools).
        return extract_aci(action.command or "", scope, open_file, schemas=schemas, python_version=python_version)
    return extract_tool(action.tool or "", action.args, scope, open_file=open_file, schemas=schemas,
                        python_version=python_version)
