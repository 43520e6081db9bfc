"""`guardrail bench monitor`: episode AUROC, detection at the false-alarm budget, FA, delay and speed per corpus and monitor.

Protocol (../shared/corpora/README.md): drop episodes with T < 4; split the healthy episodes
60/20/20 (train / validation / test) with a seeded permutation; fit on train only; threshold
at the (1 - beta) quantile of per-episode max scores on validation; evaluate on held-out
healthy + all injected episodes. ``--split FILE`` uses the given sets exactly instead, and
``--repeats N`` averages N seeded splits (means in the metric fields, spread in ``spread``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from guardrail.core.cliutil import Command, emit_json, print_table, progress
from guardrail.core.corpus import read_corpus
from guardrail.core.events import Episode
from monitors.monitor import PRESETS, StepMonitor

__all__ = ["BENCH", "Split", "evaluate", "evaluate_monitor", "published_split"]

DEFAULT_MONITORS = ("esn_cusum_max", "delta_mahalanobis", "mahalanobis", "hybrid", "default")
MIN_STEPS = 4


class Split:
    """Healthy train / healthy validation / test (held-out healthy + injected) episode sets."""

    def __init__(self, train: list[Episode], val: list[Episode], test: list[Episode]) -> None:
        self.train, self.val, self.test = train, val, test


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


def evaluate(preset: str, split: Split, beta: float = 0.05, timing_repeats: int = 5) -> dict[str, Any]:
    """Fit `preset` on split.train, calibrate on split.val, score split.test; the benchmark's metrics."""
    result = evaluate_monitor(StepMonitor.preset(preset, beta=beta), split, timing_repeats)
    result.pop("channels")  # the bench's documented fields; `evaluate_monitor` callers read it
    return result


def evaluate_monitor(monitor: StepMonitor, split: Split, timing_repeats: int = 0) -> dict[str, Any]:
    """`evaluate` for a monitor built by the caller (e.g. with a chosen set of telemetry channels)."""
    started = time.perf_counter()
    monitor = monitor.fit(split.train)
    fit_s = time.perf_counter() - started
    monitor.calibrate(split.val)
    healthy_max, injected_max, labels_max = [], [], []
    detected: dict[str, list[bool]] = {}
    delays: list[int] = []
    healthy_alarms = 0
    for episode in split.test:
        stream = monitor.start(episode.task)
        scores = [stream.update(step) for step in episode.steps]
        top = max(scores) if scores else float("-inf")
        if episode.is_healthy:
            healthy_max.append(top)
            healthy_alarms += stream.alarm_step is not None
            continue
        injected_max.append(top)
        labels_max.append(episode.label)
        onset = episode.tau or 0
        # A detection is an alarm at or after the onset; an earlier alarm is a false alarm on that episode.
        hit = stream.alarm_step is not None and stream.alarm_step >= onset
        detected.setdefault(episode.label, []).append(hit)
        if hit and stream.alarm_step is not None:
            delays.append(stream.alarm_step - onset)
    step_ns, featurize_ns = _step_times(monitor, split.test, timing_repeats)
    all_hits = [h for hits in detected.values() for h in hits]
    y = [0] * len(healthy_max) + [1] * len(injected_max)
    scores_all = np.nan_to_num(np.array(healthy_max + injected_max), neginf=-1e300)
    auroc = float(roc_auc_score(y, scores_all)) if healthy_max and injected_max else None
    return {
        "auroc": auroc,
        "detection_rate": float(np.mean(all_hits)) if all_hits else None,
        "healthy_fa_rate": healthy_alarms / len(healthy_max) if healthy_max else None,
        "median_delay": float(statistics.median(delays)) if delays else None,
        "per_class": {label: float(np.mean(hits)) for label, hits in sorted(detected.items())},
        "fit_s": fit_s,
        "step_us_median": statistics.median(step_ns) / 1e3 if step_ns else None,
        "featurize_us_median": statistics.median(featurize_ns) / 1e3 if featurize_ns else None,
        "n_train": len(split.train),
        "n_val": len(split.val),
        "n_test": len(split.test),
        "channels": list(monitor.telemetry_.channels_),
    }


def _step_times(monitor: StepMonitor, episodes: Sequence[Episode], repeats: int) -> tuple[list[float], list[float]]:
    """Per-step wall time of `MonitorStream.update` (featurize + score) and of featurizing alone, in ns.

    Each episode is replayed `repeats` times through fresh streams and each step keeps its fastest
    time, so a step preempted by another process on a shared machine does not count as slow.
    """
    if repeats < 1:
        return [], []
    step_ns: list[float] = []
    featurize_ns: list[float] = []
    clock = time.perf_counter_ns
    for episode in episodes:
        n = len(episode.steps)
        best_step = [float("inf")] * n
        best_featurize = [float("inf")] * n
        for _ in range(repeats):
            stream = monitor.start(episode.task)
            features = monitor.telemetry_.start(episode.task)
            for i, step in enumerate(episode.steps):
                t0 = clock()
                stream.update(step)
                t1 = clock()
                features.update(step)
                t2 = clock()
                best_step[i] = min(best_step[i], t1 - t0)
                best_featurize[i] = min(best_featurize[i], t2 - t1)
        step_ns += best_step
        featurize_ns += best_featurize
    return step_ns, featurize_ns


_METRICS = ("auroc", "detection_rate", "healthy_fa_rate", "median_delay", "fit_s", "step_us_median",
            "featurize_us_median")


def _average(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means in the metric fields; the spread (std, min, max) per metric and per class under "spread"."""
    out = dict(runs[0])
    spread: dict[str, Any] = {}
    for key in _METRICS:
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = float(np.mean(values)) if values else None
        if values:
            spread[key] = {"std": float(np.std(values)), "min": float(min(values)), "max": float(max(values))}
    classes = sorted({c for r in runs for c in r["per_class"]})
    out["per_class"] = {c: float(np.mean([r["per_class"][c] for r in runs if c in r["per_class"]])) for c in classes}
    spread["n_splits"] = len(runs)
    out["spread"] = spread
    return out


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", action="append", required=True, metavar="DIR",
                        help="a corpus directory (sentinel or guardrail format); repeat for several")
    parser.add_argument("--split", default=None, metavar="SPLIT.json",
                        help='{"<corpus dir name>": {"train": [ids], "val": [ids], "test": [ids]}}; '
                             "default: the published protocol")
    parser.add_argument("--beta", type=float, default=0.05, help="false-alarm budget for the threshold (default 0.05)")
    parser.add_argument("--monitor", action="append", choices=sorted(PRESETS), default=None,
                        help=f"monitor(s) to run (default: {', '.join(DEFAULT_MONITORS)})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first healthy split (default 0)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="average this many seeded splits (seed, seed+1, ...); ignored with --split")
    parser.add_argument("--timing-repeats", type=int, default=5,
                        help="replays per test episode for the per-step timing; each step keeps its fastest "
                             "(default 5; 0 skips timing)")
    parser.add_argument("--json", action="store_true", help="one JSON object per (corpus, monitor)")


def _run(args: argparse.Namespace) -> int:
    split_spec: dict[str, Any] | None = None
    if args.split:
        split_spec = json.loads(Path(args.split).read_text(encoding="utf-8"))
        if not isinstance(split_spec, dict):
            raise SystemExit(f"{args.split}: a split file is a JSON object keyed by corpus directory name")
    monitors = args.monitor or list(DEFAULT_MONITORS)
    rows = []
    for corpus_dir in args.corpus:
        corpus = read_corpus(corpus_dir)
        name = Path(corpus_dir).name
        if split_spec is not None:
            if name not in split_spec:
                raise SystemExit(f"{args.split}: no split for corpus {name!r}")
            splits = [split_from_file(corpus.episodes, split_spec[name], name)]
        else:
            splits = [published_split(corpus.episodes, args.seed + r) for r in range(max(1, args.repeats))]
        for preset in progress(monitors, desc=name, enabled=not args.json):
            runs = [evaluate(preset, split, args.beta, args.timing_repeats) for split in splits]
            result = runs[0] if len(runs) == 1 else _average(runs)
            row = {"corpus": name, "monitor": preset, **result}
            rows.append(row)
            if args.json:
                emit_json(row)
    if not args.json:
        print_table(rows, ["corpus", "monitor", "auroc", "detection_rate", "healthy_fa_rate", "median_delay",
                           "fit_s", "step_us_median", "featurize_us_median", "n_train", "n_val", "n_test"])
    return 0


BENCH = Command(help="step monitor benchmark: AUROC / detection / FA / delay / speed per corpus and monitor",
                add_arguments=_add_arguments, run=_run)
