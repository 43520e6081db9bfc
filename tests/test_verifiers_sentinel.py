"""The checks on real sentinel episodes, graded by the published label files (organic) and manifests (injected)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from guardrail.core.corpus import read_corpus
from guardrail.core.events import Episode
from verifiers import load_spec, verify_episode
from verifiers.cli import corpus_spec


def labels(sentinel: Path, name: str) -> dict[str, str]:
    with (sentinel / "results" / name).open(newline="") as handle:
        return {row["episode_id"]: row["label"] for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def cold(sentinel_dir: Path) -> dict[str, Episode]:
    return {e.episode_id: e for e in read_corpus(sentinel_dir / "organic_demo7b_cold").episodes}


@pytest.fixture(scope="module")
def cold_labels(sentinel_dir: Path) -> dict[str, str]:
    return labels(sentinel_dir, "organic_hallucination_cold.csv")


BOOKING_TOUR = load_spec("booking_tour")


def flagged(episode: Episode) -> set[str]:
    return {c for c, f in verify_episode(episode, BOOKING_TOUR).flags.items() if f}


def test_the_organic_corpora_pick_the_booking_tour_spec(cold):
    assert corpus_spec(cold.values()).name == "booking_tour"


def test_no_check_flags_any_healthy_cold_episode(cold, cold_labels):
    healthy = [e for eid, e in cold.items() if cold_labels[eid] == "healthy"]
    assert len(healthy) == 63
    assert [e.episode_id for e in healthy if flagged(e)] == []


def test_no_check_flags_any_healthy_held_out_ext_episode(sentinel_dir):
    ext_labels = labels(sentinel_dir, "organic_hallucination_ext.csv")
    healthy = [e for e in read_corpus(sentinel_dir / "organic_demo7b_ext").episodes
               if ext_labels[e.episode_id] == "healthy"]
    assert len(healthy) == 38
    assert [e.episode_id for e in healthy if flagged(e)] == []


def test_an_arithmetic_error_is_caught_by_the_recomputed_total(cold, cold_labels):
    episode = cold["organic-demo-001"]  # flights counted three times by the agent's own calculator call
    assert cold_labels["organic-demo-001"] == "arithmetic_error"
    verdict = verify_episode(episode, BOOKING_TOUR)
    [finding] = [f for f in verdict.findings if f.check == "total_consistency"]
    assert finding.evidence["recomputed"] == 2189  # the graded truth, recomputed from the run's own results


def test_every_cold_arithmetic_error_is_caught_by_totals_or_coverage(cold, cold_labels):
    errors = [e for eid, e in cold.items() if cold_labels[eid] == "arithmetic_error"]
    missed = [e.episode_id for e in errors if not flagged(e) & {"total_consistency", "required_coverage"}]
    assert len(errors) == 37 and missed == []


def test_an_incomplete_run_is_caught_by_coverage_alone(cold, cold_labels):
    assert cold_labels["organic-demo-002"] == "incomplete"
    assert flagged(cold["organic-demo-002"]) == {"required_coverage"}


def test_a_weather_hallucination_is_caught_by_grounding(cold, cold_labels):
    assert cold_labels["organic-demo-096"] == "hallucinated"
    assert flagged(cold["organic-demo-096"]) == {"grounding"}


def test_provoked_fabrications_are_all_caught(sentinel_dir):
    provoked_labels = labels(sentinel_dir, "verification_provoked.csv")
    episodes = [e for e in read_corpus(sentinel_dir / "organic_demo7b_provoked").episodes
                if provoked_labels[e.episode_id] == "hallucinated"]
    assert len(episodes) == 26
    assert [e.episode_id for e in episodes if not flagged(e)] == []


def test_an_ungrounded_input_is_caught_at_the_calculator_step(sentinel_dir):
    episode = next(e for e in read_corpus(sentinel_dir / "organic_demo7b_provoked").episodes
                   if e.episode_id == "organic-demo-047")  # ungrounded_input in provoked_fabrication.csv
    findings = [f for f in verify_episode(episode, BOOKING_TOUR).findings if f.check == "grounding"]
    assert episode.steps[8].tool_events[0].name == "calculator"
    assert findings[0].step == 8 and findings[0].evidence["ungrounded"] == [7.0, 150.0]


@pytest.mark.parametrize("corpus", ["langgraph7b", "autogen7b"])
def test_tool_contract_flags_injected_corruption_at_onset_and_no_healthy_run(sentinel_dir, corpus):
    episodes = read_corpus(sentinel_dir / corpus).episodes
    spec = corpus_spec(episodes)
    assert spec.name == "booking_tools"
    healthy_flagged, late = [], []
    for episode in episodes:
        steps = [f.step for f in verify_episode(episode, spec).findings if f.check == "tool_contract"]
        if episode.is_healthy and steps:
            healthy_flagged.append(episode.episode_id)
        if episode.label == "context_corruption" and (not steps or min(steps) - episode.tau > 1):
            late.append(episode.episode_id)
    assert healthy_flagged == []
    assert late == []


def test_the_research_corpus_gets_the_research_spec_and_its_healthy_runs_pass_contracts(sentinel_dir):
    episodes = read_corpus(sentinel_dir / "demo_real_varied_ext").episodes
    spec = corpus_spec(episodes)
    assert spec.name == "research"
    assert [e.episode_id for e in episodes if e.is_healthy
            and verify_episode(e, spec).flags["tool_contract"]] == []
