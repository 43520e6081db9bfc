"""The Guard layer: streams each step through a fitted StepMonitor and raises an alarm when it crosses the threshold."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from guardrail.core.events import Finding, Severity, Step
from guardrail.core.fileio import sha256_file
from guardrail.core.layer import EpisodeContext, Layer
from monitors.monitor import MonitorStream, StepMonitor

__all__ = ["MonitorLayer"]


class MonitorLayer(Layer):
    """`MonitorLayer(model)`: `on_step` records the streaming score and returns one alarm finding at the first crossing.

    The finding's ``step`` is where the score crossed; ``evidence["onset_step"]`` where the departure
    began (the repair rolls back to before it).

    `model` is a fitted, calibrated `StepMonitor` or the path of a model file. Whether the run ended
    with an answer is the verifiers' completion check (`verifiers.completion`), not the monitor's.
    """

    name = "monitor"
    offload = False  # short CPU work only: on the async path it runs on the loop (see Layer.offload)

    def __init__(self, model: StepMonitor | str | os.PathLike[str]) -> None:
        from monitors.model_file import load_monitor, monitor_sha256

        if not isinstance(model, StepMonitor):
            self.model_sha256 = sha256_file(model)  # what `sha256sum model.npz` says: the file that judges
            model = load_monitor(model)
        elif not hasattr(model, "hybrid_"):
            raise ValueError("MonitorLayer needs a fitted StepMonitor (fit it, or load a model file)")
        else:
            self.model_sha256 = monitor_sha256(model)
        self.model = model

    def versions(self) -> dict[str, str]:
        return {"model_sha256": self.model_sha256}

    def new_state(self, ctx: EpisodeContext) -> MonitorStream:
        return self.model.start(ctx.task)

    def on_step(self, ctx: EpisodeContext, step: Step) -> Iterable[Finding] | None:
        stream: MonitorStream = ctx.state(self)
        already = stream.alarmed
        score = stream.update(step)
        ctx.record_score(self, score)
        if already or not stream.alarmed:
            return None
        # The stream counts the steps it was fed; the episode's own indices may start elsewhere.
        onset = step.index - (stream.alarm_step or 0) + (stream.onset_step or 0)
        evidence: dict[str, Any] = {"threshold": self.model.threshold_, "scores": stream.channel_scores(),
                                    "onset_step": onset}
        since = f" (departing from step {onset})" if onset < step.index else ""
        return [Finding(
            layer=self.name, check="step_monitor", severity=Severity.ALARM, step=step.index, score=score,
            message=(f"Step {step.index}: the trajectory left the healthy range{since} (score {score:.3g} > "
                     f"threshold {self.model.threshold_:.3g})."),
            evidence=evidence,
            hint="The run may be looping, cascading tool errors or working from corrupted results; "
                 "consider rolling back to the last checkpoint",
        )]
