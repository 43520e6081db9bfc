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
    """

    name: str
    deterministic: bool
    unordered_args: frozenset[str] = frozenset()
    unordered_result: frozenset[str] = frozenset()
    probe_args: Mapping[str, Any] | None = None

    @classmethod
    def from_json_schema(cls, name: str, parameters: Mapping[str, Any], *, deterministic: bool | None = None,
                         result_schema: Mapping[str, Any] | None = None,
                         probe_args: Mapping[str, Any] | None = None) -> ToolSchema:
        """A schema from a tool's JSON Schema (the `parameters` of a function tool).

        Arrays with ``uniqueItems: true`` or ``x-order-insensitive: true`` are order-insensitive;
        `deterministic` defaults to the schema's own ``deterministic`` (or ``x-deterministic``) key,
        and a schema that says nothing is treated as nondeterministic (unknown is not a promise).
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
        )


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

    def probe(self, runner: ToolRunner, *, epoch: EpochSource,
              tools: Iterable[str] | None = None) -> dict[str, ProbeOutcome]:
        """Probe each declared-deterministic tool: two identical calls must return byte-identical results.

        Both calls of a tool must see the same, non-None epoch; otherwise `EpochNotFixedError`,
        since a moving sandbox would make an honest tool look nondeterministic. A tool without
        `probe_args`, or whose two calls both raise, stays UNVERIFIED (unknown is not false); one
        raising call and one returning call differ, and fail the probe.
        """
        names = list(self._entries) if tools is None else list(tools)
        outcomes: dict[str, ProbeOutcome] = {}
        for name in names:
            entry = self._entries.get(name)
            if entry is None:
                raise KeyError(f"cannot probe {name!r}: no schema registered for it")
            if entry.status is DeterminismStatus.BY_CONTRACT:
                continue
            outcomes[name] = self._probe_one(entry, runner, epoch)
        return outcomes

    def _probe_one(self, entry: _Entry, runner: ToolRunner, epoch_source: EpochSource) -> ProbeOutcome:
        schema = entry.schema
        if schema.probe_args is None:
            return ProbeOutcome(schema.name, entry.status, None, error="no probe_args in the schema")
        started = time.perf_counter()
        epoch_before = read_epoch(epoch_source)
        if epoch_before is None:
            raise EpochNotFixedError(f"cannot probe {schema.name!r}: the sandbox epoch is not pinned (epoch is None)")
        try:
            first, first_failed = self._probe_call(runner, schema)
            second, second_failed = self._probe_call(runner, schema)
        except CanonicalizationError as exc:
            return ProbeOutcome(schema.name, entry.status, epoch_before, error=f"result not comparable: {exc}",
                                elapsed_s=time.perf_counter() - started)
        epoch_after = read_epoch(epoch_source)
        if epoch_after != epoch_before:
            raise EpochNotFixedError(
                f"the sandbox epoch moved from {epoch_before!r} to {epoch_after!r} while probing {schema.name!r}"
            )
        if first_failed and second_failed:
            # A tool that fails its probe both times says nothing about its determinism.
            return ProbeOutcome(schema.name, entry.status, epoch_before, first, second,
                                error=first.decode("utf-8", "replace"), elapsed_s=time.perf_counter() - started)
        with self._lock:
            if entry.status in (DeterminismStatus.UNVERIFIED, DeterminismStatus.VERIFIED):
                if first == second:
                    entry.status = DeterminismStatus.VERIFIED
                    entry.reason = "two identical probe calls returned byte-identical results"
                else:
                    entry.status = DeterminismStatus.PROBE_FAILED
                    entry.reason = "two identical probe calls in one epoch returned different results"
                    entry.evidence = {"first": first[:500].decode("utf-8", "replace"),
                                      "second": second[:500].decode("utf-8", "replace")}
            status = entry.status
        return ProbeOutcome(schema.name, status, epoch_before, first, second,
                            elapsed_s=time.perf_counter() - started)

    @staticmethod
    def _probe_call(runner: ToolRunner, schema: ToolSchema) -> tuple[bytes, bool]:
        """Canonical bytes of one probe call's outcome, and whether it raised (an error is an outcome too:
        a call that succeeds once and fails once on identical input is not deterministic)."""
        try:
            result = runner(schema.name, dict(schema.probe_args or {}))
        except Exception as exc:
            return canonical_result({"$error": f"{type(exc).__name__}: {exc}"}), True
        return canonical_result(result, unordered=schema.unordered_result), False
