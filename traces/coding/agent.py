"""A scripted SWE-agent-style coding agent that sometimes hallucinates references, run under the StateMirror gate.

Each `CodingTask` asks the agent to inspect one real function of the project and run its
test. The agent plans real actions (``ls``, ``grep``, the ACI ``open FILE LINE``, ``python
-c "from M import S"``, ``python -m pytest NODE``); with probability `slip_rate` an action
refers to something that does not exist (a near-miss file, module, symbol, test node, or a
line past the end of the file), the way coding agents hallucinate. Actions run for real in
the project directory (the ACI ``open`` is emulated with SWE-agent's window and messages).

Feedback drives recovery, the same rule in both modes: if the feedback names the thing the
agent meant (a gate hint "closest existing names: chunked", an error that says how many lines
the file has), the agent fixes the action at once; otherwise it spends an exploring action
(``ls``/``grep``) first. In report mode the gate only logs, so a hallucinated action runs
and its error is the feedback; in intervene mode the gate blocks it and its typed warning is
the feedback. `run_task` measures steps, tool errors, tokens and time for one mode.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from guardrail.core.events import Action, Result
from guardrail.core.guard import Guard
from guardrail.gate import GateLayer
from traces.coding.project import ProjectIndex
from traces.policy import tokenize

__all__ = ["CodingAgent", "CodingRun", "CodingTask", "PlannedAction", "make_coding_tasks", "run_task"]

Mode = Literal["report", "intervene"]
MAX_OUTPUT_CHARS = 20_000  # what the agent reads of one observation (SWE-agent truncates too)
ACI_WINDOW = 100


@dataclass(frozen=True)
class CodingTask:
    task_id: str
    module: str
    file: str
    symbol: str
    line: int
    test_node: str

    @property
    def text(self) -> str:
        return (f"Inspect `{self.symbol}` in {self.module} ({self.file}), check it imports, and run its test "
                f"{self.test_node}.")


@dataclass(frozen=True)
class PlannedAction:
    """An action as the agent means it, and (when it slips) the form it actually proposes."""

    kind: Literal["shell", "swe_agent"]
    command: str
    explore: str  # the exploring action that would reveal the right name
    fix_token: str  # feedback containing this lets the agent fix the action directly

    def action(self, command: str | None = None) -> Action:
        text = command or self.command
        return Action.shell(text) if self.kind == "shell" else Action.swe_agent(text)


def make_coding_tasks(index: ProjectIndex, n: int, seed: int) -> list[CodingTask]:
    """`n` tasks pairing a public function with a test class named after it (``ChunkedTests`` tests ``chunked``)."""
    tests_by_name: dict[str, list[str]] = {}
    for node in index.test_nodes:
        parts = node.split("::")
        if len(parts) == 3:
            base = parts[1].removesuffix("Tests").removeprefix("Test").lower()
            tests_by_name.setdefault(base, []).append(node)
    candidates = []
    for module, names in sorted(index.symbols.items()):
        file = index.modules[module]
        source = (index.root / file).read_text(encoding="utf-8", errors="replace").splitlines()
        for name in names:
            nodes = tests_by_name.get(name.replace("_", "").lower())
            line = next((i + 1 for i, text in enumerate(source) if text.startswith((f"def {name}(", f"class {name}"))),
                        None)
            if nodes and line:
                candidates.append((module, file, name, line, sorted(nodes)))
    rng = random.Random(f"coding-tasks:{seed}")
    chosen = rng.sample(candidates, min(n, len(candidates)))
    return [CodingTask(f"{name}-{i}", module, file, name, line, rng.choice(nodes))
            for i, (module, file, name, line, nodes) in enumerate(chosen)]


def _plan(task: CodingTask, index: ProjectIndex) -> list[PlannedAction]:
    package_dir = task.file.rsplit("/", 1)[0]
    test_file = task.test_node.split("::")[0]
    return [
        PlannedAction("shell", f"ls {package_dir}", f"ls {package_dir.rsplit('/', 1)[0] or '.'}",
                      package_dir.rsplit("/", 1)[-1]),
        PlannedAction("shell", f'grep -nE "^(def|class) {task.symbol}\\b" {task.file}', f"ls {package_dir}",
                      task.file.rsplit("/", 1)[-1]),
        PlannedAction("swe_agent", f"open {task.file} {task.line}", f"ls {package_dir}",
                      f"{index.line_counts.get(task.file, 0)} lines"),
        PlannedAction("shell", f'python -c "from {task.module} import {task.symbol}; print({task.symbol}.__name__)"',
                      f'grep -n "^def {task.symbol[:3]}" {task.file}', task.symbol),
        PlannedAction("shell", f"python -m pytest {task.test_node} -q -p no:cacheprovider",
                      f'grep -n "def test" {test_file}', task.test_node.rsplit("::", 1)[-1]),
    ]


def _slip(planned: PlannedAction, task: CodingTask, index: ProjectIndex, rng: random.Random) -> str:
    """A near-miss form of the planned action that refers to something missing."""
    command = planned.command
    if command.startswith("ls "):
        return command[:-1]  # more_itertools -> more_itertool
    if command.startswith("grep "):
        stem = task.file[:-3]
        return command.replace(task.file, rng.choice([f"{stem}_utils.py", f"{stem}s.py", f"{stem}/core.py"]))
    if command.startswith("open "):
        return f"open {task.file} {index.line_counts.get(task.file, 0) + rng.randint(40, 400)}"
    if command.startswith("python -c"):
        if rng.random() < 0.5:
            wrong = task.symbol + rng.choice(["s", "_all", "_iter"])
            return command.replace(f"import {task.symbol};", f"import {wrong};").replace(
                f"print({task.symbol}.", f"print({wrong}.")
        module_tail = task.module.rsplit(".", 1)[-1]
        wrong_module = task.module[: len(task.module) - len(module_tail)] + module_tail.rstrip("s") + "_utils"
        return command.replace(f"from {task.module} ", f"from {wrong_module} ")
    if command.startswith("python -m pytest"):
        test = task.test_node.rsplit("::", 1)[-1]
        return command.replace(task.test_node, task.test_node[: -len(test)] + test + "_basic")
    return command


@dataclass
class CodingRun:
    """What one task cost in one mode."""

    task_id: str
    mode: Mode
    steps: int = 0
    tool_errors: int = 0
    tokens: int = 0
    seconds: float = 0.0
    slips: int = 0
    warned: int = 0  # actions the gate warned about (a violated predicate)
    repaired: int = 0  # warned actions whose next proposal passed the gate
    false_warnings: int = 0  # warnings on actions that were not slips
    crashes: int = 0  # the agent loop or a guard call raised (mini-swe-agent runs)
    blocked: int = 0  # commands the guard stopped before they ran (mini-swe-agent runs)
    blocks_visible: int = 0  # of those, blocks whose warning the model read in its next observation
    exit_status: str = ""  # how a mini-swe-agent run ended (Submitted, LimitsExceeded, ...; real models)
    transcript: list[tuple[str, str]] = field(default_factory=list)


class CodingAgent:
    """Runs tasks in one project directory with one gate; `run_task` per (task, mode)."""

    def __init__(self, root: str | os.PathLike[str], *, slip_rate: float = 0.3, seed: int = 0,
                 timeout_s: float = 60.0) -> None:
        self.root = Path(root).resolve()
        self.index = ProjectIndex.build(self.root)
        self.slip_rate = slip_rate
        self.seed = seed
        self.timeout_s = timeout_s
        self._gate = GateLayer(self.root)
        bin_dir = os.path.dirname(sys.executable)
        self._env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
                     "PYTHONDONTWRITEBYTECODE": "1",
                     # The project's tests need no plugins; loading ours would cost seconds per test run.
                     "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    # ---- execution
    def execute(self, action: Action) -> Result:
        started = time.perf_counter()
        if action.kind.value == "swe_agent":
            output, is_error = self._aci(action.command or "")
        else:
            try:
                done = subprocess.run(["bash", "-c", action.command or ""], cwd=self.root, env=self._env,
                                      capture_output=True, text=True, timeout=self.timeout_s, check=False)
                output, is_error = (done.stdout + done.stderr)[-MAX_OUTPUT_CHARS:], done.returncode != 0
            except subprocess.TimeoutExpired:
                output, is_error = f"command timed out after {self.timeout_s:.0f}s", True
        return Result(output=output, is_error=is_error, latency_s=time.perf_counter() - started)

    def _aci(self, command: str) -> tuple[str, bool]:
        words = command.split()
        if len(words) < 2 or words[0] != "open":
            return f"Unknown command: {command}", True
        path = (self.root / words[1]).resolve()
        if not path.is_relative_to(self.root) or not path.is_file():
            return f"File {words[1]} not found", True
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        line = int(words[2]) if len(words) > 2 and words[2].isdigit() else 1
        if line > len(lines) or line < 1:
            return (f"Warning: <line_number> ({line}) is greater than the number of lines in the file "
                    f"({len(lines)} lines)"), True
        start = max(0, line - ACI_WINDOW // 2)
        window = "\n".join(f"{i + 1}:{text}" for i, text in enumerate(lines[start:start + ACI_WINDOW], start))
        return f"[File: {path} ({len(lines)} lines total)]\n{window}", False

    # ---- one task
    def run_task(self, task: CodingTask, mode: Mode) -> CodingRun:
        """Run `task` with the gate in `mode`; the same seed gives the same slips in both modes."""
        guard = Guard([self._gate], mode=mode)
        ctx = guard.start_episode(task=task.text)
        rng = random.Random(f"coding:{self.seed}:{task.task_id}")
        run = CodingRun(task.task_id, mode)
        started = time.perf_counter()
        for planned in _plan(task, self.index):
            slipped = rng.random() < self.slip_rate
            slip_text = _slip(planned, task, self.index, rng) if slipped else None
            run.slips += int(slipped)
            command = slip_text or planned.command
            fixed_directly = False
            awaiting_repair = False  # the last proposal of this action was warned; is the next one clean?
            for _ in range(3):  # the proposal, and at most two corrections
                action = planned.action(command)
                run.steps += 1
                run.tokens += len(tokenize(command))
                decision = guard.before_action(ctx, action)
                warned = any(f.layer == "gate" and f.severity.value == "warning" for f in decision.findings)
                if awaiting_repair:
                    run.repaired += int(not warned)
                awaiting_repair = warned and mode == "intervene"
                run.warned += int(warned)
                run.false_warnings += int(warned and command == planned.command)
                if decision.blocked:
                    feedback = decision.message()
                    run.tokens += len(tokenize(feedback))
                    run.transcript.append((command, "BLOCKED: " + feedback))
                    if command == planned.command:
                        break  # a false block of a correct action: nothing to repair, move on
                else:
                    result = self.execute(action)
                    guard.after_result(ctx, action, result)
                    feedback = result.output
                    run.tokens += len(tokenize(feedback))
                    run.tool_errors += int(result.is_error)
                    run.transcript.append((command, feedback[:300]))
                    if not result.is_error or command == planned.command:
                        break
                if planned.fix_token in feedback and not fixed_directly:
                    command, fixed_directly = planned.command, True
                    continue
                # The feedback did not name the right thing: explore first, then propose the intended action.
                explore = Action.shell(planned.explore)
                run.steps += 1
                run.tokens += len(tokenize(planned.explore))
                if not guard.before_action(ctx, explore).blocked:
                    seen = self.execute(explore)
                    run.tokens += len(tokenize(seen.output))
                    run.tool_errors += int(seen.is_error)
                    run.transcript.append((planned.explore, seen.output[:300]))
                command = planned.command
        run.steps += 1  # the final report to the user
        run.seconds = time.perf_counter() - started
        guard.on_finish(ctx, answer=f"Inspected {task.symbol}; its test ran.")
        return run


def run_task(agent: CodingAgent, task: CodingTask, mode: Mode) -> CodingRun:
    return agent.run_task(task, mode)
