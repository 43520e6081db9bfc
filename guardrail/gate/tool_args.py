"""`tool_args_valid` against the schema a tool declares: required arguments, types, enums, ranges (JSON Schema).

A schema the agent declares (its LangChain tools' argument schemas, an AutoGen workbench's tools,
an MCP server's ``tools/list``) is a contract: a call that breaks it is a finding before the tool
runs. Schemas come from outside, so they are checked once when first seen (size, depth, a valid
JSON Schema) and validated with a restricted keyword set: the structural keywords the contract is
about, without ``pattern`` / ``format`` (a regex from an MCP server must not get to backtrack for
seconds on a model's argument) and without remote ``$ref`` (nothing is fetched).

The hot path serves every tool call of every agent (the gate's budget is well under a millisecond):
most declared schemas are flat objects of primitive-typed properties, and `_fast_problems` checks
those by hand in about a microsecond; anything else, and every call the fast check rejects (for
the messages), goes through `jsonschema` itself. A property test holds the two equal.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

__all__ = ["SchemaError", "args_problems", "schema_signature", "validator_for"]

MAX_SCHEMA_BYTES = 256 * 1024  # a declared schema larger than this is not used (a finding says so)
MAX_SCHEMA_DEPTH = 32
_CACHE = 2048  # compiled schemas kept (by identity of the schema object the adapter holds)
_KEPT_KEYWORDS = frozenset({
    "$ref", "$defs", "definitions", "type", "enum", "const", "required", "properties", "additionalProperties",
    "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "minProperties", "maxProperties", "anyOf", "oneOf",
    "allOf", "not", "dependentRequired",
})
_PRIMITIVE = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "null": (type(None),)}
_SIMPLE_KEYS = frozenset({"type", "description", "title", "default", "enum", "examples"})


class SchemaError(ValueError):
    """A declared schema the guard will not use (too large, too deep, not a valid JSON Schema)."""


def _depth(value: Any, limit: int, depth: int = 0) -> int:
    if depth > limit:
        return depth
    if isinstance(value, Mapping):
        return max((_depth(v, limit, depth + 1) for v in value.values()), default=depth)
    if isinstance(value, list):
        return max((_depth(v, limit, depth + 1) for v in value), default=depth)
    return depth


class _Compiled:
    """One declared schema, checked and compiled once."""

    __slots__ = ("schema", "validator", "flat", "error")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self.validator: Any = None
        self.flat: tuple[dict[str, tuple[type, ...] | None], frozenset[str], bool, dict[str, list[Any]]] | None = None
        self.error: str | None = None
        try:
            self._compile()
        except SchemaError as exc:
            self.error = str(exc)

    def _compile(self) -> None:
        try:
            text = json.dumps(self.schema, default=str)
        except (TypeError, ValueError, RecursionError) as exc:
            raise SchemaError(f"the declared schema is not JSON ({type(exc).__name__})") from exc
        if len(text) > MAX_SCHEMA_BYTES:
            raise SchemaError(f"the declared schema is larger than {MAX_SCHEMA_BYTES} bytes ({len(text)})")
        if _depth(self.schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
            raise SchemaError(f"the declared schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        import jsonschema
        from jsonschema import validators

        base = validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
        try:
            base.check_schema(self.schema)
        except jsonschema.SchemaError as exc:
            raise SchemaError(f"the declared schema is not a valid JSON Schema: {exc.message[:200]}") from exc
        restricted = validators.extend(base, {})
        restricted.VALIDATORS = {k: v for k, v in base.VALIDATORS.items() if k in _KEPT_KEYWORDS}
        self.validator = restricted(self.schema)
        self.flat = _flat_form(self.schema)


def _flat_form(schema: Mapping[str, Any]) -> Any:
    """(property -> allowed Python types or None for any, required, closed, enums) when the schema is a flat
    object of primitive-typed properties the fast path can check exactly; None otherwise."""
    if schema.get("type") != "object" or not set(schema) <= {"type", "properties", "required", "additionalProperties",
                                                            "title", "description", "$schema"}:
        return None
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    closed = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(required, list) or not isinstance(closed, bool):
        return None
    types: dict[str, tuple[type, ...] | None] = {}
    enums: dict[str, list[Any]] = {}
    for name, spec in properties.items():
        if not isinstance(spec, Mapping) or not set(spec) <= _SIMPLE_KEYS:
            return None
        kind = spec.get("type")
        if kind is None:
            types[name] = None
        elif isinstance(kind, str) and kind in _PRIMITIVE:
            types[name] = _PRIMITIVE[kind]
        else:
            return None
        if "enum" in spec:
            if not isinstance(spec["enum"], list) or not all(isinstance(v, str | int | float | bool | None)
                                                              for v in spec["enum"]):
                return None
            enums[name] = spec["enum"]
    if not all(isinstance(r, str) for r in required):
        return None
    return types, frozenset(required), not closed, enums


def _fast_valid(flat: Any, args: Mapping[str, Any]) -> bool:
    """True when `args` fits a flat schema: exactly what jsonschema decides for the same schema."""
    types, required, closed, enums = flat
    for name in required:
        if name not in args:
            return False
    for name, value in args.items():
        if name not in types:
            if closed:
                return False
            continue
        allowed = types[name]
        if allowed is not None and (not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)):
            return False  # (an integral float for "integer" lands here too; the library then accepts it)
        if name in enums and not any(_same(value, v) for v in enums[name]):
            return False
    return True


def _same(value: Any, member: Any) -> bool:
    """JSON equality as jsonschema's enum reads it: true and 1 differ, 1 and 1.0 do not."""
    if isinstance(value, bool) or isinstance(member, bool):
        return type(value) is type(member) and value == member
    return type(value) is type(member) or (isinstance(value, int | float) and isinstance(member, int | float)) \
        if value == member else False


_cache: OrderedDict[int, _Compiled] = OrderedDict()
_cache_lock = threading.Lock()


def validator_for(schema: Mapping[str, Any]) -> _Compiled:
    """The compiled form of `schema`, cached by the identity of the schema object (adapters keep theirs)."""
    key = id(schema)
    with _cache_lock:
        compiled = _cache.get(key)
        if compiled is not None and compiled.schema is schema:
            _cache.move_to_end(key)
            return compiled
    compiled = _Compiled(schema)
    with _cache_lock:
        _cache[key] = compiled
        while len(_cache) > _CACHE:
            _cache.popitem(last=False)
    return compiled


def _describe(error: Any) -> str:
    where = ".".join(str(p) for p in error.absolute_path)
    validator = error.validator
    if validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        prefix = f"{where}: " if where else ""
        return f"{prefix}missing required argument {missing!r}"
    if validator == "additionalProperties":
        return f"{error.message[:200]}"
    value = error.instance
    shown = json.dumps(value, default=str)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    if validator == "type":
        return f"argument {where!r} must be {error.validator_value}, got {type(value).__name__} {shown}"
    if validator == "enum":
        return f"argument {where!r} must be one of {json.dumps(error.validator_value)[:200]}, got {shown}"
    if validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        relation = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[validator]
        return f"argument {where!r} must be {relation} {error.validator_value}, got {shown}"
    return f"argument {where!r}: {error.message[:200]}" if where else error.message[:200]


def args_problems(args: Any, schema: Mapping[str, Any], *, limit: int = 5) -> list[str]:
    """What is wrong with `args` under `schema` (empty when the call fits), one line each, at most `limit`.

    Raises `SchemaError` when the schema itself cannot be used.
    """
    compiled = validator_for(schema)
    if compiled.error is not None:
        raise SchemaError(compiled.error)
    if not isinstance(args, Mapping):
        return [f"arguments must be an object, got {type(args).__name__}"]
    if compiled.flat is not None and _fast_valid(compiled.flat, args):
        return []
    problems = []
    try:
        for error in compiled.validator.iter_errors(dict(args)):
            problems.append(_describe(error))
            if len(problems) >= limit:
                break
    except RecursionError:
        return ["arguments nested too deep to check against the schema"]
    except Exception as exc:  # noqa: BLE001 - an unresolvable $ref and the like: the schema is unusable
        raise SchemaError(f"the declared schema cannot be applied ({type(exc).__name__})") from exc
    return problems


def schema_signature(name: str, schema: Mapping[str, Any], *, cap: int = 300) -> str:
    """The call shape a schema declares, for hints: ``convert(value: number, unit: "K"|"C", to?: string)``."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return f"{name}(...)"
    required = set(schema.get("required") or [])
    parts = []
    for prop, spec in properties.items():
        kind = "any"
        if isinstance(spec, Mapping):
            if isinstance(spec.get("enum"), list):
                kind = "|".join(json.dumps(v) for v in spec["enum"][:8])
            elif isinstance(spec.get("type"), str | list):
                kind = spec["type"] if isinstance(spec["type"], str) else "|".join(map(str, spec["type"]))
            bounds = [f"{sym}{spec[key]}" for key, sym in (("minimum", ">="), ("maximum", "<="))
                      if isinstance(spec.get(key), int | float)]
            if bounds:
                kind += f" ({', '.join(bounds)})"
        parts.append(f"{prop}{'' if prop in required else '?'}: {kind}")
    text = f"{name}({', '.join(parts)})"
    return text if len(text) <= cap else text[:cap - 4] + "...)"
