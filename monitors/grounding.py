"""The grounding detector: a CUSUM of the g channel's novelty against healthy runs (content-level departures).

Context corruption, a wrong document and a drifted goal change what the agent reads and writes
more than how it behaves (../shared/seeds/002 §8). Per step the increment is the surprisal of the
step's result shapes under the healthy lexicon plus `word_weight` times the share of its words no
healthy run used, less an allowance `kappa`: S_t = max(0, S_{t-1} + increment_t - kappa). One odd
healthy step is absorbed by the allowance; a corrupted tool that keeps returning new shapes, or
an episode that keeps writing about something else, accumulates. Nothing is fitted here (the
healthy model is the telemetry's lexicon), so cross-fitting it costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from monitors.features import G_SHAPE_SURPRISAL, G_WORD_NOVELTY

__all__ = ["NoveltyCusum", "NoveltyCusumStream"]


class NoveltyCusum:
    """CUSUM of shape surprisal + word novelty (see the module docstring); needs the g channel with novelty on."""

    name = "novelty_cusum"
    cumulative = True  # a CUSUM: its change point is the step after its last 0 (`HybridStream.onset`)

    def __init__(self, word_weight: float = 5.0, kappa: float = 1.0) -> None:
        self.word_weight = word_weight
        self.kappa = kappa

    def get_params(self) -> dict[str, Any]:
        return {"word_weight": self.word_weight, "kappa": self.kappa}

    def fit(self, healthy: Sequence[np.ndarray], slices: dict[str, slice]) -> NoveltyCusum:
        if "g" not in slices:
            raise ValueError("novelty_cusum reads the grounding channel 'g', which this telemetry does not have")
        self.slices_ = dict(slices)
        self.shape_index_ = slices["g"].start + G_SHAPE_SURPRISAL
        self.word_index_ = slices["g"].start + G_WORD_NOVELTY
        return self

    def crossfit(self, healthy: Sequence[np.ndarray], slices: dict[str, slice],
                 folds: np.ndarray) -> list[np.ndarray]:
        """Out-of-fold scores: nothing is fitted, so they are the plain scores (the lexicon was left out upstream)."""
        self.fit(healthy, slices)
        return [self.score_batch(seq) for seq in healthy]

    def increments(self, sequence: np.ndarray) -> np.ndarray:
        return sequence[:, self.shape_index_] + self.word_weight * sequence[:, self.word_index_] - self.kappa

    def score_batch(self, sequence: np.ndarray) -> np.ndarray:
        out = np.empty(len(sequence))
        level = 0.0
        for t, step in enumerate(self.increments(sequence).tolist()):
            level = max(0.0, level + step)
            out[t] = level
        return out

    def get_state(self) -> dict[str, np.ndarray]:
        return {}

    def set_state(self, state: dict[str, np.ndarray], slices: dict[str, slice]) -> None:
        self.fit([], slices)

    def start(self) -> NoveltyCusumStream:
        return NoveltyCusumStream(self)


class NoveltyCusumStream:
    """Two reads and a max per step."""

    __slots__ = ("_shape", "_word", "_weight", "_kappa", "_level")

    def __init__(self, model: NoveltyCusum) -> None:
        self._shape, self._word = model.shape_index_, model.word_index_
        self._weight, self._kappa = model.word_weight, model.kappa
        self._level = 0.0

    def update(self, x: np.ndarray) -> float:
        self._level = max(0.0, self._level + float(x[self._shape]) + self._weight * float(x[self._word]) - self._kappa)
        return self._level

    def channel_scores(self) -> dict[str, float]:
        return {"g": self._level}
