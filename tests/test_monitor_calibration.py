"""Calibration: the conformal threshold's false-alarm guarantee, its stated uncertainty, tail evidence, binomial CIs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from monitors.calibration import Calibration, TailEvidence, binomial_ci, conformal_rank, conformal_threshold


@pytest.mark.parametrize(("n", "beta", "rank"), [(19, 0.05, 19), (21, 0.05, 21), (24, 0.05, 24), (60, 0.05, 58),
                                                 (100, 0.05, 96), (9, 0.1, 9), (6, 0.05, 6)])
def test_conformal_rank_is_the_ceiling_of_n_plus_one_times_one_minus_beta_capped_at_n(n, beta, rank):
    assert conformal_rank(n, beta) == rank


def _realised_false_alarms(rule, n: int, trials: int, seed: int = 0) -> np.ndarray:
    """Each trial: n healthy calibration maxima, a threshold from `rule`, the rate at which fresh healthy maxima
    exceed it (exactly, from the heavy-tailed null's survival function)."""
    rng = np.random.default_rng(seed)
    null = stats.lognorm(s=1.2)
    out = np.empty(trials)
    for t in range(trials):
        out[t] = null.sf(rule(null.rvs(size=n, random_state=rng)))
    return out


def test_the_conformal_threshold_holds_the_budget_where_the_plain_quantile_does_not():
    n, beta = 21, 0.05
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 21 episodes suffice: no small-sample warning
        conformal = _realised_false_alarms(lambda m: conformal_threshold(m, beta).threshold, n, 4000)
    plain = _realised_false_alarms(lambda m: float(np.quantile(m, 1 - beta)), n, 4000)
    # Expected rate under the guarantee: 1 - k/(n+1) = 1/22 = 0.045 (Monte Carlo sd about 0.0007).
    assert conformal.mean() == pytest.approx(1 / 22, abs=0.003)
    assert conformal.mean() <= beta
    # What the threshold used to be (the interpolated quantile of 21 maxima) misses the budget.
    assert plain.mean() > beta + 0.01


def test_the_stated_range_of_the_false_alarm_rate_covers_the_realised_rates():
    n, beta = 40, 0.05
    record = conformal_threshold(np.random.default_rng(1).lognormal(size=n), beta)
    realised = _realised_false_alarms(lambda m: conformal_threshold(m, beta).threshold, n, 3000, seed=2)
    low, high = record.fa_interval
    inside = np.mean((realised >= low) & (realised <= high))
    assert 0.93 <= inside <= 0.97  # a 95% interval, by construction Beta(n + 1 - k, k)
    assert record.rank == 39 and record.fa_bound == pytest.approx(2 / 41)


def test_the_threshold_interval_brackets_the_quantile_it_estimates():
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(400):
        record = conformal_threshold(rng.normal(size=200), 0.05)
        low, high = record.threshold_interval
        hits += low <= stats.norm.ppf(0.95) <= (np.inf if high is None else high)
    assert hits / 400 >= 0.93


def test_too_few_calibration_episodes_warn_and_use_the_largest():
    maxima = [1.0, 3.0, 2.0, 5.0, 4.0, 0.5]
    with pytest.warns(UserWarning, match=r"only 6 healthy calibration episode.*0\.143, not 0\.05"):
        record = conformal_threshold(maxima, 0.05)
    assert record.threshold == 5.0 and record.fa_bound == pytest.approx(1 / 7)
    assert record.threshold_interval[1] is None  # the quantile lies beyond what 6 episodes can bound


def test_calibration_records_round_trip_and_junk_is_refused():
    record = conformal_threshold(np.arange(50, dtype=float), 0.05, method="crossfit")
    assert Calibration.from_json(record.to_json()) == record
    assert "crossfit conformal, 49th of 50" in record.describe()
    with pytest.raises(ValueError, match="not a calibration record"):
        Calibration.from_json({"threshold": "high"})


def test_clopper_pearson_intervals():
    low, high = binomial_ci(0, 20)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 20))
    low, high = binomial_ci(3, 60)
    assert low < 3 / 60 < high and (low, high) == pytest.approx((0.0104, 0.1392), abs=5e-4)
    assert binomial_ci(0, 0) is None


def test_tail_evidence_is_a_conformal_p_value_inside_the_data_and_keeps_ranking_beyond_it():
    tail = TailEvidence().fit([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    assert tail.evidence(-1.0) == pytest.approx(0.0)  # below every healthy maximum: p = 1
    assert tail.evidence(4.5) == pytest.approx(-np.log(6 / 11))
    beyond = [tail.evidence(v) for v in (9.5, 12.0, 40.0)]
    assert -np.log(1 / 11) < beyond[0] < beyond[1] < beyond[2] <= TailEvidence.MAX_EVIDENCE
    # A calibration episode's own maximum, scored with itself left out of the null: as a new episode would be.
    assert tail.evidence_left_out(9.0) == pytest.approx(-np.log(1 / 10))
    assert tail.evidence_left_out(0.0) == pytest.approx(0.0)


def _reference_evidence(sorted_maxima: list[float], tail_scale: float, score: float) -> float:
    """TailEvidence.evidence as its docstring defines it, computed from scratch on every call."""
    import bisect
    import math

    n = len(sorted_maxima)
    if score > sorted_maxima[-1]:
        log_p = -math.log(n + 1) - (score - sorted_maxima[-1]) / tail_scale
    elif score != score:
        return 0.0
    else:
        log_p = math.log((1 + n - bisect.bisect_left(sorted_maxima, score)) / (n + 1))
    return min(-log_p, TailEvidence.MAX_EVIDENCE)


@pytest.mark.parametrize("maxima", [[3.0], [1.0, 1.0, 1.0, 2.0], list(np.random.default_rng(0).gamma(2.0, 3.0, 57))])
def test_tail_evidence_lookup_equals_the_p_value_computed_afresh(maxima: list[float]) -> None:
    # The stream reads -log p from a table built at fit time: every score must get exactly the direct value.
    tail = TailEvidence().fit(maxima)
    ordered = sorted(maxima)
    probes = ordered + [v + d for v in ordered for d in (-1e-9, 1e-9)] + [-np.inf, np.inf, np.nan, -5.0, 1e6]
    probes += np.random.default_rng(1).uniform(min(ordered) - 1, max(ordered) * 3 + 1, 200).tolist()
    for score in probes:
        assert tail.evidence(score) == _reference_evidence(ordered, tail.tail_scale_, score), score
