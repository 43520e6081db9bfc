"""Numeric grounding: every figure the agent asserts traces to a tool result it received, or a sum of them.

The ledger runs online, one step at a time: a tool result adds its figure; a combining tool's
expression (the calculator) must use only figures already in the ledger or the spec's constants;
every money figure in the agent's own text must be a received figure or a sum of received line
items. An ungrounded figure is reported at the step where it first appears.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

from guardrail.core.events import Finding
from verifiers.expressions import MissingQuantity
from verifiers.numbers import find_figures, find_numbers, same_amount
from verifiers.observed import Call, arg_key, finding, undecided
from verifiers.quantities import MAX_TASK_CHARS, resolve_quantities
from verifiers.records import parse_record, record_fields, result_numbers
from verifiers.spec import Fact, VerifierSpec
from verifiers.total_consistency import admissible_totals, line_items, matches_total
from verifiers.units import PERCENT, Amount, convert, find_amounts, same_amount_in

__all__ = ["GroundingLedger", "MAX_AMOUNTS", "MAX_SUMS", "fact_values"]

MAX_SUMS = 50_000  # bound on the subset sums kept (a run with very many items stops growing the set)
MAX_AMOUNTS = 2_000  # numbers (with their units) kept per run for the unit checks; later ones are not added
MAX_PAIRS = 200  # the most recent received numbers whose pairwise sums, differences and ratios are tried
_SENTENCES = re.compile(r"(?:[.!?](?=\s|$)|[;\n])+")  # a dot inside an email or a number ends no sentence
_CLAUSES = re.compile(r",|\b(?:while|whereas|but|although)\b", re.IGNORECASE)


def fact_values(fact: Fact, call: Call) -> list[tuple[str, str]]:
    """(entity, value) pairs, casefolded, that one call's result gives for `fact`."""
    if fact.field is None:
        key = call.arg(fact.key_arg) if fact.key_arg else None
        return [(key, (call.result or "").strip().casefold())] if key else []
    record = parse_record(call.result)
    if record is None:
        return []
    pairs = []
    for path, value, holder in record_fields(record):
        if path != fact.field or not isinstance(value, str | int | float) or isinstance(value, bool):
            continue
        key = (str(holder.get(fact.key_field, "")).strip().casefold() if fact.key_field
               else call.arg(fact.key_arg) if fact.key_arg else None)
        if key and len(key) >= 2:
            pairs.append((key, str(value).strip().casefold()))
    return pairs


class GroundingLedger:
    """The figures a run has received so far, and the checks that read against them."""

    def __init__(self, spec: VerifierSpec, task: str | None = None) -> None:
        self.spec = spec
        self.task = task
        self.values_: list[float] = list(spec.constants)  # every figure received (and the constants)
        self.sums_: set[int] = {0}  # sums of distinct items (each times its multiplicity), in integer cents
        self._item_keys: set[tuple[str, tuple[str | None, ...]]] = set()
        self.saturated_ = False
        self.facts_: dict[tuple[str, int], dict[str, str]] = {}  # (tool, its fact) -> entity -> the value returned
        self.calls_: list[Call] = []
        self._totals: tuple[int, set[float] | None] = (-1, None)
        # The task's own numbers (nights, quantities, a tax rate) are the user's, so a run may use them.
        self.values_.extend(find_numbers((task or "")[:MAX_TASK_CHARS]))
        # Every number received with its unit (None: a bare number), for the unit checks; the task's count too.
        # Read lazily: most texts state no number with a unit, and the hot path should not parse every result.
        self._amounts: list[tuple[float, str | None]] | None = None
        self._task_text = (task or "")[:MAX_TASK_CHARS]
        self._unread: list[str] = []  # results not read for numbers yet
        self.quantities_ = resolve_quantities(spec, task, [])
        self._add_quantity_values()
        self._quantity_tools = {q.tool for q in spec.quantities.values() if q.source == "tool"}

    def _add_quantity_values(self) -> None:
        self.values_.extend(self.quantities_.values.values())
        for adjustment in self.spec.total.adjustments:
            if adjustment.kind in ("percent_add", "percent_off"):
                try:
                    rate = self.quantities_.evaluate(adjustment.by)
                except MissingQuantity:
                    continue
                self.values_.append(1 + rate if adjustment.kind == "percent_add" else 1 - rate)

    # ------------------------------------------------------------------ learning
    def _add_atom(self, value: float) -> None:
        if self.saturated_:
            return
        cents = round(value * 100)  # integer cents: exact sums and no per-element rounding on this hot path
        grown = {s + cents for s in self.sums_}
        if len(self.sums_) + len(grown) > MAX_SUMS:
            self.saturated_ = True
            return
        self.sums_ |= grown

    def add_result(self, call: Call) -> None:
        """Record what one tool call returned."""
        self.calls_.append(call)
        if call.result and call.classified.kind != "error" and len(self._unread) < MAX_AMOUNTS:
            self._unread.append(call.result)
        if call.tool in self._quantity_tools and call.made:
            known = set(self.quantities_.values)
            self.quantities_ = resolve_quantities(self.spec, self.task, self.calls_)
            self.values_.extend(v for k, v in self.quantities_.values.items() if k not in known)
        value = call.classified.value
        if call.classified.kind not in ("value", "unchecked"):
            return
        tool_spec = self.spec.tools.get(call.tool)
        if tool_spec is not None and call.result:
            for index, fact in enumerate(tool_spec.all_facts()):
                for key, truth in fact_values(fact, call):
                    self.facts_.setdefault((call.tool, index), {})[key] = truth
        if call.classified.kind != "value":
            return
        if value is None:
            return
        self.values_.append(value)
        item = self.spec.line_item_tools().get(call.tool)
        # One atom per distinct item (two hotels at the same rate are two atoms); a retry adds none.
        item_key = (call.tool, arg_key(call, item.key_args) if item is not None else (str(value),))
        if item_key in self._item_keys:
            return
        self._item_keys.add(item_key)
        if item is not None:
            try:
                scaled = round(value * self.quantities_.evaluate(item.multiplicity, item_key[1]), 2)
            except MissingQuantity:  # a multiplier the run has not read yet: the total check still sees it
                scaled = value
            self.values_.append(scaled)
            self._add_atom(scaled)
        self._add_atom(value)

    # ------------------------------------------------------------------ checking
    def grounded(self, value: float) -> bool:
        """A figure is grounded when it was received, or is a sum of received figures.

        Once the sums are saturated a figure that is not a received value cannot be ruled out:
        it counts as grounded, and `check_text` says so with an informational finding.
        """
        if any(same_amount(value, v) for v in self.values_):
            return True
        if self.saturated_:
            return True
        # Sums are whole cents, so the cent itself is the whole `same_amount` tolerance: no scan needed.
        if round(value * 100) in self.sums_:
            return True
        totals = self._admissible_totals()
        return totals is not None and any(matches_total(value, t, self.spec.total.rounding) for t in totals)

    def _admissible_totals(self) -> set[float] | None:
        """The totals the spec admits from the items so far (quantities and adjustments applied), cached per call count."""
        if self._totals[0] != len(self.calls_):
            try:
                totals = admissible_totals(self.spec, line_items(self.spec, self.calls_),
                                           resolve_quantities(self.spec, self.task, self.calls_))
            except MissingQuantity:
                totals = None
            self._totals = (len(self.calls_), totals)
        return self._totals[1]

    @property
    def amounts_(self) -> list[tuple[float, str | None]]:
        """Every number received so far with its unit (None: bare), the task's and the spec's constants included."""
        if self._amounts is None:
            self._amounts = [(v, None) for v in self.values_]
            self._amounts += [(a.value, a.unit) for a in find_amounts(self._task_text)]
        for text in self._unread:
            if len(self._amounts) >= MAX_AMOUNTS:
                break
            self._amounts.extend(result_numbers(text)[:MAX_AMOUNTS - len(self._amounts)])
        self._unread = []
        return self._amounts

    def grounded_amount(self, stated: Amount) -> bool:
        """A number stated with a unit is grounded when a received number is it (converted from the unit it came in;
        a bare number read in the stated unit), or one step of + or - between two received ones in one unit family,
        or for a percentage a received fraction or a ratio of two received numbers."""
        received = self.amounts_
        if any(same_amount_in(stated, v, u) for v, u in received):
            return True
        tolerance = 0.5 * 10.0 ** -stated.decimals + 1e-9 * max(1.0, abs(stated.value))
        if stated.dimension == PERCENT:
            if any(same_amount_in(stated, 100 * v, None) for v, u in received if u is None and abs(v) <= 1):
                return True
            ratios = [v for v, _u in received[-MAX_PAIRS:] if v]
            return any(same_amount_in(stated, 100 * a / b, None) for a in ratios for b in ratios if a != b)
        values = sorted(c for v, u in received[-MAX_PAIRS:]
                        if (c := (v if u is None else convert(v, u, stated.unit))) is not None)
        # One step of + or -: for each received a, is there a b with a + b or |a - b| the stated value (log time each).
        for i, a in enumerate(values):
            for target in (stated.value - a, a - stated.value, a + stated.value):
                j = bisect.bisect_left(values, target - tolerance)
                if j < len(values) and values[j] <= target + tolerance and (j != i or values.count(a) > 1):
                    return True
        return False

    def check_call(self, call: Call) -> list[Finding]:
        """Check a combining tool's expression before its result joins the ledger."""
        tool_spec = self.spec.tools.get(call.tool)
        if tool_spec is None or not tool_spec.combines or not tool_spec.expression_arg:
            return []
        args = call.args if isinstance(call.args, dict) else {}
        expression = str(args.get(tool_spec.expression_arg, "")) if args else str(call.args)
        ungrounded = sorted({n for n in find_numbers(expression) if not self._operand_grounded(n)})
        if not ungrounded:
            return []
        shown = ", ".join(f"{n:g}" for n in ungrounded[:5])
        return [finding(
            "grounding",
            f"{call.tool} used {shown}, which no tool result the run received gave",
            step=call.step,
            evidence={"tool": call.tool, "expression": expression[:300], "ungrounded": ungrounded[:20]},
            hint="use only figures a tool returned; look up any missing price instead of estimating it",
        )]

    def _operand_grounded(self, value: float) -> bool:
        return any(same_amount(value, v) for v in self.values_)

    def check_text(self, text: str, *, step: int | None) -> list[Finding]:
        """Check the money figures the agent states in its own text (a message or the answer)."""
        figures, unreadable = find_figures(text, symbols=self.spec.currency.symbols, codes=self.spec.currency.codes,
                                           words=self.spec.currency.words, monetary_only=True)
        findings: list[Finding] = []
        if unreadable:
            findings.append(finding(
                "grounding",
                f"cannot read the figure(s) {', '.join(repr(u.text) for u in unreadable[:3])}: {unreadable[0].reason}",
                step=step, evidence={"unreadable": [u.text for u in unreadable]},
                hint="state amounts as plain numbers with the currency, e.g. $1,234.50",
            ))
        ungrounded = [f for f in figures if not self.grounded(f.value)]
        if self.saturated_ and any(not any(same_amount(f.value, v) for v in self.values_) for f in figures):
            findings.append(undecided(
                "grounding", f"more than {MAX_SUMS} sums of received items: figures that are not a received "
                "value were not checked", step=step))
        if ungrounded:
            findings.append(finding(
                "grounding",
                f"the figure(s) {', '.join(f.text for f in ungrounded[:5])} trace to no tool result the run "
                "received, nor to a sum of them",
                step=step, evidence={"ungrounded": [f.value for f in ungrounded]},
                hint="state only figures the tools returned or their sums",
            ))
        dimensions = self.spec.unit_dimensions
        if (dimensions is None or dimensions) and any(ch.isdigit() for ch in text):
            stated = [a for a in find_amounts(text) if dimensions is None or a.dimension in dimensions]
            wrong = [a for a in stated if not self.grounded_amount(a)]
            if wrong:
                findings.append(finding(
                    "grounding",
                    f"the figure(s) {', '.join(a.text for a in wrong[:5])} match no number a tool returned (in any "
                    "unit it converts to), nor one step of arithmetic on them",
                    step=step, evidence={"ungrounded_amounts": [[a.value, a.unit] for a in wrong[:20]]},
                    hint="state each figure as the tool returned it, or convert it exactly (with a conversion tool)",
                ))
        contradictions = self.contradicted_facts(text)
        if contradictions:
            findings.append(finding(
                "grounding",
                "the answer contradicts what the tools returned: " + "; ".join(
                    f"{key}: said {said}, {tool} returned {truth}" for tool, key, said, truth in contradictions[:5]),
                step=step,
                evidence={"contradictions": [list(c) for c in contradictions]},
                hint="restate each fact as the tool returned it",
            ))
        return findings

    def contradicted_facts(self, text: str) -> list[tuple[str, str, str, str]]:
        """(tool, key, stated, returned) for each fact the text states differently from the tool.

        Conservative on purpose: a key is contradicted only when its clause names fact words and
        none of them is the returned one; "A, B and C are x, y and z respectively" pairs by position.
        """
        found: list[tuple[str, str, str, str]] = []
        for (tool, index), truth in self.facts_.items():
            fact = self.spec.tools[tool].all_facts()[index]
            vocabulary = {w.casefold() for w in fact.vocabulary} | set(truth.values())
            alternatives = [re.escape(w) for w in sorted(vocabulary, key=len, reverse=True)]
            if fact.shape is not None:
                alternatives.insert(0, fact.shape)
            word_re = re.compile(r"(?<![\w@.-])(" + "|".join(alternatives) + r")(?![\w@-])", re.IGNORECASE)
            key_re = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(truth, key=len, reverse=True))
                                + r")\b", re.IGNORECASE)
            for sentence in _SENTENCES.split(text[:20_000]):
                if re.search(r"\brespectively\b", sentence, re.IGNORECASE):
                    keys = [m.group(1).casefold() for m in key_re.finditer(sentence)]
                    in_order = [m.group(1).casefold() for m in word_re.finditer(sentence)]
                    if len(keys) == len(in_order):
                        found.extend((tool, k, w, truth[k]) for k, w in zip(keys, in_order, strict=True)
                                     if w != truth[k])
                    continue
                for clause in _CLAUSES.split(sentence):
                    words = {m.group(1).casefold() for m in word_re.finditer(clause)}
                    if not words:
                        continue
                    for m in key_re.finditer(clause):
                        key = m.group(1).casefold()
                        if truth[key] not in words:
                            found.append((tool, key, "/".join(sorted(words)), truth[key]))
        return found

    def observe(self, calls: Iterable[Call]) -> list[Finding]:
        """Check then record several calls (one step's tool events)."""
        findings: list[Finding] = []
        for call in calls:
            findings.extend(self.check_call(call))
            self.add_result(call)
        return findings


