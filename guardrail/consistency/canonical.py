"""Canonical forms of tool arguments and results, so agreement counts meaning and not surface form."""

from __future__ import annotations

import dataclasses
import json
import math
import posixpath
import re
import unicodedata
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CanonicalLimits",
    "CanonicalizationError",
    "canonical_args",
    "canonical_args_data",
    "canonical_bytes",
    "canonical_result",
    "canonicalize",
    "encode_canonical",
    "spelling",
]

# Floats with an integral value below this magnitude are written as integers: 1, 1.0 and 1e0
# are the same argument. Above 2**53 a float no longer names one integer, so it stays a float.
_EXACT_INT_FLOAT = 2.0**53


class CanonicalizationError(ValueError):
    """A value cannot be put in canonical form (too large, too deep, or of a type JSON cannot carry)."""


@dataclass(frozen=True)
class CanonicalLimits:
    """Bounds on the work one canonicalization may do: samples come from a model and are untrusted."""

    max_depth: int = 64
    max_nodes: int = 200_000
    max_chars: int = 4_000_000  # total characters across all strings and keys


DEFAULT_LIMITS = CanonicalLimits()


# A number a model may spell as text: optional sign, digits (grouped by commas in threes, or not), an optional
# fraction, an optional exponent. A leading zero before more digits ("007", "02139") is an identifier, not a number.
_NUMBER = re.compile(r"[+-]?(?:0|[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|[+-]?\.\d+(?:[eE][+-]?\d+)?")
_MAX_NUMBER_CHARS = 64
_SPACE_RUN = re.compile(r"[ \t\u00a0]+")


def spelling(text: str) -> Any:
    """One argument value as its meaning, not its spelling: what `canonical_args` compares.

    - a number written as text is the number (``"1e3"``, ``"1000"``, ``"1,000.0"`` and ``1000``
      agree; ``"007"`` and ``"1,5"`` stay text: an identifier and an ambiguous decimal);
    - a single-token path is normalized (``"./a/../b"``, ``"b/"``, ``"b"`` agree; URLs are left alone);
    - surrounding whitespace is dropped and runs of spaces inside one line become one (a multi-line
      value keeps its lines, each without trailing spaces).
    """
    stripped = text.strip()
    if len(stripped) <= _MAX_NUMBER_CHARS and _NUMBER.fullmatch(stripped):
        number = float(stripped.replace(",", ""))
        if math.isfinite(number):
            plain = stripped.replace(",", "").lstrip("+")
            if re.fullmatch(r"-?\d+", plain):
                return int(plain)  # exact, however many digits
            return _canonical_float(number)
    if "\n" in stripped or "\r" in stripped:
        lines = stripped.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        return "\n".join(line.rstrip() for line in lines)
    collapsed = _SPACE_RUN.sub(" ", stripped)
    if " " not in collapsed and "/" in collapsed and "://" not in collapsed:
        normalized = posixpath.normpath(collapsed)
        return normalized
    return collapsed


class _Walker:
    """One canonicalization pass; counts nodes and characters against the limits."""

    __slots__ = ("limits", "nodes", "chars", "unordered", "spelled")

    def __init__(self, unordered: frozenset[str], limits: CanonicalLimits, spelled: bool = False) -> None:
        self.limits = limits
        self.unordered = unordered
        self.spelled = spelled  # argument values: compare meanings (numbers as text, paths, spaces)
        self.nodes = 0
        self.chars = 0

    def text(self, value: str) -> str:
        self.chars += len(value)
        if self.chars > self.limits.max_chars:
            raise CanonicalizationError(
                f"value holds more than {self.limits.max_chars} characters; the gate does not compare it"
            )
        if value.isascii():
            return value  # ASCII is already NFC; skipping the call matters on the per-sample budget
        # NFC so a precomposed "é" and "e" + combining accent are one string.
        return unicodedata.normalize("NFC", value)

    def walk(self, value: Any, path: str, depth: int) -> Any:
        # Hot path (runs once per node of every sample): exact-type checks first, ABCs last.
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise CanonicalizationError(f"value has more than {self.limits.max_nodes} elements")
        if depth > self.limits.max_depth:
            raise CanonicalizationError(f"value is nested deeper than {self.limits.max_depth} levels at {path or '$'}")
        kind = type(value)
        if kind is str:
            return spelling(self.text(value)) if self.spelled else self.text(value)
        if value is None or kind is bool or kind is int:
            return value
        if kind is float:
            return _canonical_float(value)
        if kind is dict:
            return self.mapping(value, path, depth)
        if kind is list:
            return self.sequence(value, path, depth)
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return _canonical_float(float(value))
        if isinstance(value, str):
            return spelling(self.text(str(value))) if self.spelled else self.text(str(value))
        if isinstance(value, Mapping):
            return self.mapping(value, path, depth)
        if isinstance(value, list | tuple):
            return self.sequence(value, path, depth)
        if isinstance(value, Set):
            # A set has no order by nature, whatever the schema says.
            return sorted((self.walk(item, path + "[]", depth + 1) for item in value), key=_sort_key)
        if isinstance(value, bytes | bytearray):
            return {"$bytes": bytes(value).hex()}
        if hasattr(value, "model_dump"):
            return self.walk(value.model_dump(mode="json"), path, depth)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self.walk(dataclasses.asdict(value), path, depth)
        raise CanonicalizationError(
            f"cannot canonicalize a {type(value).__name__} at {path or '$'}: return JSON-like data "
            "(dict, list, str, number, bool, None) from tools and models"
        )

    def mapping(self, value: Mapping[Any, Any], path: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = self.text(key if isinstance(key, str) else _key_text(key, path))
            child = f"{path}.{name}" if path else name
            if name in out:
                # Two keys that differ only in Unicode form collapse to one: keep neither silently.
                raise CanonicalizationError(f"duplicate key {name!r} after Unicode normalization at {path or '$'}")
            out[name] = self.walk(item, child, depth + 1)
        return out  # key order is settled by the encoder's sort_keys

    def sequence(self, value: Any, path: str, depth: int) -> list[Any]:
        element = path + "[]"
        items = [self.walk(item, element, depth + 1) for item in value]
        if path in self.unordered:
            items.sort(key=_sort_key)
        return items


def _key_text(key: Any, path: str) -> str:
    if key is None or isinstance(key, bool | int | float):
        # json.dumps writes such keys as strings too; match it so a dict and its JSON text agree.
        return json.dumps(_canonical_float(key) if isinstance(key, float) else key)
    raise CanonicalizationError(f"mapping key of type {type(key).__name__} at {path or '$'} is not JSON-like")


def _canonical_float(value: float) -> Any:
    if math.isnan(value) or math.isinf(value):
        # JSON has no NaN/Infinity; tag them so they never equal the strings "NaN" or "Infinity".
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if value == 0.0:
        return 0  # -0.0 and 0.0 are the same argument
    if value.is_integer() and abs(value) < _EXACT_INT_FLOAT:
        return int(value)
    return value  # repr() of a float is already its shortest round-tripping form


# One encoder for every canonical form: building one per call costs more than small values take to encode.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _sort_key(item: Any) -> str:
    return _ENCODER.encode(item)


def canonicalize(value: Any, *, unordered: frozenset[str] = frozenset(),
                 limits: CanonicalLimits = DEFAULT_LIMITS, spelled: bool = False) -> Any:
    """`value` as plain JSON data in canonical form.

    Strings are NFC-normalized, integral floats become integers, and lists at the paths in
    `unordered` are sorted. With `spelled` (what `canonical_args` uses) string values are also
    read for their meaning (`spelling`: numbers as text, path spellings, whitespace). A path names a field by its keys joined with ``.`` and a list's
    elements with ``[]``: ``"tags"``, ``"filters.ids"``, ``"rows[].labels"``; ``""`` is the
    value itself. Raises `CanonicalizationError` past `limits`.
    """
    return _Walker(unordered, limits, spelled).walk(value, "", 0)


def canonical_bytes(value: Any, *, unordered: frozenset[str] = frozenset(),
                    limits: CanonicalLimits = DEFAULT_LIMITS, spelled: bool = False) -> bytes:
    """The canonical form as UTF-8 JSON with sorted keys and no spaces: equal bytes mean equal values."""
    return encode_canonical(canonicalize(value, unordered=unordered, limits=limits, spelled=spelled))


def canonical_args(args: Any, *, unordered: frozenset[str] = frozenset(),
                   limits: CanonicalLimits = DEFAULT_LIMITS) -> bytes:
    """Canonical bytes of a tool call's arguments: two spellings of one call give the same bytes.

    A JSON string is parsed first (models often emit one); key order and JSON whitespace never
    count; string values are compared by `spelling` (number formats, path spellings, whitespace,
    Unicode normalization).
    """
    return encode_canonical(canonical_args_data(args, unordered=unordered, limits=limits))


def canonical_args_data(args: Any, *, unordered: frozenset[str] = frozenset(),
                        limits: CanonicalLimits = DEFAULT_LIMITS) -> Any:
    """The canonical form of a call's arguments as data (what `canonical_args` encodes): JSON text parsed,
    values read for their meaning. `encode_canonical` of it gives the same bytes as `canonical_args`."""
    if isinstance(args, str):
        parsed = _parse_json_text(args, limits)
        if parsed is not _NOT_JSON:
            args = parsed
    return canonicalize(args, unordered=unordered, limits=limits, spelled=True)


def encode_canonical(data: Any) -> bytes:
    """Bytes of data already in canonical form (sorted keys, no spaces)."""
    try:
        text = _ENCODER.encode(data)
    except ValueError as exc:  # e.g. an int with more digits than Python will print
        raise CanonicalizationError(str(exc)) from exc
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate from a model is a value too, not a crash


def canonical_result(result: Any, *, unordered: frozenset[str] = frozenset(),
                     limits: CanonicalLimits = DEFAULT_LIMITS) -> bytes:
    """Canonical bytes of a tool result.

    Text that is a JSON object or array is compared as the data it holds; other text is
    compared with line endings unified and trailing whitespace dropped, since transports
    differ in both and neither is part of what the tool said.
    """
    if isinstance(result, str):
        parsed = _parse_json_text(result, limits)
        if parsed is _NOT_JSON:
            lines = result.replace("\r\n", "\n").replace("\r", "\n").split("\n")
            result = "\n".join(line.rstrip() for line in lines).rstrip("\n")
        else:
            result = parsed
    return canonical_bytes(result, unordered=unordered, limits=limits)


_NOT_JSON = object()


def _parse_json_text(text: str, limits: CanonicalLimits) -> Any:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return _NOT_JSON
    if len(stripped) > limits.max_chars:
        raise CanonicalizationError(f"JSON text longer than {limits.max_chars} characters")
    try:
        return json.loads(stripped)
    except (json.JSONDecodeError, RecursionError):
        return _NOT_JSON
