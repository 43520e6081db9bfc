"""The completion check: a run whose final step is empty or a bare tool call did not finish (../shared/seeds/002 §3)."""

from __future__ import annotations

import re

from guardrail.events import Episode, Finding, Severity, StepKind

__all__ = ["completion_finding", "is_incomplete"]

# A final message that is nothing but a tool-call rendering, e.g. "[search({...}) -> ...]" or "search({...})".
_BARE_CALL = re.compile(r"^\s*\[?\s*[A-Za-z_][\w.]*\s*\((.|\n)*\)\s*(->.*)?\]?\s*$")


def is_incomplete(episode: Episode, answer: str | None = None) -> str | None:
    """Why the run did not finish (None when it did): no steps, no final answer, an empty one, or a bare tool call."""
    text = answer if answer is not None else episode.answer
    if text is None:
        if not episode.steps:
            return "the run has no steps"
        last = episode.steps[-1]
        if last.kind is StepKind.TOOL_CALL:
            return "the run ended on a tool call, with no final answer"
        text = last.text
    if not text.strip():
        return "the final answer is empty"
    if _BARE_CALL.match(text) and len(text) < 2000:
        return "the final answer is a bare tool call, not an answer"
    return None


def completion_finding(episode: Episode, answer: str | None = None, *, layer: str = "monitor") -> Finding | None:
    reason = is_incomplete(episode, answer)
    if reason is None:
        return None
    return Finding(layer=layer, check="completion", message=f"Incomplete run: {reason}.",
                   evidence={"n_steps": len(episode.steps)}, severity=Severity.WARNING,
                   step=len(episode.steps) - 1 if episode.steps else None,
                   hint="ask the agent to finish with a direct answer")
