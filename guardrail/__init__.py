"""guardrail: a runtime guard for LLM agents (gate, self-consistency, step monitor, verifiers, repair)."""

from guardrail.events import (
    HEALTHY,
    Action,
    ActionKind,
    Decision,
    Episode,
    Finding,
    Result,
    Severity,
    Step,
    StepKind,
    ToolEvent,
    Verdict,
)
from guardrail.guard import Guard, GuardError
from guardrail.layer import EpisodeContext, Layer

__version__ = "0.1.0"

__all__ = [
    "HEALTHY",
    "Action",
    "ActionKind",
    "Decision",
    "Episode",
    "EpisodeContext",
    "Finding",
    "Guard",
    "GuardError",
    "Layer",
    "Result",
    "Severity",
    "Step",
    "StepKind",
    "ToolEvent",
    "Verdict",
    "__version__",
]
