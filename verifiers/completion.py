"""completion: the run ends with an answer, not with nothing and not with a bare tool call."""

from __future__ import annotations

import json
import re

from guardrail.core.events import Episode, Finding, StepKind
from verifiers.observed import finding

__all__ = ["check_completion", "is_bare_tool_call"]

_CALL_TEXT = re.compile(r"^\s*\[?\s*[A-Za-z_][\w.]*\s*\((?s:.*)\)\s*(?:->.*)?\]?\s*$")


def is_bare_tool_call(text: str) -> bool:
    """True for an answer that is only a tool call: ``lookup_flight({...})`` or a JSON call object."""
    stripped = text.strip()
    if _CALL_TEXT.match(stripped) and " " not in stripped.split("(", 1)[0]:
        return True
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except json.JSONDecodeError:
            return False
        return isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj or "args" in obj)
    return False


def check_completion(episode: Episode) -> list[Finding]:
    """One finding when the final step is missing, empty, or a bare tool call."""
    if not episode.steps:
        return [finding("completion", "the run has no steps at all", step=None)]
    last = episode.steps[-1]
    if last.kind is StepKind.TOOL_CALL:
        return [finding("completion", "the run ended on a tool call with no answer after it", step=last.index,
                        hint="finish with an answer that states the result")]
    if not last.text.strip():
        return [finding("completion", "the final answer is empty", step=last.index,
                        hint="state the result the task asked for")]
    if is_bare_tool_call(last.text):
        return [finding("completion", f"the final answer is a bare tool call: {last.text.strip()[:120]!r}",
                        step=last.index, hint="run the tool, then answer in words")]
    return []
