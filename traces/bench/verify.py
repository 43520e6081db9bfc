"""`guardrail bench verify`: catch rates per label and check, and false positives on healthy runs, beside the published figures.

Labels are the published ones: the organic corpora take theirs from
``results/organic_hallucination_{cold,ext}.csv`` (``_provoked`` from ``results/verification_provoked.csv``);
the injected corpora from their manifests (``failure_class`` null is healthy). The published
figures come from ``results/verification_vs_monitor.csv``, ``verification_provoked.csv``,
``provoked_fabrication.csv`` and ``tool_contract_coverage.csv``. ``organic_demo7b_ext`` was held
out while the checks and the booking spec were written (developed on ``_cold`` and ``_provoked``).
The fitted-spec tables (`traces.bench.verify_fit`) set specs fitted on healthy training runs
beside the hand-written ones; ``_ext`` was held out there too until the fitting method was frozen.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table
from guardrail.core.corpus import read_corpus
from guardrail.core.events import HEALTHY
from traces.bench.verify_fit import TESTBED, fit_timing, fitted_rows, shipped_rows, transfer_rows
from verifiers.cli import corpus_spec
from verifiers.offline import EpisodeVerdict, verify_episode
from verifiers.spec import CHECKS

__all__ = ["BENCH", "run_bench"]

DEFAULT_SENTINEL = Path(os.environ.get("GUARDRAIL_SENTINEL")
                        or Path(__file__).resolve().parents[2] / "shared" / "corpora" / "sentinel")
ORGANIC = {  # corpus -> the published label file
    "organic_demo7b_cold": "organic_hallucination_cold.csv",
    "organic_demo7b_ext": "organic_hallucination_ext.csv",
    "organic_demo7b_provoked": "verification_provoked.csv",
}
HELD_OUT = {"organic_demo7b_ext"}
INJECTED = ["langgraph7b", "autogen7b", "ollama7b", "real_research7b", "demo_real_varied_ext", "real_task_rollback"]


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _published_organic(results: Path) -> dict[tuple[str, str], dict[str, int]]:
    """(corpus, label) -> published n, caught by totals, caught with coverage."""
    published: dict[tuple[str, str], dict[str, int]] = {}
    for row in _read_csv(results / "verification_vs_monitor.csv"):
        published[(row["dataset"], row["label"])] = {
            "n": int(row["n"]), "totals": int(row["total_consistency"]), "with_coverage": int(row["with_coverage"])}
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for row in _read_csv(results / "verification_provoked.csv"):
        c = counts[row["label"]]
        c["n"] += 1
        c["totals"] += row["total_consistency"] == "True"
        c["with_coverage"] += row["total_consistency"] == "True" or row["required_coverage"] == "True"
    for label, c in counts.items():
        published[("organic_demo7b_provoked", label)] = dict(c)
    return published


def _rate(k: int, n: int) -> str:
    return f"{k}/{n}"


def _organic_rows(sentinel: Path, timings: list[float]) -> tuple[list[dict[str, Any]], dict[str, dict[str, EpisodeVerdict]]]:
    published = _published_organic(sentinel / "results")
    rows: list[dict[str, Any]] = []
    verdicts: dict[str, dict[str, EpisodeVerdict]] = {}
    for name, label_file in ORGANIC.items():
        if not (sentinel / name / "manifest.json").is_file():
            continue  # absent corpora are left out of the table (the bench states what it read)
        labels = {r["episode_id"]: r["label"] for r in _read_csv(sentinel / "results" / label_file)}
        corpus = read_corpus(sentinel / name)
        spec = corpus_spec(corpus.episodes)
        verdicts[name] = {}
        by_label: dict[str, Counter[str]] = defaultdict(Counter)
        for episode in corpus.episodes:
            if episode.episode_id not in labels:
                continue
            start = time.perf_counter()
            verdict = verify_episode(episode, spec)
            timings.append(time.perf_counter() - start)
            verdicts[name][episode.episode_id] = verdict
            flags = verdict.flags
            c = by_label[labels[episode.episode_id]]
            c["n"] += 1
            for check in CHECKS:
                c[check] += flags[check]
            c["with_coverage"] += flags["total_consistency"] or flags["required_coverage"]
            c["any"] += any(flags.values())
        for label in sorted(by_label, key=lambda lab: (lab != HEALTHY, lab)):
            c = by_label[label]
            pub = published.get((name, label), {})
            rows.append({
                "corpus": name + (" (held out)" if name in HELD_OUT else ""),
                "label": label,
                "n": c["n"],
                "totals": _rate(c["total_consistency"], c["n"]),
                "published_totals": _rate(pub["totals"], pub["n"]) if pub else "-",
                "with_coverage": _rate(c["with_coverage"], c["n"]),
                "published_with_coverage": _rate(pub["with_coverage"], pub["n"]) if pub else "-",
                "grounding": _rate(c["grounding"], c["n"]),
                "tool_contract": _rate(c["tool_contract"], c["n"]),
                "completion": _rate(c["completion"], c["n"]),
                "any_check": _rate(c["any"], c["n"]),
            })
    return rows, verdicts


def _fabrication_rows(sentinel: Path, verdicts: dict[str, EpisodeVerdict]) -> list[dict[str, Any]]:
    """Provoked hallucinations by kind: the grounding check alone, and any check, beside the published grounding."""
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    seen: set[str] = set()
    for row in _read_csv(sentinel / "results" / "provoked_fabrication.csv"):
        if row["label"] != "hallucinated" or row["episode_id"] in seen or row["episode_id"] not in verdicts:
            continue
        seen.add(row["episode_id"])
        flags = verdicts[row["episode_id"]].flags
        c = by_kind[row["kind"] or "-"]
        c["n"] += 1
        c["grounding"] += flags["grounding"]
        c["published_grounding"] += row["verifier_flagged"] == "True"
        c["any"] += any(flags.values())
    return [{"kind": kind, "n": c["n"], "grounding": _rate(c["grounding"], c["n"]),
             "published_grounding": _rate(c["published_grounding"], c["n"]), "any_check": _rate(c["any"], c["n"])}
            for kind, c in sorted(by_kind.items())]


def _injected_rows(sentinel: Path, timings: list[float]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Per injected corpus and label: tool_contract (and the other checks the corpus's spec runs)."""
    published_contract = Counter(r["dataset"] for r in _read_csv(sentinel / "results" / "tool_contract_coverage.csv"))
    rows: list[dict[str, Any]] = []
    onset = Counter[str]()
    for name in INJECTED:
        if not (sentinel / name / "manifest.json").is_file():
            continue
        corpus = read_corpus(sentinel / name)
        spec = corpus_spec(corpus.episodes)
        by_label: dict[str, Counter[str]] = defaultdict(Counter)
        for episode in corpus.episodes:
            start = time.perf_counter()
            verdict = verify_episode(episode, spec)
            timings.append(time.perf_counter() - start)
            c = by_label[episode.label]
            c["n"] += 1
            for check in CHECKS:
                c[check] += verdict.flags[check]
            contract = [f.step for f in verdict.findings if f.check == "tool_contract" and f.step is not None]
            if contract and not episode.is_healthy and episode.tau is not None:
                onset["flagged"] += 1
                onset["within_one_step"] += min(contract) - episode.tau <= 1
        for label in sorted(by_label, key=lambda lab: (lab != HEALTHY, lab)):
            c = by_label[label]
            rows.append({
                "corpus": name, "spec": spec.name, "label": label, "n": c["n"],
                "tool_contract": _rate(c["tool_contract"], c["n"]),
                "required_coverage": _rate(c["required_coverage"], c["n"]) if spec.runs("required_coverage") else "-",
                "completion": _rate(c["completion"], c["n"]) if spec.runs("completion") else "-",
            })
        flagged_failures = sum(c["tool_contract"] for lab, c in by_label.items() if lab != HEALTHY)
        rows.append({"corpus": name, "spec": spec.name, "label": "(published tool_contract flags)",
                     "n": sum(c["n"] for lab, c in by_label.items() if lab != HEALTHY),
                     "tool_contract": f"{published_contract.get(name, '-')} published, {flagged_failures} ours",
                     "required_coverage": "", "completion": ""})
    return rows, dict(onset)


def run_bench(sentinel: Path, *, fit: bool = True, testbed: Path | None = TESTBED) -> dict[str, Any]:
    timings: list[float] = []
    organic, verdicts = _organic_rows(sentinel, timings)
    fabrication = _fabrication_rows(sentinel, verdicts.get("organic_demo7b_provoked", {}))
    injected, onset = _injected_rows(sentinel, timings)
    healthy_contract = [r for r in injected if r["label"] == HEALTHY]
    flagged = sum(int(r["tool_contract"].split("/")[0]) for r in healthy_contract)
    total = sum(int(r["n"]) for r in healthy_contract) + sum(
        int(r["n"]) for r in organic if r["label"] == HEALTHY)
    flagged += sum(int(r["tool_contract"].split("/")[0]) for r in organic if r["label"] == HEALTHY)
    fitted = fitted_rows(sentinel, testbed) if fit else {"rows": [], "summary": []}
    return {
        "fitted": fitted["rows"],
        "fitted_summary": fitted["summary"],
        "fitted_transfer": transfer_rows(sentinel) if fit else [],
        "fitted_as_shipped": shipped_rows(sentinel) if fit else {"rows": [], "exceptions": {}},
        "fit_seconds": fit_timing(testbed) if fit else None,
        "organic": organic,
        "provoked_fabrication": fabrication,
        "injected": injected,
        "tool_contract_healthy": {"flagged": flagged, "healthy": total, "published": "0/1825"},
        "tool_contract_onset": {**onset, "published": "215/218 within one step"},
        "median_us_per_episode": round(statistics.median(timings) * 1e6, 1) if timings else None,
        "episodes_timed": len(timings),
    }


def _add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sentinel", type=Path, default=DEFAULT_SENTINEL,
                        help=f"the sentinel corpora and their results/ (default: {DEFAULT_SENTINEL})")
    parser.add_argument("--testbed", type=Path, default=TESTBED,
                        help=f"folder holding the testbed corpora testbed_* (default: {TESTBED})")
    parser.add_argument("--no-testbed", action="store_true", help="leave the testbed corpora out of the fitted tables")
    parser.add_argument("--no-fit", action="store_true", help="skip the fitted-spec tables")
    parser.add_argument("--json", action="store_true", help="one JSON object with every table")


def _run(args: argparse.Namespace) -> int:
    if not (args.sentinel / "results" / "verification_vs_monitor.csv").is_file():
        sys.stderr.write(f"guardrail bench verify: no sentinel corpora with results/ at {args.sentinel}; "
                         "pass --sentinel DIR\n")
        return 2
    report = run_bench(args.sentinel, fit=not args.no_fit, testbed=None if args.no_testbed else args.testbed)
    if args.json:
        emit_json(report)
        return 0
    if report["fitted"]:
        print("Fitted (on 60% of each corpus's healthy runs) vs hand-written specs: the other 40% healthy and every "
              "failure")
        print_table(report["fitted"])
        print_table(report["fitted_summary"])
    if report["fitted_transfer"]:
        print("\nFitted on every healthy organic_demo7b_cold run, verifying ext (held out) and provoked")
        print_table(report["fitted_transfer"])
    shipped = report["fitted_as_shipped"]
    if shipped["rows"]:
        print("\nFitted on organic_demo7b_cold exactly as shipped (its manifest calls every run healthy; no relabelling)")
        print_table(shipped["rows"])
        for rule, counts in shipped["exceptions"].items():
            print(f"  {rule}: {counts['runs']} 'healthy' runs listed as exceptions, {counts['published_failures']} of "
                  "them failures by the published labels")
    if report["fit_seconds"]:
        timing = report["fit_seconds"]
        print(f"\nfit_spec on {timing['episodes']} healthy testbed episodes: median {timing['fit_median_s']} s "
              f"(runs {timing['fit_runs_s']}; reading the corpus {timing['read_corpus_s']} s; target "
              f"{timing['target_s']} s)\n")
    print("Organic corpora: episodes caught per label (ours beside the published), false positives on healthy")
    print_table(report["organic"])
    print("\nProvoked hallucinations by kind: the grounding check alone (published) and any check")
    print_table(report["provoked_fabrication"])
    print("\nInjected corpora: tool_contract per label; coverage/completion where the corpus's spec runs them")
    print_table(report["injected"])
    tc = report["tool_contract_healthy"]
    print(f"\ntool_contract on healthy episodes: {tc['flagged']}/{tc['healthy']} (published {tc['published']})")
    onset = report["tool_contract_onset"]
    print(f"tool_contract flags within one step of onset: {onset.get('within_one_step', 0)}/"
          f"{onset.get('flagged', 0)} (published {onset['published']})")
    print(f"median verify time per episode: {report['median_us_per_episode']} us over "
          f"{report['episodes_timed']} episodes")
    return 0


BENCH = Command(help="verifier catch rates per label and false positives on healthy runs vs the published figures",
                add_arguments=_add, run=_run)
