"""fit_spec and `guardrail fit-spec`: a spec inferred from healthy runs only, per task family, checked against them."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pytest

from guardrail import Guard
from guardrail.core.cli import main
from guardrail.core.corpus import read_corpus, write_corpus
from guardrail.core.events import HEALTHY, Action, Episode, Result, Step, StepKind, ToolEvent
from verifiers import load_spec, verify_episode
from verifiers.fit import fit_spec, fit_spec_report
from verifiers.fit_template import make_template, merge_optional
from verifiers.spec import dump_spec

TESTBED = Path(__file__).resolve().parents[1] / "traces" / "corpora" / "testbed_langgraph"
ITEMS = ["rain jacket", "power bank", "sun hat", "travel towel", "toiletry bag", "neck pillow"]
PRICES = {name: 40 + 17 * i for i, name in enumerate(ITEMS)}


def order_run(seed: int, *, label: str = HEALTHY, slip: float = 0.0, answer: str | None = None) -> Episode:
    """A shop order: per-item quantities in the task, a catalog lookup per item, 8% tax, the total to the cent."""
    rng = random.Random(seed)
    chosen = rng.sample(ITEMS, rng.randint(2, 4))
    quantities = {name: rng.randint(1, 4) for name in chosen}
    listed = ", ".join(f"{q} x {n}" for n, q in quantities.items())
    task = f"Order {listed} from the shop with 8% tax. Report the total in USD."
    steps = [Step(index=i, kind=StepKind.TOOL_CALL,
                  tool_events=[ToolEvent(name="search_catalog", args={"query": n}, result=f"{n}: ${PRICES[n]}")])
             for i, n in enumerate(chosen)]
    total = round(sum(q * PRICES[n] for n, q in quantities.items()) * 1.08 + slip, 2)
    steps.append(Step(index=len(steps), kind=StepKind.FINAL, text=answer or f"The total is ${total:.2f}."))
    return Episode(episode_id=f"order-{seed}-{label}", steps=steps, task=task, label=label,
                   tools=["search_catalog", "calculator"])


def findings(episode: Episode, spec: Any) -> list[str]:
    return [f.check for f in verify_episode(episode, spec).findings if f.blocking]


# ------------------------------------------------------------------ templates
def test_a_template_takes_out_entities_numbers_and_lists():
    task = "Among Tallinn, Tunis and Montreal, pick the cheapest, and report 3 nights there in USD."
    template = make_template(task, ["Tallinn", "Tunis", "Montreal"])
    assert template is not None
    assert template.describe() == "Among <list>, pick the cheapest, and report <n> nights there in USD."
    assert template.values("Among Oslo and Rome, pick the cheapest, and report 5 nights there in USD.") == {
        "l1": "Oslo and Rome", "n1": "5"}
    assert template.values("Summarize the news.") is None


def test_two_templates_that_differ_by_a_clause_merge_with_the_clause_optional():
    with_weather = make_template("Plan a trip Oslo->Rome: 2 nights at each stop and check the weather. Report.",
                                 ["Oslo", "Rome"])
    plain = make_template("Plan a trip Lima->Quito: 3 nights at each stop. Report.", ["Lima", "Quito"])
    assert with_weather is not None and plain is not None
    merged = merge_optional(with_weather, plain)
    assert merged is not None and merged.describe() == ("Plan a trip <list>: <n> nights at each stop[ and check "
                                                        "the weather]. Report.")
    assert merged.values("Plan a trip A->B: 1 nights at each stop. Report.") is not None
    assert merged.values("Plan a trip A->B: 1 nights at each stop and check the weather. Report.") is not None


# ------------------------------------------------------------------ fitting
def test_per_item_quantities_and_a_tax_rate_are_found_from_healthy_runs_alone():
    result = fit_spec_report([order_run(s) for s in range(12)])
    [variant] = result.spec.variants
    assert variant.runs("total_consistency")
    line = variant.tools["search_catalog"].line_item
    assert line is not None and line.support == 12
    assert variant.quantities[str(line.multiplicity)].pattern == r"(?P<value>\d+(?:\.\d+)?)\s*x\s*{key}"
    [adjustment] = variant.total.adjustments
    assert adjustment.kind == "percent_add" and variant.quantities[str(adjustment.by)].scale == 0.01
    assert variant.total.support == 12 and variant.total.chance == 0.0
    # Unseen tasks of the family: a right total passes, a slipped one is caught.
    assert findings(order_run(100), result.spec) == []
    assert "total_consistency" in findings(order_run(101, slip=10), result.spec)


def test_a_family_with_too_few_healthy_runs_gets_generic_and_a_message():
    result = fit_spec_report([order_run(s) for s in range(3)], min_support=5)
    assert result.spec.variants == [] and result.spec.checks == ["completion"]
    [family] = result.families
    assert not family.fitted and "fewer than min_support 5" in family.messages[0]


def test_a_relation_that_also_holds_on_shuffled_runs_is_not_kept():
    # Each answer names one of its two prices at random: "any 1 of the 2" reproduces every answer,
    # and just as well another run's answer, so it says nothing.
    runs = []
    for seed in range(12):
        rng = random.Random(seed)
        prices = rng.sample([10, 20, 30], 2)
        steps = [Step(index=i, kind=StepKind.TOOL_CALL, tool_events=[ToolEvent(name="quote", args={"n": i},
                                                                               result=f"${p}")])
                 for i, p in enumerate(prices)]
        steps.append(Step(index=2, kind=StepKind.FINAL, text=f"Total: ${rng.choice(prices)}."))
        runs.append(Episode(episode_id=f"q{seed}", steps=steps))
    result = fit_spec_report(runs)
    [variant] = result.spec.variants
    assert not variant.runs("total_consistency")
    assert any("by chance" in m for m in result.families[0].messages)


def test_no_fitting_run_is_flagged_and_what_would_flag_one_is_dropped_with_a_message():
    runs = [order_run(s) for s in range(10)]
    runs.append(order_run(10, answer='search_catalog({"query": "sun hat"})'))  # a healthy label, a bare call
    result = fit_spec_report(runs)
    [variant] = result.spec.variants
    assert not variant.runs("completion") and not variant.runs("total_consistency")
    assert any("completion: flagged 1 of 11 fitting run(s)" in m for m in result.families[0].messages)
    assert all(findings(run, result.spec) == [] for run in runs)


def test_held_out_healthy_runs_are_checked_and_reported():
    result = fit_spec_report([order_run(s) for s in range(20)], holdout=0.25)
    [family] = result.families
    # Held out by entity: every run naming a held-out item is out, so the count is near, not exactly, a quarter.
    assert family.healthy_fit + family.held_out == 20 and 4 <= family.held_out <= 8
    assert family.held_out_flagged.get("any", 0) == 0
    assert result.spec.variants[0].fitted.held_out == {"runs": family.held_out, "flagged": family.held_out_flagged,
                                                       "by": "entity"}


def test_only_healthy_episodes_are_fitted_on():
    healthy = [order_run(s) for s in range(8)]
    wrong = [order_run(50 + s, label="arithmetic_error", slip=5) for s in range(8)]
    assert fit_spec(healthy + wrong).variants == fit_spec(healthy).variants


def test_the_testbed_catalog_and_travellers_tasks_get_a_totals_check_with_no_healthy_run_flagged():
    episodes = read_corpus(TESTBED).episodes
    spec = fit_spec(e for e in episodes if e.is_healthy)
    by_kind = {e.meta["task_kind"]: spec.for_run(e.tools, e.task) for e in episodes if e.is_healthy}
    for kind in ("catalog", "travellers"):
        assert by_kind[kind].runs("total_consistency"), kind
    assert [e.episode_id for e in episodes if e.is_healthy and findings(e, spec)] == []
    slips = [e for e in episodes if e.label == "arithmetic_error" and e.meta["task_kind"] in ("catalog", "travellers")]
    assert slips and all("total_consistency" in findings(e, spec) for e in slips)


# ------------------------------------------------------------------ the command, verify and the Guard
def test_fit_spec_writes_a_spec_that_verify_and_guard_default_use(tmp_path, capsys):
    corpus = tmp_path / "orders"
    write_corpus(corpus, [order_run(s) for s in range(12)] + [order_run(99, label="arithmetic_error", slip=7)])
    out = tmp_path / "fitted.json"
    assert main(["fit-spec", str(corpus), "-o", str(out), "--holdout", "0.25"]) == 0
    printed = capsys.readouterr().out
    assert "12 healthy episode(s) of 13 given" in printed and f"wrote {out}" in printed
    assert 7 <= load_spec(out).variants[0].fitted.healthy_fit <= 10  # held out by entity: about a quarter

    assert main(["verify", str(corpus), "--spec", str(out), "--json"]) == 0
    records = {r["episode_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert records["order-99-arithmetic_error"]["flags"]["total_consistency"]
    assert not any(records["order-3-healthy"]["flags"].values())

    guard = Guard.default(spec=out)
    slipped = order_run(77, slip=3)
    ctx = guard.start_episode(task=slipped.task, tools=slipped.tools)
    for step in slipped.steps[:-1]:
        event = step.tool_events[0]
        guard.after_result(ctx, Action.tool_call(event.name, event.args), Result(output=event.result or ""))
    decision = guard.on_finish(ctx, answer=slipped.steps[-1].text)
    assert "total_consistency" in [f.check for f in decision.findings]


def test_fit_spec_takes_labels_from_a_csv(tmp_path, capsys):
    corpus = tmp_path / "c"
    write_corpus(corpus, [order_run(s) for s in range(8)])
    labels = tmp_path / "labels.csv"
    with labels.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["episode_id", "label"])
        writer.writerows([[f"order-{s}-healthy", "healthy" if s < 6 else "incomplete"] for s in range(8)])
    out = tmp_path / "s.json"
    assert main(["fit-spec", str(corpus), "-o", str(out), "--labels", str(labels), "--holdout", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["families"][0]["healthy_fit"] == 6
    assert main(["fit-spec", str(corpus), "-o", str(out), "--labels", str(corpus / "manifest.json")]) == 2
    assert "needs columns episode_id and label" in capsys.readouterr().err


def test_a_fitted_spec_file_is_editable_json(tmp_path):
    spec = fit_spec([order_run(s) for s in range(8)])
    path = tmp_path / "s.json"
    path.write_text(dump_spec(spec))
    raw = json.loads(path.read_text())
    raw["variants"][0]["checks"] = ["completion"]  # a person turns a family's checks off by hand
    path.write_text(json.dumps(raw))
    assert load_spec(path).variants[0].checks == ["completion"]


@pytest.fixture(scope="module")
def cold(sentinel_dir: Path) -> list[Episode]:
    with (sentinel_dir / "results" / "organic_hallucination_cold.csv").open(newline="") as handle:
        labels = {row["episode_id"]: row["label"] for row in csv.DictReader(handle)}
    return [e.model_copy(update={"label": labels[e.episode_id]})
            for e in read_corpus(sentinel_dir / "organic_demo7b_cold").episodes]


def test_a_spec_fitted_on_cold_healthy_runs_catches_every_cold_failure(cold):
    spec = fit_spec(cold)
    [variant] = spec.variants
    assert variant.tools["lookup_hotel"].line_item.multiplicity == 2.0  # two nights, found, not told
    caught = {e.episode_id: bool(findings(e, spec)) for e in cold}
    assert not any(caught[e.episode_id] for e in cold if e.is_healthy)
    assert all(caught[e.episode_id] for e in cold if not e.is_healthy)


def test_json_results_get_a_json_schema_contract_that_a_broken_payload_violates():
    def quote_run(seed: int, result: str | None = None) -> Episode:
        price = 100 + seed
        body = result or json.dumps({"item": f"room {seed}", "price": price, "tags": ["a"]})
        steps = [Step(index=0, kind=StepKind.TOOL_CALL, tool_events=[ToolEvent(name="quote", args={"id": seed},
                                                                              result=body)]),
                 Step(index=1, kind=StepKind.FINAL, text="Booked.")]
        return Episode(episode_id=f"j{seed}", steps=steps)

    spec = fit_spec([quote_run(s) for s in range(8)])
    schema = spec.variants[0].tools["quote"].json_schema
    assert schema is not None and set(schema["required"]) == {"item", "price", "tags"}  # type: ignore[arg-type]
    assert findings(quote_run(9), spec) == []
    # A malformed result is flagged, and is no answer either (the call still had to be made).
    assert findings(quote_run(10, '{"item": "room", "price": }'), spec) == ["tool_contract", "required_coverage"]
    assert findings(quote_run(11, '{"item": "room"}'), spec) == ["tool_contract", "required_coverage"]
