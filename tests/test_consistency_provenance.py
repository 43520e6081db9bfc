"""Per-argument agreement and provenance: paraphrases pass, invented identifiers are caught even when N samples agree."""

from __future__ import annotations

import pytest

from guardrail.consistency import (
    ArgumentKind,
    ConsistencyGate,
    DeterminismRegistry,
    PlanDecision,
    PlanSample,
    ProvenanceContext,
    ToolSchema,
    argument_specs,
    check_arguments,
    classify_plan,
)

EPOCH = "snap-1"
DOCS = ["How to roll back a deploy (rollback runbook)", "Undo a deploy: postmortem of the March outage"]
ORDERS = {"ORD-1042": {"id": "ORD-1042", "total": 25.0, "sku": "SKU-123456"}}
FILES = {"docs/rollback_3.md": "how to roll back", "docs/canary_7.md": "canary notes",
         "docs/deploy_1.md": "deploy notes", "docs/queue_2.md": "queue notes"}

SEARCH = {"type": "object", "x-deterministic": True, "properties": {
    "query": {"type": "string", "description": "Search terms, in natural language"},
    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5}}}
ORDER = {"type": "object", "x-deterministic": True, "properties": {
    "order_id": {"type": "string", "pattern": r"^ORD-\d+$"},
    "fields": {"type": "array", "uniqueItems": True, "items": {"enum": ["status", "total"]}}}}
FILE = {"type": "object", "x-deterministic": True, "properties": {"path": {"type": "string"}}}
CONVERT = {"type": "object", "x-deterministic": True, "properties": {
    "amount": {"type": "number"}, "currency": {"type": "string", "enum": ["EUR", "USD"]}}}


def run(tool: str, args: dict) -> object:
    """The sandbox: real lookups that raise on what does not exist."""
    if tool == "get_order":
        return ORDERS[args["order_id"]]
    if tool == "read_file":
        if args["path"] not in FILES:
            raise FileNotFoundError(args["path"])
        return FILES[args["path"]]
    if tool == "search":  # every term must match, as full-text search does
        terms = str(args["query"]).lower().split()
        return [{"title": doc} for doc in DOCS if all(term in doc.lower() for term in terms)]
    return round(float(args["amount"]) * 1.08, 2)


def registry(**verified: bool) -> DeterminismRegistry:
    probes = {"search": {"query": "x"}, "get_order": {"order_id": "ORD-1042"}, "read_file": {"path": "docs/canary_7.md"},
              "convert": {"amount": 1, "currency": "EUR"}}
    schemas = {"search": SEARCH, "get_order": ORDER, "read_file": FILE, "convert": CONVERT}
    reg = DeterminismRegistry([ToolSchema.from_json_schema(name, schema, probe_args=probes[name])
                               for name, schema in schemas.items()])
    reg.probe(run, epoch=EPOCH, rounds=2, interval_s=0)
    for name, ok in verified.items():
        if not ok:
            reg.quarantine(name, "test: the batch caught it")
    return reg


def plan(tool: str, arg_sets: list[dict]) -> list[PlanSample]:
    """Each candidate dry-run against the sandbox, as the harness does."""
    samples = []
    for args in arg_sets:
        try:
            samples.append(PlanSample(tool, args, EPOCH, result=run(tool, args)))
        except Exception as exc:
            samples.append(PlanSample(tool, args, EPOCH, error=f"{type(exc).__name__}: {exc}"))
    return samples


def test_kinds_come_from_the_json_schema():
    specs = argument_specs({"type": "object", "properties": {
        **SEARCH["properties"], **ORDER["properties"], **CONVERT["properties"],
        "note": {"type": "string", "x-argument-kind": "identifier"},
        "summary": {"type": "string", "x-free-text": True},
        "filter": {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "string"}}}}}})
    kinds = {path: spec.kind for path, spec in specs.items()}
    assert kinds == {"query": ArgumentKind.FREE_TEXT, "limit": ArgumentKind.PARAMETER,
                     "order_id": ArgumentKind.IDENTIFIER, "fields[]": ArgumentKind.CHOICE,
                     "amount": ArgumentKind.AMOUNT, "currency": ArgumentKind.CHOICE,
                     "note": ArgumentKind.IDENTIFIER, "summary": ArgumentKind.FREE_TEXT,
                     "filter.ids[]": ArgumentKind.IDENTIFIER}
    assert specs["currency"].choices == ("EUR", "USD")


def test_a_paraphrased_free_text_argument_is_not_rejected():
    queries = ["rollback of the deploy", "deploy rollback", "how to roll back a deploy", "rollback", "undo deploy"]
    samples = plan("search", [{"query": q, "limit": 5} for q in queries])
    verdict = classify_plan(samples, registry(), context=ProvenanceContext(["How do we roll back a deploy?"]))
    assert verdict.record_decision is PlanDecision.REJECT  # the record's whole-call agreement: 0.0
    assert verdict.arg_agreement == 0.0 and verdict.judged_agreement == 1.0
    assert (verdict.decision, verdict.reason) == (PlanDecision.ACCEPT, "free_text_varies")
    assert verdict.free_text == ("query",)
    assert verdict.argument_agreement == {"limit": 1.0, "query": 0.0}


def test_leaving_free_text_out_does_not_hide_disagreement_elsewhere():
    samples = plan("search", [{"query": f"q{i}", "limit": 10 + i} for i in range(5)])
    verdict = classify_plan(samples, registry(), provenance=False)
    assert verdict.judged_agreement == 0.0
    assert (verdict.decision, verdict.reason) == (PlanDecision.REJECT, "fabricated_arguments")


def test_an_invented_identifier_found_nowhere_is_caught_even_when_all_samples_agree():
    samples = plan("get_order", [{"order_id": "ORD-77123"}] * 5)  # a coincident fabrication: agreement 1.0
    context = ProvenanceContext(["What's the status of my last order? I'm alice@example.com."])
    verdict = classify_plan(samples, registry(), context=context)
    assert verdict.arg_agreement == 1.0
    assert verdict.record_decision is PlanDecision.ACCEPT  # the record's rule cannot see it
    assert (verdict.decision, verdict.reason) == (PlanDecision.REJECT, "ungrounded_identifier")
    assert [(g.path, g.value) for g in verdict.provenance.ungrounded] == [("order_id", "ORD-77123")]


def test_an_invented_identifier_is_caught_on_a_tool_the_probe_could_not_verify():
    samples = plan("get_order", [{"order_id": "ORD-77123"}, {"order_id": "ORD-5"}, {"order_id": "ORD-77123"},
                                 {"order_id": "ORD-9"}, {"order_id": "ORD-31"}])
    verdict = classify_plan(samples, registry(get_order=False), context=ProvenanceContext(["check my order"]))
    assert verdict.record_decision is PlanDecision.ACCEPT and verdict.record_reason == "tool_not_verified"
    assert (verdict.decision, verdict.reason) == (PlanDecision.REJECT, "ungrounded_identifier")


def test_an_invented_code_inside_free_text_is_caught():
    samples = plan("search", [{"query": "postmortem INC-3fa9c2", "limit": 5}] * 5)
    verdict = classify_plan(samples, registry(), context=ProvenanceContext(["Find the postmortem of last week"]))
    assert verdict.reason == "ungrounded_identifier"
    assert verdict.provenance.ungrounded[0].path == "query"


@pytest.mark.parametrize(("task", "args"), [
    ("Can you check order #1042 for me?", {"order_id": "ORD-1042"}),  # a prefix added: the dry run finds it
    ("check ord-1042 please", {"order_id": "ORD-1042"}),  # case
    ("What's the status of ORD-1042?", {"order_id": " ord-1042 ", "fields": ["total", "status"]}),  # respelled
])
def test_derived_identifiers_are_not_flagged(task, args):
    verdict = classify_plan(plan("get_order", [args] * 5), registry(), context=ProvenanceContext([task]))
    assert verdict.decision is PlanDecision.ACCEPT, verdict.message
    assert verdict.provenance.grounded


@pytest.mark.parametrize(("task", "amount"), [
    ("Convert half of 25.00 EUR to USD.", 12.5),
    ("Two tickets cost 6.25 EUR each; what is that in USD?", 12.5),
    ("7.40 EUR plus 5.10 EUR shipping: convert the total to USD.", 12.5),
    ("Convert 1,250.00 EUR to USD.", "1250"),
    ("Take 15% of 80 EUR and convert it to USD.", 12),
])
def test_derived_amounts_are_not_flagged(task, amount):
    verdict = classify_plan(plan("convert", [{"amount": amount, "currency": "USD"}] * 5), registry(),
                            context=ProvenanceContext([task]))
    assert verdict.decision is PlanDecision.ACCEPT, verdict.message
    assert {g.grounded_by for g in verdict.provenance.checked} <= {"context", "derived", "schema"}


def test_an_amount_no_arithmetic_gives_and_a_value_outside_the_enum_are_ungrounded():
    context = ProvenanceContext(["Convert 25 EUR to USD."])
    report = check_arguments({"amount": 913.37, "currency": "XBT"}, argument_specs(CONVERT), context)
    assert [(g.path, g.grounded_by) for g in report.checked] == [("amount", None), ("currency", None)]


def test_dates_are_compared_as_dates_and_other_dates_are_not():
    specs = argument_specs({"type": "object", "properties": {"day": {"type": "string", "format": "date"}}})
    context = ProvenanceContext(["The invoice from March 5, 2024 is wrong."])
    assert check_arguments({"day": "2024-03-05"}, specs, context).checked[0].grounded_by == "context"
    assert not check_arguments({"day": "2023-11-20"}, specs, context).grounded


def test_samples_choosing_among_listed_files_are_a_choice_not_a_fabrication():
    listing = {"name": "list_directory", "args": {"path": "docs"}, "result": sorted(FILES)}
    context = ProvenanceContext(["One of the docs explains the rollback; read it.", listing])
    picks = ["docs/rollback_3.md", "docs/canary_7.md", "./docs/deploy_1.md", "docs//rollback_3.md", "docs/queue_2.md"]
    verdict = classify_plan(plan("read_file", [{"path": p} for p in picks]), registry(), context=context)
    assert verdict.arg_agreement == pytest.approx(0.1)  # counts (2, 1, 1, 1): two equal pairs of 20
    assert verdict.record_decision is PlanDecision.REJECT  # the record's rule: fabricated
    assert (verdict.decision, verdict.reason) == (PlanDecision.ACCEPT, "grounded_choice")


def test_scattered_values_that_do_not_exist_are_still_rejected():
    context = ProvenanceContext(["Which doc explains the rollback?", {"listing": sorted(FILES)}])
    invented = plan("read_file", [{"path": f"docs/{n}_guide.md"} for n in ("a1", "b2", "c3", "a1", "d4")])
    verdict = classify_plan(invented, registry(), context=context)
    assert (verdict.decision, verdict.reason) == (PlanDecision.REJECT, "fabricated_arguments")
    # One real file among inventions: not every variant is grounded, so the record's rejection stands.
    mixed = plan("read_file", [{"path": p} for p in ("docs/canary_7.md", "docs/a1.md", "docs/b2.md", "docs/c3.md",
                                                     "docs/d4.md")])
    assert classify_plan(mixed, registry(), context=context).reason == "fabricated_arguments"


@pytest.mark.parametrize(("error", "decision"), [
    ("FileNotFoundError: docs/canary_3.md", PlanDecision.REJECT),  # recombined from seen parts, and not there
    ("TimeoutError: sandbox busy", PlanDecision.ACCEPT),  # the dry run says nothing either way
])
def test_a_value_built_from_seen_parts_is_rejected_only_when_the_dry_run_does_not_find_it(error, decision):
    context = ProvenanceContext(["Read the canary notes in docs.", {"listing": ["canary_7.md", "rollback_3.md"]}])
    samples = [PlanSample("read_file", {"path": "docs/canary_3.md"}, EPOCH, error=error)] * 5
    verdict = classify_plan(samples, registry(), context=context)
    assert verdict.provenance.checked[0].grounded_by == "context_parts"
    assert verdict.decision is decision


def test_without_a_context_nothing_is_rejected_for_provenance_alone():
    samples = plan("get_order", [{"order_id": "ORD-77123"}] * 5)
    assert classify_plan(samples, registry()).decision is PlanDecision.ACCEPT
    assert classify_plan(samples, registry(), context=ProvenanceContext()).decision is PlanDecision.ACCEPT


def test_the_record_rule_alone_is_one_switch_away():
    samples = plan("search", [{"query": q, "limit": 5} for q in ("a b", "b a", "c", "d e", "f")])
    gate = ConsistencyGate(registry(), per_argument=False, provenance=False)
    verdict = gate.evaluate(samples, ProvenanceContext(["anything"]))
    assert (verdict.decision, verdict.reason) == (PlanDecision.REJECT, "fabricated_arguments")
    assert verdict.provenance is None


def test_error_payloads_are_not_taken_as_found():
    samples = [PlanSample("get_order", {"order_id": f"ORD-{i}9{i}"}, EPOCH, result={"error": "not found"})
               for i in range(5)]
    verdict = classify_plan(samples, registry(), context=ProvenanceContext(["check my order"]))
    assert verdict.reason == "fabricated_arguments"


def test_the_context_index_is_bounded():
    context = ProvenanceContext(max_chars=1000, max_item_chars=1000)
    context.add("ORD-1 " * 1000)
    context.add("ORD-2042 appears only after the cap")
    assert context.truncated and context.chars <= 1000
    assert not context.contains("ORD-2042")


def test_a_huge_tool_result_is_read_only_up_to_the_cap():
    context = ProvenanceContext(max_item_chars=5_000)
    context.add({"rows": [{"id": f"ORD-{i}"} for i in range(100_000)]})
    assert context.truncated and context.chars <= 5_100
    assert context.contains("ORD-7") and not context.contains("ORD-99999")
