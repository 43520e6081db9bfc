"""OpenTelemetry GenAI spans from files as episodes, through the same span-to-step rules as the live `GuardSpanProcessor`.

A file holds spans in any of three shapes, told apart per item:

- OTLP JSON, one export per line (``{"resourceSpans": [...]}``): what an OpenTelemetry Collector's
  file exporter writes (trace and span ids in hex, or base64 as protobuf's JSON mapping writes them);
- the SDK's ``ConsoleSpanExporter`` output (``span.to_json()``: ``context.trace_id``, ISO times),
  one per line or pretty-printed one after another;
- flat span records (``trace_id``, ``span_id``, ``attributes`` as an object; ``traces/demo.py``
  writes a JSON array of them to ``spans.json``).

Spans are grouped into episodes by ``gen_ai.conversation.id`` when a trace carries one, else by
trace (episode id ``trace-<trace id>``, as the live processor names it). Within a trace, spans are
taken in the order they ended (the order the live processor sees them); a conversation's traces in
the order they started. Only ``chat`` (and ``text_completion`` / ``generate_content``) and
``execute_tool`` spans make steps (`adapters.genai_spans`). A span file is outside input: a line
that is not JSON, too long or nested too deep is one problem; a span without ids is one problem;
an episode whose content attribute is too large or too deep to read (a step would be lost) is one
problem naming the span, and is left out whole. Everything else is imported.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode

from adapters.genai_spans import (
    CHAT_OPERATIONS,
    MAX_ATTRIBUTE_CHARS,
    SpanSteps,
    finished_step,
    first_user_text,
    is_guard_span,
    operation_of,
    tool_call_of,
)
from guardrail.app.importers.store import MAX_STEPS, Imported, problem
from guardrail.core.corpus import MAX_DEPTH
from guardrail.core.events import Episode, Step
from guardrail.core.fileio import json_nesting_exceeds

__all__ = ["MAX_FILE_BYTES", "MAX_LINE_BYTES", "otlp_episodes"]

MAX_LINE_BYTES = 64 * 1024 * 1024  # one OTLP export line (a collector batches many spans per line)
MAX_FILE_BYTES = 256 * 1024 * 1024  # a file that is not JSON lines is parsed whole: no larger than this
CONVERSATION_ID = "gen_ai.conversation.id"
_SYSTEM_KEYS = ("gen_ai.system", "gen_ai.provider.name")
# Content attributes the step rules parse as JSON: too large or too deep, the step they make would be wrong.
_JSON_ATTRIBUTES = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments")
# OTLP JSON spends about four JSON levels per level of an attribute value (kvlistValue, values, [, {key, value}):
# a line nested deeper than this cannot be an export of sane attributes, and is refused before it is parsed.
_LINE_DEPTH = 8 * MAX_DEPTH
_HEX_ID = re.compile(r"(?:0x)?([0-9a-fA-F]{16}|[0-9a-fA-F]{32})")


class _BadItem(ValueError):
    """One span or item that cannot be read (its message says why)."""


@dataclass
class _Trace:
    spans: list[tuple[int, ReadableSpan]] = field(default_factory=list)  # (file order, span)
    conversation: str | None = None
    problem: str | None = None  # the first span that makes this trace unreadable, and why


# ------------------------------------------------------------------------------------------- values
def _id(value: Any, what: str) -> tuple[str, int]:
    """An id as (lower hex, int): hex as OTLP JSON and the SDK write it, base64 as protobuf's JSON mapping does."""
    if not isinstance(value, str) or not value:
        raise _BadItem(f"no {what}")
    found = _HEX_ID.fullmatch(value)
    if found:
        text = found.group(1).lower()
        return text, int(text, 16)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) in (8, 16):
        return raw.hex(), int.from_bytes(raw, "big")
    if len(value) > 256:
        raise _BadItem(f"{what} is {len(value)} characters long")
    digest = hashlib.sha256(value.encode("utf-8", "replace")).digest()[:16]  # an id of another shape: opaque
    return value, int.from_bytes(digest, "big") or 1


def _any_value(value: Any, depth: int = 0) -> Any:
    """An OTLP JSON ``AnyValue`` as a Python value."""
    if depth > MAX_DEPTH:
        raise _BadItem(f"an attribute value nests deeper than {MAX_DEPTH} levels")
    if not isinstance(value, Mapping):
        raise _BadItem(f"an attribute value is a {type(value).__name__}, not an AnyValue object")
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an intValue of Infinity
            raise _BadItem(f"intValue {str(value['intValue'])[:40]!r} is not an integer") from exc
    if "doubleValue" in value:
        try:
            return float(value["doubleValue"])
        except (TypeError, ValueError) as exc:
            raise _BadItem("doubleValue is not a number") from exc
    if "arrayValue" in value:
        values = (value["arrayValue"] or {}).get("values") if isinstance(value["arrayValue"], Mapping) else None
        return [_any_value(v, depth + 1) for v in values or []]
    if "kvlistValue" in value:
        pairs = (value["kvlistValue"] or {}).get("values") if isinstance(value["kvlistValue"], Mapping) else None
        return _attributes(pairs or [], depth + 1)
    if "bytesValue" in value:
        return str(value["bytesValue"])
    return None


def _attributes(pairs: Any, depth: int = 0) -> dict[str, Any]:
    if not isinstance(pairs, list):
        raise _BadItem("attributes is not a list of key/value pairs")
    out: dict[str, Any] = {}
    for pair in pairs:
        if not isinstance(pair, Mapping) or not isinstance(pair.get("key"), str):
            raise _BadItem("an attribute without a string key")
        out[pair["key"]] = _any_value(pair.get("value") or {}, depth)
    return out


def _plain_attributes(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _BadItem(f"attributes is a {type(value).__name__}, not an object")
    return {str(k): v for k, v in value.items()}


def _nanos(value: Any, what: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise _BadItem(f"{what} is not a time")
    if isinstance(value, float) and not math.isfinite(value):
        raise _BadItem(f"{what} is {value}, not a time")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        if value.isdigit():
            return int(value)
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise _BadItem(f"{what} {value[:40]!r} is not a time") from exc
        return int(stamp.timestamp() * 1_000_000) * 1000
    raise _BadItem(f"{what} is a {type(value).__name__}, not a time")


def _status(code: Any, description: Any) -> Status:
    failed = code in (2, "2", "STATUS_CODE_ERROR", "ERROR", "StatusCode.ERROR")
    return Status(StatusCode.ERROR if failed else StatusCode.UNSET,
                  str(description)[:MAX_ATTRIBUTE_CHARS] if failed and description else None)


def _span(trace_id: Any, span_id: Any, parent_id: Any, name: Any, start: Any, end: Any, status: Status,
          attributes: dict[str, Any], scope: str | None = None) -> tuple[str, ReadableSpan]:
    """(trace key, the span as the SDK's own ReadableSpan: what the live span processor reads)."""
    trace_key, trace_int = _id(trace_id, "trace id")
    _, span_int = _id(span_id, "span id")
    parent = SpanContext(trace_int, _id(parent_id, "parent span id")[1], is_remote=False) if parent_id else None
    return trace_key, ReadableSpan(name=str(name or ""), context=SpanContext(trace_int, span_int, is_remote=False),
                                   parent=parent, attributes=attributes, status=status,
                                   start_time=_nanos(start, "start time"), end_time=_nanos(end, "end time"),
                                   instrumentation_scope=InstrumentationScope(scope) if scope else None)


def _otlp_spans(export: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(where, raw span with its scope's name under ``_scope``) of every span in one OTLP JSON export."""
    resources = export.get("resourceSpans")
    if not isinstance(resources, list):
        raise _BadItem(f"resourceSpans is a {type(resources).__name__}, not a list")
    for r, resource in enumerate(resources):
        scopes = (resource.get("scopeSpans") or resource.get("instrumentationLibrarySpans") or []) \
            if isinstance(resource, Mapping) else []
        for s, scope in enumerate(scopes if isinstance(scopes, list) else []):
            spans = scope.get("spans") if isinstance(scope, Mapping) else None
            about = scope.get("scope") if isinstance(scope, Mapping) else None
            name = about.get("name") if isinstance(about, Mapping) and isinstance(about.get("name"), str) else None
            for k, raw in enumerate(spans if isinstance(spans, list) else []):
                yield f"resourceSpans[{r}].scopeSpans[{s}].spans[{k}]", (name, raw)


def _read_otlp_span(item: Any) -> tuple[str, ReadableSpan]:
    scope, raw = item
    if not isinstance(raw, Mapping):
        raise _BadItem("not a span object")
    status: Mapping[str, Any] = raw["status"] if isinstance(raw.get("status"), Mapping) else {}
    return _span(raw.get("traceId"), raw.get("spanId"), raw.get("parentSpanId"), raw.get("name"),
                 raw.get("startTimeUnixNano"), raw.get("endTimeUnixNano"),
                 _status(status.get("code"), status.get("message")), _attributes(raw.get("attributes") or []), scope)


def _read_flat_span(raw: Any) -> tuple[str, ReadableSpan]:
    context = raw.get("context")
    if isinstance(context, Mapping):  # the SDK's span.to_json()
        state: Mapping[str, Any] = raw["status"] if isinstance(raw.get("status"), Mapping) else {}
        return _span(context.get("trace_id"), context.get("span_id"), raw.get("parent_id"), raw.get("name"),
                     raw.get("start_time"), raw.get("end_time"),
                     _status(state.get("status_code"), state.get("description")),
                     _plain_attributes(raw.get("attributes")))
    status = raw.get("status")
    return _span(raw.get("trace_id"), raw.get("span_id"), raw.get("parent_span_id"), raw.get("name"),
                 raw.get("start_time_unix_nano"), raw.get("end_time_unix_nano"),
                 _status(status.get("status_code") if isinstance(status, Mapping) else status, None),
                 _plain_attributes(raw.get("attributes")))


# ------------------------------------------------------------------------------------------- files
def _lines(path: Path, sink: list[Imported]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each JSON line; one problem per line that cannot be read."""
    with open(path, "rb") as handle:
        lineno = 0
        while True:
            line = handle.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            lineno += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # skip the rest of the line without holding it
                    line = handle.readline(1 << 20)
                sink.append(problem(str(path), f"line longer than {MAX_LINE_BYTES} bytes: skipped", lineno))
                continue
            if not line.strip():
                continue
            if json_nesting_exceeds(line, _LINE_DEPTH):
                sink.append(problem(str(path), f"JSON nested deeper than {_LINE_DEPTH} levels: skipped", lineno))
                continue
            try:
                yield lineno, json.loads(line)
            except (ValueError, RecursionError) as exc:
                sink.append(problem(str(path), f"not valid JSON ({type(exc).__name__}): skipped", lineno))


def _is_json_lines(path: Path) -> bool:
    """True unless the file's first line is not a JSON value on its own (a JSON array, pretty-printed spans)."""
    with open(path, "rb") as handle:
        first = handle.readline(MAX_LINE_BYTES + 1).strip()
        while not first:
            line = handle.readline(MAX_LINE_BYTES + 1)
            if not line:
                return True
            first = line.strip()
    if first.startswith(b"["):
        return False
    try:
        json.loads(first)
    except (ValueError, RecursionError):
        return not first.startswith(b"{")  # a "{" that does not close on its line: pretty-printed objects
    return True


def _whole(path: Path, sink: list[Imported]) -> Iterator[tuple[int, Any]]:
    """(item number, value) of a file of JSON values one after another (a JSON array counts its elements)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        sink.append(problem(str(path), f"{size} bytes of JSON that is not one value per line (at most "
                                       f"{MAX_FILE_BYTES}): skipped"))
        return
    data = path.read_bytes()
    if json_nesting_exceeds(data, _LINE_DEPTH):
        sink.append(problem(str(path), f"JSON nested deeper than {_LINE_DEPTH} levels: skipped"))
        return
    text = data.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    position, number = 0, 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return
        try:
            value, position = decoder.raw_decode(text, position)
        except (ValueError, RecursionError) as exc:
            sink.append(problem(str(path), f"not valid JSON at character {position} ({type(exc).__name__}): "
                                           "the rest of the file is skipped"))
            return
        for item in value if isinstance(value, list) else [value]:
            number += 1
            yield number, item


_Reader = Callable[[Any], tuple[str, ReadableSpan]]


def _items(path: Path, sink: list[Imported]) -> Iterator[tuple[int | None, str, _Reader, Any]]:
    """(line, where in the line, its reader, raw span) of every span of a file; one problem per item that is not spans."""
    json_lines = _is_json_lines(path)
    for number, value in (_lines(path, sink) if json_lines else _whole(path, sink)):
        line, prefix = (number, "") if json_lines else (None, f"item {number}: ")
        if isinstance(value, Mapping) and "resourceSpans" in value:
            try:
                for where, raw in _otlp_spans(value):
                    yield line, prefix + where, _read_otlp_span, raw
            except _BadItem as exc:
                sink.append(problem(str(path), f"{prefix}{exc}: skipped", line))
        elif isinstance(value, Mapping) and ("trace_id" in value or isinstance(value.get("context"), Mapping)):
            yield line, prefix.rstrip(": "), _read_flat_span, value
        else:
            sink.append(problem(str(path), f"{prefix}not an OTLP export (resourceSpans), an SDK span or a span "
                                           "record: skipped", line))


def _content_problem(span: ReadableSpan) -> str | None:
    for key in _JSON_ATTRIBUTES:
        value = (span.attributes or {}).get(key)
        if not isinstance(value, str):
            continue
        if len(value) > MAX_ATTRIBUTE_CHARS:
            return f"{key} is {len(value)} characters, more than the {MAX_ATTRIBUTE_CHARS} read"
        if json_nesting_exceeds(value.encode("utf-8", "replace"), MAX_DEPTH):
            return f"{key} nests deeper than {MAX_DEPTH} levels"
    return None


def _collect(paths: Iterable[str | os.PathLike[str]], sink: list[Imported]) -> dict[str, _Trace]:
    traces: dict[str, _Trace] = {}
    order = 0
    for given in paths:
        path = Path(given)
        if not path.is_file():
            sink.append(problem(str(path), "no such file (or not a regular file): skipped"))
            continue
        file = str(path)
        try:
            for line, where, reader, raw in _items(path, sink):
                order += 1
                try:
                    trace_key, span = reader(raw)
                except _BadItem as exc:
                    sink.append(problem(file, f"{where + ': ' if where else ''}{exc}: span skipped", line))
                    continue
                state = traces.setdefault(trace_key, _Trace())
                conversation = (span.attributes or {}).get(CONVERSATION_ID)
                if state.conversation is None and isinstance(conversation, str | int) and str(conversation):
                    state.conversation = str(conversation)[:200]
                if is_guard_span(span) or operation_of(span) not in (*CHAT_OPERATIONS, "execute_tool"):
                    continue
                why = _content_problem(span)
                if why is not None and state.problem is None:
                    state.problem = f"{file}{':' + str(line) if line else ''}: span {span.name[:80]!r}: {why}"
                state.spans.append((order, span))
        except OSError as exc:
            sink.append(problem(str(path), f"cannot read ({exc.strerror or exc}): the rest is skipped"))
    return traces


def _episode(episode_id: str, traces: list[tuple[str, _Trace]], framework: str | None) -> Imported:
    bad = next((t.problem for _, t in traces if t.problem), None)
    if bad is not None:
        return problem(episode_id, f"{bad}: episode skipped (a step of it cannot be read)")
    assembler, ready, task, system = SpanSteps(), [], None, None
    for _, state in traces:
        # The live processor sees spans as they end; parallel tool calls keep the file's order among equals.
        for _, span in sorted(state.spans, key=lambda item: (item[1].end_time or 0, item[0])):
            attributes = span.attributes or {}
            system = system or next((str(attributes[k]) for k in _SYSTEM_KEYS if isinstance(attributes.get(k), str)),
                                    None)
            if operation_of(span) in CHAT_OPERATIONS:
                task = task or first_user_text(span)
                ready += assembler.chat(span)
            else:
                ready += assembler.tool(tool_call_of(span))
    ready += assembler.take(final=True)
    if len(ready) > MAX_STEPS:
        return problem(episode_id, f"{len(ready)} steps, more than the {MAX_STEPS} an episode may store: skipped")
    steps: list[Step] = [finished_step(pending, index) for index, pending in enumerate(ready)]
    return Episode(episode_id=episode_id, steps=steps, task=task, framework=framework or system or "otel",
                   meta={"traces": [key for key, _ in traces][:100]})


def otlp_episodes(paths: Iterable[str | os.PathLike[str]], *, framework: str | None = None) -> Iterator[Imported]:
    """The GenAI runs in span files (see the module docstring) as episodes, plus one problem per item left out."""
    sink: list[Imported] = []
    traces = _collect(paths, sink)
    yield from sink
    groups: dict[str, list[tuple[str, _Trace]]] = {}
    for key, state in traces.items():
        if state.spans:
            episode_id = state.conversation or f"trace-{key}"
            groups.setdefault(episode_id, []).append((key, state))
    for episode_id, members in groups.items():
        members.sort(key=lambda item: min(s.start_time or 0 for _, s in item[1].spans))
        yield _episode(episode_id, members, framework)
