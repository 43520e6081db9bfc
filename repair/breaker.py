"""Circuit breaker: end a run that loops, keeps alarming after repair, or outgrows its step budget."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from guardrail.core.events import Step

__all__ = ["CircuitBreaker", "LoopDetector", "Trip"]


@dataclass(frozen=True)
class Trip:
    """Why the breaker ended the run."""

    reason: str  # "loop" | "repair_exhausted" | "step_budget" | "alarm" (a run ended by on_alarm="stop")
    message: str
    step: int | None = None


def _signature(step: Step) -> str | None:
    """What the step asked for, canonical: same tools with the same arguments give the same signature."""
    if not step.tool_events:
        return None
    calls = [(e.name, json.dumps(e.args, sort_keys=True, default=str)) for e in step.tool_events]
    return json.dumps(calls)


class LoopDetector:
    """Streaming loop detection: the same tool calls with the same arguments `repeats` times within `window` steps.

    ``update(step)`` is O(window) and keeps only the window, so it is safe on unbounded runs.
    """

    def __init__(self, repeats: int = 3, window: int = 6) -> None:
        self.repeats = repeats
        self.window = window
        self._recent: deque[str | None] = deque(maxlen=window)

    def reset(self) -> None:
        self._recent.clear()

    def update(self, step: Step) -> bool:
        """Add a step; True when it completes a loop."""
        signature = _signature(step)
        self._recent.append(signature)
        return signature is not None and sum(s == signature for s in self._recent) >= self.repeats


class CircuitBreaker:
    """Ends a run fast with a clear outcome instead of letting it spin.

    Trips on a detected loop (the same call `loop_repeats` times within `loop_window` steps),
    when the run is still flagged after `max_attempts` repair attempts, or, when `step_budget`
    is set, once a flagged run (original steps plus every fork's new steps) reaches that many
    steps. The published loop trap exits at 10 steps instead of 30; with these defaults the
    testbed's trap exits at its third identical call. The budget is off by default because a
    long task repaired from an early step legitimately re-runs most of its steps.
    """

    def __init__(self, max_attempts: int = 2, step_budget: int | None = None, loop_repeats: int = 3,
                 loop_window: int = 6) -> None:
        self.max_attempts = max_attempts
        self.step_budget = step_budget
        self.loop_repeats = loop_repeats
        self.loop_window = loop_window

    def new_run(self) -> BreakerRun:
        return BreakerRun(self)


class BreakerRun:
    """The breaker's per-run state: steps seen, attempts made, the loop detector."""

    def __init__(self, breaker: CircuitBreaker) -> None:
        self.breaker = breaker
        self.steps_seen = 0
        self.attempts = 0
        self.flagged = False
        self.loops = LoopDetector(breaker.loop_repeats, breaker.loop_window)

    def observe(self, step: Step) -> Trip | None:
        """Count one executed step (original or fork); a Trip when the run must end now."""
        self.steps_seen += 1
        if self.loops.update(step):
            return Trip("loop", f"the same tool call repeated {self.breaker.loop_repeats} times within "
                                f"{self.breaker.loop_window} steps", step.index)
        budget = self.breaker.step_budget
        if self.flagged and budget is not None and self.steps_seen >= budget:
            return Trip("step_budget", f"the flagged run reached its budget of {self.breaker.step_budget} steps",
                        step.index)
        return None

    def start_attempt(self) -> Trip | None:
        """Called before each repair attempt; a Trip when the attempts are used up."""
        self.flagged = True
        if self.attempts >= self.breaker.max_attempts:
            return Trip("repair_exhausted", f"still flagged after {self.attempts} repair attempts")
        self.attempts += 1
        self.loops.reset()  # the fork starts a fresh trajectory; a loop must show itself again
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"steps_seen": self.steps_seen, "attempts": self.attempts}
