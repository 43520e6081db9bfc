"""guardrail: a runtime guard for LLM agents (gate, self-consistency, step monitor, verifiers, repair).

This module is the public facade. The event model and the pipeline come from `guardrail.core`;
``Guard`` is the pipeline plus ``Guard.default(...)``, which assembles the layers
(`guardrail.app.assemble`) and is loaded on first use, so importing a core module never loads a layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guardrail.core.events import (
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
from guardrail.core.guard import GuardError
from guardrail.core.layer import EpisodeContext, Layer

if TYPE_CHECKING:
    from guardrail.app.assemble import Guard, LayerUnavailable

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
    "LayerUnavailable",
    "Result",
    "Severity",
    "Step",
    "StepKind",
    "ToolEvent",
    "Verdict",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in ("Guard", "LayerUnavailable"):
        from guardrail.app import assemble

        return getattr(assemble, name)
    if name == "__version__":
        from guardrail.core.version import version

        return version()
    raise AttributeError(f"module 'guardrail' has no attribute {name!r}")
