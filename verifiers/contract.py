"""Tool contracts: the shapes a tool's result may take, from the tool itself or from the spec.

A contract comes from a return annotation (``def lookup(...) -> Price``), a pydantic model, a JSON
Schema, a full-match regular expression, or the spec's ``returns`` list. `classify_result` reads a
result against the spec and says which declared shape it is (value, empty, error) or that it is
malformed; every other check reads results through it, so "what counts as a value" lives here.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter, ValidationError

from verifiers.numbers import NumberFormatError, read_number
from verifiers.spec import VerifierSpec

__all__ = [
    "Classified",
    "Contract",
    "ContractError",
    "classify_result",
    "contracts_for",
]

MAX_RESULT_CHARS = 200_000  # results longer than this are checked on their first MAX_RESULT_CHARS characters

ResultKind = Literal["value", "empty", "error", "malformed", "unchecked"]


class ContractError(ValueError):
    """A contract that cannot be built (an annotation or schema this module cannot turn into a check)."""


@dataclass(frozen=True)
class Classified:
    """What one tool result is, by the spec: its kind, its figure (for value shapes) and why."""

    kind: ResultKind
    value: float | None = None
    reason: str = ""


def classify_result(spec: VerifierSpec, tool: str, result: str | None, *, is_error: bool = False,
                    contract: Contract | None = None, data: Any = None) -> Classified:
    """Classify one result of `tool` against its contract (a `Contract` given for the tool wins over the spec)."""
    text = (result or "")[:MAX_RESULT_CHARS].strip()
    for pattern in spec.error_regexes:
        if pattern.fullmatch(text):
            return Classified("error", reason="a declared error")
    if contract is not None:
        problem = contract.violation(text, data)
        if problem is not None:
            return Classified("malformed", reason=problem)
        return Classified("value", _first_number(text))
    tool_spec = spec.tools.get(tool)
    if tool_spec is None or (not tool_spec.returns and tool_spec.json_schema is None):
        return Classified("error" if is_error else "unchecked", _first_number(text))
    if tool_spec.json_schema is not None:
        problem = Contract.from_json_schema(tool_spec.json_schema).violation(text, data)
        if problem is None:
            return Classified("value", None)
        if not tool_spec.returns:
            return Classified("malformed", reason=problem)
    for shape in tool_spec.returns:
        match = shape.regex.fullmatch(text)
        if match is None:
            continue
        value = None
        if shape.kind == "value" and "value" in shape.regex.groupindex and match.group("value") is not None:
            try:
                value = read_number(match.group("value"))
            except NumberFormatError as exc:
                return Classified("malformed", reason=str(exc))
            if text.lstrip().startswith("-"):
                value = -value
        return Classified(shape.kind, value)
    shown = text if len(text) <= 80 else text[:77] + "..."
    return Classified("malformed", reason=f"{tool} returned {shown!r}, which matches none of its "
                                          f"{len(tool_spec.returns)} declared shape(s)")


def _first_number(text: str) -> float | None:
    match = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*", text)
    return float(match.group(1)) if match else None


class Contract:
    """A check that a tool result has one of the shapes its tool can return.

    Build one with `from_pattern`, `from_model` (pydantic), `from_json_schema`, `from_annotation`
    (a type) or `from_callable` (the tool function's return annotation). `violation(text, data)`
    returns None when the result fits, else the reason; `data` is the structured return value when
    the tool gave one, otherwise the text is parsed (as JSON for structured contracts).
    """

    def __init__(self, describe: str, check: Callable[[str, Any], str | None]) -> None:
        self.describe = describe
        self._check = check

    def __repr__(self) -> str:
        return f"Contract({self.describe})"

    def violation(self, text: str, data: Any = None) -> str | None:
        try:
            return self._check(text[:MAX_RESULT_CHARS], data)
        except RecursionError:
            return "result nests too deeply to check"

    @classmethod
    def from_pattern(cls, pattern: str | re.Pattern[str]) -> Contract:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern

        def check(text: str, data: Any) -> str | None:
            if regex.fullmatch(text.strip()):
                return None
            return f"result {text[:80]!r} does not fully match {regex.pattern!r}"

        return cls(f"pattern {regex.pattern!r}", check)

    @classmethod
    def from_annotation(cls, annotation: Any) -> Contract:
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        except Exception as exc:  # pydantic raises several types for unsupported annotations
            raise ContractError(f"cannot build a contract from {annotation!r}: {exc}") from exc
        name = getattr(annotation, "__name__", repr(annotation))

        def check(text: str, data: Any) -> str | None:
            try:
                if data is not None:
                    adapter.validate_python(data)
                elif annotation is str:
                    return None
                else:
                    adapter.validate_json(text)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "result"
                return f"result is not a {name}: {where}: {first['msg']}"
            return None

        return cls(f"type {name}", check)

    @classmethod
    def from_model(cls, model: type[BaseModel]) -> Contract:
        if not (inspect.isclass(model) and issubclass(model, BaseModel)):
            raise ContractError(f"{model!r} is not a pydantic model class")
        return cls.from_annotation(model)

    @classmethod
    def from_json_schema(cls, schema: Mapping[str, Any]) -> Contract:
        import jsonschema  # deferred: only JSON Schema contracts need it

        try:
            validator_cls = jsonschema.validators.validator_for(schema)
            validator_cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ContractError(f"invalid JSON Schema: {exc.message}") from exc
        validator = validator_cls(schema)

        def check(text: str, data: Any) -> str | None:
            value = data
            if value is None:
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    return f"result is not JSON: {exc.msg} at position {exc.pos}"
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is None:
                return None
            where = "/".join(str(p) for p in error.absolute_path) or "result"
            return f"result does not match its JSON Schema at {where}: {error.message[:200]}"

        return cls("JSON Schema", check)

    @classmethod
    def from_callable(cls, fn: Callable[..., Any]) -> Contract:
        """A contract from a tool function's return annotation (``-> int``, ``-> Price``, ``-> list[str]``)."""
        target = getattr(fn, "func", fn)  # LangChain StructuredTool / functools.partial keep the function here
        try:
            hints = typing.get_type_hints(target)
        except (NameError, TypeError) as exc:
            raise ContractError(f"cannot read the return annotation of {fn!r}: {exc}") from exc
        if "return" not in hints:
            raise ContractError(f"{getattr(target, '__name__', fn)!r} has no return annotation to build a contract from")
        return cls.from_annotation(hints["return"])


_SHAPELESS = (str, Any, None, type(None), inspect.Signature.empty)


def contracts_for(tools: Iterable[Any]) -> dict[str, Contract]:
    """Contracts read off the tools themselves: plain functions, LangChain tools, AutoGen tools.

    A tool whose return type says something (``-> float``, ``-> Quote``, ``-> list[str]``) gets
    a contract from it; one that returns ``str`` or has no annotation says nothing about its
    shape and is left to the spec.
    """
    found: dict[str, Contract] = {}
    for tool in tools:
        return_type_of = getattr(tool, "return_type", None)
        if callable(return_type_of) and not inspect.isfunction(tool):  # AutoGen BaseTool
            annotation = return_type_of()
        else:
            target = getattr(tool, "func", None) or getattr(tool, "coroutine", None) or tool
            try:
                annotation = typing.get_type_hints(target).get("return")
            except (NameError, TypeError):
                annotation = None
        if annotation in _SHAPELESS:
            continue
        name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
        if name:
            found[str(name)] = Contract.from_annotation(annotation)
    return found
