"""Fitted specs beside the hand-written ones: `guardrail bench verify` fits a spec on each corpus's healthy training runs.

Protocol per corpus: the healthy episodes are split 60/40 with a seeded permutation; `fit_spec`
sees the 60% only (no other label); the fitted spec and the corpus's hand-written spec (the shipped
one `guardrail verify` picks, or the testbed's per-task spec from `traces.specs`) then verify the
held-out 40% healthy plus every failure. A 5-fold cross-fit over the healthy episodes says how
many healthy runs a spec fitted without them flags, so one lucky split cannot carry the claim.
The transfer row fits on every healthy ``organic_demo7b_cold`` episode and verifies
``organic_demo7b_ext``, which was held out until the fitting method was frozen.
"""

from __future__ import annotations

import csv
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from guardrail.core.corpus import read_corpus
from guardrail.core.events import HEALTHY, Episode
from verifiers.cli import corpus_spec
from verifiers.fit import fit_spec, fit_spec_report
from verifiers.offline import verify_episode
from verifiers.spec import CHECKS, VerifierSpec, load_spec

__all__ = ["TESTBED", "corpus_rows", "fit_timing", "fitted_rows", "shipped_rows", "testbed_hand", "transfer_rows"]

TESTBED = Path(__file__).resolve().parents[1] / "corpora"
ORGANIC_LABELS = {
    "organic_demo7b_cold": "organic_hallucination_cold.csv",
    "organic_demo7b_ext": "organic_hallucination_ext.csv",
    "organic_demo7b_provoked": "verification_provoked.csv",
}
SENTINEL_FIT = ["organic_demo7b_cold", "organic_demo7b_provoked", "langgraph7b", "autogen7b", "ollama7b",
                "demo_real_varied_ext", "real_research7b", "real_task_rollback"]
TRAIN_SHARE = 0.6
FOLDS = 5
HandSpec = Callable[[Episode], VerifierSpec]


def _labelled(sentinel: Path, name: str) -> list[Episode]:
    episodes = read_corpus(sentinel / name).episodes
    if name not in ORGANIC_LABELS:
        return episodes
    with (sentinel / "results" / ORGANIC_LABELS[name]).open(newline="", encoding="utf-8") as handle:
        labels = {row["episode_id"]: row["label"] for row in csv.DictReader(handle)}
    return [e.model_copy(update={"label": labels[e.episode_id]}) for e in episodes if e.episode_id in labels]


def testbed_hand(episode: Episode) -> VerifierSpec:
    """The testbed's hand-written spec for the episode's task (built from its prompt), generic when it has none."""
    from traces.specs import verifier_spec

    raw = verifier_spec(episode.task or "")
    return VerifierSpec.model_validate(raw) if raw is not None else load_spec("generic")


def _always(spec: VerifierSpec) -> HandSpec:
    return lambda _episode: spec


def _split(healthy: Sequence[Episode], seed: int) -> tuple[list[Episode], list[Episode]]:
    order = list(range(len(healthy)))
    random.Random(seed).shuffle(order)
    cut = round(TRAIN_SHARE * len(healthy))
    return [healthy[i] for i in order[:cut]], [healthy[i] for i in order[cut:]]


def _count(by_label: dict[str, Counter[str]], episode: Episode, flags: dict[str, bool]) -> None:
    c = by_label[episode.label]
    c["n"] += 1
    for check in CHECKS:
        c[check] += flags[check]
    c["with_coverage"] += flags["total_consistency"] or flags["required_coverage"]
    c["any"] += any(flags.values())


def _rows(corpus: str, spec_name: str, by_label: dict[str, Counter[str]]) -> list[dict[str, Any]]:
    rows = []
    for label in sorted(by_label, key=lambda lab: (lab != HEALTHY, lab)):
        c = by_label[label]
        rows.append({"corpus": corpus, "label": label, "n": c["n"], "spec": spec_name,
                     **{k: f"{c[k]}/{c['n']}" for k in ("total_consistency", "with_coverage", "required_coverage",
                                                       "grounding", "tool_contract", "completion", "any")}})
    return rows


def _k_fold_healthy(healthy: Sequence[Episode], seed: int) -> tuple[int, int]:
    """Healthy runs flagged by a spec fitted on the other folds: (flagged, total)."""
    order = list(range(len(healthy)))
    random.Random(seed + 1).shuffle(order)
    flagged = 0
    for fold in range(FOLDS):
        test = {i for k, i in enumerate(order) if k % FOLDS == fold}
        spec = fit_spec([healthy[i] for i in range(len(healthy)) if i not in test])
        flagged += sum(any(verify_episode(healthy[i], spec).flags.values()) for i in test)
    return flagged, len(healthy)


def corpus_rows(corpus: str, episodes: list[Episode], hand: HandSpec, seed: int) -> dict[str, Any]:
    """Fit on a seeded 60% of the healthy runs; fitted vs `hand` on the held-out 40% and every failure, per label.

    Also returns the fitted spec (``spec``) and the episodes it was evaluated on (``evaluated``).
    """
    healthy = [e for e in episodes if e.is_healthy]
    train, test_healthy = _split(healthy, seed)
    fitted = fit_spec(train)
    evaluated = test_healthy + [e for e in episodes if not e.is_healthy]
    fit_counts: dict[str, Counter[str]] = defaultdict(Counter)
    hand_counts: dict[str, Counter[str]] = defaultdict(Counter)
    for episode in evaluated:
        _count(fit_counts, episode, verify_episode(episode, fitted).flags)
        _count(hand_counts, episode, verify_episode(episode, hand(episode)).flags)
    flagged, total = _k_fold_healthy(healthy, seed)
    variants = fitted.variants
    return {
        "rows": _rows(corpus, "fitted", fit_counts) + _rows(corpus, "hand-written", hand_counts),
        "summary": {"corpus": corpus, "healthy_train": len(train), "healthy_test": len(test_healthy),
                    "failures": len(evaluated) - len(test_healthy), "families_fitted": len(variants),
                    "families_with_totals": sum(v.runs("total_consistency") for v in variants),
                    "k_fold_healthy_flagged": f"{flagged}/{total}"},
        "spec": fitted, "evaluated": evaluated,
    }


def fitted_rows(sentinel: Path | None, testbed: Path | None, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Per corpus and label, fitted vs hand-written catch rates on held-out healthy runs and every failure."""
    rows: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    sources: list[tuple[str, list[Episode], HandSpec]] = []
    if sentinel is not None:
        for name in SENTINEL_FIT:
            if (sentinel / name / "manifest.json").is_file():
                episodes = _labelled(sentinel, name)
                sources.append((name, episodes, _always(corpus_spec(episodes))))
    if testbed is not None:
        for path in sorted(testbed.glob("testbed_*")):
            if (path / "manifest.json").is_file():
                sources.append((path.name, read_corpus(path).episodes, testbed_hand))
    for name, episodes, hand in sources:
        result = corpus_rows(name, episodes, hand, seed)
        rows += result["rows"]
        summary.append(result["summary"])
    return {"rows": rows, "summary": summary}


def _organic_targets(sentinel: Path, fitted: VerifierSpec, source: str, label: str) -> list[dict[str, Any]]:
    """`fitted` beside booking_tour on ext (held out) and provoked, per published label."""
    hand = load_spec("booking_tour")
    rows: list[dict[str, Any]] = []
    for target, note in (("organic_demo7b_ext", " (held out)"), ("organic_demo7b_provoked", "")):
        if not (sentinel / target / "manifest.json").is_file():
            continue
        fit_counts: dict[str, Counter[str]] = defaultdict(Counter)
        hand_counts: dict[str, Counter[str]] = defaultdict(Counter)
        for episode in _labelled(sentinel, target):
            _count(fit_counts, episode, verify_episode(episode, fitted).flags)
            _count(hand_counts, episode, verify_episode(episode, hand).flags)
        name = f"{source} -> {target}{note}"
        rows += _rows(name, label, fit_counts) + _rows(name, "booking_tour", hand_counts)
    return rows


def transfer_rows(sentinel: Path) -> list[dict[str, Any]]:
    """Fit on every healthy cold episode and verify ext (held out) and provoked (2 healthy runs: nothing to fit
    on there), beside the booking_tour spec."""
    if not (sentinel / "organic_demo7b_cold" / "manifest.json").is_file():
        return []
    fitted = fit_spec(e for e in _labelled(sentinel, "organic_demo7b_cold") if e.is_healthy)
    return _organic_targets(sentinel, fitted, "cold", "fitted on cold")


def shipped_rows(sentinel: Path) -> dict[str, Any]:
    """`fit-spec` on ``organic_demo7b_cold`` exactly as shipped (its manifest calls all 120 runs healthy; no relabelling),
    verifying ext (held out) and provoked with the published labels, beside booking_tour; and how many of the runs
    the fit listed as exceptions ("relabel them") the published labels call failures."""
    if not (sentinel / "organic_demo7b_cold" / "manifest.json").is_file():
        return {"rows": [], "exceptions": {}}
    shipped = read_corpus(sentinel / "organic_demo7b_cold").episodes
    result = fit_spec_report(shipped)
    rows = _organic_targets(sentinel, result.spec, "cold as shipped", "fitted on cold as shipped")
    published = {e.episode_id: e.label for e in _labelled(sentinel, "organic_demo7b_cold")}
    exceptions = {}
    for family in result.families:
        for rule, ids in family.exceptions.items():
            failures = sum(published.get(i, HEALTHY) != HEALTHY for i in ids)
            exceptions[f"{family.name}/{rule}"] = {"runs": len(ids), "published_failures": failures}
    checks = sorted({c for v in result.spec.variants for c in v.checks})
    return {"rows": rows, "exceptions": exceptions, "checks": checks,
            "healthy_as_shipped": sum(e.is_healthy for e in shipped),
            "healthy_published": sum(label == HEALTHY for label in published.values())}


def fit_timing(testbed: Path | None, repeats: int = 3) -> dict[str, Any] | None:
    """Seconds `fit_spec` takes on 100 healthy testbed episodes (median of `repeats`), reading included once."""
    path = testbed / "testbed_langgraph" if testbed is not None else None
    if path is None or not (path / "manifest.json").is_file():
        return None
    start = time.perf_counter()
    healthy = [e for e in read_corpus(path).episodes if e.is_healthy][:100]
    read_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fit_spec(healthy)
        times.append(time.perf_counter() - start)
    return {"episodes": len(healthy), "read_corpus_s": round(read_s, 2), "fit_median_s": round(statistics.median(times), 2),
            "fit_runs_s": [round(t, 2) for t in times], "target_s": 5.0}
