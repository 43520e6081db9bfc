"""Synthetic perturbations of healthy training episodes and the logistic fusion learned from them."""

from __future__ import annotations

import numpy as np

from guardrail.core.events import Episode, Step, StepKind, ToolEvent
from monitors.monitor import StepMonitor
from monitors.perturb import PERTURBATIONS, perturb


def _episode(i: int) -> Episode:
    steps = [Step(index=t, kind=StepKind.TOOL_CALL, text=f"[search(q{t}) -> result {i} {t} about flights]",
                  tool_events=[ToolEvent(name="search", args={"q": f"flights {t}"}, result=f"result {i} {t} flights")],
                  latency_s=0.5, output_tokens=20)
             for t in range(4)]
    steps.append(Step(index=4, kind=StepKind.FINAL, text=f"Answer {i}: flights cost ${100 + i}", latency_s=1.0))
    return Episode(episode_id=f"h{i}", steps=steps, task="find flight prices")


def test_perturbations_keep_the_prefix_and_change_the_rest() -> None:
    healthy = [_episode(i) for i in range(6)]
    pairs = perturb(healthy, n_per_episode=2, random_state=0)
    assert len(pairs) == 12
    assert {e.label for _, e in pairs} <= set(PERTURBATIONS)
    for source, episode in pairs:
        original = healthy[source]
        assert len(episode.steps) == len(original.steps)
        assert [s.index for s in episode.steps] == list(range(len(original.steps)))
        assert episode.steps[0] == original.steps[0]  # the onset is never step 0
        assert episode.steps != original.steps
    # The inputs are untouched (perturbations are copies).
    assert healthy[0] == _episode(0)


def test_logistic_fusion_weights_are_nonnegative_and_learned_from_training_only() -> None:
    healthy = [_episode(i) for i in range(16)]
    monitor = StepMonitor(components=("delta_mahalanobis", "mahalanobis"), fusion="logistic",
                          calibration="split").fit(healthy)
    assert monitor.hybrid_.weights_.shape == (2,)
    assert np.all(monitor.hybrid_.weights_ >= 0.0)
    assert monitor.threshold_ == float("inf")  # no threshold until healthy validation episodes calibrate it
