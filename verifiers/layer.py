"""`VerifierLayer`: the deterministic checks as a Guard layer (contract and grounding per result, the rest at the end)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from guardrail.core.events import Action, Episode, Finding, Result, Step, StepKind
from guardrail.core.fileio import sha256_bytes, sha256_file
from guardrail.core.layer import EpisodeContext, Layer
from verifiers.contract import Contract, classify_result
from verifiers.grounding import GroundingLedger
from verifiers.observed import Call, call_from_event
from verifiers.offline import contract_findings, end_of_run_findings
from verifiers.spec import VerifierSpec, dump_spec, load_spec

__all__ = ["VerifierLayer"]


@dataclass
class _RunState:
    spec: VerifierSpec  # the variant of a fitted spec this run's task and tools picked
    ledger: GroundingLedger
    calls: list[Call] = field(default_factory=list)
    saw_results: bool = False  # after_result fed this run, so steps' tool events are already counted
    checked_texts: set[int] = field(default_factory=set)


class VerifierLayer(Layer):
    """The verifiers of one task spec as a Guard layer.

    ``after_result`` checks each tool result against its contract and each combining call (the
    calculator) for ungrounded figures, at the step the result arrives; ``on_step`` grounds the
    figures in the agent's own text; ``on_finish`` runs total consistency, required coverage and
    completion. Every finding is blocking, so intervene mode blocks a malformed result and asks
    for repair of a wrong answer. `spec` is a spec, a shipped spec's name or a spec file (a fitted
    one picks its variant per run from the task text and the tools). `contracts` (tool name ->
    `Contract`) override the spec's shapes, e.g. ``{"lookup": Contract.from_callable(lookup)}``.
    """

    name = "verifier"

    def __init__(self, spec: VerifierSpec | str | os.PathLike[str],
                 contracts: Mapping[str, Contract] | None = None) -> None:
        self.spec: VerifierSpec = spec if isinstance(spec, VerifierSpec) else load_spec(spec)
        self.contracts = contracts
        if isinstance(spec, str | os.PathLike) and os.path.isfile(spec):
            self.spec_sha256 = sha256_file(spec)  # what `sha256sum spec.json` says: the file that judges
        else:
            self.spec_sha256 = sha256_bytes(dump_spec(self.spec).encode("utf-8"))

    def versions(self) -> dict[str, str]:
        return {"spec_sha256": self.spec_sha256}

    def new_state(self, ctx: EpisodeContext) -> _RunState:
        spec = self.spec.for_run(ctx.episode.tools, ctx.task)
        return _RunState(spec, GroundingLedger(spec, ctx.task))

    def _observe(self, state: _RunState, calls: list[Call]) -> list[Finding]:
        spec = state.spec
        findings: list[Finding] = []
        for call in calls:
            if spec.runs("tool_contract"):
                findings.extend(contract_findings(call))
            if spec.runs("grounding"):
                findings.extend(state.ledger.check_call(call))
            state.ledger.add_result(call)
            state.calls.append(call)
        return findings

    def after_result(self, ctx: EpisodeContext, action: Action, result: Result) -> list[Finding]:
        state: _RunState = ctx.state(self)
        tool = action.tool or action.kind.value
        contract = (self.contracts or {}).get(tool)
        classified = classify_result(state.spec, tool, result.output, is_error=result.is_error, contract=contract,
                                     data=result.data)
        args = action.args if action.args else {"command": action.command or action.code}
        state.saw_results = True
        return self._observe(state, [Call(ctx.step_index, tool, args, result.output, classified)])

    def on_step(self, ctx: EpisodeContext, step: Step) -> list[Finding]:
        state: _RunState = ctx.state(self)
        findings: list[Finding] = []
        if step.tool_events and not state.saw_results:
            findings.extend(self._observe(state, [call_from_event(state.spec, step.index, e, self.contracts)
                                                  for e in step.tool_events]))
        if step.kind is not StepKind.TOOL_CALL and step.text:
            state.checked_texts.add(step.index)
            if state.spec.runs("grounding"):
                findings.extend(state.ledger.check_text(step.text, step=step.index))
        return findings

    def on_finish(self, ctx: EpisodeContext, episode: Episode) -> list[Finding]:
        state: _RunState = ctx.state(self)
        findings: list[Finding] = []
        last = episode.steps[-1] if episode.steps else None
        # The Guard appends the answer given to on_finish as a final step without an on_step call.
        if last is not None and last.index not in state.checked_texts and last.kind is not StepKind.TOOL_CALL \
                and last.text and state.spec.runs("grounding"):
            findings.extend(state.ledger.check_text(last.text, step=last.index))
        findings.extend(end_of_run_findings(episode, state.spec, state.calls, last.index if last else None))
        return findings
