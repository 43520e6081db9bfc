"""Checks for any agent's domain: record facts, ignored tool errors, answer parts, single-shot provenance, robust fitting."""

from __future__ import annotations

import json
import random

from guardrail import Guard
from guardrail.core.events import Action, Episode, Result, Step, StepKind, ToolEvent
from verifiers.fit import _EXPRESSION, _NOT_EXPRESSIONS, _count_rule, fit_spec_report
from verifiers.fit_shapes import fit_shapes
from verifiers.offline import verify_episode
from verifiers.spec import AnswerPart, Fact, ToolSpec, VerifierSpec

CONTACTS = {"Ada Lovelace": "ada@analytical.org", "Alan Turing": "alan@bletchley.uk", "Grace Hopper": "grace@navy.mil"}


def run(task: str, events: list[ToolEvent], answer: str, episode_id: str = "e", label: str = "healthy") -> Episode:
    steps = [Step(index=i, kind=StepKind.TOOL_CALL, tool_events=[e]) for i, e in enumerate(events)]
    steps.append(Step(index=len(steps), kind=StepKind.FINAL, text=answer))
    return Episode(episode_id=episode_id, steps=steps, task=task, label=label,
                   tools=sorted({e.name for e in events}))


def checks(episode: Episode, spec: VerifierSpec) -> list[str]:
    return [f.check for f in verify_episode(episode, spec).findings if f.blocking or f.severity.value != "info"]


def contact(name: str) -> ToolEvent:
    return ToolEvent(name="find_contact", args={"name": name},
                     result=json.dumps({"name": name, "email": CONTACTS[name], "team": "research"}))


EMAIL_FACT = VerifierSpec(name="contacts", tools={"find_contact": ToolSpec(facts=[Fact(
    field="email", key_field="name", shape=r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")])})


def test_a_record_field_the_answer_states_differently_is_a_contradicted_fact():
    task = "What is Ada Lovelace's email?"
    right = run(task, [contact("Ada Lovelace")], "Ada Lovelace can be reached at ada@analytical.org.")
    wrong = run(task, [contact("Ada Lovelace")], "Ada Lovelace can be reached at alan@bletchley.uk.")
    assert checks(right, EMAIL_FACT) == []
    assert checks(wrong, EMAIL_FACT) == ["grounding"]


def test_fit_spec_learns_record_facts_and_answer_parts_from_what_healthy_answers_repeat():
    rng = random.Random(0)
    runs = []
    for i in range(12):
        name = rng.choice(sorted(CONTACTS))
        runs.append(run(f"What is {name}'s email?", [contact(name)], f"{name}: {CONTACTS[name]}.", f"c{i}"))
    spec = fit_spec_report(runs).spec.variants[0]
    tool = spec.tools["find_contact"]
    [fact] = [f for f in tool.facts if f.field == "email"]
    assert fact.key_field == "name" and fact.shape is not None
    assert [p.field for p in tool.answer] == ["email"]  # the team was never stated: not a part
    left_out = run("What is Grace Hopper's email?", [contact("Grace Hopper")], "Grace Hopper works in research.")
    assert "answer_parts" in checks(left_out, spec)


def test_an_answer_reporting_an_item_a_tool_failed_for_is_an_ignored_tool_error():
    failed = ToolEvent(name="lookup_sku", args={"sku": "SKU-77"}, result="Error: unknown SKU 'SKU-77'", is_error=True)
    spec = VerifierSpec(name="stock")
    ignored = run("Stock of SKU-77?", [failed], "SKU-77 has 12 units in stock.")
    honest = run("Stock of SKU-77?", [failed], "SKU-77 could not be found in the inventory.")
    assert "tool_error" in checks(ignored, spec)
    assert "tool_error" not in checks(honest, spec)
    retried = run("Stock of SKU-77?", [failed, ToolEvent(name="lookup_sku", args={"sku": "SKU-77"}, result="12 units")],
                  "SKU-77 has 12 units in stock.")
    assert "tool_error" not in checks(retried, spec)


def test_an_answer_missing_one_of_two_asked_values_leaves_out_an_answer_part():
    spec = VerifierSpec(name="stats", tools={"get_stat": ToolSpec(answer=[AnswerPart(field="value")])})
    events = [ToolEvent(name="get_stat", args={"stat": s}, result=json.dumps({"stat": s, "value": v}))
              for s, v in (("mean", 5.84), ("median", 5.8))]
    assert checks(run("Mean and median?", events, "Mean 5.84 cm, median 5.80 cm."), spec) == []
    [finding] = [f for f in verify_episode(run("Mean and median?", events, "Mean 5.84 cm."), spec).findings]
    assert finding.check == "answer_parts" and "5.8" in finding.message


def test_an_identifier_nothing_the_agent_saw_holds_is_a_provenance_warning_live_and_offline():
    guard = Guard.default(spec=VerifierSpec(name="stock"), mode="intervene")
    ctx = guard.start_episode(task="How many units of SKU-1042 are in stock?")
    decision = guard.before_action(ctx, Action.tool_call("lookup_sku", {"sku": "SKU-5363"}))
    [finding] = decision.findings
    assert (finding.check, finding.blocking, decision.verdict.value) == ("provenance", False, "warn")
    assert guard.before_action(ctx, Action.tool_call("lookup_sku", {"sku": "SKU-1042"})).findings == []
    guard.after_result(ctx, Action.tool_call("list_skus", {}), Result(output='["SKU-2001", "SKU-2002"]'))
    assert guard.before_action(ctx, Action.tool_call("lookup_sku", {"sku": "SKU-2002"})).findings == []
    offline = run("How many units of SKU-1042 are in stock?", [ToolEvent(name="lookup_sku", args={"sku": "SKU-5363"},
                                                                          result="12 units")], "12 units.")
    assert "provenance" in checks(offline, VerifierSpec(name="stock"))
    no_task = offline.model_copy(update={"task": None})
    assert "provenance" not in checks(no_task, VerifierSpec(name="stock"))  # nothing to judge it against


def shop_run(seed: int, slip: float = 0.0) -> Episode:
    rng = random.Random(seed)
    prices = {name: rng.randint(5, 90) for name in rng.sample(["lamp", "kettle", "fan", "mug", "desk"], 2)}
    events = [ToolEvent(name="price", args={"item": n}, result=f"{n}: ${p}") for n, p in prices.items()]
    total = sum(prices.values()) + slip
    return run(f"Buy {' and '.join(prices)}. Report the total in USD.", events, f"The total is ${total:.2f}.",
               f"shop-{seed}{'-slip' if slip else ''}")


def test_a_rule_that_a_few_healthy_runs_break_is_kept_and_its_exceptions_listed_by_id():
    runs = [shop_run(s) for s in range(40)] + [shop_run(100, slip=3)]  # one mislabelled run among 41
    result = fit_spec_report(runs)
    [family] = result.families
    assert "total_consistency" in family.checks
    assert family.exceptions["total_consistency"] == ["shop-100-slip"]
    assert any("shop-100-slip" in m and "relabel" in m for m in family.messages)
    strict = fit_spec_report(runs, support=1.0).families[0]
    assert "total_consistency" not in strict.checks or strict.exceptions.get("total_consistency")


def test_iso_dates_and_times_are_not_arithmetic():
    for text in ("2025-05-12", "10/12/2025", "12:30", "from 2025-05-12 to 2025-05-14"):
        assert not _EXPRESSION.search(_NOT_EXPRESSIONS.sub(" ", text)), text
    for text in ("120 * 2 + 35", "(3 + 4) * 2", "12 - 3"):
        assert _EXPRESSION.search(_NOT_EXPRESSIONS.sub(" ", text)), text


def test_an_error_message_generalizes_over_the_entity_it_names():
    results = [(f"unknown city '{c}'", False) for c in ("Oslo", "Lyon", "Graz")]
    fitted = fit_shapes("weather", results, anchor=None, min_support=2, arguments=[["Oslo"], ["Lyon"], ["Graz"]])
    [shape] = fitted.returns
    assert shape.regex.fullmatch("unknown city 'Reykjavik'")


def test_a_call_count_ties_to_the_tasks_items_not_to_the_smallest_count_seen():
    import numpy as np

    items = np.array([4.0, 4, 4, 4, 5])
    assert _count_rule([4, 4, 4, 4, 5], {"items_after_order": items}, lists=frozenset({"items_after_order"})) == \
        "items_after_order"
    assert _count_rule([4, 4, 4, 4, 4], {"items_after_order": items[:5] * 0 + 4},
                       lists=frozenset({"items_after_order"})) == "items_after_order"  # a 3-item task needs 3
    assert _count_rule([3, 5, 4, 6], {}) == 1  # varies with nothing a run can read: at least one call
