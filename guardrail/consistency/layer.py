"""The Guard layer: gates an action against the N sampled plans an adapter staged for it."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from guardrail.consistency.canonical import CanonicalizationError, canonical_args
from guardrail.consistency.decision import ConsistencyGate, PlanDecision, PlanSample, PlanVerdict
from guardrail.consistency.errors import EpochNotFixedError
from guardrail.core.events import Action, Finding, Severity
from guardrail.core.layer import EpisodeContext, Layer

__all__ = ["SelfConsistencyLayer"]


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: dict[str, list[PlanSample]] = field(default_factory=dict)
    verdicts: list[PlanVerdict] = field(default_factory=list)


class SelfConsistencyLayer(Layer):
    """Execution-grounded self-consistency as a `before_action` check.

    An adapter that sampled N plans for a step and ran them in one sandbox epoch stages the
    samples with `stage(ctx, samples, call_id=...)`, then asks the Guard about the action it
    picked. The layer finds the staged batch (by call id, else by tool and canonical
    arguments) and turns the gate's verdict into findings:

    - reject: a blocking ``hallucinated_arguments`` warning (intervene mode blocks the call);
    - defer: a ``nondeterministic_tool`` warning; the tool is quarantined in the registry;
    - accept with scattered arguments that could not be judged (tool not verified, too few
      samples): a non-blocking ``not_judged`` warning saying why;
    - samples not in one fixed epoch: a blocking ``epoch_not_fixed`` error (fail closed).

    An action with no staged batch is a single-shot call, outside the gate's scope: no finding.
    """

    name = "consistency"

    def __init__(self, gate: ConsistencyGate) -> None:
        self.gate = gate

    def new_state(self, ctx: EpisodeContext) -> _State:
        return _State()

    def stage(self, ctx: EpisodeContext, samples: Sequence[PlanSample], *, call_id: str | None = None,
              action: Action | None = None) -> None:
        """Hold `samples` for the next `before_action` on the matching action (by `call_id`, else tool+args)."""
        if call_id is None and action is None:
            raise ValueError("stage() needs the call_id or the action the samples are for")
        key = call_id if call_id is not None else self._key(action.tool, action.args)  # type: ignore[union-attr]
        state: _State = ctx.state(self)
        with state.lock:
            state.pending[key] = list(samples)

    def verdicts(self, ctx: EpisodeContext) -> list[PlanVerdict]:
        """The verdicts this episode got, in order."""
        state: _State = ctx.state(self)
        with state.lock:
            return list(state.verdicts)

    def before_action(self, ctx: EpisodeContext, action: Action) -> Iterable[Finding] | None:
        state: _State = ctx.state(self)
        with state.lock:
            samples = None
            if action.call_id is not None:
                samples = state.pending.pop(action.call_id, None)
            if samples is None:
                samples = state.pending.pop(self._key(action.tool, action.args), None)
        if samples is None:
            return None
        return self.check(ctx, samples)

    def check(self, ctx: EpisodeContext, samples: Sequence[PlanSample]) -> list[Finding]:
        """Run the gate on `samples` now and return the findings (what `before_action` does for a staged batch)."""
        step = ctx.step_index
        try:
            verdict = self.gate.evaluate(samples)
        except EpochNotFixedError as exc:
            return [Finding(layer=self.name, check="epoch_not_fixed", predicate="epoch_fixed", message=str(exc),
                            blocking=True,
                            severity=Severity.ERROR, step=step,
                            hint="run all N samples in one pinned sandbox epoch and tag each with its id")]
        except CanonicalizationError as exc:
            return [Finding(layer=self.name, check="samples_not_comparable", message=str(exc),
                            severity=Severity.WARNING, step=step,
                            hint="cap the size of tool arguments and results the harness passes to the gate")]
        state: _State = ctx.state(self)
        with state.lock:
            state.verdicts.append(verdict)
        score = 1.0 - verdict.arg_agreement
        common: dict[str, Any] = {"layer": self.name, "evidence": verdict.evidence(), "step": step, "score": score,
                                  "args": [verdict.tool] if verdict.tool else []}
        # `predicate` names the property the samples failed: the arguments agree / the tool is deterministic.
        if verdict.decision is PlanDecision.REJECT:
            return [Finding(check="hallucinated_arguments", predicate="arguments_agree", message=verdict.message,
                            blocking=True,
                            severity=Severity.WARNING,
                            hint="re-sample the step, or ask for the identifier the plan needs instead of guessing it",
                            **common)]
        if verdict.decision is PlanDecision.DEFER:
            return [Finding(check="nondeterministic_tool", predicate="tool_deterministic", message=verdict.message,
                            severity=Severity.WARNING,
                            hint=f"re-sample or escalate; {verdict.tool!r} is quarantined until it is fixed, "
                                 "released (registry.release) and probed again",
                            **common)]
        if verdict.reason in ("tool_not_verified", "too_few_samples"):
            # Accepted, since rejecting here would not be valid; but arguments this scattered are worth a look.
            return [Finding(check="not_judged", message=verdict.message, severity=Severity.WARNING,
                            hint="probe the tool (or sample N >= the rejection minimum) so the gate can judge",
                            **common)]
        return []

    def _key(self, tool: str | None, args: Any) -> str:
        schema = self.gate.registry.schema(tool)
        try:
            canonical = canonical_args(args, unordered=schema.unordered_args if schema else frozenset())
        except CanonicalizationError:
            canonical = repr(args).encode("utf-8", "replace")
        return f"{tool or ''}\x00{canonical.decode('utf-8', 'replace')}"
