"""What every adapter shares: tool calls to Actions, and Guard calls that can never crash the agent."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from guardrail.core.events import Action, Decision, Finding, Severity, Verdict

__all__ = ["SHELL_TOOLS", "PYTHON_TOOLS", "action_from_call", "asafe_decision", "guard_failure", "safe_decision"]

log = logging.getLogger("guardrail.adapters")

# Tool names whose single string argument is a shell command / Python source: the gate parses those
# as commands, not as opaque structured calls.
SHELL_TOOLS = frozenset({"bash", "shell", "run_shell", "terminal", "execute_bash", "run_command", "sh"})
PYTHON_TOOLS = frozenset({"python", "run_python", "execute_python", "python_repl", "ipython"})

T = TypeVar("T")


def action_from_call(name: str, args: Any, call_id: str | None = None, *, cwd: str | None = None) -> Action:
    """One model tool call as the Guard's `Action` (shell and Python tools become those kinds)."""
    if isinstance(args, Mapping):
        command = args.get("command") if name in SHELL_TOOLS else None
        if isinstance(command, str):
            return Action.shell(command, tool=name, call_id=call_id, cwd=args.get("cwd") or cwd)
        code = args.get("code") if name in PYTHON_TOOLS else None
        if isinstance(code, str):
            return Action.python(code, tool=name, call_id=call_id, cwd=cwd)
        return Action.tool_call(name, dict(args), call_id=call_id, cwd=cwd)
    if isinstance(args, str):
        try:
            return Action.tool_call(name, args, call_id=call_id, cwd=cwd)
        except ValueError:
            pass  # not JSON: keep the raw text so the gate still sees what the model asked for
    return Action.tool_call(name, {"_raw": args if isinstance(args, str) else repr(args)}, call_id=call_id, cwd=cwd)


def guard_failure(hook: str, exc: BaseException) -> Decision:
    """The Decision an adapter uses when the Guard API itself raised: allow, with the error as a finding."""
    return Decision(
        verdict=Verdict.ALLOW,
        hook=hook,  # type: ignore[arg-type]  # always one of the four hook names
        findings=[Finding(layer="adapter", check="internal_error", severity=Severity.ERROR,
                          message=f"guard call {hook} failed: {type(exc).__name__}: {exc}"[:2000])],
    )


def safe_decision(hook: str, call: Callable[[], Decision]) -> Decision:
    """Run one Guard call; an exception (a misuse, a bug) is logged and the agent goes on (fail-open).

    Layer errors are already findings inside the Guard; this catches what is left (an episode
    already finished, a broken pydantic input), because the guard must never crash the agent.
    """
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - fail-open is the contract of every adapter
        log.warning("guardrail %s failed: %s: %s", hook, type(exc).__name__, exc)
        return guard_failure(hook, exc)


async def asafe_decision(hook: str, call: Callable[[], Any]) -> Decision:
    """Async twin of `safe_decision` (`call` returns an awaitable Decision)."""
    try:
        return await call()
    except Exception as exc:  # noqa: BLE001
        log.warning("guardrail %s failed: %s: %s", hook, type(exc).__name__, exc)
        return guard_failure(hook, exc)
