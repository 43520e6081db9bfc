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
from guardrail.core.events import Action, Result, Step, StepKind, ToolEvent, Verdict

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


# ---------------------------------------------------------------- provenance through the Guard episode

ORDER_SCHEMA = {"type": "object", "x-deterministic": True, "properties": {
    "order_id": {"type": "string", "pattern": r"^ORD-\d+$"}}}
PRODUCT_SCHEMA = {"type": "object", "x-deterministic": True, "properties": {"sku": {"type": "string"}}}


def provenance_layer(**options) -> SelfConsistencyLayer:
    registry = DeterminismRegistry([
        ToolSchema.from_json_schema("get_order", ORDER_SCHEMA, probe_args={"order_id": "ORD-1"}),
        ToolSchema.from_json_schema("lookup_product", PRODUCT_SCHEMA, probe_args={"sku": "SKU-1"})])
    registry.probe(lambda tool, args: {"ok": True}, epoch=EPOCH, rounds=2, interval_s=0)
    return SelfConsistencyLayer(ConsistencyGate(registry), **options)


def agreeing(tool, args, error="LookupError: no such record"):
    return [PlanSample(tool, args, EPOCH, error=error)] * 5


def ask(guard, layer, ctx, tool, args, samples, **stage):
    layer.stage(ctx, samples, call_id="c", **stage)
    return guard.before_action(ctx, Action.tool_call(tool, args, call_id="c"))


def test_an_invented_id_all_samples_agree_on_is_blocked_as_ungrounded():
    layer = provenance_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode(task="What's the status of order ORD-1042?")
    decision = ask(guard, layer, ctx, "get_order", {"order_id": "ORD-77123"}, agreeing("get_order", {"order_id": "ORD-77123"}))
    assert decision.verdict is Verdict.BLOCK
    (finding,) = decision.findings
    assert (finding.check, finding.predicate) == ("ungrounded_argument", "arguments_grounded")
    assert finding.args == ["get_order", "ORD-77123"]
    assert finding.evidence["record_decision"] == "accept"  # the record's own category, still reported
    assert finding.evidence["provenance"]["ungrounded"][0]["path"] == "order_id"
    samples = [PlanSample("get_order", {"order_id": "ORD-1042"}, EPOCH, result={"id": "ORD-1042"})] * 5
    assert ask(guard, layer, ctx, "get_order", {"order_id": "ORD-1042"}, samples).verdict is Verdict.ALLOW


def test_the_agents_own_words_and_failed_calls_ground_nothing_but_tool_results_do():
    layer = provenance_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode(task="What does the product in my order cost?")
    guard.on_step(ctx, Step(index=0, kind=StepKind.TEXT, text="I will look up SKU-998877."))
    guard.on_step(ctx, Step(index=1, kind=StepKind.TOOL_CALL, tool_events=[
        ToolEvent(name="lookup_product", args={"sku": "SKU-998877"}, result="LookupError", is_error=True)]))
    invented = agreeing("lookup_product", {"sku": "SKU-998877"})
    assert ask(guard, layer, ctx, "lookup_product", {"sku": "SKU-998877"}, invented).verdict is Verdict.BLOCK
    order = Action.tool_call("get_order", {"order_id": "ORD-1042"}, call_id="o1")
    guard.after_result(ctx, order, Result(output='{"id": "ORD-1042", "sku": "SKU-123456"}', call_id="o1"))
    real = agreeing("lookup_product", {"sku": "SKU-123456"}, error="TimeoutError: slow")
    assert ask(guard, layer, ctx, "lookup_product", {"sku": "SKU-123456"}, real).verdict is Verdict.ALLOW


def test_conversation_texts_staged_by_an_adapter_ground_values():
    layer = provenance_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode()
    samples = agreeing("get_order", {"order_id": "ORD-2001"}, error="TimeoutError: slow")
    decision = ask(guard, layer, ctx, "get_order", {"order_id": "ORD-2001"}, samples,
                   context=["You are a support agent.", "Please check ORD-2001."])
    assert decision.verdict is Verdict.ALLOW
    assert layer.verdicts(ctx)[-1].provenance.checked[0].grounded_by == "context"


def test_a_choice_among_real_records_is_an_info_finding_and_runs():
    layer = provenance_layer()
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode(task="Check my recent orders: ORD-11, ORD-12, ORD-13 and ORD-14.")
    picks = ["ORD-11", "ORD-12", "ORD-13", "ORD-14", "ORD-11"]
    samples = [PlanSample("get_order", {"order_id": p}, EPOCH, result={"id": p}) for p in picks]
    decision = ask(guard, layer, ctx, "get_order", {"order_id": "ORD-11"}, samples)
    assert decision.verdict is Verdict.ALLOW
    (finding,) = decision.findings
    assert (finding.check, finding.severity.value, finding.blocking) == ("ambiguous_choice", "info", False)
    assert finding.evidence["record_decision"] == "reject"


def test_provenance_can_be_switched_off():
    layer = provenance_layer(provenance=False)
    guard = Guard([layer], mode="intervene")
    ctx = guard.start_episode(task="What's the status of order ORD-1042?")
    samples = agreeing("get_order", {"order_id": "ORD-77123"})
    assert ask(guard, layer, ctx, "get_order", {"order_id": "ORD-77123"}, samples).verdict is Verdict.ALLOW
