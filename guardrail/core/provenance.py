"""Provenance of argument values: did the identifier come from the task, the conversation or a tool result?

Self-consistency cannot see a model that invents the same order id in all N samples. An
invented identifier usually appears nowhere the agent has looked, while a real one was given by
the user or returned by an earlier tool. `ProvenanceContext` indexes what the agent saw (task,
user and system messages, earlier tool calls that succeeded and their results) and
`ProvenanceContext.ground` says how a value is supported:

- ``context``: the value appears there (case-folded, Unicode-normalized); dates are compared as
  dates (``"2024-03-05"`` and "March 5, 2024");
- ``context_parts``: every distinctive part of it appears, not the whole: ``"ORD-1042"`` from
  "order #1042", ``"docs/rollback_3.md"`` from a listing of ``docs`` that holds ``rollback_3.md``.
  Weaker: parts can be recombined into an invention, so the gate also asks the dry run;
- ``derived``: an amount that is a context number scaled (x10^k, sign, rounding) or one
  arithmetic step (+ - x /, or "b percent of a") from two context numbers (2 and 100 need not
  be written: halves, doubles, percentages);
- ``schema``: a choice the tool's schema lists, or a value its documentation names;
- ``trivial``: nothing distinctive to check (``"."``, short words, small integers, booleans).

A distinctive part is a run of letters and digits holding a digit or at least four letters.
Free text is not checked as a whole: only its code-like words (letters with digits, or five
digits and more, e.g. ``INC-3fa9c2``) are. Settings (limits, page sizes) are never checked.
The index is bounded: each text is read up to `max_item_chars` and the whole up to `max_chars`.
"""

from __future__ import annotations

import bisect
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from guardrail.core.arguments import ArgumentKind, ArgumentSpec, iter_arguments

if TYPE_CHECKING:
    from guardrail.core.events import Action, Episode, Result, Step

__all__ = ["Grounding", "ProvenanceContext", "ProvenanceReport", "check_arguments"]

_ATOM = re.compile(r"[^\W_]+")
_NUMBER_TEXT = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w])|(?<![\w.])[-+]?\.\d+(?![\w])")
_MONTHS = {name: i for i, names in enumerate(
    (("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
     ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"),
     ("dec", "december")), start=1) for name in names}
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ISO_DATE = re.compile(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_NUMERIC_DATE = re.compile(r"(?<!\d)(\d{1,2})[-/.](\d{1,2})[-/.](\d{4})(?!\d)")
_MONTH_FIRST = re.compile(rf"\b({_MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b")
_DAY_FIRST = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE})\.?,?\s+(\d{{4}})\b")
_JSON = json.JSONEncoder(ensure_ascii=False, default=str)
_SMALL_INTEGER = 10  # integers up to this size are too common to carry provenance
_IMPLICIT_OPERANDS = (2.0, 100.0)  # halves/doubles and percentages need no number written in the text


def _fold(text: str) -> str:
    """Compare text as a reader does: compatibility-normalized, case-folded, spaces collapsed."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return " ".join(text.casefold().split())


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _atom_keys(atom: str) -> tuple[str, ...]:
    """An atom as looked up: digits also without leading zeros, so "007" and "7" meet."""
    if atom.isdigit():
        stripped = atom.lstrip("0") or "0"
        return (atom, stripped) if stripped != atom else (atom,)
    return (atom,)


def _distinctive(atom: str) -> bool:
    return any(ch.isdigit() for ch in atom) or len(atom) >= 4


def _code_like(word: str) -> bool:
    """A word in free text that reads as an identifier: letters and digits together, or a long digit run."""
    has_digit = any(ch.isdigit() for ch in word)
    if not has_digit:
        return False
    digits = sum(ch.isdigit() for ch in word)
    return any(ch.isalpha() for ch in word) or digits >= 5


def _dates(text: str) -> set[str]:
    """ISO forms (YYYY-MM-DD) of the calendar dates written in `text` (a D/M vs M/D date gives both)."""
    found: set[str] = set()

    def add(year: int, month: int, day: int) -> None:
        if 1 <= month <= 12 and 1 <= day <= 31:
            found.add(f"{year:04d}-{month:02d}-{day:02d}")

    for y, m, d in _ISO_DATE.findall(text):
        add(int(y), int(m), int(d))
    for a, b, y in _NUMERIC_DATE.findall(text):
        add(int(y), int(a), int(b))
        add(int(y), int(b), int(a))
    for month, d, y in _MONTH_FIRST.findall(text):
        add(int(y), _MONTHS[month], int(d))
    for d, month, y in _DAY_FIRST.findall(text):
        add(int(y), _MONTHS[month], int(d))
    return found


def _decimals(value: float) -> int:
    text = repr(float(value))
    if "e" in text or "E" in text:
        return 6
    return min(6, len(text.split(".")[1].rstrip("0"))) if "." in text else 0


@dataclass(frozen=True)
class Grounding:
    """One argument value and what supports it (`grounded_by` None: nothing the agent saw)."""

    path: str
    value: Any
    kind: ArgumentKind
    grounded_by: str | None  # context | context_parts | derived | schema | trivial | execution | None
    detail: str = ""

    @property
    def grounded(self) -> bool:
        return self.grounded_by is not None

    @property
    def whole(self) -> bool:
        """Supported as a whole value, not only part by part (parts can be recombined into an invention)."""
        return self.grounded_by is not None and self.grounded_by != "context_parts"

    def evidence(self) -> dict[str, Any]:
        value = self.value if not isinstance(self.value, str) else self.value[:200]
        return {"path": self.path, "value": value, "kind": self.kind.value, "grounded_by": self.grounded_by,
                "detail": self.detail}


@dataclass(frozen=True)
class ProvenanceReport:
    """What the provenance check found for one call's argument values."""

    checked: tuple[Grounding, ...]
    context_chars: int = 0  # how much context it was checked against (0: none)

    @property
    def ungrounded(self) -> tuple[Grounding, ...]:
        return tuple(g for g in self.checked if not g.grounded)

    @property
    def grounded(self) -> bool:
        return not self.ungrounded

    @property
    def partial(self) -> tuple[Grounding, ...]:
        """Values supported only part by part."""
        return tuple(g for g in self.checked if g.grounded and not g.whole)

    @property
    def whole(self) -> bool:
        return all(g.whole for g in self.checked)

    def confirmed_by_execution(self) -> ProvenanceReport:
        """The same report, every unsupported value now supported by a dry run that found it."""
        return ProvenanceReport(tuple(g if g.whole else Grounding(g.path, g.value, g.kind, "execution",
                                                                  "the dry run found it")
                                      for g in self.checked), self.context_chars)

    def evidence(self) -> dict[str, Any]:
        by: dict[str, int] = {}
        for g in self.checked:
            key = g.grounded_by or "ungrounded"
            by[key] = by.get(key, 0) + 1
        return {"checked": len(self.checked), "grounded_by": by, "context_chars": self.context_chars,
                "ungrounded": [g.evidence() for g in self.ungrounded[:5]],
                "partial": [g.evidence() for g in self.partial[:5]]}


class ProvenanceContext:
    """What an agent had seen when it proposed a call, indexed for provenance checks.

    Feed it the task, user/system messages and tool results (`add`); the agent's own words are
    not evidence of anything and should not be fed. `from_episode` reads a Guard episode.
    """

    def __init__(self, texts: Iterable[Any] = (), *, max_chars: int = 2_000_000, max_item_chars: int = 200_000,
                 max_numbers: int = 256) -> None:
        self.max_chars = max_chars
        self.max_item_chars = max_item_chars
        self.max_numbers = max_numbers  # the most recent distinct numbers are the operands of derived amounts
        self.truncated = False  # some text was cut at the caps
        self._texts: list[str] = []
        self._chars = 0
        self._atoms: set[str] = set()
        self._dates: set[str] = set()
        self._numbers: dict[float, None] = {}  # an ordered set: oldest first
        self._sorted: list[float] | None = None
        self._joined: str | None = None
        self._seen: set[int] = set()
        for text in texts:
            self.add(text)

    @classmethod
    def from_episode(cls, episode: Episode, results: Sequence[tuple[Action, Result]] = (),
                     extra: Iterable[Any] = ()) -> ProvenanceContext:
        """The task, every earlier tool call that did not fail and its result, the results the Guard saw, and `extra`."""
        context = cls()
        if episode.task:
            context.add(episode.task)
        context.add_steps(episode.steps)
        context.add_results(results)
        for item in extra:
            context.add(item)
        return context

    def add_steps(self, steps: Iterable[Step]) -> None:
        """Add the tool calls of `steps` that did not fail, and their results (not the agent's own text)."""
        for step in steps:
            if step.task:
                self.add(step.task)
            for event in step.tool_events:
                if event.is_error:
                    continue  # a failed call's arguments were never confirmed by anything
                self.add(event.args)
                if event.result is not None:
                    self.add(event.result)

    def add_results(self, results: Iterable[tuple[Action, Result]]) -> None:
        """Add (action, result) pairs the Guard saw, skipping failed calls."""
        for action, result in results:
            if result.is_error:
                continue
            self.add(action.args)
            self.add(result.data if result.data is not None else result.output)

    @property
    def empty(self) -> bool:
        return self._chars == 0

    @property
    def chars(self) -> int:
        return self._chars

    def add(self, item: Any) -> None:
        """Index one text or JSON-like value (a tool result); bounded by `max_item_chars` and `max_chars`."""
        if item is None:
            return
        if isinstance(item, str):
            text = item
        else:
            text = self._bounded_json(item)
        if len(text) > self.max_item_chars:
            text, self.truncated = text[: self.max_item_chars], True
        room = self.max_chars - self._chars
        if room <= 0:
            self.truncated = True
            return
        if len(text) > room:
            text, self.truncated = text[:room], True
        folded = _fold(text)
        if not folded or hash(folded) in self._seen:
            return  # the same message fed again (adapters pass the whole conversation each step)
        self._seen.add(hash(folded))
        self._texts.append(folded)
        self._chars += len(folded)
        self._joined = None
        for atom in _ATOM.findall(folded):
            self._atoms.update(_atom_keys(atom))
        self._dates |= _dates(folded)
        for date in _dates(folded):
            self._atoms.update(date.split("-"))
        for match in _NUMBER_TEXT.findall(folded):
            try:
                number = float(match.replace(",", ""))
            except ValueError:
                continue
            if math.isfinite(number):
                self._remember(number)

    def _bounded_json(self, item: Any) -> str:
        """JSON text of a tool result, encoded only up to `max_item_chars` (a 10 MB result costs no more)."""
        parts: list[str] = []
        size = 0
        try:
            for chunk in _JSON.iterencode(item):
                parts.append(chunk)
                size += len(chunk)
                if size > self.max_item_chars:
                    break
        except (TypeError, ValueError, RecursionError):
            return str(item)[: self.max_item_chars + 1]
        return "".join(parts)

    def _remember(self, number: float) -> None:
        self._numbers.pop(number, None)  # seen again: now the most recent
        self._numbers[number] = None
        if len(self._numbers) > self.max_numbers:
            del self._numbers[next(iter(self._numbers))]
        self._sorted = None

    # ------------------------------------------------------------------ lookups
    def _text(self) -> str:
        if self._joined is None:
            self._joined = "\n".join(self._texts)
        return self._joined

    def contains(self, value: str) -> bool:
        """True when `value` (folded) appears in the context as a whole (not inside a longer name)."""
        needle = _fold(value)
        if not needle:
            return False
        haystack = self._text()
        start = haystack.find(needle)
        while start != -1:
            end = start + len(needle)
            before = haystack[start - 1] if start else " "
            after = haystack[end] if end < len(haystack) else " "
            # "_" joins words into one name: "rollback" inside "rollback_3.md" is a part, not the value.
            if not (_word(before) and _word(needle[0])) and not (_word(after) and _word(needle[-1])):
                return True
            start = haystack.find(needle, start + 1)
        return False

    def has_atom(self, atom: str) -> bool:
        return any(key in self._atoms for key in _atom_keys(atom))

    def has_date(self, iso: str) -> bool:
        return iso in self._dates

    def _ordered(self) -> list[float]:
        if self._sorted is None:
            self._sorted = sorted(self._numbers)
        return self._sorted

    def _near(self, target: float, tolerance: float) -> float | None:
        ordered = self._ordered()
        i = bisect.bisect_left(ordered, target - tolerance)
        if i < len(ordered) and ordered[i] <= target + tolerance:
            return ordered[i]
        return None

    def number_support(self, value: float) -> str | None:
        """``context`` when `value` is a number the agent saw, ``derived`` when one step of arithmetic gives it."""
        if not self._numbers or not math.isfinite(value):
            return None
        places = _decimals(value)
        tolerance = 0.5 * 10.0 ** -places
        if self._near(value, 1e-9 * max(1.0, abs(value))) is not None:
            return "context"
        numbers = self._ordered()
        for a in numbers:  # one operand: scaling, sign, rounding
            for candidate in (-a, a * 10, a / 10, a * 100, a / 100, a * 1000, a / 1000):
                if round(candidate, places) == value:
                    return "derived"
            if places < _decimals(a) and round(a, places) == value:
                return "derived"
        operands = list(numbers) + [c for c in _IMPLICIT_OPERANDS if c not in numbers]
        for a in operands:  # two operands: a + b, a - b, a * b, a / b with b another number the agent saw
            guesses = [(value - a, lambda b, a=a: a + b), (a - value, lambda b, a=a: a - b)]
            if a != 0:
                guesses.append((value / a, lambda b, a=a: a * b))
            if value != 0:
                guesses.append((a / value, lambda b, a=a: a / b if b else math.inf))
            if a != 0:  # "b percent of a"
                guesses.append((value * 100 / a, lambda b, a=a: a * b / 100))
            for guess, apply in guesses:
                b = self._near(guess, max(tolerance * (1 + abs(guess)), 1e-9))
                if b is None and guess in _IMPLICIT_OPERANDS:
                    b = guess
                if b is not None and round(apply(b), places) == value:
                    return "derived"
        return None

    # ------------------------------------------------------------------ the check
    def ground(self, path: str, value: Any, spec: ArgumentSpec, documentation: ProvenanceContext | None = None
               ) -> Grounding | None:
        """How `value` (a canonical argument value at `path`) is supported; None when its kind is not checked."""
        kind = spec.kind
        if kind is ArgumentKind.PARAMETER:
            return None
        if kind is ArgumentKind.CHOICE:
            return self._choice(path, value, spec)
        if isinstance(value, bool) or value is None:
            return Grounding(path, value, kind, "trivial")
        if isinstance(value, int | float):
            return self._amount(path, float(value), kind, documentation)
        if not isinstance(value, str):
            return Grounding(path, value, kind, "trivial")
        if kind is ArgumentKind.FREE_TEXT:
            return self._free_text(path, value, documentation)
        if kind is ArgumentKind.AMOUNT:
            numbers = [float(m.replace(",", "")) for m in _NUMBER_TEXT.findall(_fold(value))]
            if len(numbers) == 1:  # an amount with its unit or currency: the number is what must be supported
                return self._amount(path, numbers[0], kind, documentation)
        return self._identifier(path, value, kind, documentation)

    def _choice(self, path: str, value: Any, spec: ArgumentSpec) -> Grounding:
        if not spec.choices or isinstance(value, bool):
            return Grounding(path, value, spec.kind, "trivial")
        folded = _fold(value) if isinstance(value, str) else value
        for choice in spec.choices:
            if choice == value or (isinstance(choice, str) and folded == _fold(choice)):
                return Grounding(path, value, spec.kind, "schema")
        return Grounding(path, value, spec.kind, None, "not one of the values the tool's schema lists")

    def _amount(self, path: str, value: float, kind: ArgumentKind, documentation: ProvenanceContext | None
                ) -> Grounding:
        if value.is_integer() and abs(value) <= _SMALL_INTEGER:
            return Grounding(path, value, kind, "trivial")
        if kind is not ArgumentKind.AMOUNT:
            # A numeric identifier (an order number) must be one the agent saw; arithmetic does not make ids.
            text = str(int(value)) if value.is_integer() else repr(value)
            if self.has_atom(text) or self._near(value, 0.0) is not None:
                return Grounding(path, value, kind, "context")
            if documentation is not None and documentation.has_atom(text):
                return Grounding(path, value, kind, "schema")
            return Grounding(path, value, kind, None, "a number found nowhere the agent looked")
        how = self.number_support(value)
        if how is None and documentation is not None and documentation.number_support(value) == "context":
            how = "schema"
        return Grounding(path, value, kind, how, "" if how else "no number the agent saw gives it")

    def _free_text(self, path: str, value: str, documentation: ProvenanceContext | None) -> Grounding:
        missing = []
        for word in _fold(value).split():
            if not _code_like(word):
                continue
            if self.contains(word) or (documentation is not None and documentation.contains(word)):
                continue
            parts = [a for a in _ATOM.findall(word) if any(ch.isdigit() for ch in a)]
            if all(self.has_atom(a) or (documentation is not None and documentation.has_atom(a)) for a in parts):
                continue
            missing.append(word)
        if missing:
            return Grounding(path, value, ArgumentKind.FREE_TEXT, None,
                             f"mentions {', '.join(missing[:3])}, found nowhere the agent looked")
        return Grounding(path, value, ArgumentKind.FREE_TEXT, "trivial" if not any(
            _code_like(w) for w in _fold(value).split()) else "context")

    def _identifier(self, path: str, value: str, kind: ArgumentKind, documentation: ProvenanceContext | None
                    ) -> Grounding:
        folded = _fold(value)
        if folded.startswith("./"):
            folded = folded[2:]
        atoms = _ATOM.findall(folded)
        distinctive = [a for a in atoms if _distinctive(a)]
        if not distinctive:
            return Grounding(path, value, kind, "trivial")
        if self.contains(folded):
            return Grounding(path, value, kind, "context")
        if documentation is not None and documentation.contains(folded):
            return Grounding(path, value, kind, "schema")
        dates = _dates(folded)
        if dates and all(self.has_date(d) for d in dates):
            return Grounding(path, value, kind, "context", "the same date")
        missing = [a for a in distinctive if not self.has_atom(a)
                   and not (documentation is not None and documentation.has_atom(a))]
        if not missing:
            return Grounding(path, value, kind, "context_parts", "every part appears, not the whole")
        return Grounding(path, value, kind, None, f"{', '.join(missing[:3])} found nowhere the agent looked")


def check_arguments(args: Any, specs: Mapping[str, ArgumentSpec], context: ProvenanceContext,
                    documentation: ProvenanceContext | None = None) -> ProvenanceReport:
    """Ground every checked value of one call's canonical arguments against `context` (and the tool's docs)."""
    checked = []
    for path, value, spec in iter_arguments(args, specs):
        grounding = context.ground(path, value, spec, documentation)
        if grounding is not None:
            checked.append(grounding)
    return ProvenanceReport(tuple(checked), context.chars)
