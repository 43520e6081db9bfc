"""required_coverage: every call the task requires was made, per tool, with counts and per-item links."""

from __future__ import annotations

from collections.abc import Sequence

from guardrail.core.events import Finding
from verifiers.observed import Call, arg_key, finding
from verifiers.spec import VerifierSpec

__all__ = ["check_required_coverage"]


def check_required_coverage(spec: VerifierSpec, calls: Sequence[Call], *, step: int | None) -> list[Finding]:
    """One finding per tool whose requirement the run's successful calls do not meet.

    A call counts when it got a declared non-error answer; a declared error ("service
    unavailable") is a call the run still has to repeat. `step` is where findings are reported
    (the end of the run).
    """
    findings: list[Finding] = []
    for tool, tool_spec in spec.tools.items():
        requirement = tool_spec.required
        if requirement is None:
            continue
        made = [c for c in calls if c.tool == tool and c.made]
        link = requirement.for_each
        if link is not None:
            # Per-item links name what is missing, which says more than a count.
            needed = {v for c in calls if c.tool == link.tool and c.made and (v := c.arg(link.arg))}
            covered = {v for c in made if (v := c.arg(link.as_arg or link.arg))}
            missing = sorted(needed - covered)
            if missing:
                findings.append(finding(
                    "required_coverage",
                    f"{tool} was never answered for {link.arg} {', '.join(missing)} (required for each "
                    f"{link.tool} {link.arg})",
                    step=step,
                    evidence={"tool": tool, "missing": missing, "for_each": link.model_dump()},
                    hint=f"call {tool} for {', '.join(missing)}",
                ))
                continue
        distinct = {arg_key(c, requirement.distinct_by) for c in made} if requirement.distinct_by else None
        n_made = len(distinct) if distinct is not None else len(made)
        if n_made < requirement.count:
            attempted = sum(1 for c in calls if c.tool == tool)
            what = f"distinct by {', '.join(requirement.distinct_by)}" if requirement.distinct_by else "calls"
            findings.append(finding(
                "required_coverage",
                f"{tool}: {n_made} of {requirement.count} required {what} got an answer"
                + (f" ({attempted - len(made)} more failed)" if attempted > len(made) else ""),
                step=step,
                evidence={"tool": tool, "required": requirement.count, "made": n_made, "attempted": attempted},
                hint=f"call {tool} for every item the task needs before answering",
            ))
    return findings
