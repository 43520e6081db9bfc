"""Agent trajectories as data: the recorded steps of a SWE-agent or mini-swe-agent run, read from their files
(`read_traj` picks the parser by the file's layout), and one action line as an `Action`."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.steps import (
    content_text,
    step_from_swe_agent,
    steps_from_mini_swe_agent,
)
from guardrail.core.events import Action, Episode
from guardrail.gate.bundles import known_commands

# Commands of the tool bundles the gate knows (SWE-agent 1.x defaults and the cursor commands): an action
# whose first word is one of these is an ACI command, everything else is a shell line.
ACI_COMMANDS = frozenset(known_commands())
MAX_TRAJ_BYTES = 256 * 1024 * 1024  # a trajectory bigger than this is refused, not loaded into memory

class TrajError(ValueError):
    """A trajectory file that cannot be read (not JSON, no trajectory or messages list, too big)."""


def action_from_swe(command: str, *, cwd: str | None = None, call_id: str | None = None,
                    commands: frozenset[str] = ACI_COMMANDS) -> Action:
    """One SWE-agent action line as an `Action`: an ACI command (its first word a bundle command) or a shell line."""
    first = command.strip().split(maxsplit=1)[0] if command.strip() else ""
    if first in commands:
        return Action.swe_agent(command, cwd=cwd, call_id=call_id)
    return Action.shell(command, cwd=cwd, call_id=call_id)


# --------------------------------------------------------------------------- trajectory files
@dataclass
class TrajStep:
    """One recorded action with the state it was chosen in (``state_before``) when the file tells it."""

    index: int
    action: str
    observation: str | None = ""
    thought: str = ""
    state_before: dict[str, Any] | None = None
    state_after: dict[str, Any] | None = None
    execution_time: float | None = None
    turn: int | None = None  # mini-swe-agent: the assistant message this command came from
    cwd_fixed: str | None = None  # mini-swe-agent: every command starts here (no state carries between commands)

    @property
    def cwd(self) -> str | None:
        if self.cwd_fixed:
            return self.cwd_fixed
        state = self.state_before or {}
        value = state.get("working_dir")
        return value if isinstance(value, str) else None

    @property
    def open_file(self) -> str | None:
        value = (self.state_before or {}).get("open_file")
        return value if isinstance(value, str) and value.startswith("/") else None


@dataclass
class Trajectory:
    path: str
    layout: str  # "v0" (state a JSON string, before the action), "v1" (a dict, after it) or "mini" (mini-swe-agent)
    steps: list[TrajStep] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    messages: list[Any] = field(default_factory=list)  # mini-swe-agent: the run's messages, for the step path

    @property
    def framework(self) -> str:
        return "mini-swe-agent" if self.layout == "mini" else "swe-agent"

    @property
    def submission(self) -> str | None:
        value = self.info.get("submission")
        return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _state(value: Any, where: str) -> dict[str, Any] | None:
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TrajError(f"{where}: state is not valid JSON ({exc.msg})") from exc
        return parsed if isinstance(parsed, dict) else None
    raise TrajError(f"{where}: state is a {type(value).__name__}, expected a JSON string or an object")


def _problem_statement(messages: Any) -> str | None:
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))[:4000] or None
    return None


def _load(path: str | os.PathLike[str]) -> tuple[Path, Any]:
    file = Path(path)
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise TrajError(f"{file}: cannot read ({exc.strerror or exc})") from exc
    if size > MAX_TRAJ_BYTES:
        raise TrajError(f"{file}: {size} bytes, more than the {MAX_TRAJ_BYTES} a trajectory may have")
    try:
        return file, json.loads(file.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TrajError(f"{file}: not valid JSON ({exc})") from exc
    except OSError as exc:
        raise TrajError(f"{file}: cannot read ({exc.strerror or exc})") from exc


def read_traj(path: str | os.PathLike[str]) -> Trajectory:
    """Read a SWE-agent ``.traj`` (v0: `state` a JSON string before the action; 1.x: a dict after it) or a
    mini-swe-agent trajectory (``messages``, its bash commands in ``extra.actions``, tool calls or a fenced block)."""
    from adapters.traj_mini import read_mini
    from adapters.traj_swe import read_swe

    file, raw = _load(path)
    if isinstance(raw, dict) and not isinstance(raw.get("trajectory"), list) and isinstance(raw.get("messages"), list):
        return read_mini(file, raw)
    return read_swe(file, raw)


def episode_from_traj(trajectory: Trajectory, *, episode_id: str | None = None) -> Episode:
    """A trajectory as an `Episode` (SWE-agent: one tool-call step per action, ``submit`` the final one;
    mini-swe-agent: one step per assistant message, through the same converter as a live run)."""
    if trajectory.layout == "mini":
        steps = steps_from_mini_swe_agent(trajectory.messages, task=trajectory.problem)
    else:
        steps = [step_from_swe_agent(step.index, action=step.action, thought=step.thought,
                                     observation=step.observation or "", execution_time=step.execution_time,
                                     task=trajectory.problem, cwd=step.cwd)
                 for step in trajectory.steps]
    return Episode(episode_id=episode_id or Path(trajectory.path).stem, steps=steps, task=trajectory.problem,
                   framework=trajectory.framework, meta={"layout": trajectory.layout, "exit_status":
                                                         trajectory.info.get("exit_status")})


