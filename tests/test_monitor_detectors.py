"""The detectors' mechanics on controlled sequences: ESN causality, CUSUM accumulation, Mahalanobis, the hybrid."""

from __future__ import annotations

import numpy as np
import pytest

from monitors.base import score_sequence
from monitors.esn import EsnCusum
from monitors.hybrid import Hybrid
from monitors.mahalanobis import Mahalanobis

SLICES = {"a": slice(0, 3), "b": slice(3, 5)}


def _healthy(n_episodes: int = 24, length: int = 12, seed: int = 0) -> list[np.ndarray]:
    """Sequences of a stable AR(1) process: predictable from the previous step, plus noise."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_episodes):
        x = np.zeros((length, 5))
        x[0] = rng.normal(size=5)
        for t in range(1, length):
            x[t] = 0.6 * x[t - 1] + rng.normal(scale=0.5, size=5)
        out.append(x)
    return out


@pytest.fixture(scope="module")
def esn() -> EsnCusum:
    return EsnCusum(random_state=1).fit(_healthy(), SLICES)


def test_esn_score_at_t_never_depends_on_later_steps(esn: EsnCusum) -> None:
    base = _healthy(1, 12, seed=7)[0]
    scores = score_sequence(esn, base)
    for t in range(len(base) - 1):
        changed = base.copy()
        changed[t + 1:] += np.random.default_rng(t).normal(scale=5.0, size=changed[t + 1:].shape)
        assert np.array_equal(score_sequence(esn, changed)[: t + 1], scores[: t + 1]), f"step {t} saw the future"


def test_esn_stream_matches_batch_reservoir_states(esn: EsnCusum) -> None:
    seq = _healthy(1, 8, seed=3)[0]
    states = esn._states(seq)
    stream = esn.start()
    for t, x in enumerate(seq):
        stream.update(x)
        assert np.allclose(stream._h.reshape(states[t].shape), states[t])


def test_cusum_accumulates_a_small_persistent_shift(esn: EsnCusum) -> None:
    healthy_max = max(score_sequence(esn, seq).max() for seq in _healthy(40, 30, seed=11))
    clean = _healthy(1, 30, seed=12)[0]
    shifted = clean.copy()
    onset = 8
    shifted[onset:, 3:5] += 2.0  # a persistent shift confined to channel b, ~1.6 noise sd after the AR carry-over
    scores = score_sequence(esn, shifted)
    gained = scores[-1] - scores[onset - 1]
    largest_step = float(np.max(np.diff(scores[onset - 1:])))
    # The alarm-level score is built from many steps of small evidence, not one loud step...
    assert scores[-1] > healthy_max
    assert gained > 2 * largest_step
    # ...and the same steps without the shift stay in the healthy range.
    assert score_sequence(esn, clean).max() < scores[-1] / 2


def test_cusum_is_zero_floored_and_per_channel(esn: EsnCusum) -> None:
    stream = esn.start()
    for x in _healthy(1, 10, seed=5)[0]:
        score = stream.update(x)
        assert score >= 0.0
    channels = stream.channel_scores()
    assert set(channels) == {"a", "b"} and score == max(channels.values())


def test_mahalanobis_scores_an_outlier_above_healthy_steps() -> None:
    healthy = _healthy()
    model = Mahalanobis().fit(healthy, SLICES)
    typical = np.median([score_sequence(model, s).mean() for s in healthy])
    outlier = np.full((1, 5), 6.0)
    assert score_sequence(model, outlier)[0] > 10 * typical


def test_delta_mahalanobis_needs_a_previous_step_and_sees_jumps() -> None:
    model = Mahalanobis(delta=True).fit(_healthy(), SLICES)
    seq = _healthy(1, 6, seed=9)[0]
    seq[4:] += 8.0  # a level change: one large step-to-step difference, at step 4
    scores = score_sequence(model, seq)
    assert scores[0] == 0.0
    assert scores[4] == scores.max()


def test_hybrid_max_fusion_is_calibrated_out_of_fold() -> None:
    healthy = _healthy(30)
    hybrid = Hybrid(("esn_cusum_max", "delta_mahalanobis"), fusion="max").fit(healthy, SLICES)
    maxima = [score_sequence(hybrid, s).max() for s in _healthy(30, seed=21)]
    # Robust-z: fresh healthy maxima sit around 0 in calibrated units, not in raw distance units.
    assert -3.0 < float(np.median(maxima)) < 3.0


def test_logistic_fusion_refuses_to_fit_without_perturbations() -> None:
    with pytest.raises(ValueError, match="perturbed"):
        Hybrid(("delta_mahalanobis",), fusion="logistic").fit(_healthy(), SLICES)


@pytest.mark.parametrize("delta", [False, True])
def test_mahalanobis_batch_scores_equal_the_stream(delta: bool) -> None:
    model = Mahalanobis(delta=delta).fit(_healthy(), SLICES)
    seq = _healthy(1, 9, seed=4)[0]
    stream = model.start()
    assert np.allclose(model.score_batch(seq), [stream.update(x) for x in seq])


def test_ledoit_wolf_covariance_matches_scikit_learn() -> None:
    from sklearn.covariance import LedoitWolf

    from monitors.mahalanobis import ledoit_wolf_covariance

    rows = np.random.default_rng(0).normal(size=(60, 7)) * np.arange(1, 8)
    reference = LedoitWolf().fit(rows)
    covariance, shrinkage = ledoit_wolf_covariance(rows - rows.mean(axis=0))
    assert np.allclose(covariance, reference.covariance_) and np.isclose(shrinkage, reference.shrinkage_)
