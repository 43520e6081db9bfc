"""The fit-time budget check: will the false-alarm budget hold on the runs that come next, and on long ones?

The conformal threshold bounds the false-alarm rate of a new healthy run that is exchangeable
with the calibration runs. Two ways a deployment breaks that, both visible in its own healthy
runs when they are given in the order they were recorded:

- *Time*: the runs drift (a model update, a tool whose answers change, a channel creeping up).
  Forward chaining measures it: for each cut, fit on the runs before it, set the threshold
  the same way `guardrail fit` does (cross-fit conformal at the budget), and count alarms on the
  next block of runs. A rate significantly above the budget (one-sided exact binomial test)
  means the budget will not hold on new runs; the component whose out-of-fold maxima rise
  most with recording order (Spearman) is named as the drifting one.
- *Length*: scores that accumulate (CUSUMs) reach higher on longer runs. The longest fifth of
  the healthy runs' out-of-fold maxima against the threshold says whether the budget holds for
  runs longer than most of those fitted on; it holds on average only for the same mix of lengths.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from monitors.calibration import binomial_ci

__all__ = ["BudgetCheck", "check_budget"]

ALPHA = 0.05  # one-sided level at which an observed rate counts as above the budget
CUTS = (0.4, 0.55, 0.7, 0.85)  # forward-chaining cut points, as shares of the runs in recording order
MIN_FIT = 10  # runs needed before a cut (fewer: that cut is skipped)


@dataclass
class BudgetCheck:
    """What the forward-chained and long-run checks found (rates are healthy false-alarm rates)."""

    beta: float
    forward_alarms: int = 0
    forward_runs: int = 0
    forward_ci: tuple[float, float] | None = None
    forward_p: float | None = None  # one-sided: P(this many alarms or more | rate = beta)
    drifting: str | None = None  # the component whose out-of-fold maxima rise most with recording order
    drift_rho: float | None = None
    long_min_steps: int | None = None  # the longest fifth: runs of at least this many steps
    long_alarms: int = 0
    long_runs: int = 0
    long_p: float | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def forward_fa(self) -> float | None:
        return self.forward_alarms / self.forward_runs if self.forward_runs else None

    @property
    def long_fa(self) -> float | None:
        return self.long_alarms / self.long_runs if self.long_runs else None

    @property
    def holds(self) -> bool:
        return not self.warnings

    def describe(self) -> str:
        later = (f"{self.forward_alarms} of {self.forward_runs} later runs alarmed when fitted on the earlier ones"
                 if self.forward_runs else "too few runs to fit on earlier ones")
        long = (f"{self.long_alarms} of {self.long_runs} runs of {self.long_min_steps}+ steps alarmed out of fold"
                if self.long_runs else "no length spread to compare")
        verdict = "holds" if self.holds else "WILL NOT HOLD (see the warnings)"
        return f"budget check {verdict}: {later}; {long}"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["forward_ci"] = list(self.forward_ci) if self.forward_ci else None
        out["forward_fa"], out["long_fa"], out["holds"] = self.forward_fa, self.long_fa, self.holds
        return out


def _above(alarms: int, runs: int, beta: float) -> float:
    """One-sided exact binomial p-value of `alarms` or more among `runs` at rate `beta`."""
    return float(stats.binom.sf(alarms - 1, runs, beta)) if runs else 1.0


def check_budget(lengths: Sequence[int], oof_maxima: np.ndarray, component_maxima: np.ndarray,
                 components: Sequence[str], threshold: float, beta: float,
                 forward: Callable[[int, int], tuple[int, int]]) -> BudgetCheck:
    """Run both checks. The runs are in recording order; `oof_maxima` (fused) and `component_maxima` (n, k) are
    their out-of-fold maxima under the fitted model's cross-fit, `threshold` its threshold; ``forward(cut, end)``
    fits on runs [0, cut) and returns (alarms, runs) on runs [cut, end)."""
    n = len(lengths)
    check = BudgetCheck(beta=beta)
    edges = [int(c * n) for c in CUTS] + [n]
    for cut, end in zip(edges[:-1], edges[1:], strict=True):
        if cut < MIN_FIT or end <= cut:
            continue
        alarms, runs = forward(cut, end)
        check.forward_alarms += alarms
        check.forward_runs += runs
    if check.forward_runs:
        check.forward_ci = binomial_ci(check.forward_alarms, check.forward_runs)
        check.forward_p = _above(check.forward_alarms, check.forward_runs, beta)
    order = np.arange(n)
    best: tuple[float, str] | None = None
    for k, name in enumerate(components):
        values = component_maxima[:, k]
        if n >= 8 and np.ptp(values) > 0:
            rho, p = stats.spearmanr(order, values)
            if math.isfinite(rho) and p < ALPHA and rho > 0 and (best is None or rho > best[0]):
                best = (float(rho), name)
    if best is not None:
        check.drift_rho, check.drifting = best
    if check.forward_p is not None and check.forward_p < ALPHA and (check.forward_fa or 0) > beta:
        low, high = check.forward_ci or (0.0, 1.0)
        drift = (f"; {check.drifting}'s scores rise with recording order (Spearman {check.drift_rho:.2f})"
                 if check.drifting else "")
        check.warnings.append(
            f"the false-alarm budget will not hold on new runs: fitted on the earlier healthy runs, the monitor "
            f"alarmed on {check.forward_alarms} of the {check.forward_runs} later ones ({check.forward_fa:.3f}, "
            f"95% CI {low:.3f}-{high:.3f}; budget {beta}): the healthy runs are not "
            f"exchangeable across time{drift}; fit on recent runs, and refit as the deployment changes")
    if n >= 20:
        lengths_arr = np.asarray(lengths)
        floor = int(np.quantile(lengths_arr, 0.8))
        longest = lengths_arr >= floor
        if (lengths_arr > floor).sum() >= max(5, n // 10):  # many runs tie at the quantile: strictly above it
            floor += 1
            longest = lengths_arr >= floor
        if longest.sum() < n:  # all runs the same length: nothing to compare
            floor = int(lengths_arr[longest].min())
            check.long_min_steps = floor
            check.long_runs = int(longest.sum())
            check.long_alarms = int((oof_maxima[longest] > threshold).sum())
            check.long_p = _above(check.long_alarms, check.long_runs, beta)
            if check.long_p < ALPHA and (check.long_fa or 0) > beta:
                check.warnings.append(
                    f"the budget holds on average, not for long runs: out of fold, the healthy runs of {floor} steps "
                    f"or more alarmed on {check.long_alarms} of {check.long_runs} ({check.long_fa:.3f}; budget "
                    f"{beta}); a deployment whose runs are longer than those fitted on will exceed it: fit on runs "
                    f"as long as the deployment's")
    return check
