"""Small real layers the adapter and repair tests share: a file-existence gate, a recorder, an answer check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardrail import Finding, Layer


class MissingFileGate(Layer):
    """Blocks read_file on a path that does not exist (a real check on real files)."""

    name = "gate"

    def before_action(self, ctx, action):
        path = action.args.get("path")
        if action.tool == "read_file" and path and not Path(path).exists():
            return [Finding(layer=self.name, check="file_exists", message=f"{path} does not exist",
                            hint="read notes.txt instead", blocking=True)]
        return None


class Recorder(Layer):
    """Keeps every step and finished episode it is given."""

    name = "recorder"

    def __init__(self) -> None:
        self.steps: list[Any] = []
        self.episodes: list[Any] = []

    def on_step(self, ctx, step):
        self.steps.append(step)

    def on_finish(self, ctx, episode):
        self.episodes.append(episode)


class AnswerCheck(Layer):
    """Test check: the stated total must be the testbed task's true total (the deployable checks never see it)."""

    name = "verify"

    def __init__(self, task: Any) -> None:
        self.task = task

    def on_finish(self, ctx: Any, episode: Any) -> list[Finding]:
        from traces.labeller import stated_total

        stated = stated_total(episode.answer or "")
        if stated is None or abs(stated - self.task.expected_total) < 0.5:
            return []
        return [Finding(layer=self.name, check="total_consistency", message=f"stated {stated}",
                        evidence={"expected": self.task.expected_total, "stated": stated}, blocking=True,
                        step=len(episode.steps) - 1)]
