"""Calibration: robust-z scaling of score streams, and the alarm threshold with a finite-sample false-alarm guarantee.

The threshold is conformal: with n healthy calibration episodes whose per-episode maxima are
exchangeable with a new healthy episode's, the k-th smallest maximum, k = ceil((n+1)(1-beta)),
gives P(new healthy episode alarms) <= 1 - k/(n+1) <= beta (alarm = score strictly above it).
"split" calibrates on held-out validation episodes; "crossfit" on every healthy episode's
out-of-fold maximum (each scored by a model fitted without it, as in CV+ / jackknife+), so small
deployments need not spend a fifth of their healthy runs on validation. The guarantee is on
the expectation over calibration sets; the realised rate of one threshold varies around it,
which `Calibration.fa_interval` states (Beta(n+1-k, k), Vovk 2012).
"""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

__all__ = ["Calibration", "RobustZ", "TailEvidence", "binomial_ci", "conformal_rank", "conformal_threshold",
           "episode_maxima"]

_MAD_TO_SIGMA = 1.4826
CALIBRATION_METHODS = ("split", "crossfit")


class RobustZ:
    """z = (s - median) / (1.4826 * MAD), fitted on healthy scores; the scale has a floor so a flat null cannot divide by 0."""

    def __init__(self, min_scale: float = 1e-3) -> None:
        self.min_scale = min_scale

    def fit(self, healthy_scores: Iterable[float]) -> RobustZ:
        values = np.asarray(list(healthy_scores), dtype=float)
        if values.size == 0:
            raise ValueError("RobustZ.fit needs at least one healthy score")
        self.median_ = float(np.median(values))
        mad = float(np.median(np.abs(values - self.median_))) * _MAD_TO_SIGMA
        if mad <= self.min_scale:
            # A null that is mostly one value (a CUSUM at 0): fall back to the mean absolute deviation.
            mad = float(np.mean(np.abs(values - self.median_))) * 1.2533
        self.scale_ = max(mad, self.min_scale, 1e-3 * abs(self.median_))
        return self

    def transform(self, score: float) -> float:
        return (score - self.median_) / self.scale_


class TailEvidence:
    """-log p of a score, p its tail probability among healthy per-episode maxima (out of fold).

    Empirical up to the largest healthy maximum, p = (1 + #{maxima >= s}) / (n + 1) (a conformal
    p-value); beyond it an exponential tail fitted to the top fifth keeps ranking what no healthy
    run reached. Components on different scales become the same currency (nats of surprise), so
    a fusion can add them (`fusion="fisher"`) instead of letting the heaviest-tailed one set the bar.
    """

    MAX_EVIDENCE = 200.0  # nats: far beyond any threshold; bounds the arithmetic on absurd scores

    def fit(self, healthy_maxima: Iterable[float]) -> TailEvidence:
        values = np.sort(np.asarray([v for v in healthy_maxima if math.isfinite(v)], dtype=float))
        if values.size == 0:
            raise ValueError("TailEvidence.fit needs at least one finite healthy maximum")
        self.set_maxima(values)
        return self

    def set_maxima(self, sorted_maxima: np.ndarray) -> None:
        values = np.asarray(sorted_maxima, dtype=float)
        if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)) or np.any(np.diff(values) < 0):
            raise ValueError("tail maxima must be a non-empty, finite, sorted vector")
        self.maxima_ = values
        top = values[int(0.8 * values.size):]
        spread = float(values[-1] - values[0])
        # Mean excess of the top fifth: the exponential tail's scale (floored: a flat null must not divide by 0).
        self.tail_scale_ = max(float(np.mean(top - top[0])), 0.05 * spread, 1e-6 * (1.0 + abs(float(values[-1]))))
        self._sorted = values.tolist()
        n = values.size
        self._largest = self._sorted[-1]
        self._log_beyond = math.log(n + 1)
        # -log p for each count of maxima below the score (`evidence`'s hot path: one bisection, one lookup).
        self._within = [min(-math.log((1 + n - below) / (n + 1)), self.MAX_EVIDENCE) for below in range(n + 1)]

    def evidence(self, score: float) -> float:
        """-log p for a new episode's (running) maximum `score`."""
        largest = self._largest
        if score > largest:
            return min(self._log_beyond + (score - largest) / self.tail_scale_, self.MAX_EVIDENCE)
        if score != score:  # NaN: no evidence either way
            return 0.0
        return self._within[bisect.bisect_left(self._sorted, score)]

    def evidence_left_out(self, own_maximum: float) -> float:
        """-log p of a calibration episode's own maximum with that episode left out of the null (jackknife)."""
        n = len(self._sorted)
        at_least = n - bisect.bisect_left(self._sorted, own_maximum)  # counts the episode itself
        return -math.log(max(at_least, 1) / n)


def episode_maxima(per_step_scores: Iterable[Sequence[float]]) -> np.ndarray:
    """The per-episode maximum score (an episode with no steps scores -inf: it cannot alarm)."""
    return np.array([max(scores) if len(scores) else -np.inf for scores in per_step_scores], dtype=float)


def conformal_rank(n: int, beta: float) -> int:
    """k = ceil((n+1)(1-beta)), the order statistic of n calibration maxima that bounds false alarms by beta.

    Capped at n: with fewer than 1/beta - 1 episodes no observed value gives the guarantee, and the
    largest one gives 1/(n+1) instead (`conformal_threshold` warns).
    """
    if n < 1:
        raise ValueError("a conformal threshold needs at least one calibration episode")
    return min(n, math.ceil(round((n + 1) * (1.0 - beta), 9)))


def binomial_ci(successes: int, trials: int, level: float = 0.95) -> tuple[float, float] | None:
    """Clopper-Pearson (exact) interval of a binomial rate; None with no trials."""
    if trials <= 0:
        return None
    tail = (1.0 - level) / 2.0
    low = 0.0 if successes == 0 else float(stats.beta.ppf(tail, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(stats.beta.ppf(1.0 - tail, successes + 1, trials - successes))
    return low, high


@dataclass(frozen=True)
class Calibration:
    """The alarm threshold and what it guarantees.

    `rank` is k (the k-th smallest of `n` healthy maxima); `fa_bound` = 1 - k/(n+1) bounds the
    expected healthy false-alarm rate; `fa_interval` is the central `level` interval of the rate
    this particular threshold gives (it depends on which healthy episodes were drawn);
    `threshold_interval` is a distribution-free `level` interval, from order statistics, for the
    (1 - beta) quantile of healthy maxima the threshold estimates (upper end None: beyond the data).
    """

    threshold: float
    method: str
    beta: float
    n: int
    rank: int
    fa_bound: float
    fa_interval: tuple[float, float]
    threshold_interval: tuple[float, float | None]
    level: float = 0.95

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["fa_interval"] = list(self.fa_interval)
        out["threshold_interval"] = list(self.threshold_interval)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        """Rebuild from `to_json` output (types checked: model files are untrusted)."""
        try:
            fa_low, fa_high = (float(v) for v in data["fa_interval"])
            th_low, th_high = data["threshold_interval"]
            return cls(threshold=float(data["threshold"]), method=str(data["method"]), beta=float(data["beta"]),
                       n=int(data["n"]), rank=int(data["rank"]), fa_bound=float(data["fa_bound"]),
                       fa_interval=(fa_low, fa_high),
                       threshold_interval=(float(th_low), None if th_high is None else float(th_high)),
                       level=float(data.get("level", 0.95)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a calibration record: {exc}") from exc

    def describe(self) -> str:
        high = "inf" if self.threshold_interval[1] is None else f"{self.threshold_interval[1]:.4g}"
        return (f"threshold {self.threshold:.4g} ({self.method} conformal, {self.rank}th of {self.n} healthy "
                f"episode maxima; {self.level:.0%} interval {self.threshold_interval[0]:.4g}..{high}); "
                f"expected healthy false-alarm rate <= {self.fa_bound:.3f} (budget {self.beta}), "
                f"{self.level:.0%} range for this threshold {self.fa_interval[0]:.3f}..{self.fa_interval[1]:.3f}")


def conformal_threshold(maxima: Sequence[float] | np.ndarray, beta: float = 0.05, method: str = "split",
                        level: float = 0.95) -> Calibration:
    """The conformal alarm threshold over healthy calibration maxima (see the module docstring)."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta is a false-alarm budget in (0, 1), got {beta}")
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"unknown calibration {method!r}; choose from {CALIBRATION_METHODS}")
    values = np.sort(np.asarray(maxima, dtype=float))
    values = values[np.isfinite(values)]
    n = int(values.size)
    if n == 0:
        raise ValueError("a threshold needs at least one healthy calibration episode with steps")
    k = conformal_rank(n, beta)
    fa_bound = 1.0 - k / (n + 1)
    if fa_bound > beta + 1e-12:
        advice = " (calibration='crossfit' calibrates on every healthy episode)" if method == "split" else ""
        warnings.warn(f"only {n} healthy calibration episode(s): the threshold is their maximum and bounds the "
                      f"false-alarm rate by {fa_bound:.3f}, not {beta}; {math.ceil(1 / beta) - 1} or more are "
                      f"needed{advice}", stacklevel=2)
    tail = (1.0 - level) / 2.0
    fa_interval = (float(stats.beta.ppf(tail, n + 1 - k, k)), float(stats.beta.ppf(1.0 - tail, n + 1 - k, k)))
    # Order-statistic interval for the (1 - beta) quantile: ranks from Binomial(n, 1 - beta).
    low_rank = max(1, int(stats.binom.ppf(tail, n, 1.0 - beta)))
    high_rank = int(stats.binom.ppf(1.0 - tail, n, 1.0 - beta)) + 1
    threshold_interval = (float(values[low_rank - 1]), float(values[high_rank - 1]) if high_rank <= n else None)
    return Calibration(threshold=float(values[k - 1]), method=method, beta=beta, n=n, rank=k, fa_bound=fa_bound,
                       fa_interval=fa_interval, threshold_interval=threshold_interval, level=level)
