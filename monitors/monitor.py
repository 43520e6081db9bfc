"""The step monitor a deployment fits and runs: telemetry + calibrated detectors + the alarm threshold.

``monitor = StepMonitor().fit(healthy_train).calibrate(healthy_val)``; then per episode
``stream = monitor.start()`` and ``score = stream.update(step)`` (constant time per step);
``stream.alarm_step`` is the first step whose score crossed ``threshold_``, ``stream.onset_step``
the step where the departure behind that crossing began (a CUSUM's change point; see
`monitors.hybrid.HybridStream.onset`), never after it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from guardrail.core.events import Episode, Step
from monitors.budget import BudgetCheck, check_budget
from monitors.calibration import CALIBRATION_METHODS, Calibration, conformal_threshold
from monitors.features import Telemetry, TelemetryStream
from monitors.hybrid import Hybrid, HybridStream
from monitors.perturb import perturb

__all__ = ["DEFAULT_CONFIG", "PRESETS", "EpisodeScore", "MonitorStream", "StepMonitor"]

# What `guardrail fit` produces with no options: the configuration we stand behind (docs/monitor.md).
# Chosen on langgraph7b and real_research7b only (10 seeded splits, cross-fit conformal threshold at
# beta 0.05): the four components fused by summed tail evidence. Adding the ESN to the other three
# ("grounded") raised real_research7b detection 0.78 -> 0.86 at equal AUROC (0.993) and FA (langgraph7b:
# 0.99 either way), so it is in; it costs about 9 us a step since its step is one matvec (13-25 before; an
# in-process A/B, docs/benchmarks.md); docs/monitor.md says when to leave it out.
# The held-out corpora (autogen7b, ollama7b, demo_real_varied_ext) were run once, unchanged, with it.
DEFAULT_CONFIG: dict[str, Any] = {
    "components": ["esn_cusum_max", "delta_mahalanobis", "mahalanobis", "novelty_cusum"],
    "fusion": "fisher",
    "n_folds": 10,
}
PRESETS: dict[str, dict[str, Any]] = {
    "default": DEFAULT_CONFIG,
    "esn_cusum_max": {"components": ["esn_cusum_max"], "fusion": "max"},
    "delta_mahalanobis": {"components": ["delta_mahalanobis"], "fusion": "max"},
    "mahalanobis": {"components": ["mahalanobis"], "fusion": "max"},
    "hybrid": {"components": ["esn_cusum_max", "delta_mahalanobis"], "fusion": "max"},
    "hybrid_weighted50": {"components": ["esn_cusum_max", "delta_mahalanobis"], "fusion": "weighted"},
    "hybrid_all": {"components": ["esn_cusum_max", "delta_mahalanobis", "mahalanobis"], "fusion": "max"},
    "hybrid_logistic": {"components": ["esn_cusum_max", "delta_mahalanobis", "mahalanobis"], "fusion": "logistic"},
    "novelty_cusum": {"components": ["novelty_cusum"], "fusion": "max"},
    "grounded": {"components": ["delta_mahalanobis", "mahalanobis", "novelty_cusum"], "fusion": "fisher",
                 "n_folds": 10},
}


@dataclass
class EpisodeScore:
    """One scored episode: per-step scores, their max, the alarm step (None when it never crossed) and channel scores."""

    episode_id: str
    scores: list[float]
    max_score: float
    alarm_step: int | None
    channel_scores: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"episode_id": self.episode_id, "max_score": self.max_score, "alarm_step": self.alarm_step,
                "scores": self.scores, "channel_scores": self.channel_scores}


class StepMonitor:
    """Telemetry featurizer + calibrated hybrid of one-class detectors + a threshold from healthy validation.

    Hyperparameters: `components` (detector names, see `monitors.hybrid.DETECTORS`), `fusion`
    (max | weighted | logistic), `telemetry` (a `Telemetry` with its settings), `beta` (the
    false-alarm budget), `calibration` ("crossfit": `fit` sets the threshold from every healthy
    episode's out-of-fold maximum; "split": no threshold until `calibrate` on held-out healthy
    episodes; see `monitors.calibration`), `detector_params`, `n_folds`, `random_state`.
    """

    def __init__(self, components: Sequence[str] = tuple(DEFAULT_CONFIG["components"]),
                 fusion: str = DEFAULT_CONFIG["fusion"], telemetry: Telemetry | None = None, beta: float = 0.05,
                 detector_params: dict[str, dict[str, Any]] | None = None, n_folds: int = DEFAULT_CONFIG["n_folds"],
                 random_state: int = 0, calibration: str = "crossfit") -> None:
        self.components = tuple(components)
        self.fusion = fusion
        self.telemetry = telemetry
        self.beta = beta
        self.detector_params = detector_params
        self.n_folds = n_folds
        self.random_state = random_state
        self.calibration = calibration

    @classmethod
    def preset(cls, name: str, **kwargs: Any) -> StepMonitor:
        if name not in PRESETS:
            raise ValueError(f"unknown monitor preset {name!r}; choose from {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **kwargs})

    def get_params(self) -> dict[str, Any]:
        return {"components": list(self.components), "fusion": self.fusion, "beta": self.beta,
                "detector_params": self.detector_params or {}, "n_folds": self.n_folds,
                "random_state": self.random_state, "calibration": self.calibration,
                "telemetry": (self.telemetry or Telemetry()).get_params()}

    # ------------------------------------------------------------------ fitting
    def fit(self, healthy: Sequence[Episode]) -> StepMonitor:
        """Fit telemetry channels and detectors on healthy training episodes (labels other than healthy are refused)."""
        sick = [e.episode_id for e in healthy if not e.is_healthy]
        if sick:
            raise ValueError(f"fit takes healthy episodes only; {len(sick)} are labelled otherwise "
                             f"(e.g. {sick[0]!r})")
        usable = [e for e in healthy if e.steps]
        if len(usable) < 4:
            raise ValueError(f"fit needs at least 4 healthy episodes with steps, got {len(usable)}")
        self.telemetry_ = Telemetry(**(self.telemetry or Telemetry()).get_params())
        # Leave-one-out: each training episode's novelty features as if the lexicon had not seen it.
        features = self.telemetry_.fit_transform(usable)
        perturbed = []
        if self.fusion == "logistic":
            perturbed = [(i, self.telemetry_.transform(e, leave_out=True))
                         for i, e in perturb(usable, random_state=self.random_state)]
        return self.fit_features(features, perturbed)

    def fit_features(self, features: Sequence[np.ndarray],
                     perturbed: Sequence[tuple[int, np.ndarray]] = ()) -> StepMonitor:
        """Fit the detectors on precomputed telemetry (the batch path: featurize shards in parallel, then solve)."""
        if not hasattr(self, "telemetry_"):
            raise RuntimeError("fit_features needs a fitted telemetry_ (use fit, or set telemetry_ first)")
        if self.calibration not in CALIBRATION_METHODS:
            raise ValueError(f"unknown calibration {self.calibration!r}; choose from {CALIBRATION_METHODS}")
        self.hybrid_ = Hybrid(self.components, self.fusion, detector_params=self.detector_params,
                              n_folds=self.n_folds, random_state=self.random_state)
        self.hybrid_.fit(features, self.telemetry_.slices_, perturbed)
        self.n_train_ = len(features)
        self.train_lengths_ = [len(f) for f in features]
        self.threshold_ = float("inf")  # "split": no alarms until calibrated on healthy validation episodes
        self.calibration_: Calibration | None = None
        self._weak_calibration: str | None = None
        if self.calibration == "crossfit":
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.set_calibration(conformal_threshold(self.hybrid_.oof_maxima_, self.beta, "crossfit"))
            # The calibration set itself: what a new healthy run's conformal p-value is computed against (drift).
            self.calibration_maxima_: np.ndarray | None = np.sort(
                self.hybrid_.oof_maxima_[np.isfinite(self.hybrid_.oof_maxima_)])
            # Said when the threshold is first used, not here: a `calibrate` that follows replaces it.
            self._weak_calibration = str(caught[0].message) if caught else None
        return self

    def check_budget(self, healthy: Sequence[Episode]) -> BudgetCheck:
        """Whether the false-alarm budget will hold on later and on longer runs (`monitors.budget`).

        `healthy` are the episodes this monitor was fitted on, in the order they were recorded (as given
        to `fit`). The time check refits this configuration on each prefix of them (telemetry lexicon
        included) and counts alarms on the runs that follow; the length check reads the fitted model's own
        out-of-fold maxima.
        """
        usable = [e for e in healthy if e.steps]
        if not hasattr(self, "hybrid_") or len(usable) != self.n_train_:
            raise ValueError("check_budget takes the healthy episodes the monitor was fitted on, in the same order")
        params = {k: v for k, v in self.get_params().items() if k != "telemetry"}

        def forward(cut: int, end: int) -> tuple[int, int]:
            prefix = StepMonitor(**{**params, "calibration": "crossfit"}, telemetry=self.telemetry)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a short prefix's small-n warning: the check reports rates
                prefix.fit(usable[:cut])
                later = [prefix.score_episode(e).alarm_step is not None for e in usable[cut:end]]
            return sum(later), len(later)

        return check_budget(self.train_lengths_, self.hybrid_.oof_maxima_, self.hybrid_.oof_component_maxima_,
                            self.components, self.threshold_, self.beta, forward)

    def calibrate(self, healthy_val: Sequence[Episode], beta: float | None = None) -> StepMonitor:
        """Split-conformal threshold from held-out healthy validation episodes (replaces a cross-fit one)."""
        sick = [e.episode_id for e in healthy_val if not e.is_healthy]
        if sick:
            raise ValueError(f"calibrate takes healthy validation episodes only; got {sick[0]!r} labelled otherwise")
        self._weak_calibration = None  # the cross-fit threshold is being replaced: nothing to say about it
        maxima = [self.score_episode(e).max_score for e in healthy_val if e.steps]
        self.set_calibration(conformal_threshold(maxima, self.beta if beta is None else beta, "split"))
        values = np.asarray(maxima, dtype=float)
        self.calibration_maxima_ = np.sort(values[np.isfinite(values)])
        return self

    def set_calibration(self, calibration: Calibration) -> None:
        """Use this threshold (from `monitors.calibration.conformal_threshold`), e.g. one computed on a batch engine."""
        self._weak_calibration = None
        self.calibration_ = calibration
        self.threshold_ = calibration.threshold
        self.n_val_ = calibration.n

    # ------------------------------------------------------------------ scoring
    def start(self, task: str | None = None) -> MonitorStream:
        """A per-episode scorer; `task` (the episode's task text, when known) grounds the g channel."""
        if not hasattr(self, "hybrid_"):
            raise RuntimeError("StepMonitor is not fitted: call fit(healthy_episodes) first")
        if getattr(self, "_weak_calibration", None):
            warnings.warn(self._weak_calibration or "", stacklevel=2)
            self._weak_calibration = None
        return MonitorStream(self, task)

    def score_episode(self, episode: Episode) -> EpisodeScore:
        """Score a whole episode; channel scores are read at its deciding step (the highest score)."""
        stream = self.start(episode.task)
        scores: list[float] = []
        channels: dict[str, float] = {}
        best = float("-inf")
        for step in episode.steps:
            scores.append(stream.update(step))
            if scores[-1] >= best:
                best = scores[-1]
                channels = stream.channel_scores()
        return EpisodeScore(episode.episode_id, scores, max(scores) if scores else float("-inf"),
                            stream.alarm_step, channels)


class MonitorStream:
    """One episode: featurize the step once, score it with every detector, fuse, compare with the threshold."""

    __slots__ = ("_features", "_scores", "_threshold", "alarm_step", "onset_step", "last_score", "_t")

    def __init__(self, monitor: StepMonitor, task: str | None = None) -> None:
        self._features: TelemetryStream = monitor.telemetry_.start(task)
        self._scores: HybridStream = monitor.hybrid_.start()
        self._threshold = monitor.threshold_
        self.alarm_step: int | None = None
        self.onset_step: int | None = None  # where the departure behind the alarm began (set with alarm_step)
        self.last_score = float("-inf")
        self._t = 0

    def update(self, step: Step) -> float:
        score = self._scores.update(self._features.update(step))
        if self.alarm_step is None and score > self._threshold:
            self.alarm_step = self._t
            self.onset_step = min(self._scores.onset(), self._t)
        self._t += 1
        self.last_score = score
        return score

    @property
    def alarmed(self) -> bool:
        return self.alarm_step is not None

    def channel_scores(self) -> dict[str, float]:
        return {**self._scores.component_scores(), **self._scores.channel_scores()}
