"""What a tool result says, read once for every check: its fields (a JSON record), its numbers with their units.

A result such as ``{"city": "Oslo", "temp_k": 277.15, "condition": "snowy"}`` yields the fields
``city``, ``temp_k`` and ``condition`` (nested records and lists of records by dotted path,
``items[].sku``) and the number 277.15 in kelvin (the unit its field name carries). A text result
yields its numbers, each with the unit written after it when there is one. Reading is bounded:
`MAX_FIELDS` fields and `MAX_NUMBERS` numbers per result, nesting to `MAX_DEPTH`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from verifiers.numbers import find_numbers
from verifiers.units import field_unit, find_amounts

__all__ = ["MAX_FIELDS", "MAX_NUMBERS", "parse_record", "record_fields", "result_numbers"]

MAX_FIELDS = 200
MAX_NUMBERS = 500
MAX_DEPTH = 6
MAX_RECORD_CHARS = 200_000


def parse_record(text: str | None, data: Any = None) -> Any:
    """The result as JSON data (the tool's structured value when given, else its text parsed), None when it is not JSON."""
    if data is not None and isinstance(data, dict | list):
        return data
    stripped = (text or "").strip()
    if not stripped.startswith(("{", "[")) or len(stripped) > MAX_RECORD_CHARS:
        return None
    try:
        return json.loads(stripped)
    except (json.JSONDecodeError, RecursionError):
        return None


def record_fields(record: Any) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """(dotted path, leaf value, the record holding it) for every scalar leaf, bounded; lists of records give ``a[].b``."""
    count = 0

    def walk(value: Any, path: str, holder: dict[str, Any], depth: int) -> Iterator[tuple[str, Any, dict[str, Any]]]:
        nonlocal count
        if count >= MAX_FIELDS or depth > MAX_DEPTH:
            return
        if isinstance(value, dict):
            for key, sub in value.items():
                yield from walk(sub, f"{path}.{key}" if path else str(key), value, depth + 1)
        elif isinstance(value, list):
            for item in value[:MAX_FIELDS]:
                yield from walk(item, f"{path}[]", holder, depth + 1)
        else:
            count += 1
            yield path, value, holder

    yield from walk(record, "", record if isinstance(record, dict) else {}, 0)


def _leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1].removesuffix("[]")


def result_numbers(text: str | None, data: Any = None) -> list[tuple[float, str | None]]:
    """Every number a result gives, with its unit (pint's name or "percent") when the result says one, else None."""
    record = parse_record(text, data)
    found: list[tuple[float, str | None]] = []
    if record is not None:
        for path, value, _holder in record_fields(record):
            if isinstance(value, bool):
                continue
            if isinstance(value, int | float):
                unit = field_unit(_leaf(path))
                found.append((float(value), unit[0] if unit else None))
            elif isinstance(value, str) and any(ch.isdigit() for ch in value) and len(value) <= 200:
                found.extend(_text_numbers(value))
            if len(found) >= MAX_NUMBERS:
                break
        return found[:MAX_NUMBERS]
    return _text_numbers(text or "")[:MAX_NUMBERS]


def _text_numbers(text: str) -> list[tuple[float, str | None]]:
    amounts = find_amounts(text)
    found: list[tuple[float, str | None]] = [(a.value, a.unit) for a in amounts]
    found += [(v, None) for v in find_numbers(text)]
    return found
