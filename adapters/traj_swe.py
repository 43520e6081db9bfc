"""SWE-agent's ``.traj`` files: v0 (each step's `state` a JSON string, the state before the action) and 1.x (a dict,
the state after it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.trajectory import Trajectory, TrajError, TrajStep, _problem_statement, _state


def read_swe(file: Path, raw: Any) -> Trajectory:
    """The steps of a SWE-agent trajectory already loaded from `file`."""
    if not isinstance(raw, dict) or not isinstance(raw.get("trajectory"), list):
        raise TrajError(f"{file}: no 'trajectory' or 'messages' list; is this a SWE-agent or mini-swe-agent trajectory?")
    entries = raw["trajectory"]
    string_states = any(isinstance(e, dict) and isinstance(e.get("state"), str) for e in entries)
    layout = "v0" if string_states else "v1"
    steps: list[TrajStep] = []
    previous_after: dict[str, Any] | None = None
    for index, entry in enumerate(entries):
        where = f"{file}: trajectory[{index}]"
        if not isinstance(entry, dict):
            raise TrajError(f"{where}: not an object")
        action = entry.get("action")
        if not isinstance(action, str):
            raise TrajError(f"{where}: no 'action' string")
        state = _state(entry.get("state"), where)
        if layout == "v0":
            before, after = state, None
        else:
            before, after = previous_after, state
            previous_after = state
        elapsed = entry.get("execution_time")
        steps.append(TrajStep(
            index=index, action=action, observation=str(entry.get("observation") or ""),
            thought=str(entry.get("thought") or entry.get("response") or ""),
            state_before=before, state_after=after,
            execution_time=float(elapsed) if isinstance(elapsed, int | float) and not isinstance(elapsed, bool) else None,
        ))
    if layout == "v0":  # a v0 state is the next step's state-before; keep the after-state too
        for current, following in zip(steps, steps[1:], strict=False):
            current.state_after = following.state_before
    info: dict[str, Any] = raw["info"] if isinstance(raw.get("info"), dict) else {}
    return Trajectory(path=str(file), layout=layout, steps=steps, info=info, problem=_problem_statement(raw.get("history")))


