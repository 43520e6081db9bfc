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
        assert np.allclose(stream.state(), states[t])


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


def test_esn_crossfit_scores_equal_a_fit_without_each_fold() -> None:
    healthy = _healthy(20, 10, seed=2)
    folds = np.random.default_rng(0).permutation(20) % 4
    model = EsnCusum(random_state=3)
    oof = model.crossfit(healthy, SLICES, folds)
    for fold in range(4):
        kept = folds != fold
        alone = EsnCusum(random_state=3).fit([h for h, k in zip(healthy, kept, strict=True) if k], SLICES,
                                             folds=folds[kept])
        for i in np.flatnonzero(~kept):
            assert np.allclose(oof[i], score_sequence(alone, healthy[i]))
    # ...and leaves the model fitted on everything, as a plain fit with the same folds would be.
    full = EsnCusum(random_state=3).fit(healthy, SLICES, folds=folds)
    assert np.allclose(score_sequence(model, healthy[0]), score_sequence(full, healthy[0]))


def test_esn_fit_is_the_same_model_the_cross_fit_calibrated() -> None:
    healthy = _healthy(12, 9, seed=5)
    model = EsnCusum(random_state=1).fit(healthy, SLICES)
    stream = model.start()
    seq = _healthy(1, 9, seed=6)[0]
    assert np.array_equal([stream.update(x) for x in seq], score_sequence(model, seq))
    assert model.readout_.shape == (model.out_dim_, model.n_reservoirs_ * model.n_units + 5 + 1)


@pytest.mark.parametrize("delta", [False, True])
def test_mahalanobis_crossfit_scores_equal_a_fit_without_each_fold(delta: bool) -> None:
    healthy = _healthy(15, 8, seed=8)
    folds = np.arange(15) % 3
    model = Mahalanobis(delta=delta)
    oof = model.crossfit(healthy, SLICES, folds)
    for fold in range(3):
        alone = Mahalanobis(delta=delta).fit([h for h, f in zip(healthy, folds, strict=True) if f != fold], SLICES)
        for i in np.flatnonzero(folds == fold):
            assert np.allclose(oof[i], alone.score_batch(healthy[i]))
    assert set(model.channel_precisions_) == {"a", "b"}


def _novelty_sequence(surprisal: list[float], words: list[float]) -> np.ndarray:
    from monitors.features import G_DIM, G_SHAPE_SURPRISAL, G_WORD_NOVELTY

    x = np.zeros((len(surprisal), G_DIM))
    x[:, G_SHAPE_SURPRISAL] = surprisal
    x[:, G_WORD_NOVELTY] = words
    return x


def test_novelty_cusum_absorbs_one_odd_step_and_accumulates_a_persistent_one() -> None:
    from monitors.grounding import NoveltyCusum

    detector = NoveltyCusum().fit([], {"g": slice(0, 9)})
    once = detector.score_batch(_novelty_sequence([0, 1.8, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]))
    persistent = detector.score_batch(_novelty_sequence([0, 1.8, 1.8, 1.8, 1.8, 1.8], [0, 0.2, 0.2, 0.2, 0.2, 0.2]))
    assert once.max() == pytest.approx(0.8) and once[-1] == 0.0
    assert persistent[-1] == pytest.approx(5 * (1.8 + 5 * 0.2 - 1.0))
    stream = detector.start()
    assert np.allclose([stream.update(x) for x in _novelty_sequence([0, 3, 0], [0.5, 0, 0])],
                       detector.score_batch(_novelty_sequence([0, 3, 0], [0.5, 0, 0])))
    with pytest.raises(ValueError, match="grounding channel"):
        NoveltyCusum().fit([], SLICES)


def test_fisher_fusion_stream_matches_its_calibration_and_adds_evidence() -> None:
    healthy = _healthy(30)
    hybrid = Hybrid(("esn_cusum_max", "delta_mahalanobis"), fusion="fisher", n_folds=5).fit(healthy, SLICES)
    assert len(hybrid.tails_) == 2 and hybrid.oof_maxima_.shape == (30,)
    seq = _healthy(1, 12, seed=40)[0]
    streamed = score_sequence(hybrid, seq)
    running = [np.maximum.accumulate(score_sequence(d, seq)) for d in hybrid.detectors_]
    expected = [sum(t.evidence(r[i]) for t, r in zip(hybrid.tails_, running, strict=True)) for i in range(len(seq))]
    assert np.allclose(streamed, expected)
    assert np.all(np.diff(streamed) >= -1e-12)  # running maxima: the fused evidence never falls
    # A calibration episode's fused maximum is scored with itself left out of each tail.
    assert hybrid.oof_maxima_.min() >= 0.0
