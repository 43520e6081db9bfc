"""A run's quantities: the numbers a spec's totals and requirements count by, read from its task text and tool results."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from verifiers.expressions import MissingQuantity, evaluate
from verifiers.numbers import NumberFormatError, find_numbers, read_number
from verifiers.observed import Call
from verifiers.spec import Quantity, VerifierSpec

__all__ = ["RunQuantities", "count_items", "item_key_text", "resolve_quantities", "result_items"]

MAX_TASK_CHARS = 20_000  # task texts are read up to this many characters


def count_items(text: str, separators: Sequence[str]) -> int:
    """How many elements a list written in prose has ("A, B and C" -> 3, "A->B->C" -> 3)."""
    if not text.strip():
        return 0
    pattern = "|".join(re.escape(s) for s in sorted(separators, key=len, reverse=True) if s)
    parts = re.split(pattern, text) if pattern else [text]
    return sum(1 for part in parts if part.strip())


def result_items(text: str) -> int:
    """A result's items: the length of a JSON list, else its non-empty lines."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, list):
            return len(data)
    return sum(1 for line in stripped.splitlines() if line.strip())


def item_key_text(key: tuple[str | None, ...]) -> str:
    """The text a line item's key arguments name it by ("rain jacket")."""
    return " ".join(part for part in key if part)


@dataclass
class RunQuantities:
    """The values one run gives the spec's quantities; what could not be read is in `missing` with the reason."""

    values: dict[str, float] = field(default_factory=dict)
    keyed: dict[str, Quantity] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    task: str = ""

    def for_item(self, key: tuple[str | None, ...]) -> dict[str, float]:
        """The values with each per-item quantity read for this item's key."""
        values = dict(self.values)
        name = item_key_text(key)
        for quantity_name, quantity in self.keyed.items():
            value = _keyed_value(quantity, self.task, name)
            if value is not None:
                values[quantity_name] = value
        return values

    def evaluate(self, expression: float | str, key: tuple[str | None, ...] = ()) -> float:
        """An expression's value for this run (and item); `MissingQuantity` names what the run lacks."""
        if isinstance(expression, str) and (self.keyed or self.missing):
            return evaluate(expression, self.for_item(key))
        return evaluate(expression, self.values)

    def why_missing(self, exc: MissingQuantity) -> str:
        name = str(exc.args[0]) if exc.args else "?"
        return self.missing.get(name, f"quantity {name} has no value for this item")


def _keyed_value(quantity: Quantity, task: str, key: str) -> float | None:
    if not key or quantity.pattern is None:
        return None
    key_re = r"\s+".join(re.escape(word) for word in key.split())
    match = re.search(quantity.pattern.replace("{key}", key_re), task, re.IGNORECASE)
    return _read(match.group("value"), quantity) if match else None


def _read(text: str, quantity: Quantity) -> float | None:
    if quantity.measure == "items":
        return float(count_items(text, quantity.separators)) * quantity.scale
    try:
        return read_number(text) * quantity.scale
    except NumberFormatError:
        numbers = find_numbers(text)
        return numbers[0] * quantity.scale if numbers else None


def resolve_quantities(spec: VerifierSpec, task: str | None, calls: Sequence[Call]) -> RunQuantities:
    """Every quantity of `spec` this run gives a value (per-item ones are read per item, later)."""
    text = (task or "")[:MAX_TASK_CHARS]
    run = RunQuantities(task=text)
    for name, quantity in spec.quantities.items():
        if quantity.keyed:
            run.keyed[name] = quantity
        elif quantity.source == "task":
            assert quantity.pattern is not None
            match = re.search(quantity.pattern, text) if text else None
            value = _read(match.group("value"), quantity) if match else None
            if value is None:
                run.missing[name] = f"{name} is not in the task text (pattern {quantity.pattern!r})"
            else:
                run.values[name] = value
        else:
            value = _tool_value(quantity, calls)
            if value is None:
                run.missing[name] = f"{name} comes from {quantity.tool}'s result, which the run never obtained"
            else:
                run.values[name] = value
    return run


def _tool_value(quantity: Quantity, calls: Sequence[Call]) -> float | None:
    for call in reversed(calls):
        if call.tool != quantity.tool or not call.made or call.result is None:
            continue
        if quantity.measure == "items":
            return result_items(call.result) * quantity.scale
        if call.classified.value is not None:
            return call.classified.value * quantity.scale
    return None
