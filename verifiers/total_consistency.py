"""total_consistency: recompute the total the answer states from the line items the run itself received."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from guardrail.core.events import Finding
from verifiers.expressions import MissingQuantity
from verifiers.numbers import Figure, UnreadableFigure, find_figures, same_amount
from verifiers.observed import Call, arg_key, finding, undecided
from verifiers.quantities import RunQuantities, resolve_quantities
from verifiers.spec import Rounding, VerifierSpec

__all__ = ["MAX_COMBINATIONS", "admissible_totals", "check_total_consistency", "line_items", "matches_total",
           "stated_totals"]

MAX_COMBINATIONS = 20_000  # bound on admissible totals enumerated per answer (untrusted runs can look up many items)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")


@dataclass(frozen=True)
class LineItem:
    tool: str
    key: tuple[str | None, ...]
    value: float
    step: int


def line_items(spec: VerifierSpec, calls: Sequence[Call]) -> dict[str, list[LineItem]]:
    """Per line-item tool, the distinct items received (a later value for the same item replaces an earlier one)."""
    items: dict[str, dict[tuple[str | None, ...], LineItem]] = {}
    for tool, item_spec in spec.line_item_tools().items():
        by_key = items.setdefault(tool, {})
        for call in calls:
            if call.tool == tool and call.classified.kind == "value" and call.classified.value is not None:
                key = arg_key(call, item_spec.key_args)
                by_key[key] = LineItem(tool, key, call.classified.value, call.step)
    return {tool: list(by_key.values()) for tool, by_key in items.items()}


def admissible_totals(spec: VerifierSpec, items: dict[str, list[LineItem]],
                      quantities: RunQuantities | None = None) -> set[float] | None:
    """Every total the task admits from these items, or None when there are too many to enumerate.

    Each line-item tool contributes its items times their multiplicity (a number, or an expression
    over the run's quantities, read per item for per-item quantities); when a run looked up more
    items than the task counts (alternatives, detours), any `count` of them is admissible; an
    optional tool may also contribute nothing. The total rule's adjustments (a tax rate) apply to
    the sum. Raises `MissingQuantity` when a multiplicity needs a quantity the run lacks.
    """
    run = quantities or RunQuantities()
    per_tool: list[set[float]] = []
    budget = MAX_COMBINATIONS
    for tool, item_spec in spec.line_item_tools().items():
        values = [item.value * run.evaluate(item_spec.multiplicity, item.key) for item in items.get(tool, [])]
        take = item_spec.count if item_spec.count is not None and len(values) > item_spec.count else len(values)
        sums: set[float] = {0.0} if item_spec.optional else set()
        for combo in itertools.combinations(values, take):
            sums.add(round(sum(combo), 6))
            budget -= 1
            if budget <= 0:
                return None
        per_tool.append(sums or {0.0})
    totals = {0.0}
    for sums in per_tool:
        if len(totals) * len(sums) > MAX_COMBINATIONS:
            return None
        totals = {round(a + b, 6) for a in totals for b in sums}
    for adjustment in spec.total.adjustments:
        by = run.evaluate(adjustment.by)
        totals = {round(adjustment.apply(total, by), 6) for total in totals}
    return totals


def _rounded(value: float, places: int, mode: str) -> list[float]:
    scale = 10 ** places
    scaled = value * scale
    if mode == "down":
        return [math.floor(scaled + 1e-9) / scale]
    if mode == "up":
        return [math.ceil(scaled - 1e-9) / scale]
    if mode == "any":
        return [math.floor(scaled + 1e-9) / scale, math.ceil(scaled - 1e-9) / scale]
    return [math.floor(scaled + 0.5 + 1e-9) / scale]  # half up, the way people round money


def matches_total(stated: float, exact: float, rounding: Rounding) -> bool:
    """A stated total matches an exact one when it is the same to the cent or the rounding rule's result."""
    if same_amount(stated, exact):
        return True
    return any(abs(stated - r) < 1e-6 * max(1.0, abs(r)) for r in _rounded(exact, rounding.places, rounding.mode))


def stated_totals(spec: VerifierSpec, answer: str) -> tuple[list[Figure], list[UnreadableFigure]]:
    """The figures the answer states as its total, and any currency figure it could not read.

    A total is the first money figure after a total word ("total", "altogether") in the same
    sentence; with no total word, the last money figure. Per-unit rates ("$120/night") are never totals.
    """
    figures, unreadable = find_figures(answer, symbols=spec.currency.symbols, codes=spec.currency.codes,
                                       words=spec.currency.words, monetary_only=True)
    amounts = [f for f in figures if not f.rate]
    chosen: list[Figure] = []
    for word in spec.total_regex.finditer(answer):
        boundary = _SENTENCE_END.search(answer, word.end())
        stop = boundary.start() if boundary else len(answer)
        after = [f for f in amounts if word.end() <= f.start < stop]
        if after and after[0] not in chosen:
            chosen.append(after[0])
    if not chosen and amounts:
        chosen = [amounts[-1]]
    return chosen, unreadable


def check_total_consistency(spec: VerifierSpec, calls: Sequence[Call], answer: str | None, *,
                            step: int | None, task: str | None = None) -> list[Finding]:
    """One finding when the answer's total is unreadable, missing, or not recomputable from the run's items."""
    if not spec.line_item_tools():
        return []
    text = answer or ""
    stated, unreadable = stated_totals(spec, text)
    if unreadable:
        shown = ", ".join(repr(u.text) for u in unreadable[:3])
        return [finding("total_consistency", f"the answer has figure(s) the number reader cannot read: {shown} "
                        f"({unreadable[0].reason})", step=step,
                        evidence={"unreadable": [u.text for u in unreadable]},
                        hint="state amounts as plain numbers with the currency, e.g. $1,234.50")]
    if not stated:
        return [finding("total_consistency", "the answer states no total amount", step=step,
                        hint="state the total the task asked for")]
    items = line_items(spec, calls)
    quantities = resolve_quantities(spec, task, calls)
    try:
        admissible = admissible_totals(spec, items, quantities)
    except MissingQuantity as exc:
        # A healthy run always has what its total counts by; a run that never read it cannot have the total.
        return [finding("total_consistency", f"the total cannot be recomputed: {quantities.why_missing(exc)}",
                        step=step, evidence={"missing": str(exc.args[0]) if exc.args else None},
                        hint="look up every number the total depends on before answering")]
    if admissible is None:  # unknown is not false, but it is said
        return [undecided("total_consistency", f"the run looked up too many alternative items to enumerate "
                          f"every admissible total (more than {MAX_COMBINATIONS}); the total was not checked",
                          step=step, evidence={"items": {t: len(v) for t, v in items.items()}})]
    if any(matches_total(f.value, total, spec.total.rounding) for f in stated for total in admissible):
        return []
    recomputed = round(float(min(admissible, key=lambda t: abs(t - stated[0].value))), 2)
    item_desc = {tool: [i.value for i in lst] for tool, lst in items.items()}
    return [finding(
        "total_consistency",
        f"the answer's total {stated[0].text} does not match the total recomputed from the run's own tool "
        f"results ({recomputed:g})",
        step=step,
        evidence={"stated": [f.value for f in stated], "recomputed": recomputed, "items": item_desc,
                  "quantities": quantities.values},
        hint="re-add the line items the tools returned, counting each the number of times the task says",
    )]
