"""Tool schemas and the determinism registry: a `deterministic: true` declaration counts only once probed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from guardrail.consistency.canonical import CanonicalizationError, canonical_result
from guardrail.consistency.errors import EpochNotFixedError
from guardrail.core.arguments import ArgumentSpec, argument_specs

__all__ = [
    "DeterminismRegistry",
    "DeterminismStatus",
    "EpochSource",
    "ProbeOutcome",
    "ToolRunner",
    "ToolSchema",
    "read_epoch",
]

# Runs one tool call in the sandbox: (tool name, arguments) -> the tool's result.
ToolRunner = Callable[[str, Mapping[str, Any]], Any]
# The sandbox epoch: a fixed id, or a function read before and after each batch (None = not pinned).
EpochSource = str | Callable[[], str | None] | None


def read_epoch(source: EpochSource) -> str | None:
    """The current epoch id from a fixed id or a callable."""
    value = source() if callable(source) else source
    return None if value is None else str(value)


@dataclass(frozen=True)
class ToolSchema:
    """What the gate needs to know about one tool.

    `deterministic` is the tool's own declaration: identical calls in one sandbox epoch return
    identical results. False means nondeterministic by contract (the time, a random sample):
    such tools are outside the gate's scope. `unordered_args` / `unordered_result` name the list
    paths whose order carries no meaning (see `canonicalize`). `probe_args` are the arguments
    the start-up probe calls the tool with; without them the declaration stays unverified.
    `arguments` says what kind of value each argument path holds (free text, identifier, ...;
    see `guardrail.core.arguments`); a path it does not name is judged by its name and
    value. `documentation` is the text the model was shown about the tool (descriptions, enum
    values, examples): a value it names is not invented. `execution_confirms`: a dry run of a
    call that returns something (no error, not empty) shows its identifiers exist, as for a
    lookup; say False for a tool that accepts any identifier (one that creates what it names).
    """

    name: str
    deterministic: bool
    unordered_args: frozenset[str] = frozenset()
    unordered_result: frozenset[str] = frozenset()
    probe_args: Mapping[str, Any] | None = None
    arguments: Mapping[str, ArgumentSpec] = field(default_factory=dict)
    documentation: str = ""
    execution_confirms: bool = True

    @classmethod
    def from_json_schema(cls, name: str, parameters: Mapping[str, Any], *, deterministic: bool | None = None,
                         result_schema: Mapping[str, Any] | None = None,
                         probe_args: Mapping[str, Any] | None = None, description: str = "") -> ToolSchema:
        """A schema from a tool's JSON Schema (the `parameters` of a function tool) and its description.

        Arrays with ``uniqueItems: true`` or ``x-order-insensitive: true`` are order-insensitive;
        `deterministic` defaults to the schema's own ``deterministic`` (or ``x-deterministic``) key,
        and a schema that says nothing is treated as nondeterministic (unknown is not a promise).
        Argument kinds come from `argument_specs` (``x-argument-kind`` / ``x-free-text``, else
        types, enums, formats, names); ``x-execution-confirms: false`` sets `execution_confirms`.
        """
        declared = deterministic
        if declared is None:
            declared = bool(parameters.get("deterministic", parameters.get("x-deterministic", False)))
        return cls(
            name=name,
            deterministic=declared,
            unordered_args=frozenset(_unordered_paths(parameters, "")),
            unordered_result=frozenset(_unordered_paths(result_schema or {}, "")),
            probe_args=probe_args,
            arguments=argument_specs(parameters),
            documentation=_documentation(description, parameters),
            execution_confirms=parameters.get("x-execution-confirms", True) is not False,
        )


def _documentation(description: str, schema: Mapping[str, Any], depth: int = 0) -> str:
    """The words a model is shown about a tool: its description and each argument's description, enum, examples."""
    parts = [description] if description else []
    if depth > 16:
        return ""
    for key in ("description", "title"):
        if depth and isinstance(schema.get(key), str):
            parts.append(schema[key])
    for key in ("enum", "examples"):
        if isinstance(schema.get(key), list):
            parts.extend(str(item) for item in schema[key])
    for key in ("const", "default"):
        if key in schema and depth:
            parts.append(str(schema[key]))
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for sub in properties.values():
            if isinstance(sub, Mapping):
                parts.append(_documentation("", sub, depth + 1))
    if isinstance(schema.get("items"), Mapping):
        parts.append(_documentation("", schema["items"], depth + 1))
    return "\n".join(part for part in parts if part)


def _unordered_paths(schema: Mapping[str, Any], path: str) -> Iterable[str]:
    kind = schema.get("type")
    if kind == "array" or "items" in schema:
        if schema.get("uniqueItems") or schema.get("x-order-insensitive"):
            yield path
        items = schema.get("items")
        if isinstance(items, Mapping):
            yield from _unordered_paths(items, path + "[]")
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for key, sub in properties.items():
            if isinstance(sub, Mapping):
                yield from _unordered_paths(sub, f"{path}.{key}" if path else str(key))


class DeterminismStatus(StrEnum):
    """Where a tool stands; only VERIFIED tools can have a plan rejected as hallucinated."""

    VERIFIED = "verified"  # declared deterministic and the probe saw byte-identical results
    UNVERIFIED = "unverified"  # declared deterministic, not (successfully) probed yet
    PROBE_FAILED = "probe_failed"  # declared deterministic, but two identical probe calls differed
    QUARANTINED = "quarantined"  # passed the probe, then identical calls in a batch diverged
    BY_CONTRACT = "nondeterministic_by_contract"  # declared nondeterministic: out of scope
    UNKNOWN = "unknown"  # no schema registered


@dataclass(frozen=True)
class ProbeOutcome:
    """What the start-up probe saw for one tool."""

    tool: str
    status: DeterminismStatus
    epoch: str | None
    first: bytes | None = None
    second: bytes | None = None
    error: str | None = None
    elapsed_s: float = 0.0


@dataclass
class _Entry:
    schema: ToolSchema
    status: DeterminismStatus
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)


class DeterminismRegistry:
    """Each tool's schema and whether its determinism declaration has held up.

    A declaration of `deterministic: true` starts UNVERIFIED; `probe` makes two identical calls
    in one sandbox epoch and marks the tool VERIFIED (byte-identical canonical results) or
    PROBE_FAILED. `quarantine` revokes a verified declaration when a batch catches the tool
    returning different results for identical calls. Thread-safe: one registry serves a harness.
    """

    def __init__(self, schemas: Iterable[ToolSchema] = ()) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        for schema in schemas:
            self.register(schema)

    def register(self, schema: ToolSchema) -> None:
        status = DeterminismStatus.UNVERIFIED if schema.deterministic else DeterminismStatus.BY_CONTRACT
        with self._lock:
            if schema.name in self._entries:
                raise ValueError(f"tool {schema.name!r} is already registered")
            self._entries[schema.name] = _Entry(schema, status)

    def schema(self, tool: str | None) -> ToolSchema | None:
        entry = self._entries.get(tool or "")
        return None if entry is None else entry.schema

    def status(self, tool: str | None) -> DeterminismStatus:
        entry = self._entries.get(tool or "")
        return DeterminismStatus.UNKNOWN if entry is None else entry.status

    def is_verified(self, tool: str | None) -> bool:
        return self.status(tool) is DeterminismStatus.VERIFIED

    def reason(self, tool: str) -> str:
        entry = self._entries.get(tool)
        return "" if entry is None else entry.reason

    @property
    def tools(self) -> list[str]:
        return list(self._entries)

    @property
    def misdeclared(self) -> list[str]:
        """Tools declared deterministic that the probe or a batch showed are not, in registration order."""
        bad = (DeterminismStatus.PROBE_FAILED, DeterminismStatus.QUARANTINED)
        return [name for name, entry in self._entries.items() if entry.status in bad]

    def statuses(self) -> dict[str, str]:
        return {name: entry.status.value for name, entry in self._entries.items()}

    def quarantine(self, tool: str, reason: str, evidence: Mapping[str, Any] | None = None) -> bool:
        """Revoke a tool's determinism declaration; True when this call changed its status."""
        with self._lock:
            entry = self._entries.get(tool)
            if entry is None or entry.status in (DeterminismStatus.BY_CONTRACT, DeterminismStatus.QUARANTINED,
                                                 DeterminismStatus.PROBE_FAILED):
                return False
            entry.status = DeterminismStatus.QUARANTINED
            entry.reason = reason
            entry.evidence = dict(evidence or {})
            return True

    def release(self, tool: str) -> None:
        """Lift a failed probe or a quarantine (the tool was fixed): the declaration is UNVERIFIED until probed.

        A passing probe alone never lifts a quarantine: a TTL cache passes two back-to-back calls
        and still diverges across a batch, so a person or a deployment step must say it changed.
        """
        with self._lock:
            entry = self._entries.get(tool)
            if entry is None:
                raise KeyError(f"no schema registered for {tool!r}")
            if entry.status in (DeterminismStatus.PROBE_FAILED, DeterminismStatus.QUARANTINED):
                entry.status = DeterminismStatus.UNVERIFIED
                entry.reason = "released; probe it again"
                entry.evidence = {}

    def probe(self, runner: ToolRunner, *, epoch: EpochSource, tools: Iterable[str] | None = None,
              rounds: int = 3, interval_s: float = 0.02,
              advance: Callable[[], None] | None = None) -> dict[str, ProbeOutcome]:
        """Probe each declared-deterministic tool: `rounds` identical calls must return byte-identical results.

        The rounds go across all tools, `interval_s` apart (so the whole probe waits
        ``(rounds - 1) * interval_s`` however many tools there are): a tool racing a writer or a
        reload between two calls fails here instead of mid-batch. `advance`, when given, runs
        between rounds to let the sandbox's own time pass (a simulated clock past a cache TTL, a
        sync tick): declarations that only break over time fail too. ``rounds=2, interval_s=0``
        is the record's two back-to-back calls.

        All calls must see the same, non-None epoch; otherwise `EpochNotFixedError` (and no status
        changes), since a moving sandbox would make an honest tool look nondeterministic. A tool
        without `probe_args`, or whose calls all raise, stays UNVERIFIED (unknown is not false);
        raising calls mixed with returning calls differ, and fail the probe.
        """
        if rounds < 2:
            raise ValueError(f"a determinism probe needs at least 2 rounds, got {rounds}")
        if interval_s < 0:
            raise ValueError(f"interval_s must be >= 0, got {interval_s}")
        names = list(self._entries) if tools is None else list(tools)
        outcomes: dict[str, ProbeOutcome] = {}
        probed: list[_Entry] = []
        for name in names:
            entry = self._entries.get(name)
            if entry is None:
                raise KeyError(f"cannot probe {name!r}: no schema registered for it")
            if entry.status is DeterminismStatus.BY_CONTRACT:
                continue
            if entry.schema.probe_args is None:
                outcomes[name] = ProbeOutcome(name, entry.status, None, error="no probe_args in the schema")
                continue
            probed.append(entry)
        if not probed:
            return outcomes
        epoch_before = read_epoch(epoch)
        if epoch_before is None:
            raise EpochNotFixedError(f"cannot probe {probed[0].schema.name!r}: the sandbox epoch is not pinned "
                                     "(epoch is None)")
        seen: dict[str, list[tuple[bytes, bool]]] = {entry.schema.name: [] for entry in probed}
        spent: dict[str, float] = dict.fromkeys(seen, 0.0)
        broken: dict[str, str] = {}
        for round_index in range(rounds):
            if round_index:
                if interval_s:
                    time.sleep(interval_s)
                if advance is not None:
                    advance()
            for entry in probed:
                name = entry.schema.name
                if name in broken:
                    continue
                started = time.perf_counter()
                try:
                    seen[name].append(self._probe_call(runner, entry.schema))
                except CanonicalizationError as exc:
                    broken[name] = f"result not comparable: {exc}"
                spent[name] += time.perf_counter() - started
        epoch_after = read_epoch(epoch)
        if epoch_after != epoch_before:
            raise EpochNotFixedError(
                f"the sandbox epoch moved from {epoch_before!r} to {epoch_after!r} while probing "
                f"{[entry.schema.name for entry in probed][:5]}")
        for entry in probed:
            name = entry.schema.name
            outcomes[name] = self._settle(entry, seen[name], broken.get(name), epoch_before, spent[name])
        return outcomes

    def _settle(self, entry: _Entry, calls: list[tuple[bytes, bool]], broken: str | None, epoch: str,
                elapsed_s: float) -> ProbeOutcome:
        """Turn one tool's probe calls into its status."""
        name = entry.schema.name
        first = calls[0][0] if calls else None
        if broken is not None:
            return ProbeOutcome(name, entry.status, epoch, first, error=broken, elapsed_s=elapsed_s)
        if all(failed for _, failed in calls):
            # A tool that fails its probe every time says nothing about its determinism.
            assert first is not None
            return ProbeOutcome(name, entry.status, epoch, first, calls[-1][0],
                                error=first.decode("utf-8", "replace"), elapsed_s=elapsed_s)
        differing = next((outcome for outcome, _ in calls if outcome != first), None)
        with self._lock:
            if entry.status in (DeterminismStatus.UNVERIFIED, DeterminismStatus.VERIFIED):
                if differing is None:
                    entry.status = DeterminismStatus.VERIFIED
                    entry.reason = f"{len(calls)} identical probe calls returned byte-identical results"
                else:
                    assert first is not None
                    entry.status = DeterminismStatus.PROBE_FAILED
                    entry.reason = f"{len(calls)} identical probe calls in one epoch did not all return the same result"
                    entry.evidence = {"first": first[:500].decode("utf-8", "replace"),
                                      "second": differing[:500].decode("utf-8", "replace")}
            status = entry.status
        return ProbeOutcome(name, status, epoch, first, differing if differing is not None else calls[-1][0],
                            elapsed_s=elapsed_s)

    @staticmethod
    def _probe_call(runner: ToolRunner, schema: ToolSchema) -> tuple[bytes, bool]:
        """Canonical bytes of one probe call's outcome, and whether it raised (an error is an outcome too:
        a call that succeeds once and fails once on identical input is not deterministic)."""
        try:
            result = runner(schema.name, dict(schema.probe_args or {}))
        except Exception as exc:
            return canonical_result({"$error": f"{type(exc).__name__}: {exc}"}), True
        return canonical_result(result, unordered=schema.unordered_result), False
