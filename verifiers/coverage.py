"""required_coverage: every call the task requires was made, per tool, with counts and per-item links."""

from __future__ import annotations

from collections.abc import Sequence

from guardrail.core.events import Finding
from verifiers.expressions import MissingQuantity
from verifiers.observed import Call, arg_key, finding, undecided
from verifiers.quantities import RunQuantities, resolve_quantities
from verifiers.spec import Requirement, VerifierSpec

__all__ = ["check_required_coverage"]


def _in_task(call: Call, requirement: Requirement, task: str) -> bool:
    return all((value := call.arg(name)) is not None and value in task for name in requirement.args_in_task)


def check_required_coverage(spec: VerifierSpec, calls: Sequence[Call], *, step: int | None,
                            task: str | None = None, quantities: RunQuantities | None = None) -> list[Finding]:
    """One finding per tool whose requirement the run's successful calls do not meet.

    A call counts when it got a declared non-error answer; a declared error ("service
    unavailable") is a call the run still has to repeat; with `args_in_task`, a call about
    something the task never names does not count either. `step` is where findings are reported
    (the end of the run).
    """
    findings: list[Finding] = []
    run = quantities or resolve_quantities(spec, task, calls)
    task_text = (task or "").casefold()
    for tool, tool_spec in spec.tools.items():
        requirement = tool_spec.required
        if requirement is None:
            continue
        try:
            required = round(run.evaluate(requirement.count))
        except MissingQuantity as exc:
            findings.append(undecided("required_coverage", f"{tool}: the required count {requirement.count!r} "
                                      f"cannot be worked out: {run.why_missing(exc)}", step=step))
            continue
        made = [c for c in calls if c.tool == tool and c.made
                and (not requirement.args_in_task or _in_task(c, requirement, task_text))]
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
        if n_made < required:
            attempted = sum(1 for c in calls if c.tool == tool)
            what = f"distinct by {', '.join(requirement.distinct_by)}" if requirement.distinct_by else "calls"
            about = " about what the task names" if requirement.args_in_task else ""
            findings.append(finding(
                "required_coverage",
                f"{tool}: {n_made} of {required} required {what}{about} got an answer"
                + (f" ({attempted - len(made)} more failed{' or were about something else' if about else ''})"
                   if attempted > len(made) else ""),
                step=step,
                evidence={"tool": tool, "required": required, "made": n_made, "attempted": attempted},
                hint=f"call {tool} for every item the task needs before answering",
            ))
    return findings
