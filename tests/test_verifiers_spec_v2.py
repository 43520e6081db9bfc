"""Spec format version 2: quantities from the task or a tool, expressions, optional items, adjustments, rounding, variants."""

from __future__ import annotations

import json
from typing import Any

import pytest

from guardrail.core.events import Episode, Step, StepKind, ToolEvent
from verifiers import SpecError, VerifierSpec, load_spec, verify_episode
from verifiers.expressions import ExpressionError, MissingQuantity, evaluate
from verifiers.spec import builtin_specs, dump_spec

PRICE = {"pattern": r"\$(?P<value>\d+(?:\.\d+)?)"}


def run(calls: list[tuple[str, dict[str, Any], str]], answer: str, task: str | None = None) -> Episode:
    steps = [Step(index=i, kind=StepKind.TOOL_CALL, tool_events=[ToolEvent(name=n, args=a, result=r)])
             for i, (n, a, r) in enumerate(calls)]
    steps.append(Step(index=len(steps), kind=StepKind.FINAL, text=answer))
    return Episode(episode_id="e", steps=steps, task=task)


def spec(**fields: Any) -> VerifierSpec:
    return VerifierSpec.model_validate({"name": "t", "checks": ["total_consistency", "required_coverage",
                                                                "grounding"], **fields})


def flags(episode: Episode, s: VerifierSpec) -> set[str]:
    return {c for c, hit in verify_episode(episode, s).flags.items() if hit}


# ------------------------------------------------------------------ versions
def test_every_shipped_version_1_spec_still_loads():
    assert {s.name for s in builtin_specs()} >= {"booking_tour", "booking_tools", "research", "generic"}
    assert load_spec("booking_tour").version == 1


def test_a_version_1_file_using_a_version_2_field_is_an_error_naming_it(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": "guardrail-verifier-spec", "version": 1, "name": "x",
                                "quantities": {"n": {"from": "task", "pattern": r"(?P<value>\d+)"}}}))
    with pytest.raises(SpecError, match="quantities need version 2"):
        load_spec(path)


def test_an_expression_naming_an_undefined_quantity_is_an_error():
    with pytest.raises(ValueError, match="nights, which quantities does not define"):
        spec(tools={"hotel": {"line_item": {"multiplicity": "nights"}}})


@pytest.mark.parametrize("text", ["__import__('os')", "nights ** 2", "a.b", "'x'", "f(1)"])
def test_expressions_are_arithmetic_only(text):
    with pytest.raises(ExpressionError):
        evaluate(text, {"nights": 2, "a": 1})


def test_an_expression_reports_the_quantity_it_lacks():
    assert evaluate("2 * bags + 1", {"bags": 3}) == 7
    with pytest.raises(MissingQuantity, match="bags"):
        evaluate("2 * bags", {})


def test_a_fitted_style_spec_round_trips_through_its_json(tmp_path):
    original = spec(quantities={"n": {"from": "task", "pattern": r"(?P<value>\d+) nights"}},
                    tools={"hotel": {"returns": [PRICE], "line_item": {"multiplicity": "n", "support": 7}}},
                    total={"rounding": {"places": 0, "mode": "any"}, "support": 7, "chance": 0.01})
    path = tmp_path / "s.json"
    path.write_text(dump_spec(original))
    assert load_spec(path) == original
    assert json.loads(path.read_text())["quantities"]["n"]["from"] == "task"


# ------------------------------------------------------------------ quantities in totals
CATALOG = spec(
    quantities={"qty": {"from": "task", "pattern": r"(?P<value>\d+) x {key}"}},
    tools={"search": {"returns": [PRICE], "line_item": {"multiplicity": "qty", "key_args": ["query"]}}})
ORDER = "Order 2 x rain jacket and 3 x power bank."


@pytest.mark.parametrize(("answer", "flagged"), [("Total: $490.", set()),  # 2*170 + 3*50
                                                 ("Total: $220.", {"total_consistency"}),  # a sum: grounded
                                                 ("Total: $530.", {"total_consistency", "grounding"})])
def test_a_per_item_quantity_is_read_from_the_task_next_to_each_item(answer, flagged):
    calls = [("search", {"query": "rain jacket"}, "$170"), ("search", {"query": "power bank"}, "$50")]
    assert flags(run(calls, answer, ORDER), CATALOG) == flagged


TRAVELLERS = spec(
    quantities={"travellers": {"from": "tool", "tool": "read_file", "measure": "items"}},
    tools={"flight": {"returns": [PRICE], "line_item": {"multiplicity": "travellers", "key_args": ["to"]}},
           "read_file": {}})
FARES = [("flight", {"to": "A"}, "$100"), ("flight", {"to": "B"}, "$200")]


def test_a_head_count_read_from_a_file_multiplies_the_fares():
    calls = [*FARES, ("read_file", {"path": "t.txt"}, "Ann Lee\nBo Kim\nCy Roe\n")]
    assert flags(run(calls, "Total: $900."), TRAVELLERS) == set()
    assert flags(run(calls, "Total: $300."), TRAVELLERS) == {"total_consistency"}


def test_a_total_whose_multiplier_the_run_never_read_is_flagged_with_the_reason():
    verdict = verify_episode(run(FARES, "Total: $900."), TRAVELLERS)
    [finding] = [f for f in verdict.findings if f.check == "total_consistency"]
    assert "read_file's result, which the run never obtained" in finding.message


TAXED = spec(quantities={"rate": {"from": "task", "pattern": r"(?P<value>\d+)% tax", "scale": 0.01}},
             tools={"item": {"returns": [PRICE], "line_item": {"key_args": ["id"]}}},
             total={"adjustments": [{"kind": "percent_add", "by": "rate"}]})
ITEMS = [("item", {"id": "1"}, "$221.29"), ("item", {"id": "2"}, "$139.59"), ("item", {"id": "3"}, "$48.97")]


@pytest.mark.parametrize(("answer", "ok"), [("$442.64", True), ("$442.638", True), ("$442.63", False),
                                            ("$409.85", False)])
def test_a_tax_rate_from_the_task_is_added_and_the_total_rounds_to_the_cent(answer, ok):
    episode = run(ITEMS, f"The total is {answer}.", "Add the items with 8% tax.")
    assert ("total_consistency" not in flags(episode, TAXED)) is ok


def test_a_rounding_rule_admits_whole_units_either_way():
    rounded = TAXED.model_copy(update={"total": TAXED.total.model_copy(
        update={"rounding": TAXED.total.rounding.model_copy(update={"places": 0, "mode": "any"})})})
    for answer, ok in [("$442", True), ("$443", True), ("$441", False)]:
        episode = run(ITEMS, f"The total is {answer}.", "Add the items with 8% tax.")
        assert ("total_consistency" not in flags(episode, rounded)) is ok


def test_an_optional_line_item_may_be_left_out_of_the_total():
    optional = spec(tools={"fare": {"returns": [PRICE], "line_item": {}},
                           "insurance": {"returns": [PRICE], "line_item": {"optional": True}}})
    calls = [("fare", {}, "$300"), ("insurance", {}, "$25")]
    assert flags(run(calls, "Total: $300."), optional) == set()
    assert flags(run(calls, "Total: $325."), optional) == set()
    assert "total_consistency" in flags(run(calls, "Total: $25."), optional)


# ------------------------------------------------------------------ coverage
STOPS = spec(checks=["required_coverage"],
             quantities={"stops": {"from": "task", "pattern": r"trip (?P<value>[\w>-]+):", "measure": "items"}},
             tools={"hotel": {"returns": [PRICE], "required": {"count": "stops - 2", "distinct_by": ["city"],
                                                               "args_in_task": ["city"]}}})
TRIP = "Plan a round trip Lisbon->Oslo->Rome->Lisbon: book the hotels."


def test_a_required_count_is_worked_out_from_the_task():
    both = [("hotel", {"city": "Oslo"}, "$90"), ("hotel", {"city": "Rome"}, "$80")]
    assert flags(run(both, "Done.", TRIP), STOPS) == set()
    assert flags(run(both[:1], "Done.", TRIP), STOPS) == {"required_coverage"}


def test_calls_about_something_the_task_never_names_do_not_count():
    drifted = [("hotel", {"city": "Oslo"}, "$90"), ("hotel", {"city": "Paris"}, "$80")]
    [finding] = [f for f in verify_episode(run(drifted, "Done.", TRIP), STOPS).findings]
    assert "1 of 2 required distinct by city about what the task names" in finding.message


# ------------------------------------------------------------------ variants
def test_a_run_gets_the_variant_its_task_matches_and_the_parent_otherwise():
    parent = VerifierSpec(name="fitted", checks=["completion"], variants=[
        VerifierSpec(name="trip", match={"task_pattern": r"^Plan a round trip"}, checks=["required_coverage"],
                     tools=STOPS.tools, quantities=STOPS.quantities),
        VerifierSpec(name="silent", match={"no_task": True}, priority=-1)])
    assert parent.for_run([], TRIP).name == "trip"
    assert parent.for_run([], None).name == "silent"
    assert parent.for_run([], "Summarize the news.").name == "fitted"
    assert verify_episode(run([], "Done.", TRIP), parent).spec == "trip"
    with pytest.raises(ValueError, match="variants nest one level only"):
        VerifierSpec(name="x", variants=[parent])
