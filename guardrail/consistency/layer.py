"""The Guard layer: gates an action against the N sampled plans an adapter staged for it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from guardrail.consistency.canonical import CanonicalizationError, canonical_args
from guardrail.consistency.decision import ConsistencyGate, PlanDecision, PlanSample, PlanVerdict
from guardrail.consistency.errors import EpochNotFixedError
from guardrail.core.events import Action, Finding, Severity
from guardrail.core.layer import EpisodeContext, Layer
from guardrail.core.provenance import ProvenanceContext

__all__ = ["SelfConsistencyLayer"]

_NO_LOCK = contextlib.nullcontext()


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: dict[str, tuple[list[PlanSample], tuple[Any, ...]]] = field(default_factory=dict)
    verdicts: list[PlanVerdict] = field(default_factory=list)
    context: ProvenanceContext = field(default_factory=ProvenanceContext)  # what the agent has seen so far
    task_seen: bool = False
    steps_seen: int = 0
    results_seen: int = 0


class SelfConsistencyLayer(Layer):
    """Execution-grounded self-consistency as a `before_action` check.

    An adapter that sampled N plans for a step and ran them in one sandbox epoch stages the
    samples with `stage(ctx, samples, call_id=...)`, then asks the Guard about the action it
    picked. The layer finds the staged batch (by call id, else by tool and canonical
    arguments) and turns the gate's verdict into findings:

    - reject (the record's rule: arguments disagree on a verified tool): a blocking
      ``hallucinated_arguments`` warning (intervene mode blocks the call);
    - reject (provenance: an identifier found nowhere the agent looked, nor by the dry run): a
      blocking ``ungrounded_argument`` warning;
    - defer: a ``nondeterministic_tool`` warning; the tool is quarantined in the registry;
    - accept among grounded alternatives (the samples chose among real things): an
      ``ambiguous_choice`` info finding (never blocks);
    - accept with scattered arguments that could not be judged (tool not verified, too few
      samples): a non-blocking ``not_judged`` warning saying why;
    - samples not in one fixed epoch: a blocking ``epoch_not_fixed`` error (fail closed).

    An action with no staged batch is a single-shot call, outside the gate's scope: no finding.

    Provenance is checked against what the episode shows (the task, earlier tool calls that did
    not fail and their results) plus the texts an adapter passes to `stage` (the user, system
    and tool messages of the conversation); the agent's own words are never evidence. With
    ``provenance=False`` the layer does not feed the gate a context (no provenance rejections).
    """

    name = "consistency"

    def __init__(self, gate: ConsistencyGate, *, provenance: bool = True) -> None:
        self.gate = gate
        self.provenance = provenance

    def new_state(self, ctx: EpisodeContext) -> _State:
        return _State()

    def stage(self, ctx: EpisodeContext, samples: Sequence[PlanSample], *, call_id: str | None = None,
              action: Action | None = None, context: Iterable[Any] = ()) -> None:
        """Hold `samples` for the next `before_action` on the matching action (by `call_id`, else tool+args).

        `context`: texts (or JSON-like values) the agent saw that the episode may not hold, such as
        the user, system and tool messages of the conversation; never the agent's own messages.
        """
        if call_id is None and action is None:
            raise ValueError("stage() needs the call_id or the action the samples are for")
        key = call_id if call_id is not None else self._key(action.tool, action.args)  # type: ignore[union-attr]
        state: _State = ctx.state(self)
        with state.lock:
            state.pending[key] = (list(samples), tuple(context))

    def context(self, ctx: EpisodeContext, extra: Iterable[Any] = ()) -> ProvenanceContext:
        """The provenance context of this episode, brought up to date with its task, steps and results."""
        state: _State = ctx.state(self)
        with ctx.lock:
            steps = ctx.episode.steps[state.steps_seen:]
            results = ctx.results[state.results_seen:]
        with state.lock:
            if not state.task_seen and ctx.task:
                state.context.add(ctx.task)
                state.task_seen = True
            state.context.add_steps(steps)
            state.context.add_results(results)
            state.steps_seen += len(steps)
            state.results_seen += len(results)
            for item in extra:
                state.context.add(item)
            return state.context

    def verdicts(self, ctx: EpisodeContext) -> list[PlanVerdict]:
        """The verdicts this episode got, in order."""
        state: _State = ctx.state(self)
        with state.lock:
            return list(state.verdicts)

    def before_action(self, ctx: EpisodeContext, action: Action) -> Iterable[Finding] | None:
        state: _State = ctx.state(self)
        with state.lock:
            staged = None
            if action.call_id is not None:
                staged = state.pending.pop(action.call_id, None)
            if staged is None:
                staged = state.pending.pop(self._key(action.tool, action.args), None)
        if staged is None:
            return None
        samples, extra = staged
        return self.check(ctx, samples, context=extra)

    def check(self, ctx: EpisodeContext, samples: Sequence[PlanSample], *, context: Iterable[Any] = ()) -> list[Finding]:
        """Run the gate on `samples` now and return the findings (what `before_action` does for a staged batch)."""
        step = ctx.step_index
        seen = self.context(ctx, context) if self.provenance else None
        try:
            with ctx.state(self).lock if seen is not None else _NO_LOCK:
                verdict = self.gate.evaluate(samples, seen)
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
        if verdict.decision is PlanDecision.REJECT and verdict.reason == "ungrounded_identifier":
            ungrounded = verdict.provenance.ungrounded if verdict.provenance is not None else ()
            common["args"] = [verdict.tool, *(g.value for g in ungrounded[:3])] if verdict.tool else []
            return [Finding(check="ungrounded_argument", predicate="arguments_grounded", message=verdict.message,
                            blocking=True, severity=Severity.WARNING,
                            hint="look the identifier up first (list, search) or ask the user for it; "
                                 "do not guess it", **common)]
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
        if verdict.reason == "grounded_choice":
            return [Finding(check="ambiguous_choice", message=verdict.message, severity=Severity.INFO,
                            hint="the task may be ambiguous: the samples picked different real candidates", **common)]
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
