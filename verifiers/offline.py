"""Run every check of a spec over a recorded episode, the same checks the Guard layer runs live."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from guardrail.core.events import Episode, Finding, Severity, StepKind
from guardrail.core.provenance import ProvenanceContext
from verifiers.answer_parts import check_answer_parts
from verifiers.completion import check_completion
from verifiers.contract import Contract
from verifiers.coverage import check_required_coverage
from verifiers.grounding import GroundingLedger
from verifiers.observed import Call, call_from_event, finding
from verifiers.provenance import check_provenance
from verifiers.spec import CHECKS, VerifierSpec
from verifiers.tool_errors import check_tool_errors
from verifiers.total_consistency import check_total_consistency

__all__ = ["EpisodeVerdict", "contract_findings", "episode_tools", "verify_episode"]


@dataclass
class EpisodeVerdict:
    """The checks' outcome for one episode: a flag per check (true = a problem) and the findings.

    Informational findings (a check that could not decide within its work bound) are listed but
    never raise a flag; warnings that never block (provenance) do.
    """

    episode_id: str
    label: str
    spec: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def flags(self) -> dict[str, bool]:
        return {check: any(f.check == check and (f.blocking or f.severity is not Severity.INFO)
                           for f in self.findings) for check in CHECKS}

    def to_json(self) -> dict[str, Any]:
        """The `guardrail verify --json` record."""
        return {
            "episode_id": self.episode_id,
            "flags": self.flags,
            "findings": [{"check": f.check, "step": f.step, "message": f.message} for f in self.findings],
        }


def contract_findings(call: Call) -> list[Finding]:
    """tool_contract for one call: a finding when its result matches none of the tool's shapes."""
    if call.classified.kind != "malformed":
        return []
    return [finding("tool_contract", f"{call.tool} returned a malformed result: {call.classified.reason}",
                    step=call.step, evidence={"tool": call.tool, "result": (call.result or "")[:300]},
                    hint=f"re-run {call.tool}; a result of the wrong shape cannot be used")]


def episode_tools(episode: Episode) -> set[str]:
    """The tools a run had: the roster it recorded and every tool it called."""
    return set(episode.tools) | {event.name for step in episode.steps for event in step.tool_events}


def verify_episode(episode: Episode, spec: VerifierSpec, contracts: Mapping[str, Contract] | None = None,
                   tool_schemas: Mapping[str, Mapping[str, Any]] | None = None) -> EpisodeVerdict:
    """All of the spec's checks over one episode (its own variant of a fitted spec); per-step checks report at their step."""
    spec = spec.for_run(episode_tools(episode), episode.task)
    verdict = EpisodeVerdict(episode.episode_id, episode.label, spec.name)
    ledger = GroundingLedger(spec, episode.task)
    calls: list[Call] = []
    seen = ProvenanceContext([episode.task] if episode.task else [])
    # A fitted spec names the arguments it checks per tool; one that checks none needs no index of what was seen.
    provenance = spec.runs("provenance") and bool(episode.task) and (
        not spec.tools or any(t.provenance is None or t.provenance for t in spec.tools.values()))
    for step in episode.steps:
        if provenance:
            for event in step.tool_events:
                verdict.findings.extend(check_provenance(spec, event.name, event.args, seen, step=step.index,
                                                         schema=tool_schemas.get(event.name) if tool_schemas else None))
            seen.add_steps([step])
        step_calls = [call_from_event(spec, step.index, e, contracts) for e in step.tool_events]
        calls.extend(step_calls)
        if spec.runs("tool_contract"):
            for call in step_calls:
                verdict.findings.extend(contract_findings(call))
        if spec.runs("grounding"):
            verdict.findings.extend(ledger.observe(step_calls))
            if step.kind is not StepKind.TOOL_CALL and step.text:
                verdict.findings.extend(ledger.check_text(step.text, step=step.index))
    end_step = episode.steps[-1].index if episode.steps else None
    verdict.findings.extend(end_of_run_findings(episode, spec, calls, end_step))
    return verdict


def end_of_run_findings(episode: Episode, spec: VerifierSpec, calls: list[Call],
                        end_step: int | None) -> list[Finding]:
    """The checks that need the whole run: totals, coverage, completion, the answer's parts, ignored tool errors."""
    findings: list[Finding] = []
    if spec.runs("answer_parts"):
        findings.extend(check_answer_parts(spec, calls, episode.answer, step=end_step))
    if spec.runs("tool_error"):
        findings.extend(check_tool_errors(calls, episode.answer, step=end_step))
    if spec.runs("total_consistency"):
        findings.extend(check_total_consistency(spec, calls, episode.answer, step=end_step, task=episode.task))
    if spec.runs("required_coverage"):
        findings.extend(check_required_coverage(spec, calls, step=end_step, task=episode.task))
    if spec.runs("completion"):
        findings.extend(check_completion(episode))
    return findings
