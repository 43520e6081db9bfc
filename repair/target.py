"""Where to roll back to: the last fact-gathering step before the flagged step (an alarm's onset), never past the task start."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from guardrail.core.events import Finding, Severity, Step

__all__ = ["flagged_step", "is_fact_gathering", "onset_step", "rollback_step"]


def onset_step(finding: Finding) -> int | None:
    """Where the trouble a finding reports began: a monitor alarm's ``evidence["onset_step"]`` (the step where
    the departure behind the crossing began, e.g. a CUSUM's change point) when it gives one, else its step."""
    onset = finding.evidence.get("onset_step") if finding.severity is Severity.ALARM else None
    if isinstance(onset, int) and not isinstance(onset, bool) and onset >= 0:
        return onset if finding.step is None else min(onset, finding.step)
    return finding.step


def flagged_step(findings: Iterable[Finding]) -> int | None:
    """The earliest step a finding asks to repair: a monitor alarm's onset, a verifier's failing step, a gate's
    blocked call.

    Only blocking findings and alarms count; a finding without a step (an end-of-run check
    that cannot say where it went wrong) returns None and the caller uses the final step.
    """
    steps = [onset_step(f) for f in findings if f.blocking or f.severity is Severity.ALARM]
    known = [s for s in steps if s is not None]
    return min(known) if known else None


def is_fact_gathering(step: Step, fact_tools: Collection[str] | None = None,
                      compute_tools: Collection[str] = ()) -> bool:
    """A step that fetched facts: it called a tool and got a non-error result back.

    With `fact_tools` (the read-only tools of the deployment) only those tools count, so a
    step that booked or wrote something is never a place to resume from. `compute_tools`
    (a calculator) never count: their result is the agent's own arithmetic, which is exactly
    what a repair may need to redo.
    """
    for event in step.tool_events:
        if event.is_error or event.result is None or event.name in compute_tools:
            continue
        if fact_tools is None or event.name in fact_tools:
            return True
    return False


def rollback_step(steps: Sequence[Step], flagged: int | None, *, fact_tools: Collection[str] | None = None,
                  compute_tools: Collection[str] = ()) -> int:
    """The model step to re-run from: one past the last fact-gathering step strictly before `flagged`.

    Steps before the returned index are kept (their facts are reused); it and everything
    after are re-executed. 0 means the task start, and nothing earlier is ever returned.
    `flagged=None` means the run was flagged at its end.
    """
    end = len(steps) if flagged is None else max(0, min(flagged, len(steps)))
    for index in range(end - 1, -1, -1):
        if is_fact_gathering(steps[index], fact_tools, compute_tools):
            return index + 1
    return 0
