"""`guardrail drift STORE --model M`: has production left the healthy null the monitor was calibrated on?

The calibrated false-alarm budget holds only while healthy runs look like the ones the threshold
was set on. Over the recorded runs labelled healthy (``--clean``: also unlabelled runs that ended
with no finding at warning or above), each re-scored with the model:

- **alarm rate**: k of m healthy runs alarmed, with its 95% Clopper-Pearson interval, against the
  budget. The test is exact for this threshold: with a conformal threshold at rank r of n
  calibration maxima, a healthy run's alarm probability is Beta(n+1-r, r) distributed over
  calibration sets, so k is Beta-Binomial(m, n+1-r, r) under no drift (the plain binomial at the
  budget would call drift on a third of honest thresholds with few calibration runs).
- **conformal p-values**: each run's p = (1 + #calibration maxima >= its maximum) / (n + 1). They
  are uniform under no drift but not independent (they share the calibration set), so their
  uniformity is tested exactly by the one-sided two-sample Kolmogorov-Smirnov test of the runs'
  maxima against the calibration maxima (exchangeable under no drift).
- **channels**: per telemetry channel (e text, u uncertainty, m metadata, g grounding), the
  features whose mean over the runs' steps moved from the healthy mean the model was fitted on,
  in healthy standard deviations, with a cluster-robust z (episodes are the units) and a Bonferroni
  bar. Diagnostic only: it says where to look, not whether to refit.

The verdict is ``refit`` when either test rejects at alpha/2 (so at most alpha of honest
deployments are told to refit), ``ok`` otherwise, ``insufficient`` with fewer than ``--min-runs``
healthy runs. ``guardrail bench drift`` measures both error rates. ``--otlp URL`` exports the
same numbers as OpenTelemetry gauges.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from guardrail.core.cliutil import Command, emit_json
from guardrail.core.corpus import CorpusIssue
from guardrail.core.events import Episode

__all__ = ["DRIFT", "ChannelShift", "DriftReport", "drift_report", "healthy_runs"]

ALPHA = 0.05
MIN_RUNS = 20
MIN_SHIFT_SD = 0.25  # a channel "moved" only past this effect size too (huge samples make any wobble significant)
_G_NAMES = {7: "result-shape surprisal", 8: "new-word share"}
_AT_LEAST_WARNING = ("warning", "alarm", "error")


@dataclass
class ChannelShift:
    """One telemetry channel: its largest feature shift (healthy SDs) and whether it passed the bar."""

    channel: str
    moved: bool
    feature: str
    shift_sd: float
    z: float
    features_moved: int


@dataclass
class DriftReport:
    """What `guardrail drift` found (``verdict``: refit | ok | insufficient)."""

    verdict: str
    message: str
    runs: int
    alarms: int
    alarm_rate: float | None
    alarm_ci: tuple[float, float] | None
    budget: float | None
    alarm_p: float | None
    pvalue_ks: float | None
    pvalue_ks_statistic: float | None
    median_pvalue: float | None
    calibration_n: int | None
    alpha: float
    channels: list[ChannelShift] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    model: str | None = None
    model_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["alarm_ci"] = None if self.alarm_ci is None else list(self.alarm_ci)
        out["channels_moved"] = [c.channel for c in self.channels if c.moved]
        return out

    def gauges(self) -> dict[str, float | None]:
        """The numbers exported as ``guardrail.drift.<name>`` gauges."""
        return {"alarm_rate": self.alarm_rate, "alarm_rate_ci_low": None if self.alarm_ci is None else self.alarm_ci[0],
                "alarm_rate_ci_high": None if self.alarm_ci is None else self.alarm_ci[1], "budget": self.budget,
                "runs": float(self.runs), "alarms": float(self.alarms), "alarm_p": self.alarm_p,
                "pvalue_ks": self.pvalue_ks, "refit": 1.0 if self.verdict == "refit" else 0.0,
                "channels_moved": float(sum(c.moved for c in self.channels))}


# --------------------------------------------------------------------------- which runs
def healthy_runs(location: str, *, model_sha256: str | None = None, include_clean: bool = False,
                 problems: list[CorpusIssue] | None = None) -> tuple[list[Episode], list[str]]:
    """The healthy (and, with `include_clean`, clean unlabelled) finished runs of a store or corpus, with notes.

    With `model_sha256`, only a store's runs judged by that model (the deployment being checked; its
    own fitting runs were judged by another model or none, and would score in-sample).
    """
    from guardrail.core.runstore import UNLABELLED, is_store_dir, is_store_url, open_store

    sink = problems if problems is not None else []
    notes: list[str] = []
    if not (is_store_url(location) or is_store_dir(location)):
        from guardrail.core.corpus import read_corpus

        corpus = read_corpus(location)
        sink.extend(corpus.issues)
        return [e for e in corpus.episodes if e.is_healthy and e.steps], ["a corpus: every healthy episode is used"]
    with open_store(location, create=False) as store:
        summaries = store.summaries(sink)
        wanted = {s.episode_id for s in summaries if s.status == "complete" and s.repair_of is None
                  and s.label == "healthy"}
        if include_clean:
            # Clean but for the monitor: what is being checked is whether the monitor's alarms still keep the budget.
            wanted |= {s.episode_id for s in summaries if s.label == UNLABELLED and s.status == "complete"
                       and s.repair_of is None and not any(f.layer != "monitor" and f.severity in _AT_LEAST_WARNING
                                                           for f in s.findings)}
        if model_sha256 is not None:
            judged = {s.episode_id for s in summaries if s.model_sha256 == model_sha256}
            left_out = len(wanted - judged)
            if left_out:
                notes.append(f"{left_out} healthy run(s) judged by another model (or none) left out "
                             "(--any-model scores them too)")
            wanted &= judged
        episodes = [e for e in store.episodes(wanted, problems=sink) if e.steps]
    return episodes, notes


# --------------------------------------------------------------------------- the numbers
def _alarm_test(alarms: int, runs: int, calibration: Any) -> tuple[float | None, float | None]:
    """(budget, P(at least `alarms` of `runs` healthy runs alarm) under no drift)."""
    from scipy import stats

    if calibration is None:
        return None, None
    budget = float(calibration.beta)
    a, b = calibration.n + 1 - calibration.rank, calibration.rank
    if a <= 0 or b <= 0:
        return budget, float(stats.binom.sf(alarms - 1, runs, budget))
    return budget, float(stats.betabinom.sf(alarms - 1, runs, a, b))


def _feature_name(channel: str, index: int) -> str:
    label = _G_NAMES.get(index) if channel == "g" else None
    return f"{channel}[{index}]" + (f" ({label})" if label else "")


def channel_shifts(model: Any, episodes: Sequence[Episode], alpha: float = ALPHA) -> tuple[list[ChannelShift], str | None]:
    """Per telemetry channel, how far the runs' mean features moved from the fitted healthy mean (see the module doc)."""
    from scipy import stats

    reference = next((d for d in getattr(model.hybrid_, "detectors_", []) if getattr(d, "name", "") == "mahalanobis"
                      and hasattr(d, "location_")), None)
    if reference is None:
        return [], "channel shifts need a mahalanobis component in the model (the default monitor has one)"
    blocks = [np.asarray(model.telemetry_.transform(e), dtype=float) for e in episodes]
    blocks = [b for b in blocks if b.ndim == 2 and len(b)]
    if len(blocks) < 2:
        return [], "channel shifts need at least two runs with steps"
    steps = np.vstack(blocks)
    total = len(steps)
    mean = steps.mean(axis=0)
    sums = np.vstack([(b - mean).sum(axis=0) for b in blocks])
    m = len(blocks)
    var_mean = (sums ** 2).sum(axis=0) / total ** 2 * (m / (m - 1))
    n_train = max(int(getattr(model, "n_train_", 0) or 0), 1)
    se = np.sqrt(var_mean * (1.0 + m / n_train))  # the fitted mean has its own sampling error
    diff = mean - np.asarray(reference.location_, dtype=float)
    # The healthy spread of each feature from the fitted covariance (a feature constant in the new runs still has one).
    try:
        sd = np.sqrt(np.clip(np.diag(np.linalg.pinv(np.asarray(reference.precision_, dtype=float))), 0.0, None))
    except (np.linalg.LinAlgError, ValueError):
        sd = steps.std(axis=0)
    se = np.sqrt(np.maximum(se ** 2, sd ** 2 / total * (1.0 + m / n_train)))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, diff / se, np.where(np.abs(diff) > 1e-9, np.inf * np.sign(diff), 0.0))
        shift = np.where(sd > 0, diff / sd, np.where(np.abs(diff) > 1e-9, np.inf * np.sign(diff), 0.0))
    bar = float(stats.norm.isf(alpha / 2 / max(len(diff), 1)))
    moved = (np.abs(z) > bar) & (np.abs(shift) >= MIN_SHIFT_SD)
    out = []
    for channel, sl in model.telemetry_.slices_.items():
        idx = np.arange(sl.start, sl.stop)
        if not len(idx):
            continue
        order = idx[np.argsort(-np.abs(np.nan_to_num(z[idx], posinf=1e300, neginf=-1e300)))]
        top = int(order[0])
        flagged = idx[moved[idx]]
        if len(flagged):
            top = int(flagged[np.argmax(np.abs(np.nan_to_num(shift[flagged], posinf=1e300, neginf=-1e300)))])
        out.append(ChannelShift(channel=channel, moved=bool(len(flagged)), feature=_feature_name(channel, top - sl.start),
                                shift_sd=_finite(shift[top]), z=_finite(z[top]), features_moved=int(len(flagged))))
    return out, None


def _finite(value: float) -> float:
    value = float(value)
    return value if math.isfinite(value) else math.copysign(1e9, value)


def drift_report(model: Any, episodes: Sequence[Episode], *, alpha: float = ALPHA, min_runs: int = MIN_RUNS,
                 notes: Sequence[str] = ()) -> DriftReport:
    """The drift numbers and verdict for `episodes` (healthy runs) under the fitted, calibrated `model`."""
    from scipy import stats

    from monitors.calibration import binomial_ci

    notes = list(notes)
    maxima = np.array([model.score_episode(e).max_score for e in episodes if e.steps], dtype=float)
    runs = int(len(maxima))
    alarms = int((maxima > model.threshold_).sum())
    calibration = getattr(model, "calibration_", None)
    budget, alarm_p = _alarm_test(alarms, runs, calibration) if runs else (None, None)
    cal = getattr(model, "calibration_maxima_", None)
    ks_p = ks_stat = median_p = None
    if cal is not None and len(cal) and runs:
        cal = np.sort(np.asarray(cal, dtype=float))
        pvalues = (1 + len(cal) - np.searchsorted(cal, maxima, side="left")) / (len(cal) + 1)
        median_p = float(np.median(pvalues))
        result = stats.ks_2samp(maxima, cal, alternative="less")  # "less": the runs' maxima sit higher
        ks_p, ks_stat = float(result.pvalue), float(result.statistic)
    elif runs:
        notes.append("the model file holds no calibration maxima (written before drift checks): the p-value test "
                     "is skipped; refit to get it")
    channels, why = channel_shifts(model, episodes, alpha) if runs >= 2 else ([], None)
    if why:
        notes.append(why)
    rate = alarms / runs if runs else None
    interval = binomial_ci(alarms, runs) if runs else None
    budget_text = f"budget {budget:.0%}" if budget is not None else "no calibrated budget"
    moved = [c.channel for c in channels if c.moved]
    where = f"; channels moved: {', '.join(moved)}" if moved else ""
    if runs < min_runs:
        verdict = "insufficient"
        message = (f"not enough healthy runs to tell: {runs} (at least {min_runs}); {alarms} alarmed, {budget_text}")
    elif (alarm_p is not None and alarm_p < alpha / 2) or (ks_p is not None and ks_p < alpha / 2):
        verdict = "refit"
        if alarm_p is not None and alarm_p < alpha / 2:
            message = f"refit recommended: {alarms} of {runs} healthy runs alarmed, {budget_text}{where}"
        else:
            message = (f"refit recommended: healthy runs score above the calibration set (conformal p-values not "
                       f"uniform, KS p={ks_p:.2g}); {alarms} of {runs} alarmed, {budget_text}{where}")
    else:
        verdict = "ok"
        message = f"no drift: {alarms} of {runs} healthy runs alarmed, {budget_text}{where}"
    return DriftReport(verdict=verdict, message=message, runs=runs, alarms=alarms, alarm_rate=rate,
                       alarm_ci=interval, budget=budget, alarm_p=alarm_p, pvalue_ks=ks_p, pvalue_ks_statistic=ks_stat,
                       median_pvalue=median_p, calibration_n=None if calibration is None else int(calibration.n),
                       alpha=alpha, channels=channels, notes=notes)


def export_gauges(report: DriftReport, endpoint: str, service_name: str = "guardrail") -> list[str]:
    """Push the report's numbers once as ``guardrail.drift.*`` gauges to the OTLP endpoint; the gauge names."""
    from guardrail.core.metrics import drift_gauges, get_meter
    from guardrail.core.otlp import configure_metrics

    provider = configure_metrics(service_name, endpoint=endpoint, set_global=False, export_interval_ms=3_600_000)
    if provider is None:
        return []
    attributes = {"guardrail.verdict": report.verdict, "guardrail.model_sha256": (report.model_sha256 or "")[:64]}
    names = drift_gauges(get_meter(provider), report.gauges(), attributes)
    provider.force_flush()
    provider.shutdown()
    return names


# --------------------------------------------------------------------------- the command
def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="a run store (directory, sqlite:///PATH, postgresql://...) or a corpus")
    parser.add_argument("--model", required=True, help="the deployed model file (guardrail fit)")
    parser.add_argument("--clean", action="store_true", help="also use unlabelled runs that ended with no finding "
                                                             "at warning or above")
    parser.add_argument("--any-model", action="store_true", help="score every healthy run, not only those this "
                                                                 "model judged")
    parser.add_argument("--alpha", type=float, default=ALPHA, help=f"false drift rate (default {ALPHA})")
    parser.add_argument("--min-runs", type=int, default=MIN_RUNS, help=f"fewest runs for a verdict ({MIN_RUNS})")
    parser.add_argument("--otlp", metavar="URL", default=None, help="also export the numbers as OpenTelemetry "
                                                                    "gauges to this OTLP/HTTP endpoint")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")


def run_drift(store: str, model_path: str, *, include_clean: bool = False, any_model: bool = False,
              alpha: float = ALPHA, min_runs: int = MIN_RUNS) -> DriftReport:
    """`guardrail drift` as a function: load the model, pick the runs, compute the report."""
    from guardrail.core.fileio import sha256_file
    from monitors.model_file import load_monitor

    model = load_monitor(model_path)
    sha = sha256_file(model_path)
    episodes, notes = healthy_runs(store, model_sha256=None if any_model else sha, include_clean=include_clean)
    report = drift_report(model, episodes, alpha=alpha, min_runs=min_runs, notes=notes)
    report.model, report.model_sha256 = str(model_path), sha
    return report


def _run(args: argparse.Namespace) -> int:
    from guardrail.core.corpus import CorpusError
    from guardrail.core.runstore import StoreError
    from monitors.model_file import ModelFileError

    if not 0 < args.alpha < 1 or args.min_runs < 1:
        sys.stderr.write("guardrail drift: --alpha is in (0, 1) and --min-runs at least 1\n")
        return 2
    try:
        report = run_drift(args.store, args.model, include_clean=args.clean, any_model=args.any_model,
                           alpha=args.alpha, min_runs=args.min_runs)
    except (OSError, ValueError, CorpusError, StoreError, ModelFileError) as exc:
        sys.stderr.write(f"guardrail drift: {exc}\n")
        return 2
    if args.otlp:
        try:
            export_gauges(report, args.otlp)
        except (ValueError, RuntimeError) as exc:
            sys.stderr.write(f"guardrail drift: exporting the gauges failed: {exc}\n")
            return 2
    if args.json:
        emit_json(report.to_json())
        return 0
    out = sys.stdout.write
    out(report.message + "\n")
    if report.runs:
        low, high = report.alarm_ci or (0.0, 1.0)
        out(f"  alarm rate {report.alarm_rate:.3f} (95% CI {low:.3f}-{high:.3f})"
            + (f", P(>= {report.alarms} alarms | no drift) = {report.alarm_p:.3g}" if report.alarm_p is not None else "")
            + "\n")
    if report.pvalue_ks is not None:
        out(f"  conformal p-values: median {report.median_pvalue:.3f}, uniformity (two-sample KS vs "
            f"{report.calibration_n} calibration maxima) p = {report.pvalue_ks:.3g}\n")
    for channel in report.channels:
        state = "MOVED" if channel.moved else "steady"
        out(f"  channel {channel.channel}: {state} (largest: {channel.feature} {channel.shift_sd:+.2f} SD, "
            f"z {channel.z:+.1f})\n")
    for note in report.notes:
        out(f"  note: {note}\n")
    return 0


DRIFT = Command(help="has the healthy null drifted? healthy runs' alarm rate vs the budget, conformal p-values, "
                     "channels that moved", add_arguments=_add_arguments, run=_run)
