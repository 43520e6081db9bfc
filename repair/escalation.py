"""Escalation: contract violations and broken tool layers go to the application as an event, never into a retry."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from guardrail.core.events import Finding, Severity

__all__ = ["ESCALATED_CHECKS", "Escalation", "EscalationHandler", "escalation_for", "log_escalation"]

logger = logging.getLogger("guardrail.repair")

# A retry fetches the same broken result from a broken tool, and a guard that failed cannot judge a retry:
# these go to the application (paper, section 10: "A contract violation is escalated, never repaired").
ESCALATED_CHECKS = frozenset({"tool_contract", "internal_error"})

EscalationReason = Literal["contract_violation", "guard_error", "loop", "repair_exhausted", "step_budget", "alarm"]


class Escalation(BaseModel):
    """The event an application receives when the guard hands a run back instead of repairing it."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str
    reason: EscalationReason
    message: str
    step: int | None = None
    findings: list[Finding] = Field(default_factory=list)
    attempts: int = 0  # repair attempts made before escalating (0 for a contract violation)


EscalationHandler = Callable[[Escalation], None]


def log_escalation(event: Escalation) -> None:
    """The default handler: one warning on the `guardrail.repair` logger."""
    logger.warning("escalated %s (%s) at step %s: %s", event.episode_id, event.reason, event.step, event.message)


def escalation_for(episode_id: str, findings: Sequence[Finding],
                   escalated_checks: Collection[str] = ESCALATED_CHECKS) -> Escalation | None:
    """An Escalation when any finding is of a kind that must not be retried, else None."""
    hits = [f for f in findings if f.check in escalated_checks]
    if not hits:
        return None
    guard_errors = [f for f in hits if f.check == "internal_error" or f.severity is Severity.ERROR]
    first = min(hits, key=lambda f: f.step if f.step is not None else 10**9)
    reason: EscalationReason = "guard_error" if len(guard_errors) == len(hits) else "contract_violation"
    return Escalation(
        episode_id=episode_id,
        reason=reason,
        message="; ".join(f"{f.layer}/{f.check}: {f.message}" for f in hits)[:2000],
        step=first.step,
        findings=list(hits),
    )
