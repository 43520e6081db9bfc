"""The event model every layer speaks: Action, Result, ToolEvent, Step, Episode, Finding, Decision."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "Action",
    "ActionKind",
    "Decision",
    "Episode",
    "Finding",
    "Result",
    "Severity",
    "Step",
    "StepKind",
    "ToolEvent",
    "Verdict",
    "parse_call_arguments",
    "HEALTHY",
]

HEALTHY = "healthy"


class ActionKind(StrEnum):
    """The four forms an agent's proposed action arrives in."""

    SHELL = "shell"  # a shell command line: "cd src && python -m pytest tests/test_x.py::T::t"
    TOOL = "tool"  # a structured tool call: name + JSON arguments
    PYTHON = "python"  # raw Python code the harness will execute
    SWE_AGENT = "swe_agent"  # a SWE-agent ACI command: "open x.py 50", "edit 3:5", "submit"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False, populate_by_name=True)


class Action(_Model):
    """One proposed action, normalized, before it runs.

    `tool` is the tool name for structured calls and the harness tool that will run the
    other forms (e.g. ``bash`` for a shell command) when the adapter knows it.
    """

    kind: ActionKind
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    command: str | None = None
    code: str | None = None
    cwd: str | None = None
    call_id: str | None = None

    @field_validator("args", mode="before")
    @classmethod
    def _args_from_json(cls, value: Any) -> Any:
        # Models often emit arguments as a JSON string; accept it, reject anything else with a clear error.
        if value is None:
            return {}
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"tool arguments are not valid JSON: {exc.msg} at position {exc.pos}") from exc
            if not isinstance(parsed, dict):
                raise ValueError(f"tool arguments must be a JSON object, got {type(parsed).__name__}")
            return parsed
        return value

    @classmethod
    def shell(cls, command: str, *, cwd: str | None = None, tool: str | None = "bash", **kw: Any) -> Action:
        return cls(kind=ActionKind.SHELL, command=command, cwd=cwd, tool=tool, **kw)

    @classmethod
    def python(cls, code: str, *, cwd: str | None = None, tool: str | None = "python", **kw: Any) -> Action:
        return cls(kind=ActionKind.PYTHON, code=code, cwd=cwd, tool=tool, **kw)

    @classmethod
    def tool_call(cls, tool: str, args: dict[str, Any] | str | None = None, **kw: Any) -> Action:
        return cls(kind=ActionKind.TOOL, tool=tool, args=args or {}, **kw)  # type: ignore[arg-type]  # str is parsed by the validator

    @classmethod
    def swe_agent(cls, command: str, *, cwd: str | None = None, **kw: Any) -> Action:
        return cls(kind=ActionKind.SWE_AGENT, command=command, cwd=cwd, tool=kw.pop("tool", "swe_agent"), **kw)

    def describe(self) -> str:
        """A short human-readable form for messages and span names."""
        if self.kind is ActionKind.TOOL:
            return f"{self.tool}({json.dumps(self.args, sort_keys=True, default=str)[:200]})"
        return (self.command or self.code or "")[:200]


def parse_call_arguments(raw: str | None) -> dict[str, Any] | str:
    """A model's tool-call argument text as a dict when it is a JSON object; otherwise the text as emitted.

    Nothing the model wrote is lost: junk, ``null`` or a JSON list stay the raw string, for a check to report.
    """
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except (json.JSONDecodeError, TypeError, ValueError):
        return raw
    return parsed if isinstance(parsed, dict) else raw


class Result(_Model):
    """What came back from running an action."""

    output: str = ""
    is_error: bool = False
    call_id: str | None = None
    latency_s: float | None = None
    truncated: bool = False
    data: Any = None  # the structured return value, when the tool gave one
    # What the guard showed the agent in place of this result (`blocked`: the tool never ran, `output` is
    # empty) or after it (a result check failed): kept apart so the record holds the tool's real output.
    guard_message: str | None = None
    blocked: bool = False


class ToolEvent(_Model):
    """One tool call inside a step and the result the agent saw (the sentinel `tool_events` shape)."""

    id: str = ""
    name: str
    args: Any = Field(default_factory=dict)  # usually a dict; kept as given when the model emitted junk
    result: str | None = None
    result_chars: int | None = None
    result_truncated: bool = False
    is_error: bool = False
    latency_s: float | None = None
    # The guard's own text the agent read with (or, when the call was blocked before it ran and `result` is
    # None, instead of) the tool's result. The text of the step shows what the agent read; `result` stays
    # the tool's real output, so an offline check of a recorded run sees what the live one saw.
    guard_message: str | None = None
    # Fields an external trace format carried that this version does not use, kept verbatim so a
    # corpus written back out loses nothing. No layer reads them; unknown keyword arguments are still refused.
    extra: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_pair(cls, action: Action, result: Result | None) -> ToolEvent:
        return cls(
            id=action.call_id or "",
            name=action.tool or action.kind.value,
            args=action.args if action.kind is ActionKind.TOOL else {"command": action.command or action.code},
            result=None if result is None or result.blocked else result.output,
            result_chars=None if result is None or result.blocked else len(result.output),
            result_truncated=bool(result and result.truncated),
            is_error=bool(result and result.is_error),
            latency_s=None if result is None else result.latency_s,
            guard_message=None if result is None else result.guard_message,
        )


class StepKind(StrEnum):
    TOOL_CALL = "tool_call"  # the model asked for one or more tools; tool_events hold them
    FINAL = "final"  # the run's answer
    TEXT = "text"  # an intermediate message with no tool call


class Step(_Model):
    """One agent step as the monitor and verifiers see it."""

    index: int = Field(ge=0)
    kind: StepKind
    text: str = ""
    tool_events: list[ToolEvent] = Field(default_factory=list)
    token_logprobs: list[float] = Field(default_factory=list)
    logprobs_available: bool | None = None
    latency_s: float | None = None
    output_tokens: int | None = None
    error: bool = False
    task: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)  # an external format's unused fields, verbatim (see ToolEvent)

    @property
    def is_final(self) -> bool:
        return self.kind is StepKind.FINAL


class Episode(_Model):
    """A whole run: its steps in order plus what is known about it."""

    episode_id: str = Field(min_length=1)
    steps: list[Step] = Field(default_factory=list)
    task: str | None = None
    label: str = HEALTHY  # "healthy" or a failure class
    tau: int | None = None  # 0-based onset step of the failure, when known
    framework: str | None = None
    model: str | None = None
    tools: list[str] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def is_healthy(self) -> bool:
        return self.label == HEALTHY

    @property
    def T(self) -> int:  # noqa: N802 - the papers' name for the episode length
        return len(self.steps)

    @property
    def answer(self) -> str | None:
        """The text of the final step, if the run produced one."""
        for step in reversed(self.steps):
            if step.is_final:
                return step.text
        return None


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ALARM = "alarm"  # the step monitor crossed its calibrated threshold
    ERROR = "error"  # the guard itself failed; see `check == "internal_error"`


class Finding(_Model):
    """What one layer found about one action, step or episode."""

    layer: str
    check: str
    message: str
    predicate: str | None = None
    args: list[Any] = Field(default_factory=list)
    evidence: dict[str, Any] = Field(default_factory=dict)
    hint: str | None = None
    blocking: bool = False  # a necessary precondition is false: intervene mode stops the action
    severity: Severity = Severity.WARNING
    step: int | None = None
    score: float | None = None


class Verdict(StrEnum):
    ALLOW = "allow"
    WARN = "warn"
    BLOCK = "block"
    ALARM = "alarm"
    REPAIR = "repair"


class Decision(_Model):
    """The Guard's answer to one hook call."""

    verdict: Verdict = Verdict.ALLOW
    hook: Literal["before_action", "after_result", "on_step", "on_finish"]
    findings: list[Finding] = Field(default_factory=list)
    score: float | None = None  # the step monitor's score, when one ran
    episode_id: str | None = None  # the episode it belongs to (what `guard.label` and `guardrail runs` take)

    @property
    def blocked(self) -> bool:
        return self.verdict is Verdict.BLOCK

    @property
    def allowed(self) -> bool:
        return self.verdict is not Verdict.BLOCK

    def message(self) -> str:
        """All findings as one text block an agent can read (for a tool error message)."""
        lines = []
        for finding in self.findings:
            line = f"[guardrail:{finding.layer}/{finding.check}] {finding.message}"
            if finding.hint:
                line += f" Hint: {finding.hint}"
            lines.append(line)
        return "\n".join(lines)
