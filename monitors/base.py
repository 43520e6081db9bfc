"""The detector protocol: fitted on healthy feature sequences, scored by a constant-time per-episode stream."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["Detector", "DetectorStream", "score_sequence"]


class DetectorStream(Protocol):
    """One episode's scorer: `update(x_t)` returns s_t (higher = more anomalous), using x_1..x_t only."""

    def update(self, x: np.ndarray) -> float: ...

    def channel_scores(self) -> dict[str, float]: ...


class Detector(Protocol):
    """A one-class detector over telemetry vectors (scikit-learn style: hyperparameters in __init__)."""

    @property
    def name(self) -> str: ...

    def fit(self, healthy: Sequence[np.ndarray], slices: dict[str, slice]) -> Any: ...

    def start(self) -> DetectorStream: ...

    def get_state(self) -> dict[str, np.ndarray]: ...

    def set_state(self, state: dict[str, np.ndarray], slices: dict[str, slice]) -> None: ...

    def get_params(self) -> dict[str, Any]: ...


def score_sequence(detector: Detector, sequence: np.ndarray) -> np.ndarray:
    """Per-step scores of one episode's (T, dim) features: the detector's vectorised `score_batch` when it
    has one (tested equal to the stream), else the same stream an agent uses."""
    batch = getattr(detector, "score_batch", None)
    if batch is not None:
        return np.asarray(batch(sequence))
    stream = detector.start()
    return np.array([stream.update(x) for x in sequence])
