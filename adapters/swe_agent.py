"""SWE-agent integration (duck-typed; SWE-agent is not on the package index): a hook, a .traj reader and auditor, a swe-rex prober.

    agent.add_hook(SweAgentGuardHook(guard))          # gates every action before it runs
    trajectory = read_traj("run.traj")                # v0 and v1 layouts
    audit_trajectory(trajectory, guard, "repo/")       # gate every recorded action offline (guardrail audit-traj)

Nothing here imports SWE-agent or swe-rex: the hook has `AbstractAgentHook`'s method names, the
prober calls ``runtime.execute(Command(...))`` / ``runtime.read_file(...)`` on whatever runtime it is given.
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
import shlex
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from adapters.common import malformed_call, safe_decision, with_problem
from adapters.steps import step_from_swe_agent
from guardrail.core.events import Action, Decision, Episode, Result, Verdict
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext

__all__ = [
    "ACI_COMMANDS",
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
    "read_traj",
]

# SWE-agent's documented ACI commands (tools bundles): an action whose first word is one of these is an
# ACI command, everything else is a shell line.
ACI_COMMANDS = frozenset({
    "open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "search_dir", "search_file",
    "find_file", "submit", "str_replace_editor", "filemap", "view", "undo_edit", "exit_forfeit",
})
MAX_TRAJ_BYTES = 256 * 1024 * 1024  # a trajectory bigger than this is refused, not loaded into memory


class TrajError(ValueError):
    """A .traj file that cannot be read (not JSON, no trajectory list, too big)."""


class GuardBlockedAction(Exception):
    """Raised from ``on_actions_generated`` when SWE-agent's own blocked-action error is not importable."""


def _blocked_error_class() -> type[Exception]:
    try:  # SWE-agent re-queries the model with the error when the hook raises its blocked-action error
        from sweagent.exceptions import _BlockedActionError  # type: ignore[import-not-found]
    except ImportError:
        return GuardBlockedAction
    return _BlockedActionError  # type: ignore[no-any-return]


def action_from_swe(command: str, *, cwd: str | None = None, call_id: str | None = None) -> Action:
    """One SWE-agent action line as an `Action`: an ACI command or a shell command."""
    first = command.strip().split(maxsplit=1)[0] if command.strip() else ""
    if first in ACI_COMMANDS:
        return Action.swe_agent(command, cwd=cwd, call_id=call_id)
    return Action.shell(command, cwd=cwd, call_id=call_id)


# --------------------------------------------------------------------------- .traj files
@dataclass
class TrajStep:
    """One recorded action with the state it was chosen in (``state_before``) when the file tells it."""

    index: int
    action: str
    observation: str = ""
    thought: str = ""
    state_before: dict[str, Any] | None = None
    state_after: dict[str, Any] | None = None
    execution_time: float | None = None

    @property
    def cwd(self) -> str | None:
        state = self.state_before or {}
        value = state.get("working_dir")
        return value if isinstance(value, str) else None


@dataclass
class Trajectory:
    path: str
    layout: str  # "v0" (state a JSON string, before the action) or "v1" (state a dict, after it)
    steps: list[TrajStep] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


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


def _problem_statement(raw: dict[str, Any]) -> str | None:
    for message in raw.get("history") or []:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content[:4000]
            if isinstance(content, list):
                return " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))[:4000]
    return None


def read_traj(path: str | os.PathLike[str]) -> Trajectory:
    """Read a SWE-agent .traj file (v0: `state` a JSON string before the action; v1: a dict after it)."""
    file = Path(path)
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise TrajError(f"{file}: cannot read ({exc.strerror or exc})") from exc
    if size > MAX_TRAJ_BYTES:
        raise TrajError(f"{file}: {size} bytes, more than the {MAX_TRAJ_BYTES} a trajectory may have")
    try:
        raw = json.loads(file.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TrajError(f"{file}: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("trajectory"), list):
        raise TrajError(f"{file}: no 'trajectory' list; is this a SWE-agent .traj file?")
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
        steps.append(TrajStep(
            index=index, action=action, observation=str(entry.get("observation") or ""),
            thought=str(entry.get("thought") or entry.get("response") or ""),
            state_before=before, state_after=after, execution_time=entry.get("execution_time"),
        ))
    if layout == "v0":  # a v0 state is the next step's state-before; keep the after-state too
        for current, following in zip(steps, steps[1:], strict=False):
            current.state_after = following.state_before
    info: dict[str, Any] = raw["info"] if isinstance(raw.get("info"), dict) else {}
    return Trajectory(path=str(file), layout=layout, steps=steps, info=info, problem=_problem_statement(raw))


def episode_from_traj(trajectory: Trajectory, *, episode_id: str | None = None) -> Episode:
    """A trajectory as an `Episode` (one tool-call step per action; ``submit`` is the final one)."""
    steps = [step_from_swe_agent(step.index, action=step.action, thought=step.thought, observation=step.observation,
                                 execution_time=step.execution_time, task=trajectory.problem, cwd=step.cwd)
             for step in trajectory.steps]
    return Episode(episode_id=episode_id or Path(trajectory.path).stem, steps=steps, task=trajectory.problem,
                   framework="swe-agent", meta={"layout": trajectory.layout, "exit_status":
                                                trajectory.info.get("exit_status")})


# --------------------------------------------------------------------------- offline audit
_SEVERITY_ORDER = [Verdict.ALLOW, Verdict.WARN, Verdict.ALARM, Verdict.REPAIR, Verdict.BLOCK]


def _worst(*verdicts: Verdict) -> Verdict:
    return max(verdicts, key=_SEVERITY_ORDER.index)


@dataclass
class AuditRow:
    step: int
    action: str
    cwd: str | None
    decision: Decision


def _map_into(path: str | None, sandbox_root: str, workspace: Path) -> str | None:
    """A sandbox path (``/repo/src``) as the same place in the local copy of the workspace."""
    if path is None:
        return str(workspace)
    normalized = posixpath.normpath(path)
    if normalized == sandbox_root or normalized.startswith(sandbox_root.rstrip("/") + "/"):
        return str(workspace / posixpath.relpath(normalized, sandbox_root))
    return path


def guess_sandbox_root(trajectory: Trajectory, workspace: str | os.PathLike[str]) -> str:
    """Where the repository sits in the sandbox: the ancestor of the shallowest recorded working directory
    whose remaining path exists in the local `workspace` (``/repo/src`` with a local ``src/`` gives ``/repo``).
    """
    dirs = {posixpath.normpath(d) for step in trajectory.steps for state in (step.state_before, step.state_after)
            if state and isinstance(d := state.get("working_dir"), str) and d.startswith("/")}
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


def audit_trajectory(trajectory: Trajectory, guard: Guard, workspace: str | os.PathLike[str], *,
                     sandbox_root: str | None = None) -> list[AuditRow]:
    """Gate every recorded action against a local copy of the workspace (what the guard would have said).

    Paths under ``sandbox_root`` (default: `guess_sandbox_root`) are mapped into `workspace`, in
    the cwd and in the command text, so the probes look at the local copy. A step whose state
    before it is unknown (the first step of a v1 file) starts at the workspace root.
    """
    local = Path(workspace).resolve()
    root = posixpath.normpath(sandbox_root or guess_sandbox_root(trajectory, local))
    ctx = guard.start_episode(task=trajectory.problem, framework="swe-agent")
    recorded = episode_from_traj(trajectory)
    rows = []
    for step, recorded_step in zip(trajectory.steps, recorded.steps, strict=True):
        cwd = _map_into(step.cwd, root, local)
        command = step.action.replace(root.rstrip("/") + "/", str(local) + "/") if root != "/" else step.action
        action = action_from_swe(command, cwd=cwd, call_id=f"traj-{step.index}")
        result = Result(output=step.observation, call_id=action.call_id, latency_s=step.execution_time)
        decision = safe_decision("before_action", partial(guard.before_action, ctx, action))
        after = safe_decision("after_result", partial(guard.after_result, ctx, action, result))
        recorded_step.index = ctx.step_index
        monitored = safe_decision("on_step", partial(guard.on_step, ctx, recorded_step))
        merged = Decision(verdict=_worst(decision.verdict, after.verdict, monitored.verdict), hook="before_action",
                          findings=[*decision.findings, *after.findings, *monitored.findings],
                          score=monitored.score)
        rows.append(AuditRow(step.index, step.action, cwd, merged))
    submission = trajectory.info.get("submission")
    safe_decision("on_finish", partial(guard.on_finish, ctx, answer=submission if isinstance(submission, str) else None))
    return rows


# --------------------------------------------------------------------------- live hook
def _seconds(step: Any) -> float | None:
    """A step's ``execution_time`` when it is a number (anything else is no measurement, not a crash)."""
    value = getattr(step, "execution_time", None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class SweAgentGuardHook:
    """A SWE-agent agent hook (``agent.add_hook(...)``) with `AbstractAgentHook`'s method names.

    ``on_actions_generated`` gates the parsed action. In intervene mode a block raises SWE-agent's
    blocked-action error (our `GuardBlockedAction` when SWE-agent is not importable) so the agent
    re-queries the model with the warning; in report mode the warning is appended to the
    observation in ``on_action_executed``. Every executed step goes to ``guard.on_step`` and the run
    end to ``guard.on_finish``.
    """

    def __init__(self, guard: Guard, *, blocked_error: type[Exception] | None = None,
                 on_decision: Callable[[Decision], None] | None = None) -> None:
        self.guard = guard
        self.blocked_error = blocked_error or _blocked_error_class()
        self.on_decision = on_decision
        self.decisions: list[Decision] = []
        self._ctx: EpisodeContext | None = None
        self._pending: dict[int, tuple[Action, Decision]] = {}
        self._task: str | None = None

    # SWE-agent calls these; the ones the guard does not need are no-ops.
    def on_init(self, *, agent: Any) -> None:
        problem = getattr(agent, "_problem_statement", None)
        text = getattr(problem, "problem_statement", None) or getattr(problem, "get_problem_statement", None)
        self._task = text() if callable(text) else text

    def on_run_start(self) -> None:
        self._ctx = self.guard.start_episode(task=self._task, framework="swe-agent")

    def on_step_start(self) -> None: ...
    def on_action_started(self, *, step: Any) -> None: ...
    def on_setup_attempt(self) -> None: ...
    def on_model_query(self, *, messages: Any, agent: str, **kwargs: Any) -> None: ...
    def on_query_message_added(self, **kwargs: Any) -> None: ...
    def on_setup_done(self) -> None: ...
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
            if self.on_decision is not None:
                try:
                    self.on_decision(decision)
                except Exception:  # noqa: BLE001 - a user callback never breaks the agent
                    pass
        return decision

    def on_actions_generated(self, *, step: Any) -> None:
        command = getattr(step, "action", "") or ""
        if isinstance(command, str) and not command.strip():
            return
        state = getattr(step, "state", None) or {}
        cwd = state.get("working_dir") if isinstance(state, Mapping) else None
        ctx = self.context
        call_id = f"step-{ctx.step_index}"
        try:  # a model's malformed action is a finding, never an exception out of the agent's hook
            if not isinstance(command, str) or not (cwd is None or isinstance(cwd, str)):
                raise TypeError("the action and the working directory must be strings")
            action, problem = action_from_swe(command, cwd=cwd, call_id=call_id), None
        except Exception as exc:  # noqa: BLE001
            action, problem = malformed_call("bash", {"command": command, "cwd": cwd}, call_id, None, exc)
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
        command = getattr(step, "action", "") or ""
        done = bool(getattr(step, "done", False))
        observation = str(getattr(step, "observation", "") or "")
        step_out = step_from_swe_agent(ctx.step_index, action=command if isinstance(command, str) else str(command),
                                       thought=str(getattr(step, "thought", "") or ""), observation=observation,
                                       done=done, task=ctx.task, execution_time=_seconds(step))
        self._record(safe_decision("on_step", lambda: self.guard.on_step(ctx, step_out)))

    def on_run_done(self, *, trajectory: Any, info: Any) -> None:
        if self._ctx is None or self._ctx.finished:
            return
        submission = info.get("submission") if isinstance(info, Mapping) else None
        ctx = self._ctx
        self._record(safe_decision("on_finish", lambda: self.guard.on_finish(ctx, answer=submission)))


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
    """Read-only probes that run inside the agent's sandbox through a swe-rex runtime.

    `runtime` is anything with swe-rex's ``execute(Command(...))`` and ``read_file(ReadFileRequest(...))``
    (sync or async). `command_type` / `read_request_type` default to swe-rex's own classes and can
    be given for tests or other runtimes. Every probe has a time budget; a probe that fails or
    times out answers None (unknown), never False.
    """

    def __init__(self, runtime: Any, *, command_type: Any = None, read_request_type: Any = None,
                 timeout_s: float = 5.0, max_bytes: int = 1 << 20) -> None:
        self.runtime = runtime
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        if command_type is None or read_request_type is None:
            try:
                from swerex.runtime.abstract import Command as RexCommand  # type: ignore[import-not-found]
                from swerex.runtime.abstract import ReadFileRequest  # type: ignore[import-not-found]
            except ImportError as exc:
                raise ImportError("SweRexProber needs swe-rex (pip install swe-rex) or explicit "
                                  "command_type= and read_request_type=") from exc
            command_type = command_type or RexCommand
            read_request_type = read_request_type or ReadFileRequest
        self.command_type = command_type
        self.read_request_type = read_request_type

    def run(self, argv: list[str], *, cwd: str | None = None) -> tuple[int, str] | None:
        """Run a read-only command in the sandbox: (exit code, stdout), or None when it could not run."""
        command = self.command_type(command=" ".join(shlex.quote(a) for a in argv), shell=True,
                                    timeout=self.timeout_s, cwd=cwd, check=False)
        try:
            response = _run_sync(self.runtime.execute(command))
        except Exception:  # noqa: BLE001 - a failed probe is "unknown"
            return None
        code = getattr(response, "exit_code", None)
        return (int(code) if code is not None else -1, str(getattr(response, "stdout", ""))[: self.max_bytes])

    def exists(self, path: str, *, cwd: str | None = None) -> bool | None:
        outcome = self.run(["test", "-e", path], cwd=cwd)
        return None if outcome is None or outcome[0] not in (0, 1) else outcome[0] == 0

    def is_file(self, path: str, *, cwd: str | None = None) -> bool | None:
        outcome = self.run(["test", "-f", path], cwd=cwd)
        return None if outcome is None or outcome[0] not in (0, 1) else outcome[0] == 0

    def read_text(self, path: str) -> str | None:
        try:
            response = _run_sync(self.runtime.read_file(self.read_request_type(path=path)))
        except Exception:  # noqa: BLE001 - unreadable is "unknown"
            return None
        content = getattr(response, "content", None)
        return content[: self.max_bytes] if isinstance(content, str) else None

    def sys_path(self, python: str = "python3") -> list[str] | None:
        """The target interpreter's sys.path (asked once; nothing of the target is imported)."""
        outcome = self.run([python, "-c", "import json, sys; print(json.dumps(sys.path))"])
        if outcome is None or outcome[0] != 0:
            return None
        try:
            value = json.loads(outcome[1].strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            return None
        return [str(p) for p in value] if isinstance(value, list) else None
