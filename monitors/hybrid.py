"""The calibrated hybrid: robust-z calibrate each detector's stream out of fold, then fuse (max, weighted, logistic).

../shared/seeds/002 §7. Every component is calibrated on scores it gave to healthy training
episodes it was *not* fitted on (a k-fold cross-fit), so in-sample optimism never sets the
scale. The logistic fusion's weights are learned on the same cross-fit, separating held-out
healthy training episodes from synthetic perturbations of them (`monitors.perturb`): never
on validation, test or injected episodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from monitors.base import Detector, score_sequence
from monitors.calibration import RobustZ, TailEvidence
from monitors.esn import EsnCusum
from monitors.grounding import NoveltyCusum
from monitors.mahalanobis import Mahalanobis

__all__ = ["DETECTORS", "FUSIONS", "Hybrid", "HybridStream", "make_detector"]

DETECTORS: dict[str, Callable[..., Detector]] = {
    "esn_cusum_max": EsnCusum,
    "mahalanobis": lambda **kw: Mahalanobis(delta=False, **kw),
    "delta_mahalanobis": lambda **kw: Mahalanobis(delta=True, **kw),
    "novelty_cusum": NoveltyCusum,
}
FUSIONS = ("max", "weighted", "logistic", "fisher")


def make_detector(name: str, params: dict[str, Any] | None = None) -> Detector:
    if name not in DETECTORS:
        raise ValueError(f"unknown detector {name!r}; choose from {sorted(DETECTORS)}")
    return DETECTORS[name](**(params or {}))


class Hybrid:
    """Calibrated fusion of one or more detectors; with one component it is that detector, robust-z scaled."""

    name = "hybrid"

    def __init__(self, components: Sequence[str] = ("esn_cusum_max", "delta_mahalanobis"), fusion: str = "max",
                 weights: Sequence[float] | None = None, detector_params: dict[str, dict[str, Any]] | None = None,
                 n_folds: int = 4, random_state: int = 0) -> None:
        self.components = tuple(components)
        self.fusion = fusion
        self.weights = weights
        self.detector_params = detector_params
        self.n_folds = n_folds
        self.random_state = random_state

    def get_params(self) -> dict[str, Any]:
        return {"components": list(self.components), "fusion": self.fusion,
                "weights": None if self.weights is None else list(self.weights),
                "detector_params": self.detector_params or {}, "n_folds": self.n_folds,
                "random_state": self.random_state}

    def _new(self, name: str) -> Detector:
        return make_detector(name, (self.detector_params or {}).get(name))

    def fit(self, healthy: Sequence[np.ndarray], slices: dict[str, slice],
            perturbed: Sequence[tuple[int, np.ndarray]] = ()) -> Hybrid:
        """Fit on healthy (T, dim) sequences; `perturbed` pairs (source episode index, features) feed the logistic fusion."""
        if self.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {self.fusion!r}; choose from {FUSIONS}")
        if not self.components:
            raise ValueError("a Hybrid needs at least one component detector")
        if self.fusion == "logistic" and not perturbed:
            raise ValueError("the logistic fusion learns its weights from perturbed healthy training episodes; none given")
        n = len(healthy)
        n_folds = max(2, min(self.n_folds, n))
        folds = np.random.default_rng(self.random_state).permutation(n) % n_folds
        # oof[i][k]: episode i's per-step scores from component k fitted without i's fold.
        oof: list[list[np.ndarray]] = [[np.zeros(0)] * len(self.components) for _ in range(n)]
        perturbed_max = np.full((len(perturbed), len(self.components)), np.nan)
        self.detectors_ = []
        for k, name in enumerate(self.components):
            detector = self._new(name)
            crossfit = getattr(detector, "crossfit", None)
            if crossfit is not None and not perturbed:
                # The detector's own fast path: every fold's scores from shared work (e.g. reservoir states once).
                for i, scores in enumerate(crossfit(healthy, slices, folds)):
                    oof[i][k] = scores
                self.detectors_.append(detector)
                continue
            for fold in range(n_folds):
                train = [healthy[i] for i in np.flatnonzero(folds != fold).tolist()]
                fold_detector = self._new(name).fit(train, slices)
                for i in np.flatnonzero(folds == fold).tolist():
                    oof[i][k] = score_sequence(fold_detector, healthy[i])
                for j, (source, seq) in enumerate(perturbed):
                    if folds[source] == fold:
                        perturbed_max[j, k] = _max(score_sequence(fold_detector, seq))
            self.detectors_.append(detector.fit(healthy, slices))
        healthy_max = np.array([[_max(scores) for scores in row] for row in oof]).reshape(n, len(self.components))
        self.oof_component_maxima_ = healthy_max  # (n, k): each component's out-of-fold maximum per episode
        self.calibrators_ = [RobustZ().fit(healthy_max[:, k]) for k in range(len(self.components))]
        self.tails_ = ([TailEvidence().fit(healthy_max[:, k]) for k in range(len(self.components))]
                       if self.fusion == "fisher" else [])
        self.weights_, self.intercept_ = self._fusion_weights(healthy_max, perturbed_max)
        # Each healthy episode's fused maximum from models that never saw it: the cross-fit calibration set.
        self.oof_maxima_ = np.array([self._fused_max(row) for row in oof])
        return self

    def _fused_max(self, component_scores: Sequence[np.ndarray]) -> float:
        """The max over a calibration episode of the fused stream HybridStream would emit for these scores
        (for "fisher", each tail with the episode itself left out: it is scored as a new episode would be)."""
        if not len(component_scores[0]):
            return float("-inf")
        if self.fusion == "fisher":
            return sum(tail.evidence_left_out(float(scores.max()))
                       for scores, tail in zip(component_scores, self.tails_, strict=True))
        z = np.column_stack([(scores - cal.median_) / cal.scale_
                             for scores, cal in zip(component_scores, self.calibrators_, strict=True)])
        if self.fusion == "max":
            return float(z.max())
        if self.fusion == "logistic":
            z = np.maximum.accumulate(z, axis=0)
        return float((self.intercept_ + np.minimum(z, 50.0) @ self.weights_).max())

    def _fusion_weights(self, healthy_max: np.ndarray, perturbed_max: np.ndarray) -> tuple[np.ndarray, float]:
        k = len(self.components)
        if self.fusion in ("max", "fisher"):
            return np.ones(k), 0.0
        if self.fusion == "weighted":
            weights = np.ones(k) / k if self.weights is None else np.asarray(self.weights, dtype=float)
            if weights.shape != (k,):
                raise ValueError(f"weights has {weights.size} value(s) for {k} component(s)")
            return weights, 0.0
        from sklearn.linear_model import LogisticRegression

        z_healthy = self._z(healthy_max)
        z_perturbed = self._z(perturbed_max)
        features = np.vstack([z_healthy, z_perturbed])
        labels = np.concatenate([np.zeros(len(z_healthy)), np.ones(len(z_perturbed))])
        clf = LogisticRegression(C=1.0, class_weight="balanced").fit(np.clip(features, -50, 50), labels)
        # A component can only add evidence of a failure: a negative weight would reward anomalies.
        return np.maximum(clf.coef_[0], 0.0), float(clf.intercept_[0])

    def _z(self, maxima: np.ndarray) -> np.ndarray:
        out = np.empty_like(maxima)
        for k, cal in enumerate(self.calibrators_):
            out[:, k] = (maxima[:, k] - cal.median_) / cal.scale_
        return out

    def get_state(self) -> dict[str, np.ndarray]:
        state: dict[str, np.ndarray] = {
            "cal_median": np.array([c.median_ for c in self.calibrators_]),
            "cal_scale": np.array([c.scale_ for c in self.calibrators_]),
            "weights": self.weights_,
            "intercept": np.array([self.intercept_]),
        }
        for k, tail in enumerate(self.tails_):
            state[f"tail{k}"] = tail.maxima_
        for k, detector in enumerate(self.detectors_):
            for key, value in detector.get_state().items():
                state[f"d{k}.{key}"] = value
        return state

    def set_state(self, state: dict[str, np.ndarray], slices: dict[str, slice]) -> None:
        self.calibrators_ = []
        for median, scale in zip(state["cal_median"], state["cal_scale"], strict=True):
            cal = RobustZ()
            cal.median_, cal.scale_ = float(median), float(scale)
            self.calibrators_.append(cal)
        self.weights_ = state["weights"]
        self.intercept_ = float(state["intercept"][0])
        self.tails_ = []
        if self.fusion == "fisher":
            for k in range(len(self.components)):
                tail = TailEvidence()
                tail.set_maxima(state[f"tail{k}"])
                self.tails_.append(tail)
        self.detectors_ = []
        for k, name in enumerate(self.components):
            prefix = f"d{k}."
            detector = self._new(name)
            detector.set_state({key[len(prefix):]: v for key, v in state.items() if key.startswith(prefix)}, slices)
            self.detectors_.append(detector)

    def start(self) -> HybridStream:
        return HybridStream(self)


def _max(scores: np.ndarray) -> float:
    return float(scores.max()) if len(scores) else 0.0


class HybridStream:
    """Per step: each component's stream, its running max, robust-z, then the fusion (plain floats: k is 1-3)."""

    __slots__ = ("_h", "_streams", "_running", "_medians", "_scales", "_weights", "_fusion", "_intercept", "_tails",
                 "_raw_max", "_floors", "_starts", "_onsets", "_t")

    def __init__(self, hybrid: Hybrid) -> None:
        self._h = hybrid
        self._streams = [d.start() for d in hybrid.detectors_]
        self._running = [-np.inf] * len(self._streams)
        self._raw_max = [-np.inf] * len(self._streams)
        self._medians = [c.median_ for c in hybrid.calibrators_]
        self._scales = [c.scale_ for c in hybrid.calibrators_]
        self._weights = [float(w) for w in hybrid.weights_]
        self._fusion = hybrid.fusion
        self._intercept = hybrid.intercept_
        self._tails = hybrid.tails_
        # Where each component's excursion began: a CUSUM's change point is the step after its last 0; any
        # other score's excursion is its run of steps above the healthy median maximum.
        self._floors = [0.0 if getattr(d, "cumulative", False) else c.median_
                        for d, c in zip(hybrid.detectors_, hybrid.calibrators_, strict=True)]
        self._starts = [0] * len(self._streams)
        self._onsets = [0] * len(self._streams)  # the excursion start behind each running maximum
        self._t = 0

    def update(self, x: np.ndarray) -> float:
        t = self._t
        self._t = t + 1
        floors, starts = self._floors, self._starts
        if self._fusion == "fisher":
            # Sum over components of the evidence (-log p) of each one's running maximum.
            raw, running, tails = self._raw_max, self._running, self._tails
            for k, stream in enumerate(self._streams):
                score = stream.update(x)
                if score <= floors[k]:
                    starts[k] = t + 1
                if score > raw[k]:
                    raw[k] = score
                    running[k] = tails[k].evidence(score)
                    self._onsets[k] = min(starts[k], t)
            return sum(running)
        zs = []
        for k, stream in enumerate(self._streams):
            score = stream.update(x)
            if score <= floors[k]:
                starts[k] = t + 1
            z = (score - self._medians[k]) / self._scales[k]
            if z > self._running[k]:
                self._running[k] = z
                self._onsets[k] = min(starts[k], t)
            zs.append(self._running[k] if self._fusion == "logistic" else z)
        if self._fusion == "max":
            return max(zs)
        fused = self._intercept
        for w, z in zip(self._weights, zs, strict=True):
            fused += w * min(z, 50.0)
        return fused

    ONSET_EVIDENCE = math.log(10.0)  # nats: a component counts for the onset once beyond 90% of healthy maxima

    def onset(self) -> int:
        """The step (0-based, in this stream) where the departure that drives the score began: the earliest
        excursion start among the components whose maximum is unusual for a healthy run (fisher: evidence
        beyond `ONSET_EVIDENCE`), else the most anomalous component's. Never after the current step."""
        running = self._running
        if not running:
            return 0
        top = max(range(len(running)), key=running.__getitem__)
        loud = [k for k, v in enumerate(running) if v >= self.ONSET_EVIDENCE] if self._fusion == "fisher" else []
        return min(self._onsets[k] for k in (loud or [top]))

    def component_scores(self) -> dict[str, float]:
        return {name: float(z) for name, z in zip(self._h.components, self._running, strict=True)}

    def channel_scores(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, stream in zip(self._h.components, self._streams, strict=True):
            for channel, value in stream.channel_scores().items():
                out[f"{name}.{channel}"] = value
        return out
