"""Memoryless Mahalanobis and delta-Mahalanobis detectors (Ledoit-Wolf shrinkage covariance, as scikit-learn computes it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["Mahalanobis", "MahalanobisStream", "ledoit_wolf_covariance"]


def ledoit_wolf_covariance(centred: np.ndarray) -> tuple[np.ndarray, float]:
    """Ledoit-Wolf shrinkage covariance of centred rows: scikit-learn's estimator, term for term.

    Written out because `sklearn.covariance.LedoitWolf().fit` spends several times the solve on
    per-call input validation (dataframe-library probing), and a fit makes ten of them within the
    0.5 s per-corpus budget; tests/test_monitor_detectors.py pins it to scikit-learn's result.
    """
    n, p = centred.shape
    empirical = centred.T @ centred / n
    mu = float(np.trace(empirical)) / p
    if p == 1:
        return empirical, 0.0
    squared = centred ** 2
    beta_sum = float(np.sum(squared.T @ squared))
    delta_sum = float(np.sum((centred.T @ centred) ** 2)) / n ** 2
    beta = (beta_sum / n - delta_sum) / (p * n)
    delta = (delta_sum - 2.0 * mu * float(np.trace(empirical)) + p * mu ** 2) / p
    beta = min(beta, delta)
    shrinkage = 0.0 if beta == 0 else beta / delta
    covariance = (1.0 - shrinkage) * empirical
    covariance.flat[:: p + 1] += shrinkage * mu
    return covariance, shrinkage


def _pinvh(matrix: np.ndarray) -> np.ndarray:
    """Pseudo-inverse of a symmetric matrix (scipy.linalg.pinvh's cutoff, without its per-call validation:
    a fit inverts dozens of these)."""
    values, vectors = np.linalg.eigh(matrix)
    cutoff = np.finfo(float).eps * max(matrix.shape) * float(np.max(np.abs(values), initial=0.0))
    inverse = np.where(np.abs(values) > cutoff, 1.0 / np.where(values == 0, 1.0, values), 0.0)
    return (vectors * inverse) @ vectors.T


class Mahalanobis:
    """Squared Mahalanobis distance of x_t (or of x_t - x_{t-1} with ``delta=True``) from healthy steps.

    `channel_scores` explains a score: each channel's own squared distance (its own shrinkage
    covariance, fitted alongside) at the last step, computed only when asked, off the hot path.
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
        self._fit_rows(self._stack(healthy), slices, explain=True)
        return self

    def crossfit(self, healthy: Sequence[np.ndarray], slices: dict[str, slice],
                 folds: np.ndarray) -> list[np.ndarray]:
        """Each episode's per-step scores from the model fitted without its fold; leaves self fitted on all.
        (The fold models skip the per-channel covariances: they only explain alarms.)"""
        out: list[np.ndarray] = [np.zeros(0)] * len(healthy)
        for fold in np.unique(folds).tolist():
            fold_model = Mahalanobis(delta=self.delta)
            fold_model._fit_rows(self._stack([seq for seq, f in zip(healthy, folds, strict=True) if f != fold]),
                                 slices, explain=False)
            for i in np.flatnonzero(folds == fold).tolist():
                out[i] = fold_model.score_batch(healthy[i])
        self.fit(healthy, slices)
        return out

    def _stack(self, healthy: Sequence[np.ndarray]) -> np.ndarray:
        blocks = [self._rows(seq) for seq in healthy if len(self._rows(seq))]
        rows = np.vstack(blocks) if blocks else np.zeros((0, 0))
        if len(rows) < 2:
            raise ValueError(f"{self.name} needs at least two healthy {'step changes' if self.delta else 'steps'} "
                             f"to fit, got {len(rows)}")
        return rows

    def _fit_rows(self, rows: np.ndarray, slices: dict[str, slice], explain: bool) -> None:
        self.location_ = rows.mean(axis=0)
        covariance, self.shrinkage_ = ledoit_wolf_covariance(rows - self.location_)
        self.precision_ = _pinvh(covariance)
        self.slices_ = dict(slices)
        self.channel_precisions_ = {name: _pinvh(ledoit_wolf_covariance(rows[:, sl] - self.location_[sl])[0])
                                    for name, sl in slices.items()} if explain else {}

    def get_state(self) -> dict[str, np.ndarray]:
        return {"location": self.location_, "precision": self.precision_,
                **{f"channel_precision.{name}": p for name, p in self.channel_precisions_.items()}}

    def set_state(self, state: dict[str, np.ndarray], slices: dict[str, slice]) -> None:
        self.location_, self.precision_ = state["location"], state["precision"]
        self.slices_ = dict(slices)
        self.channel_precisions_ = {name: state[f"channel_precision.{name}"] for name in slices}

    def start(self) -> MahalanobisStream:
        return MahalanobisStream(self)

    def score_batch(self, sequence: np.ndarray) -> np.ndarray:
        """Per-step scores of a whole (T, dim) episode at once: the stream's values, vectorised for fitting."""
        if not len(sequence):
            return np.zeros(0)
        if self.delta:
            centred = np.diff(sequence, axis=0) - self.location_
            return np.concatenate(([0.0], np.einsum("ij,jk,ik->i", centred, self.precision_, centred)))
        centred = sequence - self.location_
        return np.einsum("ij,jk,ik->i", centred, self.precision_, centred)


class MahalanobisStream:
    """Hot path: one centred vector, written into a buffer, and one matvec per step (a few microseconds)."""

    __slots__ = ("_m", "_prev", "_last", "_centred", "_buffer", "_location", "_precision")

    def __init__(self, model: Mahalanobis) -> None:
        self._m = model
        self._prev: np.ndarray | None = None
        self._last = 0.0
        self._centred: np.ndarray | None = None
        self._location = model.location_
        self._precision = model.precision_
        self._buffer = np.empty_like(model.location_, dtype=float)

    def update(self, x: np.ndarray) -> float:
        centred = self._buffer
        if self._m.delta:
            prev, self._prev = self._prev, x
            if prev is None:
                self._last = 0.0
                self._centred = None
                return 0.0
            np.subtract(x, prev, out=centred)
            centred -= self._location
        else:
            np.subtract(x, self._location, out=centred)
        self._centred = centred
        self._last = float(centred.dot(self._precision.dot(centred)))
        return self._last

    def channel_scores(self) -> dict[str, float]:
        """Each channel's squared distance at the last step (0 before a delta has a previous step)."""
        centred = self._centred
        m = self._m
        if centred is None:
            return {name: 0.0 for name in m.slices_}
        return {name: float(centred[sl] @ m.channel_precisions_[name] @ centred[sl]) for name, sl in m.slices_.items()}
