"""The per-task verifier spec: which tools return line items, what each may return, what a run must call.

A spec is written once by whoever defines a task, as JSON or TOML (`verifiers/specs/` ships the
booking tour, the mock booking tools, and the research tasks), or fitted from healthy runs
(`verifiers.fit`). It is pydantic-validated on load, so a typo in a spec is a clear error naming
the field, not a silently weaker check.

Version 2 adds what version 1 could not say: `quantities` read from the task text or from another
tool's result (nights, per-item quantities, a head count, a tax rate), multiplicities and required
counts written as small expressions over them, optional line items, a `total` rule (percentage
adjustments, rounding), `variants` (one spec per task family, as `fit-spec` writes them) and the
`support` each fitted rule held on. Version 1 files load unchanged.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from verifiers.expressions import ExpressionError, expression_names

__all__ = [
    "CHECKS",
    "SPEC_FORMAT",
    "SPEC_VERSION",
    "SPECS_DIR",
    "Adjustment",
    "Currency",
    "Fact",
    "FitInfo",
    "ForEach",
    "LineItem",
    "Quantity",
    "Requirement",
    "ResultShape",
    "Rounding",
    "SpecError",
    "SpecMatch",
    "ToolSpec",
    "TotalRule",
    "VerifierSpec",
    "builtin_specs",
    "dump_spec",
    "load_spec",
    "pick_spec",
]

SPEC_FORMAT = "guardrail-verifier-spec"
SPEC_VERSION: Literal[2] = 2  # what this module writes; version 1 files still load
SPECS_DIR = Path(__file__).parent / "specs"
MAX_TASK_MATCH_CHARS = 8_000  # task texts longer than this are not matched against task patterns
CHECKS = ("total_consistency", "required_coverage", "tool_contract", "grounding", "completion", "answer_parts",
          "tool_error", "provenance")
Check = Literal["total_consistency", "required_coverage", "tool_contract", "grounding", "completion", "answer_parts",
                "tool_error", "provenance"]
_ALL_CHECKS: tuple[Check, ...] = ("total_consistency", "required_coverage", "tool_contract", "grounding", "completion",
                                  "answer_parts", "tool_error", "provenance")


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
    support: int | None = Field(default=None, ge=0)  # fitted: how many healthy results had this shape

    @field_validator("pattern")
    @classmethod
    def _valid_regex(cls, value: str) -> str:
        _compile(value)
        return value

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return _compile(self.pattern)


def _valid_expression(value: float | str) -> float | str:
    if isinstance(value, str):
        try:
            expression_names(value)
        except ExpressionError as exc:
            raise ValueError(str(exc)) from exc
    elif value <= 0:
        raise ValueError("must be greater than 0")
    return value


class LineItem(_Model):
    """A tool whose value results are priced items a total is built from.

    `multiplicity` is a number (2 hotel nights) or, in version 2, an expression over the spec's
    quantities (``"nights"``, ``"2 * bags"``, ``"qty"`` for a per-item quantity from the task).
    """

    multiplicity: float | str = 1.0  # units of the item a total counts
    key_args: list[str] = Field(default_factory=list)  # arguments naming the item; a repeat replaces it
    count: int | None = Field(None, ge=1)  # items the total includes; more observed -> any `count` of them
    optional: bool = False  # the total may leave these items out altogether (an optional extra)
    unit: str | None = None  # what one item is priced per ("night"), for the reader and the messages
    support: int | None = Field(default=None, ge=0)

    @field_validator("multiplicity")
    @classmethod
    def _valid_multiplicity(cls, value: float | str) -> float | str:
        return _valid_expression(value)


class ForEach(_Model):
    """One call per distinct value another tool was called with (weather for every hotel city)."""

    tool: str
    arg: str
    as_arg: str | None = None  # the argument name on this tool (defaults to `arg`)


class Requirement(_Model):
    """Calls a run must make to this tool: at least `count` distinct successful ones.

    `count` is a number or (version 2) an expression over quantities (``"stops - 1"``). Calls
    count only when each `args_in_task` argument's value appears in the task text.
    """

    count: int | str = 1
    distinct_by: list[str] = Field(default_factory=list)  # argument names that make two calls distinct
    for_each: ForEach | None = None
    args_in_task: list[str] = Field(default_factory=list)
    support: int | None = Field(default=None, ge=0)

    @field_validator("count")
    @classmethod
    def _valid_count(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 0:
            raise ValueError("must be 0 or more")
        if isinstance(value, str):
            _valid_expression(value)
        return value


class Fact(_Model):
    """A value a tool returns about one entity (the weather of a city, a contact's email, an order's status).

    `field` is the dotted path of the value in a JSON record result (``condition``, ``items[].sku``);
    None: the whole result is the value. The entity is the call's `key_arg`, or the record's own
    `key_field` (``city``, ``name``). The answer must not state, for the same entity, a different
    value of `vocabulary` (plus every value the run saw) or, for open values (emails, codes), a
    different value of `shape` (a regular expression).
    """

    key_arg: str | None = None
    field: str | None = None
    key_field: str | None = None
    vocabulary: list[str] = Field(default_factory=list)
    shape: str | None = None
    support: int | None = Field(default=None, ge=0)
    exceptions: list[str] = Field(default_factory=list)  # fitted: healthy runs the rule did not hold on

    @model_validator(mode="after")
    def _has_key(self) -> Fact:
        if self.key_arg is None and self.key_field is None:
            raise ValueError("a fact needs key_arg (the call's argument naming the entity) or key_field")
        if self.shape is not None:
            _compile(self.shape)
        return self


class AnswerPart(_Model):
    """A value of each successful call to this tool that the answer must state (the mean and the median asked for).

    `field`: the dotted path in a JSON record result, or None for the result's own figure or word.
    A number counts as stated in any unit it converts to; a word or code as written (case aside).
    """

    field: str | None = None
    support: int | None = Field(default=None, ge=0)
    exceptions: list[str] = Field(default_factory=list)


class Quantity(_Model):
    """A number a total or a requirement counts by, read from the task text or from a tool's result.

    From the task: `pattern` is searched in the task text and its group ``value`` read (``measure
    = "value"``) or its list elements counted (``"items"``, split at `separators`); a pattern with
    ``{key}`` is per item: it is searched with each line item's key put in (``(?P<value>\\d+) x {key}``).
    From a tool: its latest successful result's figure (``"value"``), or its non-empty lines or
    JSON list length (``"items"``). `scale` turns a percentage into a rate (0.01).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    source: Literal["task", "tool"] = Field(alias="from")
    pattern: str | None = None
    tool: str | None = None
    measure: Literal["value", "items"] = "value"
    separators: list[str] = Field(default_factory=lambda: ["->", ",", " and "])
    scale: float = 1.0
    support: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _source_fields(self) -> Quantity:
        if self.source == "task":
            if not self.pattern:
                raise ValueError("a quantity from the task needs a pattern with a group named value")
            if "(?P<value>" not in self.pattern:
                raise ValueError(f"pattern {self.pattern!r} has no group named value")
            _compile(self.pattern.replace("{key}", "key"))
        elif not self.tool:
            raise ValueError("a quantity from a tool needs the tool's name")
        return self

    @property
    def keyed(self) -> bool:
        return self.source == "task" and "{key}" in (self.pattern or "")


class Adjustment(_Model):
    """One step from the sum of the line items to the total: a percentage added or taken off, a factor, a fee."""

    kind: Literal["percent_add", "percent_off", "multiply", "add"]
    by: float | str  # a rate (0.08), or an expression over quantities

    @field_validator("by")
    @classmethod
    def _valid_by(cls, value: float | str) -> float | str:
        if isinstance(value, str):
            _valid_expression(value)
        return value

    def apply(self, amount: float, by: float) -> float:
        if self.kind == "percent_add":
            return amount * (1 + by)
        if self.kind == "percent_off":
            return amount * (1 - by)
        if self.kind == "multiply":
            return amount * by
        return amount + by


class Rounding(_Model):
    """How a stated total may round the exact one: to `places` decimals, to the nearest, down, up, or either way."""

    places: int = Field(default=2, ge=0, le=6)
    mode: Literal["nearest", "down", "up", "any"] = "nearest"


class TotalRule(_Model):
    """What turns the line items into the stated total beyond their sum (version 2)."""

    adjustments: list[Adjustment] = Field(default_factory=list)
    rounding: Rounding = Field(default_factory=lambda: Rounding())
    support: int | None = Field(default=None, ge=0)  # fitted: healthy runs the whole relation held on
    chance: float | None = Field(default=None, ge=0, le=1)  # fitted: share of shuffled run pairs it held on by chance


class ToolSpec(_Model):
    returns: list[ResultShape] = Field(default_factory=list)  # empty: any result is a valid shape
    json_schema: dict[str, object] | None = None  # alternative contract: the result parsed as JSON
    line_item: LineItem | None = None
    required: Requirement | None = None
    combines: bool = False  # an arithmetic tool (calculator): its figures combine earlier ones
    expression_arg: str | None = None  # for a combining tool, the argument holding the expression
    fact: Fact | None = None
    facts: list[Fact] = Field(default_factory=list)  # (version 2) more facts, e.g. one per record field
    answer: list[AnswerPart] = Field(default_factory=list)  # (version 2) values the answer must state
    # (version 2) argument paths the provenance check reads for this tool; None: every identifier-like one
    provenance: list[str] | None = None

    def all_facts(self) -> list[Fact]:
        return ([self.fact] if self.fact is not None else []) + list(self.facts)


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

    @field_validator("task_pattern")
    @classmethod
    def _valid_task_pattern(cls, value: str | None) -> str | None:
        if value is not None:
            _compile(value)
        return value

    def matches(self, tools: Iterable[str], tasks: Sequence[str]) -> bool:
        names = set(tools)
        if not set(self.tools_all) <= names or names & set(self.tools_none):
            return False
        if self.no_task and tasks:
            return False
        if self.task_pattern is not None:
            pattern = _compile(self.task_pattern)
            # A task text past the cap is not matched: bounded time on any input, and the run gets a
            # less specific spec rather than none.
            return bool(tasks) and all(len(task) <= MAX_TASK_MATCH_CHARS and pattern.search(task) for task in tasks)
        return True


class FitInfo(BaseModel):
    """Where a fitted spec came from and how it did: written by `fit-spec`, read by people (never by a check)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    family: str = ""
    healthy_fit: int = 0  # healthy runs the rules were fitted on
    held_out: dict[str, object] = Field(default_factory=dict)  # healthy runs not used for fitting, and what flagged them
    min_support: int = 0
    messages: list[str] = Field(default_factory=list)


_V2_FIELDS = ("quantities", "total", "variants", "fitted")


class VerifierSpec(_Model):
    """A task's spec (see the module docstring); `checks` lists which checks the task admits."""

    format: Literal["guardrail-verifier-spec"] = "guardrail-verifier-spec"
    version: Literal[1, 2] = SPEC_VERSION
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
    # Numbers stated with a unit that grounding checks, by dimension ("[temperature]", "percent"); None: every one.
    unit_dimensions: list[str] | None = None
    quantities: dict[str, Quantity] = Field(default_factory=dict)
    total: TotalRule = Field(default_factory=lambda: TotalRule())
    variants: list[VerifierSpec] = Field(default_factory=list)  # per task family; the first that matches a run wins
    fitted: FitInfo | None = None

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
        for where, expression in self._expressions():
            unknown = expression_names(expression) - set(self.quantities)
            if unknown:
                raise ValueError(f"{where} uses {', '.join(sorted(unknown))}, which quantities does not define")
            if self.version == 1:
                raise ValueError(f"{where}: an expression needs version 2")
        if self.version == 1:
            used = [f for f in _V2_FIELDS if f in self.model_fields_set]
            if used:
                raise ValueError(f"{', '.join(used)} need version 2 (this spec says version 1)")
        for variant in self.variants:
            if variant.variants:
                raise ValueError(f"variant {variant.name!r} has variants of its own; variants nest one level only")
        return self

    def _expressions(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for name, tool in self.tools.items():
            if tool.line_item is not None and isinstance(tool.line_item.multiplicity, str):
                found.append((f"tools.{name}.line_item.multiplicity", tool.line_item.multiplicity))
            if tool.required is not None and isinstance(tool.required.count, str):
                found.append((f"tools.{name}.required.count", tool.required.count))
        found += [(f"total.adjustments.{i}.by", a.by) for i, a in enumerate(self.total.adjustments)
                  if isinstance(a.by, str)]
        return found

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

    def for_run(self, tools: Iterable[str], task: str | None) -> VerifierSpec:
        """The variant for one run (its tools and task text), or this spec when no variant matches."""
        names = set(tools)
        tasks = [task] if task else []
        for variant in sorted(self.variants, key=lambda v: -v.priority):
            if variant.match.matches(names, tasks):
                return variant
        return self


def dump_spec(spec: VerifierSpec) -> str:
    """A spec as the JSON a person reads and edits (fields left at their defaults are left out)."""
    body = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    head = {"format": spec.format, "version": spec.version, "name": spec.name}
    return json.dumps(head | body, indent=2) + "\n"


def load_spec(source: str | os.PathLike[str] | Mapping[str, Any]) -> VerifierSpec:
    """A spec from a file (.json or .toml), the name of a shipped spec (``"booking_tour"``), or its mapping."""
    if isinstance(source, Mapping):
        try:
            return VerifierSpec.model_validate(dict(source))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
            raise SpecError(f"invalid verifier spec: {problems}") from exc
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
