"""Property tests: the gate's parsers never crash on model junk, and every verdict obeys the decision boundary."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail import Guard
from guardrail.consistency import (
    CanonicalizationError,
    ConsistencyGate,
    DeterminismRegistry,
    DeterminismStatus,
    PlanDecision,
    PlanSample,
    SelfConsistencyLayer,
    ToolSchema,
    canonical_args,
    canonical_result,
    classify_plan,
)
from guardrail.core.events import Action
from tests.fuzzing import FUZZ, json_values, nasty_text

pytestmark = pytest.mark.fuzz


def registry() -> DeterminismRegistry:
    reg = DeterminismRegistry([
        ToolSchema("verified", True, probe_args={}, unordered_args=frozenset({"ids"})),
        ToolSchema("unverified", True),
        ToolSchema("clock", False),
    ])
    reg.probe(lambda tool, args: "same", epoch="e")
    return reg


@FUZZ
@given(json_values | nasty_text)
def test_canonical_forms_are_deterministic_or_a_typed_error(value):
    try:
        first = (canonical_args(value), canonical_result(value))
    except CanonicalizationError:
        return
    assert (canonical_args(value), canonical_result(value)) == first


samples_strategy = st.lists(
    st.builds(PlanSample, tool=st.sampled_from(["verified", "unverified", "clock", "unknown", None]),
              args=st.sampled_from([{"id": 1}, {"id": 1.0}, {"id": 2}, '{"id": 1}']) | json_values,
              epoch=st.just("e"), result=st.sampled_from([1, 2, "x"]) | json_values),
    min_size=1, max_size=8)


@FUZZ
@given(samples_strategy)
def test_every_verdict_obeys_the_decision_boundary(samples):
    reg = registry()
    try:
        verdict = classify_plan(samples, reg)
    except CanonicalizationError:
        return
    assert 0.0 <= verdict.arg_agreement <= 1.0
    called = {s.tool for s in samples if s.tool}
    verified = bool(called) and all(reg.status(t) is DeterminismStatus.VERIFIED for t in called)
    rejectable = verdict.arg_agreement < 0.20 and len(samples) >= 5 and verified
    assert (verdict.record_decision is PlanDecision.REJECT) == rejectable  # the record's rule, kept beside the layer's
    # With no context the layer can only narrow the record's rejections, and says why it lets one through.
    if verdict.decision is PlanDecision.REJECT:
        assert rejectable
    elif rejectable:
        assert verdict.reason in ("free_text_varies", "grounded_choice"), verdict.reason
    if verdict.decision is PlanDecision.DEFER:
        assert verdict.arg_agreement >= 0.80
        assert verdict.result_agreement is not None and verdict.result_agreement < 0.50


@FUZZ
@given(samples_strategy, st.sampled_from(["e", None]))
def test_the_layer_never_breaks_the_guard(samples, epoch):
    samples = [PlanSample(s.tool, s.args, epoch, s.result) for s in samples]
    layer = SelfConsistencyLayer(ConsistencyGate(registry()))
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode()
    layer.stage(ctx, samples, call_id="c")
    decision = guard.before_action(ctx, Action.tool_call("verified", {"id": 1}, call_id="c"))
    assert all(f.check != "internal_error" for f in decision.findings)
    if epoch is None:
        assert decision.blocked
