"""provenance: an identifier-like argument (an ID, an email, a path, a SKU) that nothing the agent saw holds.

Single-shot agents get the check the self-consistency layer runs on N samples, through the core's
provenance index (`guardrail.core.provenance`): each call's arguments, by the kinds its declared
schema gives them (or their names and values), are grounded against the task, the earlier tool
calls that did not fail and their results. A value found nowhere there is a warning (never a block:
a user may have given it somewhere the guard did not see). A run with no task text is not judged,
as there is nothing to judge it against; a fitted spec names the arguments it checks per tool
(`ToolSpec.provenance`: those healthy runs always grounded).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guardrail.core.arguments import ArgumentSpec, argument_specs
from guardrail.core.events import Finding, Severity
from guardrail.core.provenance import ProvenanceContext, ProvenanceReport, check_arguments
from verifiers.observed import LAYER
from verifiers.spec import VerifierSpec

__all__ = ["check_provenance", "ground_call"]


def _specs(schema: Mapping[str, Any] | None) -> dict[str, ArgumentSpec]:
    if not schema:
        return {}
    try:
        return argument_specs(schema)
    except (TypeError, ValueError, AttributeError, RecursionError):
        return {}  # a schema we cannot read: kinds come from names and values


def ground_call(tool: str, args: Any, context: ProvenanceContext,
                schema: Mapping[str, Any] | None = None) -> ProvenanceReport:
    """How each checked argument value of one call is supported by `context`."""
    return check_arguments(args if isinstance(args, dict) else {}, _specs(schema), context)


def check_provenance(spec: VerifierSpec, tool: str, args: Any, context: ProvenanceContext, *, step: int | None,
                     schema: Mapping[str, Any] | None = None) -> list[Finding]:
    """A warning naming the argument values of this call that nothing the agent saw holds."""
    if context.empty:
        return []
    tool_spec = spec.tools.get(tool)
    checked = tool_spec.provenance if tool_spec is not None else None
    report = ground_call(tool, args, context, schema)
    ungrounded = [g for g in report.ungrounded if checked is None or g.path in checked]
    if not ungrounded:
        return []
    shown = ", ".join(f"{g.path or 'argument'}={g.value!r}" for g in ungrounded[:3])
    return [Finding(layer=LAYER, check="provenance",
                    message=f"{tool} was called with {shown}, found nowhere the agent looked (task, earlier tool "
                            "results)",
                    step=step, evidence={"tool": tool, "ungrounded": [g.evidence() for g in ungrounded[:5]]},
                    hint="look the identifier up first (list, search) or ask the user for it; do not guess it",
                    blocking=False, severity=Severity.WARNING)]
