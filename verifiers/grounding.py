"""Numeric grounding: every figure the agent asserts traces to a tool result it received, or a sum of them.

The ledger runs online, one step at a time: a tool result adds its figure; a combining tool's
expression (the calculator) must use only figures already in the ledger or the spec's constants;
every money figure in the agent's own text must be a received figure or a sum of received line
items. An ungrounded figure is reported at the step where it first appears.
"""

from __future__ import annotations

from collections.abc import Iterable

from guardrail.events import Finding
from verifiers.numbers import find_figures, find_numbers, same_amount
from verifiers.observed import Call, finding
from verifiers.spec import VerifierSpec

__all__ = ["GroundingLedger", "MAX_SUMS"]

MAX_SUMS = 50_000  # bound on the subset sums kept (a run with very many items stops growing the set)


class GroundingLedger:
    """The figures a run has received so far, and the checks that read against them."""

    def __init__(self, spec: VerifierSpec) -> None:
        self.spec = spec
        self.values_: list[float] = list(spec.constants)  # every figure received (and the constants)
        self.sums_: set[float] = {0.0}  # sums of distinct line items (each times its multiplicity)
        self._item_keys: set[tuple[str, float]] = set()
        self.saturated_ = False

    # ------------------------------------------------------------------ learning
    def _add_atom(self, value: float) -> None:
        if self.saturated_:
            return
        grown = {round(s + value, 2) for s in self.sums_}
        if len(self.sums_) + len(grown) > MAX_SUMS:
            self.saturated_ = True
            return
        self.sums_ |= grown

    def add_result(self, call: Call) -> None:
        """Record what one tool call returned."""
        value = call.classified.value
        if call.classified.kind != "value" or value is None:
            return
        self.values_.append(value)
        item = self.spec.line_item_tools().get(call.tool)
        key = (call.tool, value)
        if key in self._item_keys:
            return  # the same figure again (a retry) adds no new combination
        self._item_keys.add(key)
        if item is not None:
            self.values_.append(round(value * item.multiplicity, 2))
            self._add_atom(round(value * item.multiplicity, 2))
        self._add_atom(value)

    # ------------------------------------------------------------------ checking
    def grounded(self, value: float) -> bool:
        """A figure is grounded when it was received, or is a sum of received figures."""
        if any(same_amount(value, v) for v in self.values_):
            return True
        if self.saturated_:
            return True  # too many combinations to rule it out: unknown is not false
        return round(value, 2) in self.sums_ or any(same_amount(value, s) for s in self.sums_)

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
        if ungrounded:
            findings.append(finding(
                "grounding",
                f"the figure(s) {', '.join(f.text for f in ungrounded[:5])} trace to no tool result the run "
                "received, nor to a sum of them",
                step=step, evidence={"ungrounded": [f.value for f in ungrounded]},
                hint="state only figures the tools returned or their sums",
            ))
        return findings

    def observe(self, calls: Iterable[Call]) -> list[Finding]:
        """Check then record several calls (one step's tool events)."""
        findings: list[Finding] = []
        for call in calls:
            findings.extend(self.check_call(call))
            self.add_result(call)
        return findings


