"""What every adapter shares: tool calls to Actions, and Guard calls that can never crash the agent."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from guardrail.core.events import Action, Decision, Finding, Severity, Verdict

if TYPE_CHECKING:
    from guardrail.core.guard import Guard
    from guardrail.core.layer import EpisodeContext

__all__ = ["SHELL_TOOLS", "PYTHON_TOOLS", "MALFORMED_CALL", "action_from_call", "asafe_decision", "call_action", "notify",
           "guard_failure", "malformed_call", "safe_decision", "with_problem"]

log = logging.getLogger("guardrail.adapters")

# Tool names whose single string argument is a shell command / Python source: the gate parses those
# as commands, not as opaque structured calls.
SHELL_TOOLS = frozenset({"bash", "shell", "run_shell", "terminal", "execute_bash", "run_command", "sh"})
PYTHON_TOOLS = frozenset({"python", "run_python", "execute_python", "python_repl", "ipython"})
MALFORMED_CALL = "malformed_call"
_NAME_CAP = 200  # a tool name or call id longer than this is junk; keep its head
_RAW_CAP = 20_000  # how much of an unusable argument value is kept (as text) for the checks and the record

T = TypeVar("T")


def _action(name: str, args: Any, call_id: str | None, cwd: str | None) -> Action:
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


def action_from_call(name: str, args: Any, call_id: str | None = None, *, cwd: str | None = None) -> Action:
    """One model tool call as the Guard's `Action` (shell and Python tools become those kinds); never raises.

    A malformed call becomes the stand-in `call_action` describes; use `call_action` to get the
    finding that says so.
    """
    return call_action(name, args, call_id, cwd=cwd)[0]


def _text(value: Any, cap: int) -> str:
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises (or recurses forever) is still a value the model sent
        text = f"<unrepresentable {type(value).__name__}>"
    return text.encode("utf-8", "replace").decode("utf-8")[:cap]


def _problem(exc: BaseException) -> str:
    """What was wrong, in one line and without the values (they can be huge, or secret)."""
    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors()[:3]]
        return "; ".join(parts)
    if isinstance(exc, RecursionError):
        return "arguments nested too deep to read"
    return type(exc).__name__


def _stand_in(name: Any, args: Any, call_id: Any, cwd: Any) -> Action:
    """What can still be checked of a malformed call: text fields coerced, a shell command kept as a command
    (run in the agent's working directory when the call's own is unusable), anything else as raw text."""
    tool = _text(name, _NAME_CAP) if name is not None else "tool"
    ident = None if call_id is None else _text(call_id, _NAME_CAP)
    base = cwd if isinstance(cwd, str) else None
    own_cwd = args.get("cwd") if isinstance(args, Mapping) else None
    where = _text(own_cwd, 4096) if isinstance(own_cwd, str) else base
    try:
        if isinstance(args, Mapping):
            command, code = args.get("command"), args.get("code")
            if tool in SHELL_TOOLS and isinstance(command, str):
                return Action.shell(_text(command, _RAW_CAP), tool=tool, call_id=ident, cwd=where)
            if tool in PYTHON_TOOLS and isinstance(code, str):
                return Action.python(_text(code, _RAW_CAP), tool=tool, call_id=ident, cwd=base)
        return Action.tool_call(tool, {"_raw": _text(args, _RAW_CAP)}, call_id=ident, cwd=base)
    except Exception:  # noqa: BLE001 - the last resort holds nothing the model chose but the tool name
        return Action.tool_call("tool", {"_raw": "<unusable call>"})


def call_action(name: Any, args: Any, call_id: Any = None, *, cwd: Any = None) -> tuple[Action, Finding | None]:
    """One model tool call as an `Action`, and a ``malformed_call`` finding when it is not a well-formed call.

    Never raises: a call the model got wrong (a numeric ``cwd``, a non-string name, arguments
    nested past the parser's limit, a circular or unprintable value) becomes a stand-in action
    holding what can still be checked, plus a finding saying what was wrong. The agent's tool
    then rejects the call the way it would without the guard.
    """
    try:
        if not isinstance(name, str) or not (call_id is None or isinstance(call_id, str)) \
                or not (cwd is None or isinstance(cwd, str)):
            raise TypeError("the tool name, call id and working directory must be strings")
        return _action(name, args, call_id, cwd), None
    except Exception as exc:  # noqa: BLE001 - whatever the model sent, the agent goes on
        return malformed_call(name, args, call_id, cwd, exc)


def malformed_call(name: Any, args: Any, call_id: Any, cwd: Any, exc: BaseException) -> tuple[Action, Finding]:
    """The stand-in action for a call that could not become an `Action`, and the finding saying why."""
    action = _stand_in(name, args, call_id, cwd)
    return action, Finding(layer="adapter", check=MALFORMED_CALL, severity=Severity.WARNING,
                           message=f"the model's call to {action.tool!r} is malformed ({_problem(exc)}); "
                                   f"the guard checked what it could read"[:500].replace("\n", " "))


def with_problem(decision: Decision, problem: Finding | None, guard: Guard,
                 episode: EpisodeContext | str | None = None) -> Decision:
    """`decision` with a malformed-call finding added (and recorded on the episode): at least a warning,
    a block when the guard is fail-closed (it could not check the call as the model wrote it)."""
    if problem is None:
        return decision
    problem = problem.model_copy(update={"blocking": guard.fail_closed})
    if episode is not None:
        try:
            ctx = guard.context(episode)
            with ctx.lock:
                problem.step = ctx.step_index
                ctx.findings.append(problem)
        except Exception:  # noqa: BLE001 - an episode already closed: the finding still goes on the decision
            pass
    verdict = Verdict.BLOCK if guard.fail_closed else (Verdict.WARN if decision.verdict is Verdict.ALLOW
                                                        else decision.verdict)
    return decision.model_copy(update={"verdict": verdict, "findings": [problem, *decision.findings]})


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


def notify(callback: Callable[[Decision], Any] | None, decision: Decision) -> None:
    """Hand `decision` to a user's callback; whatever the callback raises is logged, never passed to the agent."""
    if callback is None:
        return
    try:
        callback(decision)
    except Exception as exc:  # noqa: BLE001 - a user callback never breaks the agent
        log.warning("guardrail: on_decision callback failed: %s: %s", type(exc).__name__, exc)


async def asafe_decision(hook: str, call: Callable[[], Any]) -> Decision:
    """Async twin of `safe_decision` (`call` returns an awaitable Decision)."""
    try:
        return await call()
    except Exception as exc:  # noqa: BLE001
        log.warning("guardrail %s failed: %s: %s", hook, type(exc).__name__, exc)
        return guard_failure(hook, exc)
