"""`guardrail bench monitor`: episode AUROC, detection at the false-alarm budget, FA with its CI, delay and speed.

Protocol (../shared/corpora/README.md): drop episodes with T < 4; split the healthy episodes
60/20/20 (train / validation / test) with a seeded permutation; evaluate on held-out healthy +
all injected episodes. Calibration "split": fit on train, conformal threshold on validation;
"crossfit": fit on train + validation, conformal threshold from their out-of-fold maxima (the
test set is never touched either way). ``--split FILE`` uses the given sets exactly instead, and
``--repeats N`` averages N seeded splits (means in the metric fields, spread in ``spread``; the
FA interval is Clopper-Pearson on the alarms pooled over the splits). The public release's own
`esn_cusum_max` and `delta_mahalanobis` run on the same splits in the same process when its code
is available (../shared/anchors/sentinel), so time ratios hold on a busy machine. A corpus or
monitor that fails is reported as an error row and the rest go on (exit status 1).

``--protocol temporal`` fits on the earlier healthy runs (recording order) and tests on the next
ones (forward cuts); ``--entities N`` adds rows on generated testbed runs whose fitting and test
tasks name disjoint cities (`traces.bench.monitor_protocols`). Every row says its ``protocol``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from guardrail.core.cliutil import Command, emit_json, print_table, progress
from guardrail.core.corpus import CorpusError, read_corpus
from guardrail.core.events import Episode
from monitors.calibration import CALIBRATION_METHODS, binomial_ci
from monitors.inventory import take_inventory
from monitors.monitor import PRESETS, StepMonitor
from traces.bench.monitor_protocols import PROTOCOLS, entity_splits, fit_validation, temporal_split, untold
from traces.bench.release import RELEASE_MONITORS, ReleaseCorpus, find_release, load_release, median_us, quiet

__all__ = ["BENCH", "Split", "evaluate", "published_split"]

DEFAULT_MONITORS = ("esn_cusum_max", "delta_mahalanobis", "mahalanobis", "hybrid", "grounded", "default")
MIN_STEPS = 4
Outcome = tuple[str, int | None, np.ndarray]  # label, onset, per-step scores


class Split:
    """Healthy train / healthy validation / test (held-out healthy + injected) episode sets."""

    def __init__(self, train: list[Episode], val: list[Episode], test: list[Episode]) -> None:
        self.train, self.val, self.test = train, val, test

    def ids(self) -> tuple[list[str], list[str], list[str]]:
        return ([e.episode_id for e in self.train], [e.episode_id for e in self.val],
                [e.episode_id for e in self.test])


def published_split(episodes: Sequence[Episode], seed: int = 0, *, min_steps: int = MIN_STEPS) -> Split:
    """The published protocol: T >= 4; healthy 60/20/20 by a seeded permutation; test adds every injected episode.

    `min_steps` lowers the T floor for corpora of short tasks (a real small model's runs: 2 steps).
    """
    kept = [e for e in episodes if len(e.steps) >= min_steps]
    healthy = [e for e in kept if e.is_healthy]
    injected = [e for e in kept if not e.is_healthy]
    order = np.random.default_rng(seed).permutation(len(healthy))
    n_train, n_val = int(0.6 * len(healthy)), int(0.2 * len(healthy))
    train = [healthy[i] for i in order[:n_train]]
    val = [healthy[i] for i in order[n_train:n_train + n_val]]
    test = [healthy[i] for i in order[n_train + n_val:]] + injected
    return Split(train, val, test)


def split_from_file(episodes: Sequence[Episode], spec: dict[str, Any], corpus_name: str) -> Split:
    by_id = {e.episode_id: e for e in episodes}
    sets: dict[str, list[Episode]] = {}
    for part in ("train", "val", "test"):
        ids = spec.get(part)
        if not isinstance(ids, list):
            raise ValueError(f"split for {corpus_name!r} has no {part!r} list of episode ids")
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(f"split for {corpus_name!r}: {len(missing)} {part} id(s) not in the corpus, "
                             f"e.g. {missing[0]!r}")
        sets[part] = [by_id[i] for i in ids]
    for part in ("train", "val"):
        sick = [e.episode_id for e in sets[part] if not e.is_healthy]
        if sick:
            raise ValueError(f"split for {corpus_name!r}: {part} must hold healthy episodes only, "
                             f"{sick[0]!r} is labelled {by_id[sick[0]].label!r}")
    return Split(sets["train"], sets["val"], sets["test"])


def _alarm_step(scores: np.ndarray, threshold: float) -> int | None:
    above = np.flatnonzero(scores > threshold)
    return int(above[0]) if above.size else None


def outcome_metrics(outcomes: Sequence[Outcome], threshold: float) -> dict[str, Any]:
    """AUROC over per-episode maxima; detection = an alarm at or after the onset (an earlier one is a false
    alarm on that episode); healthy FA = any alarm on a held-out healthy episode."""
    healthy_max, injected_max = [], []
    detected: dict[str, list[bool]] = {}
    delays: list[int] = []
    healthy_alarms = 0
    for label, tau, scores in outcomes:
        top = float(scores.max()) if scores.size else float("-inf")
        alarm = _alarm_step(scores, threshold)
        if label == "healthy":
            healthy_max.append(top)
            healthy_alarms += alarm is not None
            continue
        injected_max.append(top)
        onset = tau or 0
        hit = alarm is not None and alarm >= onset
        detected.setdefault(label, []).append(hit)
        if hit and alarm is not None:
            delays.append(alarm - onset)
    all_hits = [h for hits in detected.values() for h in hits]
    y = [0] * len(healthy_max) + [1] * len(injected_max)
    scores_all = np.nan_to_num(np.array(healthy_max + injected_max), neginf=-1e300, posinf=1e300)
    auroc = float(roc_auc_score(y, scores_all)) if healthy_max and injected_max else None
    return {
        "auroc": auroc,
        "detection_rate": float(np.mean(all_hits)) if all_hits else None,
        "healthy_fa_rate": healthy_alarms / len(healthy_max) if healthy_max else None,
        "healthy_fa_ci": binomial_ci(healthy_alarms, len(healthy_max)),
        "healthy_alarms": healthy_alarms,
        "healthy_test": len(healthy_max),
        "median_delay": float(statistics.median(delays)) if delays else None,
        "per_class": {label: float(np.mean(hits)) for label, hits in sorted(detected.items())},
        "per_class_n": {label: len(hits) for label, hits in sorted(detected.items())},
    }


def evaluate(preset: str, split: Split, beta: float = 0.05, timing_repeats: int = 5,
             calibration: str = "split") -> dict[str, Any]:
    """Fit `preset` and set its threshold per `calibration`, score split.test; the benchmark's metrics."""
    result = evaluate_monitor(StepMonitor.preset(preset, beta=beta, calibration=calibration), split, timing_repeats)
    result.pop("channels")  # the bench's documented fields; `evaluate_monitor` callers read it
    return result


def evaluate_monitor(monitor: StepMonitor, split: Split, timing_repeats: int = 0) -> dict[str, Any]:
    """`evaluate` for a monitor built by the caller (e.g. with a chosen set of telemetry channels)."""
    calibration = monitor.calibration
    started = time.perf_counter()
    if calibration == "crossfit":
        monitor.fit(split.train + split.val)  # the conformal threshold comes from the out-of-fold maxima
    else:
        monitor.fit(split.train)
    fit_s = time.perf_counter() - started
    if calibration == "split":
        monitor.calibrate(split.val)
    outcomes = [(e.label, e.tau, np.array(monitor.score_episode(e).scores)) for e in split.test]
    metrics = outcome_metrics(outcomes, monitor.threshold_)
    step_ns, featurize_ns, score_ns = _step_times(monitor, split.test, timing_repeats)
    cal = monitor.calibration_
    return {
        **metrics,
        "threshold_fa_bound": cal.fa_bound if cal else None,
        "threshold_fa_interval": list(cal.fa_interval) if cal else None,
        "n_cal": cal.n if cal else None,
        "fit_s": fit_s,
        "step_us_median": median_us(step_ns),
        "score_us_median": median_us(score_ns),
        "featurize_us_median": median_us(featurize_ns),
        "n_train": len(split.train) + (len(split.val) if calibration == "crossfit" else 0),
        "n_val": len(split.val) if calibration == "split" else 0,
        "n_test": len(split.test),
        "channels": list(monitor.telemetry_.channels_),
    }


def _step_times(monitor: StepMonitor, episodes: Sequence[Episode],
                repeats: int) -> tuple[list[float], list[float], list[float]]:
    """Per-step wall time, in ns, of `MonitorStream.update` (featurize + score: the agent's code path), of
    featurizing alone and of scoring a ready feature vector alone.

    Each episode is replayed `repeats` times through fresh streams and each step keeps its fastest
    time, so a step preempted by another process on a shared machine does not count as slow.
    """
    if repeats < 1:
        return [], [], []
    step_ns: list[float] = []
    featurize_ns: list[float] = []
    score_ns: list[float] = []
    clock = time.perf_counter_ns
    for episode in episodes:
        n = len(episode.steps)
        best = np.full((3, n), np.inf)
        for _ in range(repeats):
            stream = monitor.start(episode.task)
            features = monitor.telemetry_.start(episode.task)
            scorer = monitor.hybrid_.start()
            for i, step in enumerate(episode.steps):
                t0 = clock()
                stream.update(step)
                t1 = clock()
                x = features.update(step)
                t2 = clock()
                scorer.update(x)
                t3 = clock()
                best[:, i] = np.minimum(best[:, i], (t1 - t0, t2 - t1, t3 - t2))
        step_ns += best[0].tolist()
        featurize_ns += best[1].tolist()
        score_ns += best[2].tolist()
    return step_ns, featurize_ns, score_ns


_METRICS = ("auroc", "detection_rate", "healthy_fa_rate", "median_delay", "threshold_fa_bound", "n_cal", "fit_s",
            "step_us_median", "score_us_median", "featurize_us_median")


def _average(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means in the metric fields, FA CI on the pooled alarms, spread (std, min, max) per metric under "spread"."""
    out = dict(runs[0])
    spread: dict[str, Any] = {}
    for key in _METRICS:
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = float(np.mean(values)) if values else None
        if values:
            spread[key] = {"std": float(np.std(values)), "min": float(min(values)), "max": float(max(values))}
    alarms, episodes = sum(r["healthy_alarms"] for r in runs), sum(r["healthy_test"] for r in runs)
    out["healthy_alarms"], out["healthy_test"] = alarms, episodes
    out["healthy_fa_ci"] = binomial_ci(alarms, episodes)
    intervals = [r["threshold_fa_interval"] for r in runs if r.get("threshold_fa_interval")]
    out["threshold_fa_interval"] = np.mean(intervals, axis=0).tolist() if intervals else None
    classes = sorted({c for r in runs for c in r["per_class"]})
    out["per_class"] = {c: float(np.mean([r["per_class"][c] for r in runs if c in r["per_class"]])) for c in classes}
    spread["per_class"] = {c: {"min": float(min(r["per_class"][c] for r in runs if c in r["per_class"])),
                               "max": float(max(r["per_class"][c] for r in runs if c in r["per_class"]))}
                           for c in classes}
    spread["n_splits"] = len(runs)
    out["spread"] = spread
    return out


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", action="append", default=[], metavar="DIR",
                        help="a corpus directory (sentinel or guardrail format); repeat for several")
    parser.add_argument("--protocol", action="append", choices=PROTOCOLS, default=None,
                        help="random: the published seeded 60/20/20 healthy split (default); temporal: in recording "
                             "order, fit on the earlier runs and test on the next ones (--repeats forward cuts from 50%% "
                             "to 90%% of the healthy runs); repeat the option for both")
    parser.add_argument("--entities", type=int, default=0, metavar="N",
                        help="also generate testbed runs (N requested per city half and framework, per repeat) whose "
                             "fitting and test tasks name disjoint cities, and report that row beside a same-cities "
                             "control (a scripted model: a mechanism check)")
    parser.add_argument("--entities-framework", action="append", choices=("langgraph", "autogen"), default=None,
                        help="framework(s) of the generated runs (default: both)")
    parser.add_argument("--split", default=None, metavar="SPLIT.json",
                        help='{"<corpus dir name>": {"train": [ids], "val": [ids], "test": [ids]}}; '
                             "default: the published protocol")
    parser.add_argument("--beta", type=float, default=0.05, help="false-alarm budget for the threshold (default 0.05)")
    parser.add_argument("--monitor", action="append", choices=sorted(PRESETS), default=None,
                        help=f"monitor(s) to run (default: {', '.join(DEFAULT_MONITORS)})")
    parser.add_argument("--calibration", action="append", choices=CALIBRATION_METHODS, default=None,
                        help="threshold calibration(s) to run for each monitor (default: both)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first healthy split (default 0)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="average this many seeded splits (seed, seed+1, ...); ignored with --split")
    parser.add_argument("--timing-repeats", type=int, default=5,
                        help="replays per test episode for the per-step timing; each step keeps its fastest "
                             "(default 5; 0 skips timing)")
    parser.add_argument("--release", default=None, metavar="DIR",
                        help="the public release's code (default: ../shared/anchors/sentinel, found beside the "
                             "corpora); its esn_cusum_max and delta_mahalanobis run on the same splits")
    parser.add_argument("--no-release", action="store_true", help="skip the release's monitors")
    parser.add_argument("--json", action="store_true", help="one JSON object per (corpus, monitor, calibration)")


def _error_row(corpus: str, monitor: str | None, calibration: str | None, exc: Exception) -> dict[str, Any]:
    return {"corpus": corpus, "monitor": monitor, "calibration": calibration,
            "error": f"{type(exc).__name__}: {exc}"}


def _corpus_splits(corpus_dir: str, args: argparse.Namespace, split_spec: dict[str, Any] | None,
                   protocol: str = "random") -> list[Split]:
    name = Path(corpus_dir).name
    corpus = read_corpus(corpus_dir)
    if split_spec is not None:
        if name not in split_spec:
            raise ValueError(f"{args.split}: no split for corpus {name!r}")
        return [split_from_file(corpus.episodes, split_spec[name], name)]
    if protocol == "temporal":
        cuts = max(1, args.repeats)
        splits = [Split(*temporal_split(corpus.episodes, min_steps=MIN_STEPS, cut=c, cuts=cuts)) for c in range(cuts)]
    else:
        splits = [published_split(corpus.episodes, args.seed + r) for r in range(max(1, args.repeats))]
    if len(splits[0].train) < 4 or not splits[0].val:
        raise ValueError("too few usable healthy episodes for the protocol (60/20/20 of those with >= "
                         f"{MIN_STEPS} steps): {take_inventory(corpus_dir).explain()}")
    return splits


def _release_rows(release: Any, corpus_dir: str, splits: list[Split], args: argparse.Namespace) -> list[dict[str, Any]]:
    name = Path(corpus_dir).name
    rows: list[dict[str, Any]] = []
    with quiet():
        data = ReleaseCorpus(release, corpus_dir, args.timing_repeats)
    featurize_us = median_us(data.featurize_ns)
    for monitor in RELEASE_MONITORS:
        runs = []
        for split in splits:
            train, val, test = split.ids()
            with quiet():
                got = data.evaluate(monitor, train, val, test, args.beta, args.timing_repeats)
            outcomes = [(label, tau, scores) for _, label, tau, scores in got["outcomes"]]
            runs.append({**outcome_metrics(outcomes, got["threshold"]), "threshold_fa_bound": None,
                         "threshold_fa_interval": None, "n_cal": len(val), "fit_s": got["fit_s"],
                         "step_us_median": median_us(got["step_ns"]), "score_us_median": median_us(got["step_ns"]),
                         "featurize_us_median": featurize_us, "n_train": len(train), "n_val": len(val),
                         "n_test": len(test)})
        result = runs[0] if len(runs) == 1 else _average(runs)
        rows.append({"corpus": name, "monitor": f"release.{monitor}", "calibration": "release", **result})
    return rows


def _ratios(row: dict[str, Any], esn: dict[str, Any] | None) -> dict[str, float | None]:
    """Our per-step time over the release ESN's, measured in the same run: `step_vs_release_esn` sets ours
    (featurize + score) against its scoring alone (the strict reading: the release's published per-step
    figure leaves out its telemetry adapter); `score_vs_release_esn` scoring against scoring;
    `total_vs_release_esn` featurize + score against its adapter + scoring."""
    def ratio(ours: Any, theirs: Any) -> float | None:
        return ours / theirs if ours and theirs else None

    esn = esn or {}
    theirs_total = (esn["featurize_us_median"] + esn["step_us_median"]
                    if esn.get("featurize_us_median") and esn.get("step_us_median") else None)
    return {"step_vs_release_esn": ratio(row.get("step_us_median"), esn.get("step_us_median")),
            "score_vs_release_esn": ratio(row.get("score_us_median"), esn.get("step_us_median")),
            "total_vs_release_esn": ratio(row.get("step_us_median"), theirs_total)}


def _monitor_rows(name: str, protocol: str, splits: list[Split], monitors: Sequence[str],
                  calibrations: Sequence[str], args: argparse.Namespace,
                  emit: Any) -> list[dict[str, Any]]:
    """One row per (monitor, calibration) over `splits` (means when there are several); failures are error rows."""
    out: list[dict[str, Any]] = []
    for preset in progress(monitors, desc=f"{name} ({protocol})", enabled=not args.json):
        for calibration in calibrations:
            try:
                runs = [evaluate(preset, split, args.beta, args.timing_repeats, calibration) for split in splits]
            except (ValueError, np.linalg.LinAlgError, RuntimeError) as exc:
                emit({**_error_row(name, preset, calibration, exc), "protocol": protocol})
                continue
            result = runs[0] if len(runs) == 1 else _average(runs)
            out.append({"corpus": name, "protocol": protocol, "monitor": preset, "calibration": calibration,
                        **result})
    return out


def _entity_rows(args: argparse.Namespace, monitors: Sequence[str], calibrations: Sequence[str],
                 emit: Any) -> None:
    """The disjoint-entities rows: generated testbed runs, fitted on one city half, tested on the other (and a
    same-cities control), one generated set per repeat."""
    for framework in args.entities_framework or ("langgraph", "autogen"):
        generated = [entity_splits(framework, args.entities, args.seed + r) for r in range(max(1, args.repeats))]
        for protocol in ("entities_control", "entities_disjoint", "entities_control_untold", "entities_disjoint_untold"):
            splits = []
            for r, gen in enumerate(generated):
                train, val = fit_validation(gen.fit, args.seed + r)
                test = gen.control if "control" in protocol else gen.disjoint
                if protocol.endswith("_untold"):
                    train, val, test = untold(train), untold(val), untold(test)
                splits.append(Split(train, val, test))
            cities = [f"{g.fit_cities} -> {g.test_cities}" for g in generated]
            for row in _monitor_rows(f"testbed_{framework}", protocol, splits, monitors, calibrations, args, emit):
                emit({**row, "cities": cities})


def _run(args: argparse.Namespace) -> int:
    if not args.corpus and not args.entities:
        raise SystemExit("guardrail bench monitor: give --corpus DIR (repeatable) and/or --entities N")
    split_spec: dict[str, Any] | None = None
    if args.split:
        split_spec = json.loads(Path(args.split).read_text(encoding="utf-8"))
        if not isinstance(split_spec, dict):
            raise SystemExit(f"{args.split}: a split file is a JSON object keyed by corpus directory name")
    monitors = args.monitor or list(DEFAULT_MONITORS)
    calibrations = args.calibration or list(CALIBRATION_METHODS)
    protocols = ["file"] if split_spec is not None else (args.protocol or ["random"])
    release: Any = None
    if not args.no_release and args.corpus:
        release = load_release(find_release(args.release, args.corpus))
        if isinstance(release, str):
            sys.stderr.write(f"guardrail bench monitor: {release}\n")
            release = None
    rows: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        if args.json:
            emit_json(row)

    for corpus_dir in args.corpus:
        name = Path(corpus_dir).name
        for protocol in protocols:
            try:
                splits = _corpus_splits(corpus_dir, args, split_spec, protocol)
            except (CorpusError, OSError, ValueError) as exc:
                emit({**_error_row(name, None, None, exc), "protocol": protocol})
                continue
            corpus_rows = _monitor_rows(name, protocol, splits, monitors, calibrations, args, emit)
            if release is not None:
                try:
                    release_rows = [{**r, "protocol": protocol} for r in _release_rows(release, corpus_dir, splits, args)]
                except Exception as exc:  # noqa: BLE001 - the release is third-party code: report it, keep going
                    emit({**_error_row(name, "release", "release", exc), "protocol": protocol})
                    release_rows = []
                esn = next((r for r in release_rows if r["monitor"] == "release.esn_cusum_max"), None)
                for row in corpus_rows:
                    row.update(_ratios(row, esn))
                corpus_rows += release_rows
            for row in corpus_rows:
                emit(row)
    if args.entities:
        _entity_rows(args, monitors, calibrations, emit)
    if not args.json:
        for row in rows:
            ci = row.get("healthy_fa_ci")
            row["healthy_fa_ci"] = f"{ci[0]:.3f}-{ci[1]:.3f}" if ci else None
        print_table(rows, ["corpus", "protocol", "monitor", "calibration", "auroc", "detection_rate",
                           "healthy_fa_rate", "healthy_fa_ci", "median_delay", "fit_s", "step_us_median",
                           "step_vs_release_esn", "n_train", "n_val", "n_test", "error"])
    return 1 if any("error" in row for row in rows) else 0


BENCH = Command(help="step monitor benchmark: AUROC / detection / FA with CI / delay / speed per corpus and monitor, "
                     "beside the public release's own monitors",
                add_arguments=_add_arguments, run=_run)
