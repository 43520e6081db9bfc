"""What each tool argument is, read from the tool's JSON Schema: free text, an identifier, an amount, a choice, a setting.

Self-consistency and provenance treat these differently. A paraphrased free-text query is not a
fabrication, so free text is left out of the argument agreement that can reject a plan; an
identifier (an id, a path, a code, a date) or an amount must come from somewhere the agent saw,
so those go through the provenance check; a choice must be one the schema lists; a setting
(a limit, a page size) is the caller's to pick and is only compared.

A schema says it outright with ``"x-argument-kind": "free_text" | "identifier" | "amount" |
"choice" | "parameter"`` (or ``"x-free-text": true``); otherwise the kind is read from the
argument's type, ``enum``/``const``, ``format``, ``pattern``, bounds, default, name and description.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["ArgumentKind", "ArgumentSpec", "argument_specs", "infer_kind", "iter_arguments", "without_free_text"]


class ArgumentKind(StrEnum):
    FREE_TEXT = "free_text"  # queries, descriptions, messages: wording varies legitimately
    IDENTIFIER = "identifier"  # ids, keys, paths, codes, handles, URLs, emails, dates: must name something real
    AMOUNT = "amount"  # a quantity taken from the task or a result (price, total, count of things)
    CHOICE = "choice"  # one of a closed set the schema lists (enum, const, boolean)
    PARAMETER = "parameter"  # a setting the caller picks (limit, page size, bounded or defaulted numbers)


@dataclass(frozen=True)
class ArgumentSpec:
    """One argument path of a tool (``"order_id"``, ``"filter.ids[]"``) and what kind of value it holds."""

    path: str
    kind: ArgumentKind
    choices: tuple[Any, ...] = ()  # the schema's enum / const values, for CHOICE
    declared: bool = False  # the schema said the kind itself (x-argument-kind / x-free-text)


_FREE_TEXT_NAMES = re.compile(
    r"(?:^|_)(?:query|q|search|keywords?|terms|text|prompt|question|message|body|content|comment|notes?|summary|"
    r"description|instructions?|reason|title|subject|topic|caption|answer|explanation)$", re.IGNORECASE)
_FREE_TEXT_WORDS = re.compile(
    r"\b(?:free[- ]text|natural[- ]language|search (?:terms|query|string)|keywords|full[- ]text|in your own words)\b",
    re.IGNORECASE)
_PARAMETER_NAMES = re.compile(
    r"^(?:limit|k|n|top_?k|top_?n|count|max_\w+|min_\w+|page(?:_\w+)?|per_page|offset|size|page_size|timeout\w*|"
    r"retries|depth|temperature|threshold|verbose|dry_run|recursive)$", re.IGNORECASE)
_IDENTIFIER_NAMES = re.compile(r"(?:^|_)(?:id|ids|key|number|no|num|code|ref|handle|path|file|sku|uuid)$",
                               re.IGNORECASE)
_IDENTIFIER_FORMATS = frozenset({"uuid", "uri", "url", "uri-reference", "iri", "iri-reference", "email", "idn-email",
                                 "hostname", "idn-hostname", "ipv4", "ipv6", "date", "date-time", "time", "path",
                                 "json-pointer"})
_KINDS = {kind.value: kind for kind in ArgumentKind}


def infer_kind(name: str, value: Any = None, schema: Mapping[str, Any] | None = None) -> ArgumentKind:
    """The kind of the argument `name` from its sub-schema (when there is one) or, failing that, its name and value."""
    schema = schema or {}
    declared = schema.get("x-argument-kind")
    if isinstance(declared, str) and declared in _KINDS:
        return _KINDS[declared]
    if schema.get("x-free-text") is True:
        return ArgumentKind.FREE_TEXT
    if "enum" in schema or "const" in schema:
        return ArgumentKind.CHOICE
    types = schema.get("type")
    type_set = set(types) if isinstance(types, list) else ({types} if isinstance(types, str) else set())
    if not type_set:  # no schema: read the value's own type
        if isinstance(value, bool):
            type_set = {"boolean"}
        elif isinstance(value, int | float):
            type_set = {"number"}
        elif isinstance(value, str):
            type_set = {"string"}
    if type_set == {"boolean"}:
        return ArgumentKind.CHOICE
    description = str(schema.get("description", ""))
    if type_set & {"integer", "number"} and not type_set & {"string"}:
        if _IDENTIFIER_NAMES.search(name):
            return ArgumentKind.IDENTIFIER
        if _PARAMETER_NAMES.match(name) or "default" in schema or "maximum" in schema:
            return ArgumentKind.PARAMETER  # a bounded or defaulted number is a setting, not a quantity from the task
        return ArgumentKind.AMOUNT
    if schema.get("format") in _IDENTIFIER_FORMATS or "pattern" in schema:
        return ArgumentKind.IDENTIFIER
    if _FREE_TEXT_NAMES.search(name) or _FREE_TEXT_WORDS.search(description):
        return ArgumentKind.FREE_TEXT
    return ArgumentKind.IDENTIFIER  # a string a tool looks something up by, unless the schema says otherwise


def argument_specs(parameters: Mapping[str, Any]) -> dict[str, ArgumentSpec]:
    """Every argument path of a JSON Schema ``parameters`` object with its kind (nested objects and arrays too)."""
    specs: dict[str, ArgumentSpec] = {}
    _collect(parameters, "", "", specs, depth=0)
    return specs


def _collect(schema: Mapping[str, Any], path: str, name: str, out: dict[str, ArgumentSpec], depth: int) -> None:
    if depth > 16:  # a schema is the deployer's, but bound the walk anyway (self-referencing $defs, deep nesting)
        return
    properties = schema.get("properties")
    items = schema.get("items")
    if isinstance(properties, Mapping) and "x-argument-kind" not in schema:
        for key, sub in properties.items():
            if isinstance(sub, Mapping):
                _collect(sub, f"{path}.{key}" if path else str(key), str(key), out, depth + 1)
        return
    if isinstance(items, Mapping) and "x-argument-kind" not in schema and "enum" not in schema:
        _collect(items, path + "[]", name, out, depth + 1)
        return
    if not path:
        return
    declared = "x-argument-kind" in schema or schema.get("x-free-text") is True
    choices: tuple[Any, ...] = ()
    if isinstance(schema.get("enum"), list):
        choices = tuple(schema["enum"])
    elif "const" in schema:
        choices = (schema["const"],)
    out[path] = ArgumentSpec(path, infer_kind(name, None, schema), choices, declared)


def _parent_name(path: str) -> str:
    """The argument's own name in a path: ``"filter.ids[]"`` -> ``"ids"``."""
    return path.rsplit(".", 1)[-1].replace("[]", "")


def iter_arguments(args: Any, specs: Mapping[str, ArgumentSpec]) -> Iterator[tuple[str, Any, ArgumentSpec]]:
    """Every scalar value of canonical arguments with its path and spec (a spec inferred from name and value
    where the schema has none). Arguments that are not an object are one IDENTIFIER value at path ``""``."""
    yield from _walk(args, "", specs, 0)


def _walk(value: Any, path: str, specs: Mapping[str, ArgumentSpec], depth: int) -> Iterator[tuple[str, Any, ArgumentSpec]]:
    if depth > 32:
        return
    spec = specs.get(path)
    if isinstance(value, dict) and (spec is None or spec.kind is not ArgumentKind.FREE_TEXT):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}" if path else str(key), specs, depth + 1)
        return
    if isinstance(value, list) and (spec is None or spec.kind is not ArgumentKind.FREE_TEXT):
        for item in value:
            yield from _walk(item, path + "[]", specs, depth + 1)
        return
    if spec is None:
        spec = ArgumentSpec(path, infer_kind(_parent_name(path), value))
    yield path, value, spec


def without_free_text(args: Any, specs: Mapping[str, ArgumentSpec]) -> Any:
    """Canonical arguments with every free-text value removed: what the agreement that can reject compares."""
    return _strip(args, "", specs, 0)


_DROP = object()


def _strip(value: Any, path: str, specs: Mapping[str, ArgumentSpec], depth: int) -> Any:
    spec = specs.get(path)
    if path and (spec.kind if spec is not None else _inferred(path, value)) is ArgumentKind.FREE_TEXT:
        return _DROP
    if depth > 32:
        return value
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            stripped = _strip(item, f"{path}.{key}" if path else str(key), specs, depth + 1)
            if stripped is not _DROP:
                kept[key] = stripped
        return kept
    if isinstance(value, list):
        items = [_strip(item, path + "[]", specs, depth + 1) for item in value]
        return [item for item in items if item is not _DROP]
    return value


def _inferred(path: str, value: Any) -> ArgumentKind | None:
    if isinstance(value, dict | list):
        return None  # containers are judged by what they hold
    return infer_kind(_parent_name(path), value)
