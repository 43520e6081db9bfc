"""`fit_spec`: a verifier spec inferred from healthy runs only, one variant per task family.

A family is the runs that share a tool roster and a task template (`verifiers.fit_template`).
Per family the fit writes, in the ordinary spec format so a person can read and edit it:

- contracts: each tool's result shapes (`verifiers.fit_shapes`);
- coverage: the tools every healthy run called, how many distinct calls (a constant or the
  task's own count, "stops - 1"), the arguments that tell calls apart, per-item links (weather
  for every hotel city) and which arguments must name something in the task;
- totals: the relation between what the run observed and the total its answer states
  (`verifiers.fit_totals`), kept only when it holds on every healthy run and not by chance on
  shuffled runs (one run's answer against another run's observations);
- grounding: the figures a healthy run may use without a tool giving them, and the categorical
  facts (weather words) an answer must not contradict.

Every rule carries its support (runs or results it held on) and rules below `min_support` are
dropped; a family with fewer healthy runs than that gets no variant (its runs get the generic
completion check) and a message says so. Zero false positives on the fitting runs is checked,
not assumed: the fitted variant is run over them and any check that still flags one is dropped
with a message. `holdout` keeps a share of each family's healthy runs out of the fit and reports
what the written spec flags on them.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from guardrail.core.events import Episode, StepKind, ToolEvent
from guardrail.core.provenance import ProvenanceContext
from verifiers.answer_parts import part_values, states_value
from verifiers.fit_shapes import figures_of, fit_shapes, value_anchors
from verifiers.fit_template import SEPARATORS, Template, make_template, merge_optional
from verifiers.fit_totals import GroupData, Relation, search_relations
from verifiers.grounding import GroundingLedger
from verifiers.observed import Call, arg_key, call_from_event
from verifiers.offline import verify_episode
from verifiers.provenance import ground_call
from verifiers.quantities import count_items, item_key_text, result_items
from verifiers.records import parse_record, record_fields
from verifiers.spec import (
    CHECKS,
    Adjustment,
    AnswerPart,
    Fact,
    FitInfo,
    ForEach,
    LineItem,
    Quantity,
    Requirement,
    Rounding,
    SpecMatch,
    ToolSpec,
    TotalRule,
    VerifierSpec,
)
from verifiers.total_consistency import check_total_consistency, stated_totals

__all__ = ["DEFAULT_MIN_SUPPORT", "DEFAULT_SUPPORT", "FamilyReport", "FitResult", "fit_spec", "fit_spec_report"]

ANY_TASK = "<any task>"
DEFAULT_MIN_SUPPORT = 5
DEFAULT_SUPPORT = 0.95  # a rule is kept when it holds on at least this share of a family's healthy runs
TOTALS_MAJORITY = 0.5  # a totals relation chance cannot explain is kept when it holds on more than this share
DEFAULT_MAX_CHANCE = 0.05
MAX_CHANCE_PAIRS = 400
MIN_CHANCE_PAIRS = 10
TOTAL_WORDS = ["grand total", "total", "totals", "overall", "altogether", "in all", "comes to", "sum", "answer"]
ERROR_SHAPES = [r"(?s)(?:Error|ERROR): .*"]
_EXPRESSION = re.compile(r"\d\s*[-+*/]\s*[\d(]|\(\s*\d")
# Dates, times and versions look like arithmetic ("2025-05-12", "10/12/2025", "12:30", "v1.2-3"); they are not.
_NOT_EXPRESSIONS = re.compile(r"\b\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
                              r"|\b\d{1,2}:\d{2}\b|\b\d{3}-\d{3,4}(?:-\d{3,4})?\b")
_KEYED_JOINERS = {"x": "x", "×": "×", "*": r"\*"}


@dataclass
class FamilyReport:
    """What the fit did for one family: its runs, the checks its variant runs, and why anything was left out."""

    name: str
    template: str
    healthy_fit: int
    held_out: int
    held_out_flagged: dict[str, int] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    fitted: bool = True
    exceptions: dict[str, list[str]] = field(default_factory=dict)  # rule -> healthy fitting runs that break it
    held_out_rates: dict[str, float] = field(default_factory=dict)  # rule -> share of held-out healthy runs it flags


@dataclass
class FitResult:
    """A fitted spec and the per-family report `fit-spec` prints."""

    spec: VerifierSpec
    families: list[FamilyReport]
    messages: list[str]


# ------------------------------------------------------------------------------------------ families
def _arg_values(episode: Episode) -> list[str]:
    values: list[str] = []
    for step in episode.steps:
        for event in step.tool_events:
            if isinstance(event.args, dict):
                values += [str(v) for v in event.args.values() if isinstance(v, str | int | float)]
    return values


def _family_key(episode: Episode, entities: Sequence[str]) -> tuple[tuple[str, ...], str | None, Template | None]:
    roster = tuple(sorted(episode.tools))
    if not episode.task:
        return roster, None, None
    template = make_template(episode.task, entities)
    return roster, (template.key if template else ANY_TASK), template


def _events(episode: Episode) -> list[tuple[int, ToolEvent]]:
    return [(step.index, event) for step in episode.steps for event in step.tool_events]


def _args(event: ToolEvent) -> dict[str, Any]:
    if isinstance(event.args, dict):
        return event.args
    if isinstance(event.args, str):
        try:
            parsed = json.loads(event.args)
        except json.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _arg_texts(event: ToolEvent) -> list[str]:
    return [str(v) for v in _args(event).values() if isinstance(v, str | int | float) and not isinstance(v, bool)]


def _norm(value: Any) -> str:
    return str(value).strip().casefold()


# ------------------------------------------------------------------------------------------ tools
def _combining_arg(events: list[ToolEvent]) -> str | None:
    """The argument of an arithmetic tool (a calculator) that holds its expression, when most calls have one."""
    counts: Counter[str] = Counter()
    for event in events:
        for name, value in _args(event).items():
            if isinstance(value, str) and _EXPRESSION.search(_NOT_EXPRESSIONS.sub(" ", value)):
                counts[name] += 1
    if not counts:
        return None
    name, n = counts.most_common(1)[0]
    return name if n >= max(1, len(events) / 2) else None


def _key_args(per_run: list[list[ToolEvent]]) -> list[str]:
    """Arguments whose value differs between two calls of the tool in one run: what names one item."""
    varying: set[str] = set()
    for events in per_run:
        seen: dict[str, set[str]] = defaultdict(set)
        for event in events:
            for name, value in _args(event).items():
                seen[name].add(_norm(value))
        varying |= {name for name, values in seen.items() if len(values) > 1}
    return sorted(varying)


@dataclass
class _Family:
    """One family's healthy fitting runs and what the fit learns about its tools."""

    runs: list[Episode]
    template: Template | None
    roster: tuple[str, ...]
    min_support: int
    max_chance: float
    share: float = 1.0  # the least share of healthy fitting runs a rule must hold on (the rest are its exceptions)
    messages: list[str] = field(default_factory=list)
    exceptions: dict[str, list[str]] = field(default_factory=dict)  # rule -> the healthy runs it did not hold on
    key_args: dict[str, list[str]] = field(default_factory=dict)
    combining: dict[str, str] = field(default_factory=dict)

    @property
    def tasks(self) -> list[str]:
        return [e.task or "" for e in self.runs]

    @property
    def allowed(self) -> int:
        """How many healthy fitting runs a rule may fail on and still be kept."""
        return int((1.0 - self.share) * len(self.runs) + 1e-9)

    def note_exceptions(self, rule: str, episode_ids: Sequence[str]) -> None:
        """Keep a rule that some healthy runs break, and say which: a person relabels them or turns the rule off."""
        ids = sorted(set(episode_ids))
        if not ids:
            return
        self.exceptions[rule] = ids
        self.messages.append(f"{rule}: kept; {len(ids)} healthy run(s) break it: {', '.join(ids[:10])}"
                             + (" ..." if len(ids) > 10 else "") + " (relabel them, or keep the rule off)")

    def tool_events(self) -> dict[str, list[list[ToolEvent]]]:
        per_tool: dict[str, list[list[ToolEvent]]] = defaultdict(lambda: [[] for _ in self.runs])
        for r, episode in enumerate(self.runs):
            for _, event in _events(episode):
                per_tool[event.name][r].append(event)
        return dict(per_tool)


def _base_spec(family: _Family, name: str, tools: dict[str, ToolSpec], **extra: Any) -> VerifierSpec:
    match = SpecMatch(tools_all=list(family.roster), task_pattern=family.template.pattern if family.template else None,
                      no_task=not any(family.tasks))
    return VerifierSpec(name=name, match=match, tools=tools, error_shapes=ERROR_SHAPES, total_words=TOTAL_WORDS,
                        **extra)


def _calls(spec: VerifierSpec, episode: Episode) -> list[Call]:
    return [call_from_event(spec, step, event) for step, event in _events(episode)]


# ------------------------------------------------------------------------------------------ quantities
def _quantity(source: str, **fields: Any) -> Quantity:
    return Quantity.model_validate({"from": source, **fields})


def _task_quantities(family: _Family) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Quantity]]:
    """(multipliers, rates, their spec definitions) read from the family's task slots."""
    template = family.template
    if template is None:
        return {}, {}, {}
    readings = [template.values(task) for task in family.tasks]
    if any(r is None for r in readings):
        return {}, {}, {}
    multipliers: dict[str, np.ndarray] = {}
    rates: dict[str, np.ndarray] = {}
    defs: dict[str, Quantity] = {}
    for slot in template.slots:
        if slot.quantity is None:
            continue
        texts = [r[slot.group] for r in readings if r is not None]
        if slot.kind == "number":
            values = np.array([float(t) for t in texts])
            (rates if slot.percent else multipliers)[slot.quantity] = values / 100 if slot.percent else values
            defs[slot.quantity] = _quantity("task", pattern=template.slot_pattern(slot, family.tasks),
                                           scale=0.01 if slot.percent else 1.0, support=len(texts))
        else:
            multipliers[slot.quantity] = np.array([float(count_items(t, SEPARATORS)) for t in texts])
            defs[slot.quantity] = _quantity("task", pattern=template.slot_pattern(slot, family.tasks),
                                           measure="items", separators=SEPARATORS, support=len(texts))
    return multipliers, rates, defs


def _tool_quantities(family: _Family, spec: VerifierSpec,
                     calls: list[list[Call]]) -> tuple[dict[str, np.ndarray], dict[str, Quantity]]:
    """Counts read from a tool's result (the travellers listed in a file), for tools every run called without figures."""
    multipliers: dict[str, np.ndarray] = {}
    defs: dict[str, Quantity] = {}
    for tool in sorted({c.tool for run in calls for c in run}):
        if tool in family.combining:
            continue
        last = [next((c for c in reversed(run) if c.tool == tool and c.made and c.result), None) for run in calls]
        if any(c is None for c in last) or any(figures_of(c.result or "") for c in last if c is not None):
            continue
        counts = np.array([float(result_items(c.result or "")) for c in last if c is not None])
        if counts.max() <= 1:
            continue  # one item every time: a count that multiplies nothing
        name = f"{tool}_items"
        multipliers[name] = counts
        defs[name] = _quantity("tool", tool=tool, measure="items", support=len(calls))
    return multipliers, defs


def _keyed(family: _Family, tool: str, keys: list[list[str]]) -> tuple[list[list[float]], str] | None:
    """Per-item quantities from the task ("3 x rain jacket"): weights per run and the pattern, when every item has one."""
    joiners: set[str] = set()
    weights: list[list[float]] = []
    for task, run_keys in zip(family.tasks, keys, strict=True):
        run_weights: list[float] = []
        for key in run_keys:
            key_re = r"\s+".join(re.escape(w) for w in key.split())
            match = re.search(rf"(\d+(?:\.\d+)?)\s*([x×*])\s*{key_re}(?!\w)", task, re.IGNORECASE) if key else None
            if match is None:
                return None
            joiners.add(match.group(2))
            run_weights.append(float(match.group(1)))
        weights.append(run_weights)
    if len(joiners) != 1 or not any(weights):
        return None
    return weights, rf"(?P<value>\d+(?:\.\d+)?)\s*{_KEYED_JOINERS[joiners.pop()]}\s*{{key}}"


# ------------------------------------------------------------------------------------------ totals
def _groups(family: _Family, calls: list[list[Call]]) -> tuple[list[GroupData], dict[tuple[str, str], list[list[str]]]]:
    groups: list[GroupData] = []
    keys_of: dict[tuple[str, str], list[list[str]]] = {}
    for tool in sorted({c.tool for run in calls for c in run}):
        if tool in family.combining:
            continue
        values = [c.result or "" for run in calls for c in run if c.tool == tool and c.classified.kind == "value"]
        for anchor in value_anchors(values):
            items: list[list[float]] = []
            keys: list[list[str]] = []
            for run in calls:
                by_key: dict[tuple[str | None, ...], float] = {}
                for call in run:
                    if call.tool != tool or call.classified.kind != "value":
                        continue
                    figures = figures_of(call.result or "")
                    chosen = figures[0] if anchor == "*" else next((f for f in figures if f.anchor == anchor), None)
                    if chosen is not None:
                        by_key[arg_key(call, family.key_args.get(tool, []))] = chosen.value
                items.append(list(by_key.values()))
                keys.append([item_key_text(k) if family.key_args.get(tool) else "" for k in by_key])
            if any(items):
                groups.append(GroupData(tool, anchor, items))
                keys_of[(tool, anchor)] = keys
    return groups, keys_of


def _unit(anchor: str) -> str | None:
    words = [w for w in re.findall(r"[a-z]+", anchor) if w not in ("per", "a", "each")]
    return " ".join(words) if anchor.startswith(("/", "per", "a ", "each")) and words else None


def _fit_totals(family: _Family, spec: VerifierSpec, calls: list[list[Call]],
                tools: dict[str, ToolSpec]) -> VerifierSpec | None:
    stated = [[f.value for f in stated_totals(spec, e.answer or "")[0]] for e in family.runs]
    missing = sum(1 for s in stated if not s)
    if missing > family.allowed:
        family.messages.append(f"totals: {missing} of {len(stated)} healthy answers state no total; no totals check")
        return None
    multipliers, rates, defs = _task_quantities(family)
    tool_multipliers, tool_defs = _tool_quantities(family, spec, calls)
    multipliers |= tool_multipliers
    defs |= tool_defs
    groups, keys_of = _groups(family, calls)
    if not groups:
        family.messages.append("totals: no tool returned figures; no totals check")
        return None
    keyed_patterns: dict[str, str] = {}
    if family.template is not None:
        for group in groups:
            found = _keyed(family, group.tool, keys_of[(group.tool, group.anchor)])
            if found is not None:
                group.keyed_weights, keyed_patterns[group.tool] = found
    share = 1.0 - family.allowed / len(stated)
    relations = search_relations(groups, stated, multipliers, rates, share=share)
    if not relations:
        # A relation that reproduces stated totals to the cent is no accident even on a bare majority of the runs
        # (the shuffled-pair check below measures it): it is searched for on a majority, and kept past the support
        # threshold only when chance cannot explain it; the runs it fails on are listed (mislabelled, or failures).
        relations = search_relations(groups, stated, multipliers, rates, share=TOTALS_MAJORITY)
    if not relations:
        family.messages.append(f"totals: no relation of the {len(groups)} figure group(s) reproduces "
                               f"{'every' if share >= 1 else f'{share:.0%} of the'} healthy total(s); no totals check")
        return None
    counts = {(g.tool, g.anchor): {len(v) for v in g.items} for g in groups}
    tried: list[str] = []
    scored = []
    for order, relation in enumerate(relations):
        candidate = _with_relation(family, spec, tools, relation, defs, keyed_patterns, counts)
        broken = [e.episode_id for run, e in zip(_recalled(candidate, family.runs), family.runs, strict=True)
                  if check_total_consistency(candidate, run, e.answer, step=None, task=e.task)]
        if len(broken) <= family.allowed or len(broken) < len(family.runs) * (1 - TOTALS_MAJORITY):
            scored.append((len(broken), order, relation, candidate, broken))
        if len(broken) <= family.allowed:
            break  # the simplest relation within the support threshold: the rest are only more complex
    for _n, _order, relation, candidate, broken in sorted(scored, key=lambda item: item[:2]):  # most support first
        chance = _chance(candidate, family)
        if chance is None and len(broken) > family.allowed:
            continue
        if chance is None or chance <= family.max_chance:
            total = candidate.total.model_copy(update={"support": len(family.runs) - len(broken), "chance": chance})
            family.note_exceptions("total_consistency", broken)
            return candidate.model_copy(update={"total": total})
        tried.append(f"{_describe(relation)} (chance {chance:.2f})")
    family.messages.append("totals: every relation that held also held on shuffled runs by chance: "
                           + "; ".join(tried[:3]) + "; no totals check")
    return None


def _describe(relation: Relation) -> str:
    parts = [f"{m.expression if not m.keyed else 'qty'} x {tool}" for (tool, _), m in relation.multipliers.items()]
    return " + ".join(parts)


def _with_relation(family: _Family, spec: VerifierSpec, tools: dict[str, ToolSpec], relation: Relation,
                   defs: dict[str, Quantity], keyed_patterns: dict[str, str],
                   counts: dict[tuple[str, str], set[int]]) -> VerifierSpec:
    updated = dict(tools)
    quantities: dict[str, Quantity] = {}
    for (tool, anchor), multiplier in relation.multipliers.items():
        expression: float | str = multiplier.expression
        if multiplier.keyed:
            expression = re.sub(r"\W", "_", tool) + "_quantity"
            quantities[expression] = _quantity("task", pattern=keyed_patterns[tool], support=len(family.runs))
        elif isinstance(expression, str):
            for name in re.findall(r"[A-Za-z_]\w*", expression):
                quantities[name] = defs[name]
        observed = counts[(tool, anchor)]
        count = relation.subset[1] if relation.subset and relation.subset[0] == (tool, anchor) else (
            observed.pop() if len(observed) == 1 else None)
        line = LineItem(multiplicity=expression, key_args=family.key_args.get(tool, []), count=count or None,
                        unit=_unit(anchor), support=len(family.runs))
        events = [e for run in family.runs for _, e in _events(run) if e.name == tool]
        shapes = fit_shapes(tool, [(e.result or "", e.is_error) for e in events], anchor=anchor,
                            min_support=family.min_support, arguments=[_arg_texts(e) for e in events])
        updated[tool] = updated[tool].model_copy(update={"line_item": line, "returns": shapes.returns})
    adjustments = []
    if relation.adjustment is not None:
        kind, name = relation.adjustment
        adjustments.append(Adjustment(kind=kind, by=name))  # type: ignore[arg-type]
        quantities[name] = defs[name]
    rounding = Rounding(places=2, mode="nearest") if relation.places == 2 else Rounding(places=0, mode="any")
    return spec.model_copy(update={"tools": updated, "quantities": quantities,
                                   "total": TotalRule(adjustments=adjustments, rounding=rounding)})


def _recalled(spec: VerifierSpec, runs: Sequence[Episode]) -> list[list[Call]]:
    """Each run's calls classified by this spec (a new anchor moves the value group)."""
    return [_calls(VerifierSpec.model_validate(spec.model_dump()), e) for e in runs]


def _chance(spec: VerifierSpec, family: _Family) -> float | None:
    """Share of shuffled pairs (one run's answer, another run's observations) the totals check passes.

    A pair counts only when the two runs share no observed figure: an answer that also fits a run
    which saw the same prices is the same fact, not chance (a small catalogue repeats its prices).
    With fewer than `MIN_CHANCE_PAIRS` such pairs, any two runs that did not observe the same figures count.
    """
    runs = family.runs
    calls = _recalled(spec, runs)
    signatures = [frozenset(round(c.classified.value, 2) for c in run if c.classified.kind == "value"
                            and c.classified.value is not None and c.tool not in family.combining) for run in calls]
    indexes = range(len(runs))
    pairs = [(i, j) for i in indexes for j in indexes if i != j and not signatures[i] & signatures[j]]
    if len(pairs) < MIN_CHANCE_PAIRS:
        pairs = [(i, j) for i in indexes for j in indexes if i != j and signatures[i] != signatures[j]]
    if not pairs:
        return None
    rng = random.Random(0)
    if len(pairs) > MAX_CHANCE_PAIRS:
        pairs = rng.sample(pairs, MAX_CHANCE_PAIRS)
    passed = sum(1 for i, j in pairs
                 if not check_total_consistency(spec, calls[j], runs[i].answer, step=None, task=runs[j].task))
    return round(passed / len(pairs), 4)


# ------------------------------------------------------------------------------------------ coverage
def _made_counts(family: _Family, calls: list[list[Call]], tool: str) -> list[int]:
    counts = []
    for run in calls:
        made = [c for c in run if c.tool == tool and c.made]
        key = family.key_args.get(tool, [])
        counts.append(len({arg_key(c, key) for c in made}) if key else len(made))
    return counts


def _count_rule(counts: list[int], quantities: dict[str, np.ndarray], allowed: int = 0,
                lists: frozenset[str] = frozenset()) -> int | str:
    """How many distinct calls a run needs: the task's or an earlier result's count of items ("stops - 1", a
    listing's length), a constant every run made, or one call when the counts vary with nothing a run can read.

    The smallest count seen would not generalize: a three-item task of a family fitted on four-item
    tasks would fail it. A count of items (`lists`: list slots of the task, a result's lines) is
    preferred even when the fitting tasks all had the same number of them; another quantity only
    when it varies. `allowed` runs may break the rule (they are the fit's exceptions).
    """
    observed = np.array(counts, dtype=float)
    most, n = Counter(counts).most_common(1)[0]
    if max(counts) <= 1:
        return most if len(counts) - n <= allowed else 0
    for name, values in sorted(quantities.items(), key=lambda kv: (kv[0] not in lists, kv[0])):
        constant = len(set(values.tolist())) == 1
        if constant and name not in lists:
            continue
        # A constant count of items explains a count only as itself or one less (legs between stops).
        for offset in (0, -1) if constant else (0, -1, 1, -2, 2, -3, 3):
            if int(np.sum(values + offset != observed)) <= allowed and (values + offset).min() >= 0:
                return name if offset == 0 else f"{name} {'+' if offset > 0 else '-'} {abs(offset)}"
    if len(counts) - n <= allowed:
        return most
    return 1 if min(counts) >= 1 else 0


def _links(calls: list[list[Call]], tool: str, other: str, arg: str) -> bool:
    """In every run, `tool` was answered for every `arg` value `other` was answered for."""
    for run in calls:
        needed = {v for c in run if c.tool == other and c.made and (v := c.arg(arg))}
        covered = {v for c in run if c.tool == tool and c.made and (v := c.arg(arg))}
        if not needed or not needed <= covered:
            return False
    return True


def _comes_first(calls: list[list[Call]], first: str, then: str) -> bool:
    """`first` is called before `then` in most runs (which way a link between equal sets points)."""
    ahead = 0
    for run in calls:
        order = [c.tool for c in run]
        ahead += first in order and then in order and order.index(first) < order.index(then)
    return ahead * 2 > len(calls)


def _for_each(family: _Family, calls: list[list[Call]], tool: str, required: set[str]) -> ForEach | None:
    """Per-item link: `tool` answered for each value another tool was answered for (weather for every hotel city).

    When the link holds both ways the sets were always equal and the data cannot say which one
    the task requires; the link then points from the tool called first (hotels, then their weather).
    """
    for other in sorted(required - {tool}):
        for arg in family.key_args.get(tool, []):
            if arg not in family.key_args.get(other, []) or not _links(calls, tool, other, arg):
                continue
            if _links(calls, other, tool, arg) and not _comes_first(calls, other, tool):
                continue
            return ForEach(tool=other, arg=arg)
    return None


def _fit_coverage(family: _Family, calls: list[list[Call]], tools: dict[str, ToolSpec],
                  quantities: dict[str, np.ndarray], defs: dict[str, Quantity]) -> tuple[dict[str, ToolSpec],
                                                                                       dict[str, Quantity]]:
    updated = dict(tools)
    used: dict[str, Quantity] = {}
    runs = len(calls)
    # A combining tool (the calculator) is how a run adds up, not something it must find out: the totals
    # check verifies the arithmetic whichever way it was done, so coverage never requires it.
    required = {tool for tool in tools if tool not in family.combining
                and sum(not any(c.tool == tool and c.made for c in run) for run in calls) <= family.allowed}
    for tool in sorted(required):
        lists = frozenset(name for name, d in defs.items() if d.measure == "items")
        count = _count_rule(_made_counts(family, calls, tool), quantities, family.allowed, lists)
        if isinstance(count, str):
            used[count.split()[0]] = defs[count.split()[0]]
        key = family.key_args.get(tool, [])
        in_task = [arg for arg in key if family.template is not None and all(
            (v := c.arg(arg)) is not None and v in task.casefold()
            for run, task in zip(calls, family.tasks, strict=True) for c in run if c.tool == tool and c.made)]
        requirement = Requirement(count=count, distinct_by=key, for_each=_for_each(family, calls, tool, required),
                                  args_in_task=in_task, support=runs)
        updated[tool] = updated[tool].model_copy(update={"required": requirement})
    return updated, used


# ------------------------------------------------------------------------------------------ grounding
_EMAIL = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
_SHAPE_TOKEN = re.compile(r"[A-Z]+|[a-z]+|\d+|.", re.DOTALL)


def _value_shape(values: Sequence[str]) -> str | None:
    """A regular expression every value fits and that names their kind (an email, a code like ``SKU-1042``), or None."""
    if all(re.fullmatch(_EMAIL, v) for v in values):
        return _EMAIL
    shapes = set()
    for value in values:
        parts = []
        for token in _SHAPE_TOKEN.findall(value):
            parts.append(r"\d+" if token.isdigit() else "[A-Z]+" if token.isupper() and token.isalpha()
                         else "[a-z]+" if token.isalpha() else re.escape(token))
        shapes.add("".join(parts))
    if len(shapes) != 1 or not all(any(ch.isdigit() for ch in v) for v in values):
        return None  # only codes with digits: a shape of plain words would match any word of the answer
    shape = shapes.pop()
    return shape if len(shape) <= 120 else None


def _entity_arg(family: _Family, tool: str, calls: list[list[Call]]) -> str | None:
    """The argument naming what a call is about: the one that tells calls in a run apart, else the one string
    argument whose value changes from run to run (the city of a one-city task)."""
    key = family.key_args.get(tool, [])
    if len(key) == 1:
        return key[0]
    values: dict[str, set[str]] = defaultdict(set)
    for run in calls:
        for call in run:
            if call.tool == tool and isinstance(call.args, dict):
                for name, value in call.args.items():
                    if isinstance(value, str):
                        values[name].add(value.strip().casefold())
    varying = [name for name, seen in values.items() if len(seen) > 1]
    return varying[0] if len(varying) == 1 else None


def _record_calls(family: _Family, calls: list[list[Call]], tool: str) -> list[tuple[int, Call, dict[str, Any]]]:
    found = []
    for r, run in enumerate(calls):
        for call in run:
            if call.tool == tool and call.made:
                record = parse_record(call.result)
                if isinstance(record, dict):
                    found.append((r, call, record))
    return found


def _key_field(found: list[tuple[int, Call, dict[str, Any]]]) -> str | None:
    """The record's field naming its entity: one whose value is one of the call's own arguments in (nearly) every record."""
    counts: Counter[str] = Counter()
    for _r, call, record in found:
        args = {str(v).strip().casefold() for v in (call.args.values() if isinstance(call.args, dict) else [])}
        for path, value, _holder in record_fields(record):
            if isinstance(value, str) and value.strip().casefold() in args and "[]" not in path:
                counts[path] += 1
    if not counts:
        return None
    path, n = counts.most_common(1)[0]
    return path if n >= 0.95 * len(found) else None


def _fit_facts(family: _Family, calls: list[list[Call]], tools: dict[str, ToolSpec]) -> dict[str, ToolSpec]:
    """Facts: tool values a healthy answer repeats for the entity (the weather of a city, a record's status or email),
    with the vocabulary (or the shape, for open values) an answer stating another value would use."""
    updated = dict(tools)
    for tool in tools:
        if tool in family.combining:
            continue
        key_arg = _entity_arg(family, tool, calls)
        values = [c for run in calls for c in run if c.tool == tool and c.classified.kind == "value"]
        words = [(c.result or "").strip().casefold() for c in values]
        if (key_arg and words and not any(figures_of(w) for w in words)
                and not any(len(w) > 20 or len(w.split()) > 2 or not w for w in words)):
            vocabulary = sorted(set(words))
            if 2 <= len(vocabulary) <= max(2, len(words) // 3) and len(words) >= family.min_support:
                updated[tool] = updated[tool].model_copy(
                    update={"fact": Fact(key_arg=key_arg, vocabulary=vocabulary, support=len(words))})
        found = _record_calls(family, calls, tool)
        if len(found) < family.min_support:
            continue
        key_field = _key_field(found)
        if key_field is None and key_arg is None:
            continue
        by_path: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for r, _call, record in found:
            for path, value, _holder in record_fields(record):
                if isinstance(value, str) and path != key_field and value.strip() and "[]" not in path:
                    by_path[path].append((r, value.strip()))
        facts = []
        for path, seen in sorted(by_path.items()):
            if len(seen) < family.min_support:
                continue
            missed = [family.runs[r].episode_id for r, v in seen if v.casefold() not in (family.runs[r].answer or "").casefold()]
            if len(missed) > int((1.0 - family.share) * len(seen) + 1e-9):
                continue  # healthy answers do not repeat it: not a fact the answer states
            distinct = sorted({v.casefold() for _, v in seen})
            short = all(len(v) <= 30 and len(v.split()) <= 3 for _, v in seen)
            # Open values (emails, codes) get their shape, which a next contact's or item's value also has; words
            # from a small vocabulary (conditions, statuses) get the vocabulary.
            shape = _value_shape([v for _, v in seen])
            if shape is not None:
                distinct = []
            elif not (short and 2 <= len(distinct) <= max(2, len(seen) // 3)):
                continue
            facts.append(Fact(field=path, key_field=key_field, key_arg=None if key_field else key_arg,
                              vocabulary=distinct, shape=shape, support=len(seen) - len(missed),
                              exceptions=sorted(set(missed))))
        if facts:
            updated[tool] = updated[tool].model_copy(update={"facts": facts})
    return updated


def _fit_answer_parts(family: _Family, calls: list[list[Call]], tools: dict[str, ToolSpec]) -> dict[str, ToolSpec]:
    """Required answer parts: each value of a tool's result that every healthy answer states for every call (both
    asked-for statistics, each city's condition and temperature), with its support."""
    updated = dict(tools)
    for tool in tools:
        if tool in family.combining:
            continue
        made = [(r, c) for r, run in enumerate(calls) for c in run if c.tool == tool and c.made]
        if len(made) < family.min_support:
            continue
        fields: set[str | None] = {None}
        for _r, call in made:
            record = parse_record(call.result)
            if isinstance(record, dict):
                fields |= {path for path, value, _h in record_fields(record)
                           if "[]" not in path and not isinstance(value, bool) and value is not None}
        parts = []
        for field_path in sorted(fields, key=lambda f: f or ""):
            part = AnswerPart(field=field_path)
            tried = 0
            missed: list[str] = []
            for r, call in made:
                answer = family.runs[r].answer
                asked = {str(v).casefold() for v in call.args.values()} if isinstance(call.args, dict) else set()
                for value, unit in part_values(part, call):
                    if isinstance(value, str) and (len(value) < 2 or value.casefold() in asked):
                        continue  # the call's own argument (the city asked about) says nothing new
                    tried += 1
                    if answer is None or not states_value(answer, value, unit):
                        missed.append(family.runs[r].episode_id)
            # What an answer states varies more than what it computes: a part must hold on every fitting run (a
            # healthy answer that leaves a looked-up word out is common, and held-out runs would pay for it).
            if tried >= family.min_support and not missed:
                parts.append(part.model_copy(update={"support": tried}))
        if parts:
            updated[tool] = updated[tool].model_copy(update={"answer": parts})
    return updated


def _fit_provenance(family: _Family, tools: dict[str, ToolSpec]) -> dict[str, ToolSpec]:
    """Per tool, the argument paths healthy runs always took from what they saw (the rest are not checked)."""
    grounded: dict[str, Counter[str]] = defaultdict(Counter)
    total: dict[str, Counter[str]] = defaultdict(Counter)
    for episode in family.runs:
        if not episode.task:
            continue
        seen = ProvenanceContext([episode.task])
        for step in episode.steps:
            for event in step.tool_events:
                for g in ground_call(event.name, event.args, seen).checked:
                    total[event.name][g.path] += 1
                    grounded[event.name][g.path] += g.grounded
            seen.add_steps([step])
    updated = dict(tools)
    for tool in tools:
        paths = [p for p, n in total[tool].items()
                 if n >= family.min_support and n - grounded[tool][p] <= int((1.0 - family.share) * n + 1e-9)]
        updated[tool] = updated[tool].model_copy(update={"provenance": sorted(paths)})
    return updated


def _fit_constants(family: _Family, spec: VerifierSpec) -> tuple[list[float], dict[str, int]]:
    """Figures healthy runs used that no tool gave (the 2 of "2 nights"), kept when at least min_support runs did."""
    per_run: Counter[float] = Counter()
    for episode in family.runs:
        ledger = GroundingLedger(spec, episode.task)
        seen: set[float] = set()
        for call in _calls(spec, episode):
            for finding in ledger.check_call(call):
                seen |= {float(v) for v in finding.evidence.get("ungrounded", [])}
            ledger.add_result(call)
        for step in episode.steps:
            if step.text and step.kind is not StepKind.TOOL_CALL:
                for finding in ledger.check_text(step.text, step=step.index):
                    seen |= {float(v) for v in finding.evidence.get("ungrounded", [])}
        per_run.update(seen)
    kept = {v: n for v, n in per_run.items() if n >= family.min_support}
    dropped = {v: n for v, n in per_run.items() if n < family.min_support}
    if dropped:
        family.messages.append(f"grounding: {len(dropped)} figure(s) used without a tool by fewer than "
                               f"{family.min_support} runs are not constants ({', '.join(f'{v:g}' for v in sorted(dropped)[:5])})")
    return sorted({*spec.constants, *kept}), {f"{v:g}": n for v, n in sorted(kept.items())}


# ------------------------------------------------------------------------------------------ one family
def _slug(template: Template | None, roster: tuple[str, ...]) -> str:
    if template is None:
        return "no_task"
    words = re.findall(r"[A-Za-z]+", template.describe().split("Task:")[-1])
    return "_".join(w.lower() for w in words[:4]) or "task"


def _fit_family(family: _Family, name: str) -> VerifierSpec:
    per_tool = family.tool_events()
    for tool, runs in per_tool.items():
        flat = [e for run in runs for e in run]
        family.key_args[tool] = _key_args(runs)
        expression_arg = _combining_arg(flat)
        if expression_arg is not None and all(figures_of(e.result or "") or e.is_error for e in flat):
            family.combining[tool] = expression_arg
    tools: dict[str, ToolSpec] = {}
    for tool, runs in sorted(per_tool.items()):
        events = [e for run in runs for e in run]
        shapes = fit_shapes(tool, [(e.result or "", e.is_error) for e in events], anchor=None,
                            min_support=family.min_support, arguments=[_arg_texts(e) for e in events])
        family.messages += shapes.messages
        extra: dict[str, Any] = {}
        if tool in family.combining:
            extra = {"combines": True, "expression_arg": family.combining[tool]}
        tools[tool] = ToolSpec(returns=shapes.returns, json_schema=shapes.json_schema, **extra)
    spec = _base_spec(family, name, tools, version=2)
    calls = [_calls(spec, e) for e in family.runs]
    with_totals = _fit_totals(family, spec, calls, tools)
    if with_totals is not None:
        spec = with_totals
        calls = _recalled(spec, family.runs)
    multipliers, _rates, defs = _task_quantities(family)
    tool_multipliers, tool_defs = _tool_quantities(family, spec, calls)
    tools, used = _fit_coverage(family, calls, spec.tools, multipliers | tool_multipliers, defs | tool_defs)
    tools = _fit_facts(family, calls, tools)
    tools = _fit_answer_parts(family, calls, tools)
    tools = _fit_provenance(family, tools)
    # 0 and 1 never introduce a figure (adding nothing, counting once); the relation's own factors are the task's.
    relation_constants = sorted({0.0, 1.0} | {float(t.line_item.multiplicity) for t in tools.values()
                                             if t.line_item is not None and not isinstance(t.line_item.multiplicity, str)})
    checks = [c for c in CHECKS if c != "total_consistency" or with_totals is not None]
    spec = spec.model_copy(update={"tools": tools, "quantities": spec.quantities | used, "checks": checks,
                                   "constants": relation_constants})
    spec = VerifierSpec.model_validate(spec.model_dump())
    constants, constant_support = _fit_constants(family, spec)
    spec = spec.model_copy(update={"constants": constants})
    spec = _zero_false_positives(family, VerifierSpec.model_validate(spec.model_dump()))
    info = FitInfo(family=family.template.describe() if family.template else "runs with no task text",
                   healthy_fit=len(family.runs), min_support=family.min_support, messages=family.messages,
                   constants_support=constant_support, support_threshold=family.share,
                   exceptions=family.exceptions)  # type: ignore[call-arg]
    description = (f"fitted from {len(family.runs)} healthy runs: "
                   + (family.template.describe() if family.template else "runs that recorded no task text"))
    return spec.model_copy(update={"fitted": info, "description": description})


def _rule_of(check: str, evidence: dict[str, Any]) -> str:
    tool = evidence.get("tool")
    return f"{check}:{tool}" if check in _PER_TOOL_CHECKS and isinstance(tool, str) else check


_PER_TOOL_CHECKS = ("required_coverage", "provenance")


def _zero_false_positives(family: _Family, spec: VerifierSpec) -> VerifierSpec:
    """Run the variant over its own fitting runs: a rule that flags more of them than the support threshold allows
    is dropped; one that flags fewer is kept, its exceptions listed by episode id (the guarantee is checked)."""
    for _ in range(len(CHECKS) + 2 * len(spec.tools) + 1):
        flagged: dict[str, set[str]] = defaultdict(set)
        for episode in family.runs:
            for f in verify_episode(episode, spec).findings:
                if f.blocking or f.severity.value != "info":
                    flagged[_rule_of(f.check, f.evidence)].add(episode.episode_id)
        # A rule kept with its exceptions already (a totals relation chance cannot explain) keeps them.
        dropping = {rule: ids for rule, ids in flagged.items()
                    if len(ids) > family.allowed and not ids <= set(family.exceptions.get(rule, []))}
        if not dropping:
            for rule, ids in flagged.items():
                if set(family.exceptions.get(rule, [])) != ids:
                    family.note_exceptions(rule, sorted(ids))
            return spec
        tools = dict(spec.tools)
        checks = list(spec.checks)
        for rule, ids in dropping.items():
            shown = ", ".join(sorted(ids)[:3])
            check, _, tool = rule.partition(":")
            if tool and tool in tools and check == "required_coverage":
                tools[tool] = tools[tool].model_copy(update={"required": None})
            elif tool and tool in tools and check == "provenance":
                tools[tool] = tools[tool].model_copy(update={"provenance": []})
            else:
                checks = [c for c in checks if c != check]
            family.messages.append(f"{rule}: flagged {len(ids)} of {len(family.runs)} fitting run(s) ({shown}), more "
                                   f"than the {family.share:.0%} support threshold allows; dropped for this family")
        spec = VerifierSpec.model_validate(spec.model_copy(update={"tools": tools, "checks": checks}).model_dump())
    return spec


# ------------------------------------------------------------------------------------------ the whole fit
def _run_entities(episode: Episode) -> set[str]:
    """What a run was about: the string values it passed to its tools (cities, SKUs, contacts, datasets)."""
    return {v.strip().casefold() for v in _arg_values(episode)
            if isinstance(v, str) and len(v.strip()) >= 2 and not re.fullmatch(r"[\d.,\s-]+", v)}


def _split(episodes: list[Episode], holdout: float, seed: int) -> tuple[list[Episode], list[Episode]]:
    """Fitting runs and held-out runs, held out by entity: the held-out runs are about entities no fitting run saw.

    Holding out runs of the same cities and SKUs would report 0 flagged while the deployment's next
    entities fail; entities are drawn in a seeded order until a `holdout` share of the runs is out.
    Runs that name no entity are split at random.
    """
    if holdout <= 0 or len(episodes) < 2:
        return episodes, []
    n_out = min(len(episodes) - 1, math.ceil(holdout * len(episodes)))
    rng = random.Random(seed)
    entities = [_run_entities(e) for e in episodes]
    pool = sorted(set().union(*entities))
    rng.shuffle(pool)
    held_entities: set[str] = set()
    held: set[int] = set()
    for entity in pool:
        if len(held) >= n_out:
            break
        candidate = held | {i for i, names in enumerate(entities) if entity in names}
        # An entity in too many runs (a closed catalogue every run orders from) cannot be held out.
        if len(candidate) > max(n_out * 1.5, n_out + 1):
            continue
        held, held_entities = candidate, held_entities | {entity}
    if not held:  # no entities, or every one is in most runs: a seeded random split
        order = list(range(len(episodes)))
        rng.shuffle(order)
        held = set(order[:n_out])
    return [e for i, e in enumerate(episodes) if i not in held], [e for i, e in enumerate(episodes) if i in held]


def _fit_size(n: int, holdout: float) -> int:
    return n - (min(n - 1, math.ceil(holdout * n)) if holdout > 0 and n >= 2 else 0)


def _merge_optional_clauses(families: dict[tuple[tuple[str, ...], str | None], list[Episode]],
                            templates: dict[tuple[tuple[str, ...], str | None], Template | None],
                            min_support: int, holdout: float) -> None:
    """Two templates that differ by one clause merge into one with the clause optional, when either is too small."""
    merged = True
    while merged:
        merged = False
        keys = sorted(families, key=lambda k: len(families[k]))
        for a, b in ((a, b) for i, a in enumerate(keys) for b in keys[i + 1:]):
            ta, tb = templates.get(a), templates.get(b)
            if a[0] != b[0] or ta is None or tb is None or min(_fit_size(len(families[a]), holdout),
                                                             _fit_size(len(families[b]), holdout)) >= min_support:
                continue
            template = merge_optional(ta, tb)
            if template is None:
                continue
            runs = families.pop(a) + families.pop(b)
            del templates[a], templates[b]
            families[(a[0], template.key)] = runs
            templates[(a[0], template.key)] = template
            merged = True
            break


def _pool_small_families(families: dict[tuple[tuple[str, ...], str | None], list[Episode]],
                         templates: dict[tuple[tuple[str, ...], str | None], Template | None],
                         min_support: int, holdout: float) -> None:
    """Task families too small to fit are pooled per tool roster when the pool is big enough.

    Tasks that vary in more than names and numbers (a research task whose steps come in a
    different order each time) never repeat a template; their runs still share what every run
    with those tools does (the pool gets coverage and contracts, matched on the roster alone).
    """
    pooled: dict[tuple[str, ...], list[tuple[tuple[str, ...], str | None]]] = defaultdict(list)
    for key, runs in families.items():
        if key[1] is not None and _fit_size(len(runs), holdout) < min_support:
            pooled[key[0]].append(key)
    for roster, keys in pooled.items():
        runs = [e for key in keys for e in families[key]]
        if len(keys) > 1 and _fit_size(len(runs), holdout) >= min_support:
            for key in keys:
                del families[key]
                templates.pop(key, None)
            families[(roster, ANY_TASK)] = runs
            templates[(roster, ANY_TASK)] = None


def fit_spec_report(episodes: Iterable[Episode], *, name: str = "fitted", min_support: int = DEFAULT_MIN_SUPPORT,
                    holdout: float = 0.0, seed: int = 0, max_chance: float = DEFAULT_MAX_CHANCE,
                    support: float = DEFAULT_SUPPORT) -> FitResult:
    """Fit a spec on the healthy episodes given (others are ignored) and say per family what was fitted and why not.

    `support` is the least share of a family's healthy runs a rule must hold on to be kept (the
    runs it fails on are listed as its exceptions: mislabelled runs, or a rule to keep off).
    """
    if not 0.5 <= support <= 1.0:
        raise ValueError(f"support must be between 0.5 and 1, got {support}")
    all_episodes = list(episodes)
    healthy = [e for e in all_episodes if e.is_healthy]
    messages = [f"{len(healthy)} healthy episode(s) of {len(all_episodes)} given; only healthy ones are fitted on"]
    families: dict[tuple[tuple[str, ...], str | None], list[Episode]] = defaultdict(list)
    templates: dict[tuple[tuple[str, ...], str | None], Template | None] = {}
    # Every argument any healthy run passed is an entity in every task: one run that skipped a city
    # must not get a template of its own.
    entities = sorted({v for e in healthy for v in _arg_values(e)})
    for episode in healthy:
        roster, key, template = _family_key(episode, entities)
        families[(roster, key)].append(episode)
        templates.setdefault((roster, key), template)
    _merge_optional_clauses(families, templates, min_support, holdout)
    _pool_small_families(families, templates, min_support, holdout)
    variants: list[VerifierSpec] = []
    reports: list[FamilyReport] = []
    held_out_runs: list[tuple[FamilyReport, list[Episode]]] = []
    for index, ((roster, key), runs) in enumerate(sorted(families.items(), key=lambda kv: -len(kv[1]))):
        template = templates[(roster, key)]
        fit_runs, held = _split(runs, holdout, seed)
        label = template.describe() if template else (f"{key} ({len({e.task for e in runs})} task texts)" if key
                                                      else "runs with no task text")
        variant_name = f"{name}_{index + 1}_{_slug(template, roster) if key != ANY_TASK else 'any_task'}"
        if len(fit_runs) < min_support:
            reports.append(FamilyReport(variant_name, label, len(fit_runs), len(held), fitted=False, checks=["completion"],
                                        messages=[f"{len(fit_runs)} healthy fitting run(s), fewer than min_support "
                                                  f"{min_support}: its runs get generic (completion only)"]))
            continue
        family = _Family(fit_runs, template, roster, min_support, max_chance, share=support)
        variant = _fit_family(family, variant_name)
        priority = 30 if template is not None else (20 if key else 10)
        if key is not None and template is None:  # any task with this roster (no_task would wrongly exclude them)
            variant = variant.model_copy(update={"match": variant.match.model_copy(update={"no_task": False})})
        variants.append(variant.model_copy(update={"priority": priority}))
        report = FamilyReport(variant_name, label, len(fit_runs), len(held), checks=list(variant.checks),
                              messages=list(family.messages), exceptions=dict(family.exceptions))
        reports.append(report)
        held_out_runs.append((report, held))
    spec = VerifierSpec(name=name, description=f"fitted from {len(healthy)} healthy runs in {len(reports)} "
                        "task families; runs of no fitted family get the completion check",
                        checks=["completion"], error_shapes=ERROR_SHAPES, variants=variants,
                        fitted=FitInfo(healthy_fit=len(healthy), min_support=min_support, messages=messages))
    spec = VerifierSpec.model_validate(spec.model_dump())
    for report, held in held_out_runs:
        flags: Counter[str] = Counter()
        for episode in held:
            rules = {_rule_of(f.check, f.evidence) for f in verify_episode(episode, spec).findings
                     if f.blocking or f.severity.value != "info"}
            flags.update(rules)
            flags["any"] += bool(rules)
        report.held_out_flagged = dict(flags)
        report.held_out_rates = {rule: round(n / len(held), 3) for rule, n in flags.items()} if held else {}
    return FitResult(spec=_record_held_out(spec, reports), families=reports, messages=messages)


def _record_held_out(spec: VerifierSpec, reports: Sequence[FamilyReport]) -> VerifierSpec:
    by_name = {r.name: r for r in reports}
    variants = []
    for variant in spec.variants:
        report = by_name.get(variant.name)
        if report is not None and variant.fitted is not None and report.held_out:
            held = {"runs": report.held_out, "flagged": report.held_out_flagged, "by": "entity"}
            variant = variant.model_copy(update={"fitted": variant.fitted.model_copy(update={"held_out": held})})
        variants.append(variant)
    return spec.model_copy(update={"variants": variants})


def fit_spec(episodes: Iterable[Episode], **options: Any) -> VerifierSpec:
    """A spec fitted on the healthy episodes given: one variant per task family (see the module docstring).

    Options: ``name``, ``min_support`` (runs or results a rule must hold on; families with fewer
    healthy runs get no variant), ``holdout`` (share of each family's healthy runs kept out of the
    fit and checked with the result), ``seed``, ``max_chance`` (highest share of shuffled runs a
    totals relation may hold on).
    """
    return fit_spec_report(episodes, **options).spec

