"""`guardrail bench consistency` runs end to end and its figures mean what they say."""

from __future__ import annotations

import json

from guardrail.core.cli import main
from traces.bench.consistency import run_benchmark
from traces.bench.consistency_sandbox import MISDECLARED

REQUIRED = ("naive_fp_share", "separated_fp_share", "fabricated_recall_naive", "fabricated_recall_separated",
            "fabricated_accepted_share", "layer_fp_share", "layer_fabricated_accepted_share",
            "misdeclared_found", "n_plans", "added_us_per_sample", "sweep")
SWEEP_KEYS = {"paraphrase_rate", "coincident_rate", "separated_fp_share", "fabricated_accepted_share",
              "naive_fp_share", "naive_fabricated_accepted_share", "layer_fp_share", "layer_fabricated_accepted_share"}


def test_cli_json_has_the_issue_keys(capsys):
    assert main(["bench", "consistency", "--json", "--plans", "120", "--seed", "2", "--sweep-plans", "60",
                 "--sweep-paraphrase", "0", "0.5", "--sweep-coincident", "0", "1", "--sweep-gap", "0.2",
                 "--sweep-recombined", "1", "--slip-plans", "150"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert set(REQUIRED) <= set(figures)
    assert figures["n_plans"] == 120
    for key in REQUIRED[:7]:
        assert figures[key] is None or 0.0 <= figures[key] <= 1.0
    assert figures["added_us_per_sample"] > 0
    assert [(p["paraphrase_rate"], p["coincident_rate"]) for p in figures["sweep"]] == [
        (0.0, 0.0), (0.0, 1.0), (0.5, 0.0), (0.5, 1.0)]
    assert all(SWEEP_KEYS <= set(point) for point in figures["sweep"])
    assert [p["gap_rate"] for p in figures["gap_sweep"]] == [0.2]
    assert [p["recombined_rate"] for p in figures["recombined_sweep"]] == [1.0]
    assert figures["free_text_point"]["search_index_writer"] == "stopped"
    # The per-signal breakdown: every in-scope plan is counted once per scorer, under the rule that decided it.
    for scorer in ("naive", "record", "layer"):
        signals = figures["scorers"][scorer]["signals"]
        assert sum(sum(rules.values()) for rules in signals.values()) == figures["n_in_scope"]
    assert set(figures["probes"]) == {"record_two_calls", "rounds_3_interval_20ms", "same_with_sandbox_clock_advanced"}
    assert set(figures["slip_point"]["by_style"]) >= {"healthy", "same_format", "near_miss"}


def test_paraphrased_healthy_plans_are_never_rejected_and_coincident_fabrications_all_run():
    # Every healthy candidate respelled (number formats, paths, spaces, NFD, indented JSON): one meaning, no rejection.
    healthy = run_benchmark(n_plans=200, seed=3, fabricated_fraction=0.0, ambiguous_fraction=0.0,
                            paraphrase_rate=1.0)
    assert healthy["separated_rejections"] == 0 and healthy["naive_rejections"] <= healthy["n_in_scope"]
    # A model that fabricates the same value in every sample defeats self-consistency: all of them would run.
    assert healthy["layer_rejections"] == 0  # nor by the full layer: each value is in its episode, or derived from it
    coincident = run_benchmark(n_plans=150, seed=4, fabricated_fraction=1.0, ambiguous_fraction=0.0,
                               coincident_rate=1.0)
    assert coincident["fabricated_accepted_share"] == 1.0 and coincident["separated_rejections"] == 0
    # Provenance sees what agreement cannot: none of those inventions appears in the episode, none is found.
    assert coincident["layer_fabricated_accepted_share"] == 0.0
    assert set(coincident["scorers"]["layer"]["signals"]["fabricated"]) == {"reject/ungrounded_identifier"}


def test_ambiguous_plans_the_record_rejects_are_choices_among_real_things_for_the_layer():
    figures = run_benchmark(n_plans=300, seed=6, fabricated_fraction=0.0, ambiguous_fraction=1.0)
    assert figures["separated_rejections"] > 20  # the record's false positives: one of several fitting files
    assert figures["layer_rejections"] == 0
    assert figures["scorers"]["layer"]["signals"]["ambiguous"]["accept/grounded_choice"] > 20


def test_honest_tools_are_never_reported_as_misdeclared():
    figures = run_benchmark(n_plans=200, seed=5)
    assert set(figures["misdeclared_found"]) <= set(MISDECLARED)
    assert figures["n_in_scope"] + figures["n_out_of_scope"] == 200


def test_without_fabrication_or_ambiguity_the_separated_gate_rejects_nothing():
    figures = run_benchmark(n_plans=200, seed=1, fabricated_fraction=0.0, ambiguous_fraction=0.0)
    assert figures["separated_rejections"] == 0
    assert figures["separated_fp_share"] is None
    assert figures["n_by_kind"] == {"healthy": figures["n_in_scope"]}


def test_all_fabricated_plans_on_verified_tools_are_mostly_caught():
    figures = run_benchmark(n_plans=150, seed=4, fabricated_fraction=1.0, ambiguous_fraction=0.0)
    assert figures["naive_fp_share"] in (0.0, None)
    assert figures["fabricated_recall_naive"] == 1.0
    assert figures["fabricated_recall_separated"] > 0.5


def test_bad_options_get_a_clear_error(capsys):
    assert main(["bench", "consistency", "--fabricated", "0.9", "--ambiguous", "0.5"]) == 2
    assert "fractions" in capsys.readouterr().err


def test_naive_scorer_rejects_what_the_separated_gate_defers():
    from guardrail.consistency import ConsistencyGate, DeterminismRegistry, PlanSample, ToolSchema
    from traces.bench.consistency import NaiveCombinedScorer

    registry = DeterminismRegistry([ToolSchema("search_index", True, probe_args={"q": "x"})])
    registry.probe(lambda tool, args: [1, 2], epoch="e")
    reordered = [PlanSample("search_index", {"q": "deploy"}, "e", result=hits)
                 for hits in ([1, 2, 3], [2, 1, 3], [1, 2, 3], [3, 1, 2], [2, 3, 1])]
    rejects, combined = NaiveCombinedScorer(registry).rejects(reordered)
    assert rejects and combined == 0.1
    assert ConsistencyGate(registry).evaluate(reordered).decision.value == "defer"


def test_slipped_fabrications_look_like_real_values_and_only_another_entitys_real_value_gets_past_provenance():
    from traces.bench.consistency_slips import STYLES

    figures = run_benchmark(n_plans=400, seed=3, fabricated_fraction=0.5, coincident_rate=0.5, slip_styles=STYLES)
    by_style = figures["by_style"]
    assert set(STYLES) <= set(by_style)
    for style in ("same_format", "near_miss"):  # invented values in the real format: nothing the agent saw holds them
        assert by_style[style]["n"] > 0 and by_style[style]["layer_rejected"] >= 0.9 * by_style[style]["n"]
        not_whole = by_style[style]["single_shot_ungrounded"] + by_style[style]["single_shot_partial"]
        assert not_whole >= 0.9 * by_style[style]["n"]
    # A real value of another entity is in the episode: provenance grounds it, by design (the layer's blind spot).
    assert by_style["other_entity"]["single_shot_ungrounded"] == 0
    assert by_style["healthy"]["layer_rejected"] == 0 and by_style["healthy"]["single_shot_ungrounded"] == 0
