"""The per-task verifier spec: which tools return line items, what each may return, what a run must call.

A spec is written once by whoever defines a task, as JSON or TOML (`verifiers/specs/` ships the
booking tour, the mock booking tools, and the research tasks). It is pydantic-validated on load,
so a typo in a spec is a clear error naming the field, not a silently weaker check.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "CHECKS",
    "SPEC_FORMAT",
    "SPECS_DIR",
    "Currency",
    "Fact",
    "ForEach",
    "LineItem",
    "Requirement",
    "ResultShape",
    "SpecError",
    "SpecMatch",
    "ToolSpec",
    "VerifierSpec",
    "builtin_specs",
    "load_spec",
    "pick_spec",
]

SPEC_FORMAT = "guardrail-verifier-spec"
SPECS_DIR = Path(__file__).parent / "specs"
CHECKS = ("total_consistency", "required_coverage", "tool_contract", "grounding", "completion")
Check = Literal["total_consistency", "required_coverage", "tool_contract", "grounding", "completion"]
_ALL_CHECKS: tuple[Check, ...] = ("total_consistency", "required_coverage", "tool_contract", "grounding", "completion")


class SpecError(ValueError):
    """A spec file that cannot be read or does not validate (the message names the field)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc


class ResultShape(_Model):
    """One shape a tool result may take, as a full-match regular expression.

    ``kind="value"`` results carry the figure in the named group ``value`` (when the pattern has
    one); ``"empty"`` is a legitimate no-data answer ("No route found."), ``"error"`` a declared
    failure. Only ``value`` results are line items and count towards coverage.
    """

    pattern: str
    kind: Literal["value", "empty", "error"] = "value"

    @field_validator("pattern")
    @classmethod
    def _valid_regex(cls, value: str) -> str:
        _compile(value)
        return value

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return _compile(self.pattern)


class LineItem(_Model):
    """A tool whose value results are priced items a total is built from."""

    multiplicity: float = Field(1.0, gt=0)  # units of the item a total counts (2 hotel nights)
    key_args: list[str] = Field(default_factory=list)  # arguments naming the item; a repeat replaces it
    count: int | None = Field(None, ge=1)  # items the total includes; more observed -> any `count` of them


class ForEach(_Model):
    """One call per distinct value another tool was called with (weather for every hotel city)."""

    tool: str
    arg: str
    as_arg: str | None = None  # the argument name on this tool (defaults to `arg`)


class Requirement(_Model):
    """Calls a run must make to this tool: at least `count` distinct successful ones."""

    count: int = Field(1, ge=0)
    distinct_by: list[str] = Field(default_factory=list)  # argument names that make two calls distinct
    for_each: ForEach | None = None


class Fact(_Model):
    """A tool whose value result is a categorical fact about one argument (the weather of a city).

    The answer must not state a different value of `vocabulary` (plus every value the run saw)
    for the same argument.
    """

    key_arg: str
    vocabulary: list[str] = Field(default_factory=list)


class ToolSpec(_Model):
    returns: list[ResultShape] = Field(default_factory=list)  # empty: any result is a valid shape
    json_schema: dict[str, object] | None = None  # alternative contract: the result parsed as JSON
    line_item: LineItem | None = None
    required: Requirement | None = None
    combines: bool = False  # an arithmetic tool (calculator): its figures combine earlier ones
    expression_arg: str | None = None  # for a combining tool, the argument holding the expression
    fact: Fact | None = None


class Currency(_Model):
    symbols: list[str] = Field(default_factory=lambda: ["$"])
    codes: list[str] = Field(default_factory=lambda: ["USD"])
    words: list[str] = Field(default_factory=lambda: ["dollars", "dollar"])


class SpecMatch(_Model):
    """When a spec applies to a corpus: tools it must have used, tools it must not, a task pattern."""

    tools_all: list[str] = Field(default_factory=list)
    tools_none: list[str] = Field(default_factory=list)
    task_pattern: str | None = None  # regex searched in the task text; None: any task, or none
    no_task: bool = False  # applies only to runs that recorded no task text

    def matches(self, tools: Iterable[str], tasks: Sequence[str]) -> bool:
        names = set(tools)
        if not set(self.tools_all) <= names or names & set(self.tools_none):
            return False
        if self.no_task and tasks:
            return False
        if self.task_pattern is not None:
            pattern = _compile(self.task_pattern)
            return bool(tasks) and all(pattern.search(task) for task in tasks)
        return True


class VerifierSpec(_Model):
    """A task's spec (see the module docstring); `checks` lists which checks the task admits."""

    format: Literal["guardrail-verifier-spec"] = "guardrail-verifier-spec"
    version: Literal[1] = 1
    name: str = Field(min_length=1)
    description: str = ""
    match: SpecMatch = Field(default_factory=SpecMatch)
    priority: int = 0  # higher is tried first by `pick_spec`
    checks: list[Check] = Field(default_factory=lambda: list(_ALL_CHECKS))
    tools: dict[str, ToolSpec] = Field(default_factory=dict)
    error_shapes: list[str] = Field(default_factory=list)  # failures any tool may report (never line items)
    currency: Currency = Field(default_factory=Currency)
    total_words: list[str] = Field(default_factory=lambda: ["total"])
    constants: list[float] = Field(default_factory=list)  # figures a run may use without a tool giving them

    @field_validator("error_shapes")
    @classmethod
    def _valid_error_regexes(cls, value: list[str]) -> list[str]:
        for pattern in value:
            _compile(pattern)
        return value

    @model_validator(mode="after")
    def _references_exist(self) -> VerifierSpec:
        for name, tool in self.tools.items():
            if tool.required and tool.required.for_each and tool.required.for_each.tool not in self.tools:
                raise ValueError(f"tools.{name}.required.for_each names unknown tool {tool.required.for_each.tool!r}")
            if tool.combines and not tool.expression_arg:
                raise ValueError(f"tools.{name}: a combining tool needs expression_arg")
        return self

    @cached_property
    def error_regexes(self) -> list[re.Pattern[str]]:
        return [_compile(p) for p in self.error_shapes]

    @cached_property
    def total_regex(self) -> re.Pattern[str]:
        words = "|".join(re.escape(w) for w in sorted(self.total_words, key=len, reverse=True))
        return re.compile(rf"\b(?:{words})\b", re.IGNORECASE)

    def runs(self, check: str) -> bool:
        return check in self.checks

    def line_item_tools(self) -> dict[str, LineItem]:
        return {name: tool.line_item for name, tool in self.tools.items() if tool.line_item is not None}


def load_spec(source: str | Path) -> VerifierSpec:
    """A spec from a file (.json or .toml) or the name of a shipped spec (``"booking_tour"``)."""
    path = Path(source)
    if not path.exists() and not path.suffix:
        shipped = {p.stem: p for p in _shipped_paths()}
        if str(source) not in shipped:
            raise SpecError(f"no spec file {source!r} and no shipped spec of that name (shipped: {sorted(shipped)})")
        path = shipped[str(source)]
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec: {exc.strerror or exc}") from exc
    try:
        raw = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {exc}") from exc
    try:
        return VerifierSpec.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise SpecError(f"{path}: invalid verifier spec: {problems}") from exc


def _shipped_paths() -> list[Path]:
    return sorted([*SPECS_DIR.glob("*.json"), *SPECS_DIR.glob("*.toml")])


def builtin_specs() -> list[VerifierSpec]:
    """The specs shipped with guardrail, highest priority first."""
    return sorted((load_spec(p) for p in _shipped_paths()), key=lambda s: -s.priority)


def pick_spec(tools: Iterable[str], tasks: Sequence[str] = (),
              specs: Sequence[VerifierSpec] | None = None) -> VerifierSpec:
    """The first spec (by priority) whose match accepts these tools and task texts."""
    names = set(tools)
    candidates = builtin_specs() if specs is None else sorted(specs, key=lambda s: -s.priority)
    for spec in candidates:
        if spec.match.matches(names, tasks):
            return spec
    raise SpecError(f"no spec matches tools {sorted(names)}; pass --spec FILE")
