"""The typed errors of the self-consistency gate."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from guardrail.consistency.decision import PlanVerdict

__all__ = ["ConsistencyError", "EpochNotFixedError", "HallucinationGateError"]


class ConsistencyError(Exception):
    """Base class of the gate's errors."""


class HallucinationGateError(ConsistencyError):
    """The gate would not let a sampled plan run: its arguments look fabricated, or it could not judge safely.

    `verdict` holds the agreement figures when the gate got as far as classifying the plan.
    """

    def __init__(self, message: str, verdict: PlanVerdict | None = None) -> None:
        super().__init__(message)
        self.verdict = verdict


class EpochNotFixedError(HallucinationGateError):
    """The samples did not all run in one fixed sandbox epoch, so the gate fails closed.

    Were the epoch allowed to move, the environment's own changes would show up as argument
    disagreement and real plans would be rejected as hallucinated. Pin the sandbox (one
    snapshot, one frozen clock) for the whole batch and tag every sample with its id.
    """
