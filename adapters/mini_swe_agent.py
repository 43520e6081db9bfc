"""mini-swe-agent integration: a guarded environment around any of its environments, and the agent's messages as steps.

    agent = guard_agent(DefaultAgent(model, LocalEnvironment(cwd="repo"), **agent_config),
                        Guard.default(workspace="repo", mode="intervene"))
    agent.run("Fix the failing test")   # every command gated before it runs

`GuardedEnvironment` gates each command before the wrapped environment runs it. When the guard
blocks (intervene mode) the command does not run and the warning with its hint comes back as the
command's output, so the agent's own loop goes on and the model reads why. In report mode every
command runs and the decisions are only recorded (``.decisions``). `guard_agent` also feeds the
agent's messages to the step monitor and the verifiers through `adapters.steps` (one step per
assistant message, the ``exit`` message closing the episode with the submission).
`SwerexRuntimeEnvironment` is a mini-swe-agent environment over any SWE-ReX runtime (a
``RemoteRuntime`` talking to ``swerex-remote``), for sandboxes that mini-swe-agent's own docker
environment does not reach. Around an environment that runs a SWE-ReX runtime, the gate probes the
sandbox itself (`adapters.swerex_backend`):

    env = SwerexRuntimeEnvironment(runtime, cwd="/testbed")
    agent = guard_agent(DefaultAgent(model, env, **agent_config),
                        Guard.default(workspace="/testbed", mode="intervene"))   # the sandbox's path

mini-swe-agent is imported by the user's code, not here: the environment and agent are duck-typed
on its documented ``execute(action, cwd)`` / ``add_messages(*messages)`` interface.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from adapters.common import notify, safe_decision
from adapters.steps import build_step, content_text, step_from_mini_swe_agent
from adapters.swerex_backend import gate_in_sandbox, runtime_of
from guardrail.core.events import Action, Decision, Result, Verdict
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext

__all__ = ["BLOCKED_RETURNCODE", "GuardedEnvironment", "SwerexRuntimeEnvironment", "blocked_output", "guard_agent"]

BLOCKED_RETURNCODE = -1  # mini-swe-agent's own code for a command that did not run
MAX_BLOCK_MESSAGE = 4000  # what the model reads of one block (its templates elide outputs over 10 000 chars)


def blocked_output(decision: Decision, command: str) -> dict[str, Any]:
    """The output dict mini-swe-agent renders for a command the guard stopped: the warning and hint, nothing ran."""
    warning = decision.message() or "blocked by guardrail"
    text = ("guardrail blocked this command before it ran; nothing was executed.\n"
            f"{warning[:MAX_BLOCK_MESSAGE]}\nFix the command and try again.")
    return {"output": text, "returncode": BLOCKED_RETURNCODE, "exception_info": "",
            "extra": {"guardrail": {"verdict": decision.verdict.value, "command": command[:2000],
                                    "findings": [f.model_dump(mode="json", exclude_defaults=True)
                                                 for f in decision.findings]}}}


def _gate_workspace(guard: Guard) -> str | None:
    for layer in guard.layers:
        workspace = getattr(getattr(layer, "gate", None), "workspace", None)
        if isinstance(workspace, str):
            return workspace
    return None


class GuardedEnvironment:
    """Any mini-swe-agent environment, with every command gated before it runs.

    `cwd` is where commands start when neither the call nor the wrapped environment's config says
    (default: the gate's workspace); mini-swe-agent runs each command in a fresh subshell, so a
    ``cd`` never carries to the next command and each is checked from that directory. Everything
    else (``config``, ``get_template_vars``, ``serialize``) is the wrapped environment's.

    When the wrapped environment runs its commands through a SWE-ReX runtime (`SwerexRuntimeEnvironment`,
    mini-swe-agent's ``SwerexDockerEnvironment``), the gate probes that sandbox, not this machine
    (`adapters.swerex_backend`; the guard's workspace is then the sandbox's path): `sandbox=False` keeps
    it local, `sandbox=True` insists. `python` names the agent's interpreter in the sandbox (default: its
    ``python3`` on PATH). `backend` is the sandbox backend in use, if any.
    """

    def __init__(self, env: Any, guard: Guard, *, cwd: str | None = None, task: str | None = None,
                 on_decision: Callable[[Decision], None] | None = None, sandbox: bool | None = None,
                 python: str | None = None) -> None:
        self.env = env
        self.guard = guard
        runtime = runtime_of(env) if sandbox is not False else None
        if sandbox and runtime is None:
            raise ValueError("sandbox=True, but the environment runs no SWE-ReX runtime (.runtime or .deployment.runtime)")
        self.backend = gate_in_sandbox(guard, runtime, python=python) if runtime is not None else None
        self.cwd = cwd or _gate_workspace(guard)
        self.task = task
        self.on_decision = on_decision
        self.decisions: list[Decision] = []  # every decision that was not a plain allow
        self.flagged: list[tuple[str, Decision]] = []  # (command, decision) of each command the gate did not allow
        self.blocked: list[tuple[str, Decision]] = []  # (command, decision) of each command that did not run
        self.crashes: list[str] = []  # guard calls that raised (the agent went on: fail-open)
        self._ctx: EpisodeContext | None = None
        self._calls = 0
        self._turn: Mapping[str, Any] | None = None
        self._observed: list[Mapping[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    # ----------------------------------------------------------------- episodes
    @property
    def context(self) -> EpisodeContext:
        if self._ctx is None or self._ctx.finished:
            self.start(self.task)
        assert self._ctx is not None
        return self._ctx

    def start(self, task: str | None = None) -> EpisodeContext:
        """Open a new episode (closing a running one); `guard_agent` does this when a run starts."""
        self.close()
        self.task = task
        self._ctx = self.guard.start_episode(task=task, framework="mini-swe-agent")
        self._turn, self._observed = None, []
        return self._ctx

    @property
    def episode_id(self) -> str | None:
        """The current (or last) episode's id: what `guard.label` and `guardrail runs` take."""
        return None if self._ctx is None else self._ctx.episode_id

    def close(self, answer: str | None = None) -> None:
        """Finish the running episode (the verifiers' end-of-run checks), if one is running."""
        if self._ctx is not None and not self._ctx.finished:
            ctx = self._ctx
            self._record(safe_decision("on_finish", lambda: self.guard.on_finish(ctx, answer=answer)))

    def _record(self, decision: Decision) -> Decision:
        if any(f.check == "internal_error" and f.layer == "adapter" for f in decision.findings):
            self.crashes.append(decision.message())
        if decision.verdict is not Verdict.ALLOW or decision.findings:
            self.decisions.append(decision)
            notify(self.on_decision, decision)
        return decision

    # ----------------------------------------------------------------- commands
    def _cwd(self, cwd: str) -> str | None:
        config = getattr(self.env, "config", None)
        configured = getattr(config, "cwd", "")
        return cwd or (configured if isinstance(configured, str) and configured else None) or self.cwd

    def execute(self, action: dict[str, Any], cwd: str = "", **kwargs: Any) -> dict[str, Any]:
        """Gate `action`'s command, then run it in the wrapped environment (or return the block as its output)."""
        command = action.get("command") if isinstance(action, Mapping) else None
        if not isinstance(command, str):  # not ours to judge: the environment reports what is wrong with it
            return self._run(action, cwd, **kwargs)
        ctx = self.context
        self._calls += 1
        call_id = action.get("tool_call_id") if isinstance(action.get("tool_call_id"), str) else f"cmd-{self._calls}"
        gated = Action.shell(command, cwd=self._cwd(cwd), call_id=call_id)
        decision = self._record(safe_decision("before_action", lambda: self.guard.before_action(ctx, gated)))
        if decision.verdict is not Verdict.ALLOW:
            self.flagged.append((command, decision))
        if decision.blocked:
            self.blocked.append((command, decision))
            return blocked_output(decision, command)
        started = time.perf_counter()
        output = self._run(action, cwd, **kwargs)  # mini-swe-agent's Submitted and timeouts propagate as they would
        if not isinstance(output, dict):
            return output
        code = output.get("returncode")
        result = Result(output=str(output.get("output") or ""), call_id=call_id,
                        is_error=bool(output.get("exception_info")) or (isinstance(code, int) and code != 0),
                        latency_s=round(time.perf_counter() - started, 6))
        after = self._record(safe_decision("after_result", lambda: self.guard.after_result(ctx, gated, result)))
        if after.blocked:
            output = {**output, "output": f"{output.get('output') or ''}\n\n{after.message()}"}
        return output

    def _run(self, action: Any, cwd: str, **kwargs: Any) -> Any:
        return self.env.execute(action, cwd, **kwargs) if cwd else self.env.execute(action, **kwargs)

    # ----------------------------------------------------------------- messages -> steps
    def observe(self, messages: tuple[Mapping[str, Any], ...] | list[Mapping[str, Any]]) -> None:
        """Feed messages the agent just added: a system message starts a run, an assistant message and the
        observations answering it make one step, the ``exit`` message ends the run."""
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            role = message.get("role")
            if role == "system":
                self.start(self.task)
            elif role == "assistant":
                self._flush()
                self._turn, self._observed = message, []
            elif role == "exit":
                self._finish(message)
            elif self._turn is not None and (role == "tool" or (
                    role == "user" and isinstance(message.get("extra"), Mapping)
                    and "returncode" in message["extra"])):
                self._observed.append(message)
        if self._turn is not None and self._observed:
            self._flush()

    def _flush(self) -> None:
        if self._turn is None:
            return
        ctx = self.context
        step = step_from_mini_swe_agent(ctx.step_index, self._turn, self._observed, task=ctx.task)
        self._turn, self._observed = None, []
        self._record(safe_decision("on_step", lambda: self.guard.on_step(ctx, step)))

    def _finish(self, message: Mapping[str, Any]) -> None:
        extra = message.get("extra") if isinstance(message.get("extra"), Mapping) else {}
        assert isinstance(extra, Mapping)
        submission = extra.get("submission")
        answer = submission if isinstance(submission, str) and submission else content_text(message.get("content"))
        ctx = self.context
        if self._turn is not None and not self._observed:  # the submit command: it raised before any observation
            final = build_step(ctx.step_index, content=answer, task=ctx.task, final=True)
            self._turn = None
            self._record(safe_decision("on_step", lambda: self.guard.on_step(ctx, final)))
        else:
            self._flush()
        self.close(answer if extra.get("exit_status") == "Submitted" else None)


def guard_agent(agent: Any, guard: Guard, **options: Any) -> Any:
    """Guard a mini-swe-agent agent (``DefaultAgent`` or any subclass) in place and return it.

    Its environment is wrapped in a `GuardedEnvironment` (options go there) and every message it adds
    is also given to the guard, so the monitor and the verifiers see the run as it happens.
    """
    env = agent.env if isinstance(agent.env, GuardedEnvironment) else GuardedEnvironment(agent.env, guard, **options)
    agent.env = env
    add_messages = agent.add_messages

    def add_and_observe(*messages: dict[str, Any]) -> list[dict[str, Any]]:
        if any(isinstance(m, Mapping) and m.get("role") == "system" for m in messages):
            extra = getattr(agent, "extra_template_vars", None)
            task = extra.get("task") if isinstance(extra, Mapping) else None
            env.task = task if isinstance(task, str) else env.task
        added = add_messages(*messages)
        env.observe(messages)
        return added  # type: ignore[no-any-return]

    agent.add_messages = add_and_observe
    return agent


# --------------------------------------------------------------------------- SWE-ReX runtime environment
def _run_coroutine(awaitable: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    from adapters.swe_agent import _run_sync  # an event loop is running here: run it on a worker thread

    return _run_sync(awaitable)


class SwerexRuntimeEnvironment:
    """A mini-swe-agent environment whose commands run through a SWE-ReX runtime (e.g. ``RemoteRuntime``).

    Like mini-swe-agent's ``SwerexDockerEnvironment`` but over a runtime you already have: a
    ``swerex-remote`` server in a container, on a remote machine or on loopback. Each command is a
    fresh ``bash -c`` in `cwd` (mini-swe-agent's rule: no state carries between commands).
    """

    def __init__(self, runtime: Any, *, cwd: str = "/", timeout: int = 30) -> None:
        try:
            from swerex.runtime.abstract import Command as RexCommand
        except ImportError as exc:
            raise ImportError("SwerexRuntimeEnvironment needs swe-rex: pip install 'guardrail[swe]'") from exc
        self._command_type = RexCommand
        self.runtime = runtime
        self.config = _EnvConfig(cwd=cwd, timeout=timeout)

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        request = self._command_type(command=command, shell=True, check=False, cwd=cwd or self.config.cwd,
                                     timeout=timeout or self.config.timeout, merge_output_streams=True)
        try:
            response = _run_coroutine(self.runtime.execute(request))
            output = {"output": response.stdout, "returncode": response.exit_code, "exception_info": ""}
        except Exception as exc:  # noqa: BLE001 - mini-swe-agent's own environments report errors as output
            output = {"output": str(exc), "returncode": -1,
                      "exception_info": f"An error occurred while executing the command: {exc}",
                      "extra": {"exception_type": type(exc).__name__, "exception": str(exc)}}
        _check_finished(output)
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {"cwd": self.config.cwd, "timeout": self.config.timeout, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": {"cwd": self.config.cwd, "timeout": self.config.timeout},
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}


class _EnvConfig:
    def __init__(self, *, cwd: str, timeout: int) -> None:
        self.cwd, self.timeout = cwd, timeout


def _check_finished(output: dict[str, Any]) -> None:
    """mini-swe-agent's submit rule: a first output line ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (exit 0) ends the run."""
    lines = str(output.get("output") or "").lstrip().splitlines(keepends=True)
    if lines and lines[0].strip() == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" and output.get("returncode") == 0:
        from minisweagent.exceptions import Submitted

        submission = "".join(lines[1:])
        raise Submitted({"role": "exit", "content": submission,
                         "extra": {"exit_status": "Submitted", "submission": submission}})
