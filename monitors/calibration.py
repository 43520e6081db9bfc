"""Calibration: robust-z scaling of score streams and the alarm threshold from healthy validation maxima."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["RobustZ", "alarm_threshold", "episode_maxima"]

_MAD_TO_SIGMA = 1.4826


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


def episode_maxima(per_step_scores: Iterable[Sequence[float]]) -> np.ndarray:
    """The per-episode maximum score (an episode with no steps scores -inf: it cannot alarm)."""
    return np.array([max(scores) if len(scores) else -np.inf for scores in per_step_scores], dtype=float)


def alarm_threshold(healthy_val_maxima: Sequence[float], beta: float = 0.05) -> float:
    """theta = the (1 - beta) quantile of per-episode max scores on healthy validation episodes only."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta is a false-alarm budget in (0, 1), got {beta}")
    values = np.asarray(healthy_val_maxima, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        raise ValueError("alarm_threshold needs at least one healthy validation episode with steps")
    return float(np.quantile(values, 1.0 - beta))
