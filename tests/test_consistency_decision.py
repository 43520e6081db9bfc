"""The decision boundary of the self-consistency gate, one branch per test, plus the fail-closed epoch rule."""

from __future__ import annotations

import pytest

from guardrail.consistency import (
    ConsistencyGate,
    DeterminismRegistry,
    DeterminismStatus,
    EpochNotFixedError,
    GateThresholds,
    HallucinationGateError,
    PlanDecision,
    PlanSample,
    ToolSchema,
    classify_plan,
    pairwise_agreement,
)

EPOCH = "snap-1"


class OrderDb:
    """A deterministic lookup the probe can verify."""

    orders = {"A-1": {"id": "A-1", "total": 12}, "A-2": {"id": "A-2", "total": 30}}

    def __call__(self, tool, args):
        return self.orders.get(args["id"], {"error": "not found"})


def verified_registry(*extra: ToolSchema) -> DeterminismRegistry:
    registry = DeterminismRegistry([
        ToolSchema("get_order", deterministic=True, probe_args={"id": "A-1"}),
        ToolSchema("get_time", deterministic=False),
        ToolSchema("unprobed", deterministic=True),
        *extra,
    ])
    registry.probe(OrderDb(), epoch=EPOCH)
    return registry


def samples(tool, arg_values, results=None, epoch=EPOCH):
    results = results or [None] * len(arg_values)
    return [PlanSample(tool, {"id": value}, epoch, result=result) for value, result in zip(arg_values, results, strict=True)]


def test_pairwise_agreement_reaches_zero_and_one():
    assert pairwise_agreement([1, 1, 1, 1, 1]) == 0.0
    assert pairwise_agreement([5]) == 1.0
    assert pairwise_agreement([4, 1]) == pytest.approx(0.6)
    assert pairwise_agreement([1]) == 1.0


def test_probe_verifies_a_deterministic_tool_and_leaves_unprobed_ones_unverified():
    registry = verified_registry()
    assert registry.status("get_order") is DeterminismStatus.VERIFIED
    assert registry.status("unprobed") is DeterminismStatus.UNVERIFIED
    assert registry.status("get_time") is DeterminismStatus.BY_CONTRACT
    assert registry.status("nope") is DeterminismStatus.UNKNOWN


def test_reject_when_arguments_disagree_on_a_verified_tool_with_five_samples():
    verdict = classify_plan(samples("get_order", ["X-1", "X-2", "X-3", "X-4", "X-5"]), verified_registry())
    assert verdict.decision is PlanDecision.REJECT
    assert verdict.reason == "fabricated_arguments"
    assert verdict.arg_agreement == 0.0


def test_one_agreeing_pair_among_five_still_rejects():
    verdict = classify_plan(samples("get_order", ["X-1", "X-1", "X-3", "X-4", "X-5"]), verified_registry())
    assert verdict.arg_agreement == pytest.approx(0.1)
    assert verdict.decision is PlanDecision.REJECT


def test_agreement_at_the_threshold_does_not_reject():
    # counts (2, 2, 1): 4 agreeing pairs of 20 ordered -> exactly 0.20, not below it
    verdict = classify_plan(samples("get_order", ["X-1", "X-1", "X-2", "X-2", "X-3"]), verified_registry())
    assert verdict.arg_agreement == pytest.approx(0.2)
    assert verdict.decision is PlanDecision.ACCEPT


def test_four_samples_cannot_reject():
    verdict = classify_plan(samples("get_order", ["X-1", "X-2", "X-3", "X-4"]), verified_registry())
    assert verdict.decision is PlanDecision.ACCEPT
    assert verdict.reason == "too_few_samples"


def test_low_agreement_on_an_unverified_tool_is_not_rejected():
    verdict = classify_plan(samples("unprobed", ["X-1", "X-2", "X-3", "X-4", "X-5"]), verified_registry())
    assert verdict.decision is PlanDecision.ACCEPT
    assert verdict.reason == "tool_not_verified"


def test_low_agreement_on_a_tool_that_failed_its_probe_is_not_rejected():
    registry = DeterminismRegistry([ToolSchema("flaky", deterministic=True, probe_args={})])
    calls = iter(range(100))
    registry.probe(lambda tool, args: next(calls), epoch=EPOCH)
    assert registry.status("flaky") is DeterminismStatus.PROBE_FAILED
    assert registry.misdeclared == ["flaky"]
    verdict = classify_plan(samples("flaky", ["1", "2", "3", "4", "5"]), registry)
    assert verdict.decision is PlanDecision.ACCEPT
    assert verdict.reason == "tool_not_verified"


def test_tools_nondeterministic_by_contract_are_out_of_scope():
    verdict = classify_plan(samples("get_time", ["a", "b", "c", "d", "e"], [1, 2, 3, 4, 5]), verified_registry())
    assert verdict.decision is PlanDecision.ACCEPT
    assert verdict.reason == "out_of_scope"


def test_defer_when_arguments_agree_but_results_diverge():
    verdict = classify_plan(samples("get_order", ["A-1"] * 5, [1, 2, 3, 1, 2]), verified_registry())
    assert verdict.decision is PlanDecision.DEFER
    assert verdict.arg_agreement == 1.0
    assert verdict.result_agreement == pytest.approx(0.2)
    assert verdict.quarantine == ("get_order",)


def test_result_agreement_just_at_half_is_accepted():
    # results (3 same, 2 same) among identical calls: (6 + 2) / 20 = 0.4 -> defer; (4 same, 1) = 0.6 -> accept
    registry = verified_registry()
    assert classify_plan(samples("get_order", ["A-1"] * 5, [1, 1, 1, 2, 2]), registry).decision is PlanDecision.DEFER
    assert classify_plan(samples("get_order", ["A-1"] * 5, [1, 1, 1, 1, 2]), registry).decision is PlanDecision.ACCEPT


def test_a_minority_argument_variant_is_not_mistaken_for_tool_nondeterminism():
    # 9 of 10 samples call A-1 and agree on its result; the one A-2 sample returns something else.
    plan = samples("get_order", ["A-1"] * 9 + ["A-2"], [12] * 9 + [30])
    verdict = classify_plan(plan, verified_registry())
    assert verdict.arg_agreement == pytest.approx(0.8)
    assert verdict.result_agreement == 1.0
    assert verdict.decision is PlanDecision.ACCEPT


def test_accept_when_everything_agrees_and_the_chosen_sample_has_the_modal_arguments():
    plan = samples("get_order", ["A-2", "A-1", "A-1", "A-1", "A-1"], [30, 12, 12, 12, 12])
    verdict = classify_plan(plan, verified_registry())
    assert verdict.decision is PlanDecision.ACCEPT
    assert verdict.reason == "agreement_ok"
    assert plan[verdict.chosen_index].args == {"id": "A-1"}


def test_surface_variants_of_one_call_agree():
    plan = [PlanSample("get_order", {"id": "A-1", "n": 1}, EPOCH), PlanSample("get_order", {"n": 1.0, "id": "A-1"}, EPOCH),
            PlanSample("get_order", '{"id": "A-1", "n": 1e0}', EPOCH)] * 2
    verdict = classify_plan(plan, verified_registry())
    assert verdict.arg_agreement == 1.0
    assert verdict.distinct_args == 1


@pytest.mark.parametrize("epochs", [[EPOCH, EPOCH, "snap-2", EPOCH, EPOCH], [EPOCH, None, EPOCH, EPOCH, EPOCH]])
def test_epoch_not_fixed_fails_closed(epochs):
    plan = [PlanSample("get_order", {"id": "A-1"}, epoch, result=12) for epoch in epochs]
    with pytest.raises(EpochNotFixedError, match="epoch"):
        classify_plan(plan, verified_registry())


def test_epoch_not_fixed_fails_closed_even_for_a_plan_that_would_be_accepted():
    plan = [PlanSample("get_order", {"id": "A-1"}, None, result=12) for _ in range(5)]
    gate = ConsistencyGate(verified_registry())
    with pytest.raises(HallucinationGateError):
        gate.gate_or_raise(plan)


def test_probe_refuses_an_unpinned_or_moving_epoch():
    registry = DeterminismRegistry([ToolSchema("get_order", deterministic=True, probe_args={"id": "A-1"})])
    with pytest.raises(EpochNotFixedError, match="not pinned"):
        registry.probe(OrderDb(), epoch=None)
    ticks = iter(["e1", "e2"])
    with pytest.raises(EpochNotFixedError, match="moved"):
        registry.probe(OrderDb(), epoch=lambda: next(ticks))
    assert registry.status("get_order") is DeterminismStatus.UNVERIFIED


def test_gate_quarantines_a_deferred_tool_so_it_can_no_longer_reject():
    gate = ConsistencyGate(verified_registry())
    assert gate.evaluate(samples("get_order", ["A-1"] * 5, [1, 2, 3, 4, 5])).decision is PlanDecision.DEFER
    assert gate.registry.status("get_order") is DeterminismStatus.QUARANTINED
    assert gate.registry.misdeclared == ["get_order"]
    later = gate.evaluate(samples("get_order", ["X-1", "X-2", "X-3", "X-4", "X-5"]))
    assert later.decision is PlanDecision.ACCEPT
    assert later.reason == "tool_not_verified"


def test_gate_or_raise_raises_the_typed_error_with_the_verdict():
    gate = ConsistencyGate(verified_registry())
    with pytest.raises(HallucinationGateError) as caught:
        gate.gate_or_raise(samples("get_order", ["X-1", "X-2", "X-3", "X-4", "X-5"]))
    assert caught.value.verdict is not None
    assert caught.value.verdict.decision is PlanDecision.REJECT
    assert gate.gate_or_raise(samples("get_order", ["A-1"] * 5, [12] * 5)).decision is PlanDecision.ACCEPT


def test_thresholds_are_configurable_and_validated():
    strict = GateThresholds(reject_arg_below=0.5, min_samples=3)
    verdict = classify_plan(samples("get_order", ["X-1", "X-1", "X-2"]), verified_registry(), strict)
    assert verdict.arg_agreement == pytest.approx(1 / 3)
    assert verdict.decision is PlanDecision.REJECT
    with pytest.raises(ValueError, match="within"):
        classify_plan(samples("get_order", ["A-1"]), verified_registry(), GateThresholds(reject_arg_below=2.0))


def test_a_raising_probe_call_leaves_the_tool_unverified():
    registry = DeterminismRegistry([ToolSchema("broken", deterministic=True, probe_args={})])

    def runner(tool, args):
        raise ConnectionError("sandbox down")

    outcome = registry.probe(runner, epoch=EPOCH)["broken"]
    assert outcome.error == '{"$error":"ConnectionError: sandbox down"}'
    assert registry.status("broken") is DeterminismStatus.UNVERIFIED


def test_tool_errors_are_observed_results():
    plan = [PlanSample("get_order", {"id": "A-1"}, EPOCH, error=f"Timeout #{i}") for i in range(5)]
    assert classify_plan(plan, verified_registry()).decision is PlanDecision.DEFER


def test_a_passing_probe_does_not_lift_a_quarantine_but_release_and_probe_do():
    gate = ConsistencyGate(verified_registry())
    gate.evaluate(samples("get_order", ["A-1"] * 5, [1, 2, 3, 4, 5]))
    gate.registry.probe(OrderDb(), epoch=EPOCH, tools=["get_order"])
    assert gate.registry.status("get_order") is DeterminismStatus.QUARANTINED
    gate.registry.release("get_order")
    assert gate.registry.status("get_order") is DeterminismStatus.UNVERIFIED
    gate.registry.probe(OrderDb(), epoch=EPOCH, tools=["get_order"])
    assert gate.registry.status("get_order") is DeterminismStatus.VERIFIED
