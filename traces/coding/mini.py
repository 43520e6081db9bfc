"""The coding testbed through mini-swe-agent's real loop: its DefaultAgent and LocalEnvironment, a scripted model.

`ScriptedCodingModel` is a mini-swe-agent model (its ``query`` / ``format_message`` /
``format_observation_messages`` protocol) that plays the same scripted agent as
`traces.coding.agent.CodingAgent`: the same planned actions, the same seeded slips and the same
recovery rule, but it reads its feedback from the messages mini-swe-agent's loop hands it, so a
block reaches it only as the command's output in the conversation. mini-swe-agent is bash-only,
so the plan leaves out the ACI ``open`` (four actions instead of five). Figures from it check the
mechanism through a real agent loop; they are not a claim about a real model.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from guardrail.core.guard import Guard
from guardrail.gate import GateLayer
from traces.coding.agent import CodingRun, CodingTask, Mode, _plan, _slip
from traces.coding.project import ProjectIndex
from traces.policy import tokenize

__all__ = ["ScriptedCodingModel", "run_mini_task"]

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo inspected"
_BLOCK_MARK = "guardrail blocked this command"


class ScriptedCodingModel:
    """A mini-swe-agent model that proposes the coding task's commands and recovers from what it reads."""

    def __init__(self, task: CodingTask, index: ProjectIndex, run: CodingRun, *, slip_rate: float, seed: int) -> None:
        from minisweagent.models.test_models import DeterministicModelConfig

        self.config = DeterministicModelConfig(outputs=[], model_name="scripted-coding")
        self.task, self.index, self.run = task, index, run
        self.rng = random.Random(f"coding:{seed}:{task.task_id}")  # the scripted agent's seed: the same slips
        self.slip_rate = slip_rate
        self._policy = self._steps()
        self._last: str | None = None
        self._awaiting_repair = False
        self.proposed: list[tuple[str, str]] = []  # (command, the command meant) of every proposal

    # ---- what mini-swe-agent calls
    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        feedback, failed = self._feedback(messages)
        command = next(self._policy) if self._last is None else self._policy.send((feedback, failed))
        self._last = command
        self.run.steps += 1
        self.run.tokens += len(tokenize(command))
        return {"role": "assistant", "content": f"THOUGHT: next step.\n\n```mswea_bash_command\n{command}\n```",
                "extra": {"actions": [{"command": command}], "cost": 0.0, "timestamp": time.time()}}

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        return dict(kwargs)

    def format_observation_messages(self, message: dict[str, Any], outputs: list[dict[str, Any]],
                                    template_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        from minisweagent.models.utils.actions_text import format_observation_messages

        return format_observation_messages(outputs, observation_template=(
            "<returncode>{{output.returncode}}</returncode>\n<output>\n{{output.output}}</output>"),
            template_vars=template_vars)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"model": {"model_name": "scripted-coding"}}}}

    # ---- the scripted agent
    def _feedback(self, messages: list[dict[str, Any]]) -> tuple[str, bool]:
        last = messages[-1] if messages else {}
        extra = last.get("extra") or {}
        output = str(extra.get("raw_output", last.get("content", "")))
        code = extra.get("returncode")
        self.run.tokens += len(tokenize(output))
        return output, isinstance(code, int) and code != 0

    def _propose(self, command: str, meant: str, *, explore: bool = False,
                 ) -> Generator[str, tuple[str, bool], tuple[str, bool]]:
        self.proposed.append((command, meant))
        feedback, failed = yield command
        blocked = _BLOCK_MARK in feedback
        if not explore:  # as the scripted agent: a repair is the next proposal of the same action passing the gate
            if self._awaiting_repair:
                self.run.repaired += int(not blocked)
            self._awaiting_repair = blocked
        self.run.tool_errors += int(failed and not blocked)
        return feedback, failed

    def _steps(self) -> Generator[str, tuple[str, bool], None]:
        for planned in _plan(self.task, self.index):
            if planned.kind != "shell":
                continue  # mini-swe-agent has no ACI: the windowed `open` is left out
            slipped = self.rng.random() < self.slip_rate
            slip_text = _slip(planned, self.task, self.index, self.rng) if slipped else None
            self.run.slips += int(slipped)
            command = slip_text or planned.command
            fixed_directly = False
            for _ in range(3):  # the proposal, and at most two corrections (as the scripted agent)
                feedback, failed = yield from self._propose(command, planned.command)
                blocked = _BLOCK_MARK in feedback
                if (not failed and not blocked) or command == planned.command:
                    break
                if planned.fix_token in feedback and not fixed_directly:
                    command, fixed_directly = planned.command, True
                    continue
                feedback, failed = yield from self._propose(planned.explore, planned.explore, explore=True)
                command = planned.command
        yield SUBMIT


def run_mini_task(root: Path, index: ProjectIndex, task: CodingTask, mode: Mode, gate: GateLayer, *,
                  slip_rate: float, seed: int, timeout_s: int = 60,
                  model_factory: Callable[[CodingTask, CodingRun], Any] | None = None,
                  system_template: str = "You inspect code.", step_limit: int = 40) -> CodingRun:
    """One coding task through mini-swe-agent's DefaultAgent in `root`, gated in `mode`.

    `model_factory` (task, run) -> a mini-swe-agent model replaces the scripted one (e.g. a real model,
    `traces.coding.real_model`); it counts its own steps and tokens into the run. With it, tool errors
    are counted from the observations the model read, and false warnings are not judged (nobody knows
    what a real model meant): ``false_warnings`` stays 0.
    """
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment

    from adapters.mini_swe_agent import BLOCKED_RETURNCODE, guard_agent

    run = CodingRun(task.task_id, mode)
    model = ScriptedCodingModel(task, index, run, slip_rate=slip_rate, seed=seed) if model_factory is None \
        else model_factory(task, run)
    bin_dir = os.path.dirname(sys.executable)
    env = LocalEnvironment(cwd=str(root), timeout=timeout_s, env={
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    agent = guard_agent(DefaultAgent(model, env, system_template=system_template, instance_template="{{task}}",
                                     step_limit=step_limit, cost_limit=0), Guard([gate], mode=mode))
    started = time.perf_counter()
    try:
        agent.run(task.text)
    except Exception:  # noqa: BLE001 - counted: the target is a guarded run with no crash
        run.crashes += 1
    run.seconds = time.perf_counter() - started
    run.crashes += len(agent.env.crashes)
    run.warned = len(agent.env.flagged)
    if model_factory is None:
        meant = dict(model.proposed)
        run.false_warnings = sum(1 for command, _ in agent.env.flagged if meant.get(command) == command)
    run.blocked = len(agent.env.blocked)
    # a block is visible when the observation the model read next carries the guard's own warning and hint
    observations = [m for m in agent.messages if m.get("role") in ("user", "tool")
                    and "returncode" in (m.get("extra") or {})]
    run.blocks_visible = sum(1 for command, decision in agent.env.blocked
                             if any(decision.message()[:300] in str(m.get("content")) for m in observations))
    if model_factory is None:
        run.transcript = [(str(m.get("content"))[-300:], "") for m in agent.messages if m.get("role") == "assistant"]
        return run
    codes = [(m.get("extra") or {}).get("returncode") for m in observations]
    run.tool_errors = sum(1 for code in codes if isinstance(code, int) and code not in (0, BLOCKED_RETURNCODE))
    stopped = [_BLOCK_MARK in str(m.get("content")) for m in observations]
    # What the model did after reading a block: its next command passed the gate (it ran).
    run.repaired = sum(1 for i, was in enumerate(stopped[:-1]) if was and not stopped[i + 1])
    last = agent.messages[-1] if agent.messages else {}
    run.exit_status = str((last.get("extra") or {}).get("exit_status") or "")
    # A tool-calling model's command is in its actions, not its text; the output is what it read back.
    commands = [" && ".join(a["command"] for a in (m.get("extra") or {}).get("actions", []))
                for m in agent.messages if m.get("role") == "assistant"]
    run.transcript = list(zip(commands, [str(m.get("content"))[:300] for m in observations] + [""] * len(commands),
                              strict=False))
    return run
