"""Memoryless Mahalanobis and delta-Mahalanobis detectors (Ledoit-Wolf shrinkage covariance from scikit-learn)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.covariance import LedoitWolf

__all__ = ["Mahalanobis", "MahalanobisStream"]


class Mahalanobis:
    """Squared Mahalanobis distance of x_t (or of x_t - x_{t-1} with ``delta=True``) from healthy steps.

    Per-channel distances are also kept (`channel_scores`) so a user can see which channel moved.
    The delta form scores the first step by its distance from healthy first-step changes of zero,
    i.e. 0: a change needs a previous step.
    """

    def __init__(self, delta: bool = False) -> None:
        self.delta = delta

    @property
    def name(self) -> str:
        return "delta_mahalanobis" if self.delta else "mahalanobis"

    def get_params(self) -> dict[str, Any]:
        return {"delta": self.delta}

    def _rows(self, seq: np.ndarray) -> np.ndarray:
        return np.diff(seq, axis=0) if self.delta else seq

    def fit(self, healthy: Sequence[np.ndarray], slices: dict[str, slice]) -> Mahalanobis:
        rows = np.vstack([self._rows(seq) for seq in healthy if len(self._rows(seq))])
        if len(rows) < 2:
            raise ValueError(f"{self.name} needs at least two healthy steps to fit, got {len(rows)}")
        estimator = LedoitWolf().fit(rows)
        self.location_ = estimator.location_
        self.precision_ = estimator.precision_
        self.slices_ = dict(slices)
        return self

    def get_state(self) -> dict[str, np.ndarray]:
        return {"location": self.location_, "precision": self.precision_}

    def set_state(self, state: dict[str, np.ndarray], slices: dict[str, slice]) -> None:
        self.location_, self.precision_ = state["location"], state["precision"]
        self.slices_ = dict(slices)

    def start(self) -> MahalanobisStream:
        return MahalanobisStream(self)


class MahalanobisStream:
    """Hot path: one centred vector and one matvec per step (a few microseconds)."""

    __slots__ = ("_m", "_prev", "_last")

    def __init__(self, model: Mahalanobis) -> None:
        self._m = model
        self._prev: np.ndarray | None = None
        self._last = 0.0

    def update(self, x: np.ndarray) -> float:
        m = self._m
        if m.delta:
            prev, self._prev = self._prev, x
            if prev is None:
                self._last = 0.0
                return 0.0
            centred = (x - prev) - m.location_
        else:
            centred = x - m.location_
        self._last = float(centred @ (m.precision_ @ centred))
        return self._last

    def channel_scores(self) -> dict[str, float]:
        return {"all": self._last}
