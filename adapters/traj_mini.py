"""mini-swe-agent's trajectory files: ``{"info", "messages", "trajectory_format"}``, one step per command of each
assistant message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.steps import (
    content_text,
    mini_swe_agent_actions,
)
from adapters.trajectory import Trajectory, TrajStep, _dict, _problem_statement


def read_mini(file: Path, raw: dict[str, Any]) -> Trajectory:
    """mini-swe-agent's ``{"info", "messages", "trajectory_format"}``: one step per command of each assistant message."""
    messages = raw["messages"]
    info: dict[str, Any] = raw["info"] if isinstance(raw.get("info"), dict) else {}
    config = _dict(info.get("config"))
    environment = _dict(config.get("environment"))
    configured = environment.get("cwd")
    cwd = configured if isinstance(configured, str) and configured else None
    steps: list[TrajStep] = []
    turn = -1
    pending: list[tuple[str | None, TrajStep]] = []  # the commands of the last assistant message not yet answered
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            turn += 1
            pending = []
            for action in mini_swe_agent_actions(message):
                step = TrajStep(index=len(steps), action=action["command"], observation=None,
                                thought=content_text(message.get("content")), turn=turn, cwd_fixed=cwd)
                steps.append(step)
                call_id = action.get("tool_call_id")
                pending.append((call_id if isinstance(call_id, str) else None, step))
        elif role in ("user", "tool") and pending:
            extra = _dict(message.get("extra"))
            if role == "user" and "returncode" not in extra and "raw_output" not in extra \
                    and "<returncode>" not in content_text(message.get("content")):
                continue  # a format error or the task, not a command's output
            call_id = message.get("tool_call_id")
            position = next((i for i, (cid, _) in enumerate(pending) if call_id and cid == call_id), 0)
            _, step = pending.pop(position)
            raw_output = extra.get("raw_output")
            step.observation = raw_output if isinstance(raw_output, str) else content_text(message.get("content"))
        elif role == "exit":
            extra = _dict(message.get("extra"))
            if isinstance(extra.get("submission"), str):
                info.setdefault("submission", extra["submission"])
            info.setdefault("exit_status", extra.get("exit_status"))
    return Trajectory(path=str(file), layout="mini", steps=steps, info=info, problem=_problem_statement(messages),
                      messages=messages)


