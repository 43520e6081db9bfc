"""The public release's own monitors (esn_cusum_max, delta_mahalanobis), run side by side in `guardrail bench monitor`.

The release's code lives in ../shared/anchors/sentinel (Apache-2.0) and is never copied into the
project: `load_release` imports it from there at benchmark time and, when it is absent or cannot
be imported, returns the reason for the benchmark to print. The driving here follows the release's
own example (`run_monitors_on_splits.py`): its telemetry adapter, a Standardizer fitted on the
healthy training split, its per-channel ESN (`ChannelMax`) over (e, u, m) when at least 90% of
the manifest has logprobs, else (e, m), and its `pick_threshold` on healthy validation maxima.
Alarm, detection and timing are then measured exactly as for our monitors.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RELEASE_MONITORS", "Release", "ReleaseCorpus", "find_release", "load_release"]

RELEASE_MONITORS = ("esn_cusum_max", "delta_mahalanobis")
_MIN_STEPS = 4


@dataclass
class Release:
    """The release's classes and functions this benchmark drives."""

    root: Path
    standardizer: Any
    pick_threshold: Any
    delta_mahalanobis: Any
    channel_max: Any
    validate_steps: Any
    episode_from_trace: Any


def find_release(explicit: str | None, corpus_dirs: Sequence[str]) -> Path | None:
    """--release DIR, else anchors/sentinel beside the corpora (shared/corpora/sentinel/C), else ../shared/anchors."""
    candidates = [Path(explicit)] if explicit else []
    for corpus in corpus_dirs:
        parents = Path(corpus).resolve().parents
        if len(parents) > 2:
            candidates.append(parents[2] / "anchors" / "sentinel")
    candidates.append(Path("..") / "shared" / "anchors" / "sentinel")
    return next((c for c in candidates if (c / "derail" / "__init__.py").is_file()), None)


def load_release(root: Path | None) -> Release | str:
    """Import the release's monitors from `root`; a string says why they are not available."""
    if root is None:
        return ("the release's monitors were not found (../shared/anchors/sentinel, or --release DIR); "
                "its rows are skipped")
    path = str(root.resolve())
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        common = importlib.import_module("derail.common")
        metrics = importlib.import_module("derail.evaluation.metrics")
        baselines = importlib.import_module("derail.monitor.baselines")
        adapter = importlib.import_module("derail.telemetry.adapter")
        runner = importlib.import_module("derail.experiments.run_real_traces")
    except ImportError as exc:
        return f"the release at {root} could not be imported ({exc}); its rows are skipped"
    return Release(root=root, standardizer=common.Standardizer, pick_threshold=metrics.pick_threshold,
                   delta_mahalanobis=baselines.DeltaMahalanobisMonitor, channel_max=runner.ChannelMax,
                   validate_steps=adapter.validate_steps, episode_from_trace=adapter.episode_from_trace)


class ReleaseCorpus:
    """One corpus as the release reads it: its own telemetry per episode (T >= 4), featurized once."""

    def __init__(self, release: Release, corpus_dir: str | Path, timing_repeats: int = 0) -> None:
        root = Path(corpus_dir)
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        self.release = release
        self.episodes: dict[str, Any] = {}
        self.featurize_ns: list[float] = []  # per episode: the adapter's time per step (its telemetry)
        for entry in manifest:
            if int(entry.get("T") or 0) < _MIN_STEPS:
                continue
            lines = (root / entry["file"]).read_text(encoding="utf-8").splitlines()
            steps = [json.loads(line) for line in lines if line.strip()]

            def featurize(steps: list[dict[str, Any]] = steps, entry: dict[str, Any] = entry) -> Any:
                return release.episode_from_trace(
                    release.validate_steps(steps, context=entry["file"]), entry["episode_id"], tau=entry["tau"],
                    failure_class=entry["failure_class"], severity=None if entry["tau"] is None else 0.5,
                    use_sentence_transformers=False)

            self.episodes[entry["episode_id"]] = featurize()
            if timing_repeats > 0:
                best = min(_timed(featurize) for _ in range(timing_repeats))
                self.featurize_ns.append(best / len(steps))
        with_logprobs = sum(bool(entry.get("has_logprobs")) for entry in manifest)
        self.channels = ("e", "u", "m") if with_logprobs >= 0.9 * len(manifest) else ("e", "m")

    def evaluate(self, name: str, train: Sequence[str], val: Sequence[str], test: Sequence[str],
                 beta: float, timing_repeats: int) -> dict[str, Any]:
        """Fit one release monitor on `train`, threshold on `val`, score `test` (episode ids)."""
        tr, va, te = ([self.episodes[i] for i in ids] for ids in (train, val, test))
        standardizer = self.release.standardizer().fit(tr)
        monitor = (self.release.channel_max(standardizer, self.channels) if name == "esn_cusum_max"
                   else self.release.delta_mahalanobis(standardizer))
        started = time.perf_counter()
        monitor.fit(tr)
        fit_s = time.perf_counter() - started
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its small-n warning: our rows carry the calibration figures
            threshold = float(self.release.pick_threshold([monitor.score_episode(e) for e in va], beta))
        streams = [(e, np.asarray(monitor.score_episode(e), dtype=float)) for e in te]
        return {"threshold": threshold, "fit_s": fit_s,
                "outcomes": [(e.episode_id, "healthy" if e.is_healthy else e.failure_class, e.tau, s) for e, s in
                             streams],
                "step_ns": _step_times(monitor, te, timing_repeats)}


def _timed(fn: Any) -> float:
    started = time.perf_counter_ns()
    fn()
    return float(time.perf_counter_ns() - started)


def _step_times(monitor: Any, episodes: Sequence[Any], repeats: int) -> list[float]:
    """Per-step `score_step` time in ns, each step's fastest of `repeats` replays (as for our monitors)."""
    out: list[float] = []
    if repeats < 1:  # --timing-repeats 0: no timing (not a row of infinite times)
        return out
    clock = time.perf_counter_ns
    for episode in episodes:
        best = [float("inf")] * episode.T
        for _ in range(repeats):
            monitor.start_episode()
            for t, x in enumerate(episode.X):
                t0 = clock()
                monitor.score_step(x)
                best[t] = min(best[t], clock() - t0)
        out += best
    return out


def median_us(values: Sequence[float]) -> float | None:
    return statistics.median(values) / 1e3 if values else None


@contextlib.contextmanager
def quiet() -> Any:
    """Silence the release's prints while it runs (stdout carries our JSON)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield
