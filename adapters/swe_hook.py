"""SWE-agent's live hook: `SweAgentGuardHook` gates every action before it runs (duck-typed: SWE-agent is not on the
package index; the hook has `AbstractAgentHook`'s method names and is driven in SWE-agent's order)."""

from __future__ import annotations

import asyncio
import posixpath
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from adapters.common import malformed_call, notify, safe_decision, with_problem
from adapters.steps import (
    step_from_swe_agent,
)
from adapters.swe_audit import _map_into, _map_text, _set_open_file
from adapters.swerex_backend import gate_in_sandbox, runtime_of
from adapters.trajectory import ACI_COMMANDS, action_from_swe
from guardrail.core.events import Action, Decision, Result, Verdict
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext


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

    @property
    def episode_id(self) -> str | None:
        """The current (or last) run's episode id: what `guard.label` and `guardrail runs` take."""
        return None if self._ctx is None else self._ctx.episode_id

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


