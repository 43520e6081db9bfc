"""The SelfConsistencyLayer inside a real Guard: findings, verdicts, spans."""

from __future__ import annotations

from guardrail import Guard
from guardrail.consistency import (
    ConsistencyGate,
    DeterminismRegistry,
    PlanSample,
    SelfConsistencyLayer,
    ToolSchema,
)
from guardrail.core.events import Action, Verdict

EPOCH = "snap-7"


def make_layer() -> SelfConsistencyLayer:
    registry = DeterminismRegistry([ToolSchema("get_order", deterministic=True, probe_args={"id": "A-1"},
                                               unordered_args=frozenset({"fields"}))])
    registry.probe(lambda tool, args: {"id": args["id"]}, epoch=EPOCH)
    return SelfConsistencyLayer(ConsistencyGate(registry))


def fabricated(epoch=EPOCH):
    return [PlanSample("get_order", {"id": f"X-{i}"}, epoch, result={"error": "not found"}) for i in range(5)]


def test_rejection_blocks_in_intervene_mode_and_names_the_check(spans):
    layer = make_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode(task="t")
    layer.stage(ctx, fabricated(), call_id="c1")
    decision = guard.before_action(ctx, Action.tool_call("get_order", {"id": "X-0"}, call_id="c1"))
    assert decision.verdict is Verdict.BLOCK
    (finding,) = decision.findings
    assert finding.check == "hallucinated_arguments"
    assert finding.evidence["arg_agreement"] == 0.0
    span = next(s for s in spans.get_finished_spans() if s.name == "guardrail.consistency")
    assert span.attributes["guardrail.decision"] == "block"


def test_rejection_is_a_warning_in_report_mode():
    layer = make_layer()
    guard = Guard([layer], mode="report")
    ctx = guard.start_episode()
    layer.stage(ctx, fabricated(), call_id="c1")
    decision = guard.before_action(ctx, Action.tool_call("get_order", {"id": "X-0"}, call_id="c1"))
    assert decision.verdict is Verdict.WARN
    assert layer.verdicts(ctx)[0].decision.value == "reject"


def test_batch_is_matched_by_canonical_arguments_when_there_is_no_call_id():
    layer = make_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode()
    plan = [PlanSample("get_order", {"id": "A-1", "fields": ["total", "id"]}, EPOCH, result=12)] * 5
    layer.stage(ctx, plan, action=Action.tool_call("get_order", {"id": "A-1", "fields": ["total", "id"]}))
    decision = guard.before_action(ctx, Action.tool_call("get_order", {"fields": ["id", "total"], "id": "A-1"}))
    assert decision.verdict is Verdict.ALLOW
    assert [v.decision.value for v in layer.verdicts(ctx)] == ["accept"]


def test_unstaged_actions_are_out_of_scope():
    layer = make_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode()
    decision = guard.before_action(ctx, Action.tool_call("get_order", {"id": "A-1"}))
    assert decision.verdict is Verdict.ALLOW
    assert layer.verdicts(ctx) == []


def test_deferral_warns_and_quarantines():
    layer = make_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode()
    plan = [PlanSample("get_order", {"id": "A-1"}, EPOCH, result=i) for i in range(5)]
    layer.stage(ctx, plan, call_id="c9")
    decision = guard.before_action(ctx, Action.tool_call("get_order", {"id": "A-1"}, call_id="c9"))
    assert decision.verdict is Verdict.WARN
    assert decision.findings[0].check == "nondeterministic_tool"
    assert layer.gate.registry.misdeclared == ["get_order"]


def test_unfixed_epoch_blocks_even_though_the_plan_agrees():
    layer = make_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode()
    plan = [PlanSample("get_order", {"id": "A-1"}, f"snap-{i % 2}", result=12) for i in range(5)]
    layer.stage(ctx, plan, call_id="c2")
    decision = guard.before_action(ctx, Action.tool_call("get_order", {"id": "A-1"}, call_id="c2"))
    assert decision.verdict is Verdict.BLOCK
    assert decision.findings[0].check == "epoch_not_fixed"
    assert decision.findings[0].severity.value == "error"


def test_oversized_samples_are_a_finding_not_a_crash():
    layer = make_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode()
    deep: object = "x"
    for _ in range(200):
        deep = [deep]
    plan = [PlanSample("get_order", {"id": deep}, EPOCH, result=1)] * 5
    layer.stage(ctx, plan, call_id="c3")
    decision = guard.before_action(ctx, Action.tool_call("get_order", {"id": "A-1"}, call_id="c3"))
    assert decision.findings[0].check == "samples_not_comparable"
    assert decision.verdict is Verdict.WARN


def test_scattered_arguments_on_an_unverified_tool_warn_but_do_not_block():
    registry = DeterminismRegistry([ToolSchema("lookup", deterministic=True)])  # no probe_args: never verified
    layer = SelfConsistencyLayer(ConsistencyGate(registry))
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode()
    layer.stage(ctx, [PlanSample("lookup", {"id": i}, EPOCH, result=None) for i in range(5)], call_id="c4")
    decision = guard.before_action(ctx, Action.tool_call("lookup", {"id": 0}, call_id="c4"))
    assert decision.verdict is Verdict.WARN
    (finding,) = decision.findings
    assert finding.check == "not_judged"
    assert not finding.blocking
    assert finding.evidence["tool_status"] == "unverified"
