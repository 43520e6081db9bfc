"""SWE-agent and mini-swe-agent trajectories, and SWE-agent's live hook (duck-typed: SWE-agent is not on the package index).

    agent.add_hook(SweAgentGuardHook(guard))          # gates every action before it runs
    trajectory = read_traj("run.traj")                # SWE-agent v0 / 1.x, mini-swe-agent messages
    audit_trajectory(trajectory, guard, copy)          # gate every recorded action offline (guardrail audit-traj)

Nothing here imports SWE-agent: the hook has `AbstractAgentHook`'s method names and is driven in
SWE-agent's order (``on_actions_generated`` sees ``step.state == {}``: SWE-agent fills the state only
after the action ran, so the working directory and the open file come from the previous step's state,
and before the first one from the gate's own tracking of ``cd``). When the agent's environment runs a
SWE-ReX runtime (SWE-agent's ``SWEEnv.deployment.runtime``), the hook makes the gate probe that
sandbox (`adapters.swerex_backend`): the guard's workspace is then the repository's path in the sandbox.
`SweRexProber` is the same backend answering single questions.
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
import re
import shlex
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from adapters.common import malformed_call, notify, safe_decision, with_problem
from adapters.replay import EditReplayer, WorkspaceCopy
from adapters.steps import (
    content_text,
    mini_swe_agent_actions,
    step_from_swe_agent,
    steps_from_mini_swe_agent,
)
from adapters.swerex_backend import SwerexBackend, gate_in_sandbox, runtime_of
from guardrail.core.events import Action, Decision, Episode, Finding, Result, Verdict
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext
from guardrail.gate.backend import Roots
from guardrail.gate.bundles import known_commands
from guardrail.gate.extract_aci import editor_args

__all__ = [
    "ACI_COMMANDS",
    "BLOCKLIST_ERROR_TEMPLATE",
    "AuditRow",
    "GuardBlockedAction",
    "SweAgentGuardHook",
    "SweRexProber",
    "TrajError",
    "TrajStep",
    "Trajectory",
    "action_from_swe",
    "audit_trajectory",
    "episode_from_traj",
    "guess_sandbox_root",
    "observation_confirms",
    "read_traj",
    "sample_path",
    "swe_agent_config_path",
    "write_sample_workspace",
]

# Commands of the tool bundles the gate knows (SWE-agent 1.x defaults and the cursor commands): an action
# whose first word is one of these is an ACI command, everything else is a shell line.
ACI_COMMANDS = frozenset(known_commands())
MAX_TRAJ_BYTES = 256 * 1024 * 1024  # a trajectory bigger than this is refused, not loaded into memory

# SWE-agent's ``agent.tools.filter.blocklist_error_template``: what the model reads when the hook blocks. SWE-agent
# renders it with Jinja2 and passes the blocked-action error's message as ``exception_message``; its default
# template ("Operation '{{action}}' is not supported by this environment.") drops the guard's warning and hint.
# Shipped as YAML to merge into a run's config: `swe_agent_config_path()`.
BLOCKLIST_ERROR_TEMPLATE = (
    "guardrail blocked this action before it ran (nothing was executed):\n"
    "{{exception_message}}\n"
    "Fix the action and try again."
)


def sample_path(name: str = "") -> Path:
    """A sample trajectory shipped with the package (``adapters/samples/``), or the folder itself."""
    folder = Path(str(resources.files("adapters") / "samples"))
    return folder / name if name else folder


def write_sample_workspace(directory: str | os.PathLike[str] | None = None) -> Path:
    """Write the repository the sample trajectories worked on (at ``/testbed`` in their sandbox) into `directory`
    (default: a new temporary directory) and return it."""
    spec = json.loads(sample_path("workspace.json").read_text(encoding="utf-8"))
    root = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="guardrail-sample-"))
    for relative, text in spec["files"].items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root


def swe_agent_config_path() -> Path:
    """The shipped SWE-agent config fragment that sets `BLOCKLIST_ERROR_TEMPLATE` (``--config`` it after yours)."""
    return sample_path("swe_agent_guardrail.yaml")


class TrajError(ValueError):
    """A trajectory file that cannot be read (not JSON, no trajectory or messages list, too big)."""


class GuardBlockedAction(Exception):
    """Raised from ``on_actions_generated`` when SWE-agent's own blocked-action error is not importable."""


def _blocked_error_class() -> type[Exception]:
    # SWE-agent re-queries the model (rendering blocklist_error_template) when the hook raises its blocked-action error.
    for module in ("sweagent.agent.agents", "sweagent.exceptions"):
        try:
            found = getattr(__import__(module, fromlist=["_BlockedActionError"]), "_BlockedActionError", None)
        except ImportError:
            continue
        if isinstance(found, type) and issubclass(found, Exception):
            return found
    return GuardBlockedAction


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
    file, raw = _load(path)
    if isinstance(raw, dict) and not isinstance(raw.get("trajectory"), list) and isinstance(raw.get("messages"), list):
        return _read_mini(file, raw)
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


def _read_mini(file: Path, raw: dict[str, Any]) -> Trajectory:
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


# --------------------------------------------------------------------------- offline audit
_SEVERITY_ORDER = [Verdict.ALLOW, Verdict.WARN, Verdict.ALARM, Verdict.REPAIR, Verdict.BLOCK]

# What a failed reference looks like in an observation: the shell, Python, pytest and SWE-agent's own tools.
_MISS = re.compile(
    r"No such file or directory|command not found|ModuleNotFoundError|No module named|ImportError: cannot import name"
    r"|ERROR: (?:file or directory )?not found|no tests ran|The path \S+ does not exist|did not appear verbatim"
    r"|File \S+ not found|File name \S+ not found|is greater than the number of lines|must be less than or equal to"
    r"|Invalid `(?:view_range|insert_line)`|No file open",
    re.IGNORECASE)


def _worst(*verdicts: Verdict) -> Verdict:
    return max(verdicts, key=_SEVERITY_ORDER.index)


def observation_confirms(flagged: bool, observation: str | None) -> bool | None:
    """Whether the action's own recorded observation agrees with the gate.

    A "No such file", "command not found", ``ModuleNotFoundError``, pytest "not found" (or SWE-agent's
    editor saying a path or text is missing) confirms a flagged action and contradicts an allowed one
    (a miss); a clean observation confirms an allowed action and contradicts a flagged one. None when
    nothing was observed (the action never ran or the file kept no output).
    """
    if observation is None or not observation.strip():
        return None
    failed = _MISS.search(observation[:50_000]) is not None
    return failed if flagged else not failed


@dataclass
class AuditRow:
    step: int
    action: str
    cwd: str | None
    decision: Decision  # the worst of what every layer said about the action and its step
    gate: Decision | None = None  # what the guard said before the action ran
    observation_confirms: bool | None = None
    trajectory: str = ""

    @property
    def predicates(self) -> list[dict[str, Any]]:
        """The gate's violated predicates for this action (name, arguments, whether it would block, hint)."""
        findings: list[Finding] = self.gate.findings if self.gate is not None else []
        return [{"predicate": f.predicate or f.check, "args": f.args, "blocking": f.blocking, "message": f.message,
                 **({"hint": f.hint} if f.hint else {})} for f in findings if f.layer == "gate"]

    def as_json(self) -> dict[str, Any]:
        return {"trajectory": self.trajectory, "step": self.step, "action": self.action,
                "verdict": self.decision.verdict.value, "predicates": self.predicates,
                "observation_confirms": self.observation_confirms}


def _map_into(path: str | None, sandbox_root: str, workspace: Path) -> str | None:
    """A sandbox path (``/repo/src``) as the same place in the local copy of the workspace."""
    if path is None:
        return str(workspace)
    normalized = posixpath.normpath(path)
    if normalized == sandbox_root or normalized.startswith(sandbox_root.rstrip("/") + "/"):
        return str(workspace / posixpath.relpath(normalized, sandbox_root))
    return path


def _map_text(command: str, sandbox_root: str, workspace: Path) -> str:
    """The sandbox root replaced by the local copy wherever it starts a path in `command`."""
    if sandbox_root == "/":
        return command
    return re.sub(re.escape(sandbox_root.rstrip("/")) + r"(?=/|\s|['\"]|$)", lambda _: str(workspace), command)


def guess_sandbox_root(trajectory: Trajectory, workspace: str | os.PathLike[str]) -> str:
    """Where the repository sits in the sandbox: the ancestor of the shallowest recorded working directory
    whose remaining path exists in the local `workspace` (``/repo/src`` with a local ``src/`` gives ``/repo``).
    """
    dirs = {posixpath.normpath(d) for step in trajectory.steps for state in (step.state_before, step.state_after)
            if state and isinstance(d := state.get("working_dir"), str) and d.startswith("/")}
    dirs |= {posixpath.normpath(s.cwd_fixed) for s in trajectory.steps if s.cwd_fixed and s.cwd_fixed.startswith("/")}
    if not dirs:
        return "/"
    shallowest = min(dirs, key=lambda d: (d.count("/"), d))
    local = Path(workspace)
    candidate, best = shallowest, shallowest
    while candidate != "/":
        if (local / posixpath.relpath(shallowest, candidate)).is_dir():
            best = candidate
        candidate = posixpath.dirname(candidate)
    return best


def _set_open_file(guard: Guard, ctx: EpisodeContext, open_file: str) -> None:
    for layer in guard.layers:
        setter = getattr(layer, "set_editor_state", None)
        if callable(setter):
            setter(ctx, open_file=open_file)


def _replay(replayer: EditReplayer, command: str, cwd: str, observation: str, open_file: str | None,
            commands: frozenset[str]) -> None:
    first_line, _, body = command.strip().partition("\n")
    name = first_line.split(maxsplit=1)[0] if first_line.strip() else ""
    if name == "str_replace_editor":
        args = editor_args(command.strip())
        if args is not None:
            replayer.apply_editor(args, observation)
    elif name in commands:
        try:
            words = shlex.split(first_line)
        except ValueError:
            words = first_line.split()
        replayer.apply_aci(command, words, body, cwd, observation, open_file)


def _relabel(decision: Decision, copy_root: Path, source: Path) -> Decision:
    old, new = json.dumps(str(copy_root))[1:-1], json.dumps(str(source))[1:-1]
    text = decision.model_dump_json()
    return Decision.model_validate_json(text.replace(old, new)) if old in text else decision


def audit_trajectory(trajectory: Trajectory, guard: Guard, workspace: str | os.PathLike[str] | WorkspaceCopy, *,
                     sandbox_root: str | None = None, commands: frozenset[str] = ACI_COMMANDS) -> list[AuditRow]:
    """Gate every recorded action against the workspace as the agent had it (what the guard would have said).

    Give a `WorkspaceCopy` (whose root the guard's gate must probe) to have the trajectory's own edits
    replayed onto it as the audit goes, so a file the agent created or edited is judged as it was;
    a plain directory is only read. Paths under ``sandbox_root`` (default: `guess_sandbox_root`) are
    mapped into the workspace, in the cwd and in the command text. A SWE-agent step whose state before
    it is unknown (the first step of a 1.x file) starts at the workspace root; every mini-swe-agent
    command starts in its environment's cwd.
    """
    replayer = EditReplayer(workspace) if isinstance(workspace, WorkspaceCopy) else None
    local = (workspace.root if isinstance(workspace, WorkspaceCopy) else Path(workspace)).resolve()
    root = posixpath.normpath(sandbox_root or guess_sandbox_root(trajectory, local))
    ctx = guard.start_episode(task=trajectory.problem, framework=trajectory.framework)
    recorded = episode_from_traj(trajectory)
    mini = trajectory.layout == "mini"
    last_of_turn = {s.turn: s.index for s in trajectory.steps} if mini else {}
    rows = []
    for step in trajectory.steps:
        cwd = _map_into(step.cwd, root, local) if (step.cwd or mini) else None
        command = _map_text(step.action, root, local)
        open_file = _map_into(step.open_file, root, local) if step.open_file else None
        if open_file:
            _set_open_file(guard, ctx, open_file)
        call_id = f"traj-{step.index}"
        action = Action.shell(command, cwd=cwd, call_id=call_id) if mini else \
            action_from_swe(command, cwd=cwd, call_id=call_id, commands=commands)
        decision = safe_decision("before_action", partial(guard.before_action, ctx, action))
        decisions = [decision]
        if step.observation is not None:
            result = Result(output=step.observation, call_id=call_id, latency_s=step.execution_time)
            decisions.append(safe_decision("after_result", partial(guard.after_result, ctx, action, result)))
        if replayer is not None:
            _replay(replayer, command, cwd or str(local), step.observation or "", open_file,
                    frozenset() if mini else commands)
        step_index = step.turn if mini else step.index
        if step_index is not None and step_index < len(recorded.steps) and (
                not mini or last_of_turn.get(step.turn) == step.index):
            recorded_step = recorded.steps[step_index]
            recorded_step.index = ctx.step_index
            decisions.append(safe_decision("on_step", partial(guard.on_step, ctx, recorded_step)))
        merged = Decision(verdict=_worst(*(d.verdict for d in decisions)), hook="before_action",
                          findings=[f for d in decisions for f in d.findings], score=decisions[-1].score)
        flagged = decision.verdict in (Verdict.WARN, Verdict.BLOCK) or any(
            f.layer == "gate" and f.severity.value == "warning" for f in decision.findings)
        if replayer is not None:  # report the workspace the user gave, not the private copy the gate looked at
            merged, decision = (_relabel(d, local, replayer.copy.source) for d in (merged, decision))
            cwd = cwd.replace(str(local), str(replayer.copy.source), 1) if cwd else cwd
        rows.append(AuditRow(step.index, step.action, cwd, merged, gate=decision,
                             observation_confirms=observation_confirms(flagged, step.observation),
                             trajectory=trajectory.path))
    turns = sum(1 for m in trajectory.messages if isinstance(m, dict) and m.get("role") == "assistant")
    if mini and len(recorded.steps) > turns:  # the final step of its own (the exit message after an observed turn)
        final = recorded.steps[-1]
        final.index = ctx.step_index
        safe_decision("on_step", partial(guard.on_step, ctx, final))
    safe_decision("on_finish", partial(guard.on_finish, ctx, answer=trajectory.submission))
    return rows


# --------------------------------------------------------------------------- live hook
_NO_FILE = ("", "n/a", "None")


def _seconds(step: Any) -> float | None:
    """A step's ``execution_time`` when it is a number (anything else is no measurement, not a crash)."""
    value = getattr(step, "execution_time", None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class SweAgentGuardHook:
    """A SWE-agent agent hook (``agent.add_hook(...)``) with `AbstractAgentHook`'s method names.

    SWE-agent calls, per step: ``on_step_start``, then (``forward``) ``on_model_query`` and
    ``on_actions_generated``, then (``handle_action``) ``on_action_started``, the action runs,
    ``on_action_executed``, the state command fills ``step.state``, and last ``on_step_done``. A
    blocked action makes SWE-agent re-query the model inside the same step, so ``on_actions_generated``
    can come again before ``on_step_done``.

    ``on_actions_generated`` gates the parsed action from the working directory and open file of the
    previous step's state (``step.state`` is still ``{}`` there); before any state is known the
    gate follows ``cd`` in earlier actions itself. `sandbox_root` maps sandbox paths into the guard's
    workspace when the gate probes a local copy. In intervene mode a block raises SWE-agent's
    blocked-action error with the warning and hint as its message: set SWE-agent's
    ``blocklist_error_template`` to one with ``{{exception_message}}`` (`BLOCKLIST_ERROR_TEMPLATE`,
    shipped in `swe_agent_config_path()`) or the model never reads them. In report mode the warning
    is appended to the observation. Every executed step goes to ``guard.on_step`` and the run end to
    ``guard.on_finish``.

    `sandbox` (default: when the agent's environment runs a SWE-ReX runtime and no `sandbox_root` is
    given) makes the gate probe the sandbox through that runtime once the run starts; `python` names the
    agent's interpreter there (default: its ``python3`` on PATH). `backend` is that sandbox backend.
    """

    def __init__(self, guard: Guard, *, blocked_error: type[Exception] | None = None,
                 on_decision: Callable[[Decision], None] | None = None, sandbox_root: str | None = None,
                 commands: frozenset[str] = ACI_COMMANDS, sandbox: bool | None = None,
                 python: str | None = None) -> None:
        if sandbox and sandbox_root is not None:
            raise ValueError("sandbox_root maps sandbox paths into a local copy; sandbox=True probes the sandbox "
                             "itself: give one or the other")
        self.sandbox = sandbox if sandbox is not None else (None if sandbox_root is None else False)
        self.python = python
        self.backend: Any = None
        self.guard = guard
        self.blocked_error = blocked_error or _blocked_error_class()
        self.on_decision = on_decision
        self.sandbox_root = posixpath.normpath(sandbox_root) if sandbox_root else None
        self.commands = commands
        self.decisions: list[Decision] = []
        self._ctx: EpisodeContext | None = None
        self._pending: dict[int, tuple[Action, Decision]] = {}
        self._cwds: dict[int, str | None] = {}
        self._task: str | None = None
        self._agent: Any = None
        self._state: Mapping[str, Any] = {}  # what SWE-agent's state command said after the previous action
        self._workspace = next((w for layer in guard.layers
                                if isinstance(w := getattr(getattr(layer, "gate", None), "workspace", None), str)), None)

    # SWE-agent calls these; the ones the guard does not need are no-ops.
    def on_init(self, *, agent: Any) -> None:
        self._agent = agent

    def _bind_sandbox(self) -> None:
        """Point the gate at the agent's SWE-ReX sandbox, once its environment is set up (SWE-agent sets
        ``agent._env`` in ``setup``, before ``on_setup_done`` and ``on_run_start``)."""
        if self.sandbox is False or self.backend is not None:
            return
        runtime = runtime_of(self._agent) if self._agent is not None else None
        if runtime is None:
            if self.sandbox:
                raise ValueError("sandbox=True, but the agent's environment runs no SWE-ReX runtime")
            return
        self.backend = gate_in_sandbox(self.guard, runtime, python=self.python)

    def on_setup_done(self) -> None:
        self._bind_sandbox()

    def on_run_start(self) -> None:
        self._bind_sandbox()
        problem = getattr(self._agent, "_problem_statement", None)
        text = getattr(problem, "get_problem_statement", None) or getattr(problem, "problem_statement", None)
        try:
            task = text() if callable(text) else text
        except Exception:  # noqa: BLE001 - a problem statement we cannot read is no reason to stop the agent
            task = None
        self._task = task if isinstance(task, str) else None
        self._state = {}
        self._ctx = self.guard.start_episode(task=self._task, framework="swe-agent")

    def on_step_start(self) -> None: ...
    def on_action_started(self, *, step: Any) -> None: ...
    def on_setup_attempt(self) -> None: ...
    def on_model_query(self, *, messages: Any, agent: str, **kwargs: Any) -> None: ...
    def on_query_message_added(self, **kwargs: Any) -> None: ...
    def on_tools_installation_started(self) -> None: ...

    @property
    def context(self) -> EpisodeContext:
        if self._ctx is None or self._ctx.finished:
            self.on_run_start()
        assert self._ctx is not None
        return self._ctx

    def _record(self, decision: Decision) -> Decision:
        if decision.verdict is not Verdict.ALLOW:
            self.decisions.append(decision)
            notify(self.on_decision, decision)
        return decision

    def _local(self, path: str | None) -> str | None:
        if path is None or self.sandbox_root is None or self._workspace is None:
            return path
        return _map_into(path, self.sandbox_root, Path(self._workspace))

    def _known_state(self, step: Any) -> Mapping[str, Any]:
        state = getattr(step, "state", None)
        return state if isinstance(state, Mapping) and state else self._state

    def on_actions_generated(self, *, step: Any) -> None:
        command = getattr(step, "action", "") or ""
        if isinstance(command, str) and not command.strip():
            return
        ctx = self.context
        call_id = f"step-{ctx.step_index}"
        state = self._known_state(step)
        working_dir = state.get("working_dir") if isinstance(state.get("working_dir"), str) else None
        try:  # a model's malformed action is a finding, never an exception out of the agent's hook
            if not isinstance(command, str):
                raise TypeError("the action must be a string")
            cwd = self._local(working_dir) if working_dir and working_dir.startswith("/") else None
            open_file = state.get("open_file")
            if isinstance(open_file, str) and open_file not in _NO_FILE:
                try:
                    _set_open_file(self.guard, ctx, self._local(open_file) or open_file)
                except Exception:  # noqa: BLE001 - fail-open: the gate then asks the observation's [File: ...] header
                    pass
            if self.sandbox_root is not None and self._workspace is not None:
                command = _map_text(command, self.sandbox_root, Path(self._workspace))
            action, problem = action_from_swe(command, cwd=cwd, call_id=call_id, commands=self.commands), None
        except Exception as exc:  # noqa: BLE001
            action, problem = malformed_call("bash", {"command": command, "cwd": working_dir}, call_id, None, exc)
        # The step records the directory its action was chosen in, as the trajectory's state-before does.
        self._cwds[id(step)] = working_dir
        decision = self._record(with_problem(
            safe_decision("before_action", lambda: self.guard.before_action(ctx, action)), problem, self.guard, ctx))
        if decision.blocked:
            raise self.blocked_error(decision.message() or "blocked by guardrail")
        self._pending[id(step)] = (action, decision)

    def on_action_executed(self, *, step: Any) -> None:
        action, before = self._pending.pop(id(step), (None, None))
        if action is None:
            return
        ctx = self.context
        observation = str(getattr(step, "observation", "") or "")
        result = Result(output=observation, latency_s=_seconds(step), call_id=action.call_id)
        after = self._record(safe_decision("after_result", lambda: self.guard.after_result(ctx, action, result)))
        warnings = "\n".join(d.message() for d in (before, after) if d is not None and d.findings)
        if warnings and self.guard.mode == "report":
            step.observation = f"{observation}\n\n{warnings}" if observation else warnings

    def on_step_done(self, *, step: Any, info: Any) -> None:
        ctx = self.context
        state = getattr(step, "state", None)
        if isinstance(state, Mapping) and state:
            self._state = dict(state)  # the next action is chosen in this state
        command = getattr(step, "action", "") or ""
        done = bool(getattr(step, "done", False))
        observation = str(getattr(step, "observation", "") or "")
        step_out = step_from_swe_agent(ctx.step_index, action=command if isinstance(command, str) else str(command),
                                       thought=str(getattr(step, "thought", "") or ""), observation=observation,
                                       done=done, task=ctx.task, execution_time=_seconds(step),
                                       cwd=self._cwds.pop(id(step), None))
        self._record(safe_decision("on_step", lambda: self.guard.on_step(ctx, step_out)))

    def on_run_done(self, *, trajectory: Any, info: Any) -> None:
        if self._ctx is None or self._ctx.finished:
            return
        submission = info.get("submission") if isinstance(info, Mapping) else None
        ctx = self._ctx
        self._record(safe_decision("on_finish", lambda: self.guard.on_finish(
            ctx, answer=submission if isinstance(submission, str) else None)))


# --------------------------------------------------------------------------- swe-rex prober
def _run_sync(awaitable: Any) -> Any:
    """Run a swe-rex coroutine from sync code, also when an event loop is already running here."""
    if not asyncio.iscoroutine(awaitable):
        return awaitable
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(awaitable)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


class SweRexProber:
    """Single read-only questions about a SWE-ReX sandbox, answered by `SwerexBackend` (the one way this project
    probes a sandbox: the fixed probe program, never a shell line, never the workspace's interpreter).

    A probe that fails or times out answers None (unknown), never False.
    """

    def __init__(self, runtime: Any, *, timeout_s: float = 5.0, python: str | None = None,
                 max_bytes: int = 1 << 20) -> None:
        self.backend = SwerexBackend(runtime, timeout_s=timeout_s, python=python)
        self.max_bytes = max_bytes

    def _state(self, path: str, cwd: str | None) -> Any:
        state = self.backend.stat_many([posixpath.join(cwd or "/", path)], None)[0]
        return None if state.kind in ("unknown", "outside") else state

    def exists(self, path: str, *, cwd: str | None = None) -> bool | None:
        state = self._state(path, cwd)
        return None if state is None else state.exists

    def is_file(self, path: str, *, cwd: str | None = None) -> bool | None:
        state = self._state(path, cwd)
        return None if state is None else state.kind == "file"

    def read_text(self, path: str) -> str | None:
        data = self.backend.read_prefix(path, None, self.max_bytes)
        return None if data is None else data[: self.max_bytes].decode("utf-8", errors="replace")

    def sys_path(self, python: str | None = None) -> list[str] | None:
        """The target interpreter's import path, learned by the gate's rules (its trusted base, ``-I -S -B``)."""
        from guardrail.gate.interpreter import TargetPythonError

        try:
            return list(self.backend.import_paths(python, Roots()).sys_path)
        except TargetPythonError:
            return None
