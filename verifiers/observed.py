"""What a run observed: its tool calls in order, each result classified against the spec.

Every check reads a run's calls through `call_from_event` (offline) or the layer (live), so the
checks agree on which results are values, which are declared errors and which are malformed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardrail.core.events import Finding, Severity, ToolEvent
from verifiers.contract import Classified, Contract, classify_result
from verifiers.spec import VerifierSpec

__all__ = ["LAYER", "Call", "arg_key", "finding", "call_from_event", "undecided"]

LAYER = "verifier"


@dataclass(frozen=True)
class Call:
    """One tool call the run made and what came back, with the step it happened in."""

    step: int
    tool: str
    args: Any
    result: str | None
    classified: Classified

    def arg(self, name: str) -> str | None:
        """An argument's value as a comparable string (casefolded), or None when absent."""
        args = self.args
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return None
        if not isinstance(args, Mapping) or name not in args:
            return None
        return str(args[name]).strip().casefold()

    @property
    def made(self) -> bool:
        """The call got an answer of a declared non-error shape (a value or a legitimate 'no data')."""
        return self.classified.kind in ("value", "empty", "unchecked")


def arg_key(call: Call, names: list[str]) -> tuple[str | None, ...]:
    """The identity of a call by the named arguments (all arguments, as JSON, when none are named)."""
    if names:
        return tuple(call.arg(n) for n in names)
    return (json.dumps(call.args, sort_keys=True, default=str),)


def call_from_event(spec: VerifierSpec, step: int, event: ToolEvent,
                    contracts: Mapping[str, Contract] | None = None) -> Call:
    contract = (contracts or {}).get(event.name)
    return Call(step, event.name, event.args, event.result,
                classify_result(spec, event.name, event.result, is_error=event.is_error, contract=contract))


def finding(check: str, message: str, *, step: int | None, evidence: dict[str, Any] | None = None,
            hint: str | None = None) -> Finding:
    """A verifier finding: blocking, so intervene mode asks for repair (or blocks a malformed result)."""
    return Finding(layer=LAYER, check=check, message=message, step=step, evidence=evidence or {},
                   hint=hint, blocking=True, severity=Severity.WARNING)


def undecided(check: str, message: str, *, step: int | None, evidence: dict[str, Any] | None = None) -> Finding:
    """A note that a check could not decide within its work bound: informational, never a flag or a block."""
    return Finding(layer=LAYER, check=check, message=message, step=step, evidence=evidence or {},
                   blocking=False, severity=Severity.INFO)
