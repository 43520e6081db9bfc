"""answer_parts: the answer states every value the task asked for (each call's figure or word a healthy answer repeats).

A spec lists, per tool, the parts of each successful call's result an answer must state
(`ToolSpec.answer`, fitted by `fit-spec` from what healthy answers always repeated): the mean and
the median when both were looked up, the condition and the temperature of each city. A number
counts as stated in any unit it converts to ("277.15 K" as "4 °C"), to the precision written; a
word or a code as written, case aside.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from guardrail.core.events import Finding
from verifiers.numbers import find_figures, find_numbers
from verifiers.observed import Call, finding
from verifiers.records import parse_record, record_fields
from verifiers.spec import AnswerPart, VerifierSpec
from verifiers.units import Amount, field_unit, find_amounts, same_amount_in

__all__ = ["check_answer_parts", "part_values", "states_value"]

MAX_PARTS = 50  # values checked per run (a run with more calls is checked on its first ones)


def part_values(part: AnswerPart, call: Call) -> list[tuple[str | float, str | None]]:
    """The values (with the unit a number came in) one call's result gives for `part`."""
    if part.field is None:
        if call.classified.value is not None:
            return [(call.classified.value, None)]
        text = (call.result or "").strip()
        return [(text, None)] if text and len(text) <= 60 else []
    record = parse_record(call.result)
    if record is None:
        return []
    found: list[tuple[str | float, str | None]] = []
    for path, value, _holder in record_fields(record):
        if path != part.field or isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float):
            unit = field_unit(path.rsplit(".", 1)[-1])
            found.append((float(value), unit[0] if unit else None))
        elif str(value).strip():
            found.append((str(value).strip(), None))
    return found


@lru_cache(maxsize=512)
def _readings(answer: str) -> tuple[tuple[Amount, ...], tuple[float, ...]]:
    """An answer's numbers with units and its plain numbers, read once however many parts are checked against it."""
    return tuple(find_amounts(answer)), tuple(_numbers(answer))


def states_value(answer: str, value: str | float, unit: str | None, amounts: Sequence[Amount] | None = None,
                 numbers: Sequence[float] | None = None) -> bool:
    """Whether `answer` states `value` (a number in any unit it converts to, or the word as written)."""
    if isinstance(value, str):
        return value.casefold() in answer.casefold()
    if amounts is None or numbers is None:
        amounts, numbers = _readings(answer)
    if any(same_amount_in(a, value, unit) for a in amounts):
        return True
    # A bare number (or money) stated as written or rounded to what the answer shows.
    return any(abs(n - value) <= 0.5 * 10 ** -_places(n) + 1e-9 for n in numbers)


def _numbers(answer: str) -> list[float]:
    figures, _ = find_figures(answer)
    return [f.value for f in figures] + find_numbers(answer)


def _places(number: float) -> int:
    text = f"{number:.6f}".rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


def check_answer_parts(spec: VerifierSpec, calls: Sequence[Call], answer: str | None, *,
                       step: int | None) -> list[Finding]:
    """One finding naming every asked-for value the answer leaves out."""
    if not any(t.answer for t in spec.tools.values()) or answer is None:
        return []
    amounts, numbers = _readings(answer)
    missing: list[str] = []
    checked = 0
    seen: set[tuple[str, str, str]] = set()
    for call in calls:
        tool_spec = spec.tools.get(call.tool)
        if tool_spec is None or not tool_spec.answer or not call.made:
            continue
        for part in tool_spec.answer:
            for value, unit in part_values(part, call):
                key = (call.tool, part.field or "", str(value))
                if key in seen or checked >= MAX_PARTS:
                    continue
                seen.add(key)
                checked += 1
                if not states_value(answer, value, unit, amounts, numbers):
                    shown = f"{value:g}" if isinstance(value, float) else repr(value)
                    missing.append(f"{call.tool} {part.field or 'result'} {shown}"
                                   + (f" ({unit})" if unit else ""))
    if not missing:
        return []
    return [finding("answer_parts", "the answer leaves out what the task asked for: " + "; ".join(missing[:5]),
                    step=step, evidence={"missing": missing[:20]},
                    hint="state every value the task asked for, as the tools returned it")]
