"""Repair rungs: the hint each rung sends after rollback (resample sends none), and the adaptive policy."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from guardrail.core.events import Finding, Severity

__all__ = [
    "ARITHMETIC_CHECKS",
    "RUNGS",
    "Hint",
    "Rung",
    "RungNotApplicable",
    "adaptive_rung",
    "make_hint",
]

Rung = Literal["resample", "generic", "located", "specific", "recompute", "adaptive"]
RUNGS: tuple[Rung, ...] = ("resample", "generic", "located", "specific", "recompute", "adaptive")

# Checks whose failure is a wrong number: the recompute rung routes those to a calculator.
ARITHMETIC_CHECKS = frozenset({"total_consistency", "numeric_grounding", "arithmetic"})
# Evidence keys that carry values rather than the check's own bookkeeping (only `specific` shows values).
_VALUE_KEYS = ("expected", "recomputed", "computed", "correct", "stated", "observed", "missing", "values")
_MAX_HINT_CHARS = 1200  # evidence comes from tool results the agent saw: keep the hint bounded

GENERIC_TEXT = "Before you give your final answer, re-check your work against the tool results you received."


class RungNotApplicable(Exception):
    """This rung cannot be used for this run (e.g. recompute with no calculator tool); the message says why."""


@dataclass(frozen=True)
class Hint:
    """What a rung sends the model after rollback: nothing (resample) or one user message."""

    rung: Rung
    text: str | None
    check: str | None = None
    step: int | None = None


def _primary(findings: Sequence[Finding]) -> Finding | None:
    """The finding the hint is about: the earliest blocking finding or alarm (ties: the first reported)."""
    flagged = [f for f in findings if f.blocking or f.severity is Severity.ALARM]
    if not flagged:
        return findings[0] if findings else None
    return min(flagged, key=lambda f: (f.step if f.step is not None else 10**9))


def _where(finding: Finding) -> str:
    check = finding.check if finding.layer in ("", finding.check) else f"{finding.layer}/{finding.check}"
    at = f" at step {finding.step}" if finding.step is not None else ""
    onset = finding.evidence.get("onset_step") if finding.severity is Severity.ALARM else None
    if isinstance(onset, int) and finding.step is not None and onset < finding.step:
        at += f" (the run departed from step {onset})"  # the step the fork re-runs from, or just after it
    return f"The check `{check}` failed{at}."


def _values(evidence: dict[str, Any]) -> str:
    shown = [f"{key} = {evidence[key]!r}" for key in _VALUE_KEYS if key in evidence]
    return "; ".join(shown)


def adaptive_rung(findings: Sequence[Finding], attempt: int, tools: Collection[str] = (),
                  calculator: str = "calculator") -> Rung:
    """The adaptive policy: name the failing check first (the rung that held up in the paper), then escalate detail.

    Attempt 0 -> located; attempt 1 -> recompute when the failure is arithmetic and the agent
    holds a calculator, else specific; later attempts -> generic.
    """
    if attempt == 0:
        return "located"
    if attempt == 1:
        primary = _primary(findings)
        if primary is not None and primary.check in ARITHMETIC_CHECKS and calculator in tools:
            return "recompute"
        return "specific"
    return "generic"


def make_hint(rung: Rung, findings: Sequence[Finding], *, attempt: int = 0, tools: Collection[str] = (),
              calculator: str = "calculator") -> Hint:
    """The hint for `rung` about `findings`. Raises RungNotApplicable when the rung cannot apply here."""
    if rung == "adaptive":
        chosen = adaptive_rung(findings, attempt, tools, calculator)
        inner = make_hint(chosen, findings, attempt=attempt, tools=tools, calculator=calculator)
        return Hint(rung=chosen, text=inner.text, check=inner.check, step=inner.step)
    primary = _primary(findings)
    check = primary.check if primary else None
    step = primary.step if primary else None
    if rung == "resample":
        return Hint(rung=rung, text=None, check=check, step=step)
    if rung == "generic":
        return Hint(rung=rung, text=GENERIC_TEXT, check=check, step=step)
    if primary is None:
        raise RungNotApplicable(f"rung {rung!r} names a failing check, and no finding was given")
    located = _where(primary) + " Re-check that step against the tool results before answering."
    if rung == "located":
        return Hint(rung=rung, text=located, check=check, step=step)
    if rung == "specific":
        values = _values(primary.evidence)
        text = _where(primary) + (f" Recomputed from the tool results: {values}." if values else "")
        if primary.hint:
            text += f" {primary.hint.rstrip('.')}."
        text += " Correct the answer accordingly."
        return Hint(rung=rung, text=text[:_MAX_HINT_CHARS], check=check, step=step)
    if rung == "recompute":
        if calculator not in tools:
            raise RungNotApplicable(
                f"recompute routes the step to the `{calculator}` tool, which this agent does not hold "
                f"(its tools: {sorted(tools)})"
            )
        text = (_where(primary) + f" Recompute every number in that step with the `{calculator}` tool, "
                "then answer using its results.")
        return Hint(rung=rung, text=text, check=check, step=step)
    raise ValueError(f"unknown rung {rung!r}; expected one of {RUNGS}")
