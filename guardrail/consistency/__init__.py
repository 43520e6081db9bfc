"""Execution-grounded self-consistency: tell fabricated tool arguments from nondeterministic tools.

Sample N plans for a step, run each in one sandbox epoch, and compare the canonical arguments
and the results as two separate signals (seed record 001). A plan is rejected as hallucinated
only when its arguments disagree on a tool whose determinism a start-up probe verified; a
plan whose arguments agree but whose results do not is deferred and its tool quarantined.
Free-text arguments (from the tool's JSON Schema) are left out of that agreement, and a
provenance check asks whether each identifier-like value came from what the agent saw (or was
found by its dry run): it catches the invention all N samples agree on.

    registry = DeterminismRegistry([ToolSchema("get_order", deterministic=True, probe_args={"id": 1})])
    registry.probe(runner, epoch="snap-1")
    gate = ConsistencyGate(registry)
    verdict = gate.evaluate(samples, ProvenanceContext([task]))  # or gate.gate_or_raise(...) to raise
    guard = Guard([SelfConsistencyLayer(gate)])
"""

from guardrail.consistency.canonical import (
    CanonicalizationError,
    CanonicalLimits,
    canonical_args,
    canonical_bytes,
    canonical_result,
    canonicalize,
    spelling,
)
from guardrail.consistency.decision import (
    NOT_RUN,
    ConsistencyGate,
    GateThresholds,
    PlanDecision,
    PlanSample,
    PlanVerdict,
    classify_plan,
    found_by_dry_run,
    missed_by_dry_run,
    modal_index,
    pairwise_agreement,
)
from guardrail.consistency.errors import ConsistencyError, EpochNotFixedError, HallucinationGateError
from guardrail.consistency.harness import DryRunHarness, ProposedCall
from guardrail.consistency.layer import SelfConsistencyLayer
from guardrail.consistency.registry import (
    DeterminismRegistry,
    DeterminismStatus,
    EpochSource,
    ProbeOutcome,
    ToolRunner,
    ToolSchema,
    read_epoch,
)
from guardrail.core.arguments import ArgumentKind, ArgumentSpec, argument_specs, infer_kind
from guardrail.core.provenance import Grounding, ProvenanceContext, ProvenanceReport, check_arguments

__all__ = [
    "NOT_RUN",
    "ArgumentKind",
    "ArgumentSpec",
    "Grounding",
    "ProvenanceContext",
    "ProvenanceReport",
    "argument_specs",
    "check_arguments",
    "found_by_dry_run",
    "infer_kind",
    "missed_by_dry_run",
    "CanonicalLimits",
    "CanonicalizationError",
    "ConsistencyError",
    "ConsistencyGate",
    "DeterminismRegistry",
    "DeterminismStatus",
    "DryRunHarness",
    "EpochNotFixedError",
    "EpochSource",
    "GateThresholds",
    "HallucinationGateError",
    "PlanDecision",
    "PlanSample",
    "PlanVerdict",
    "ProbeOutcome",
    "ProposedCall",
    "SelfConsistencyLayer",
    "ToolRunner",
    "ToolSchema",
    "canonical_args",
    "canonical_bytes",
    "canonical_result",
    "canonicalize",
    "classify_plan",
    "modal_index",
    "pairwise_agreement",
    "read_epoch",
    "spelling",
]
