"""Task templates: a task text with its entities, numbers and lists taken out, so tasks of one family group together.

The slots are found from what a healthy run did with the task: an entity is a word the run passed
to a tool as an argument ("Prague", "rain jacket"), a number is a number, and a list is two or more
entities joined by list separators ("Prague->Oslo->Seville", "1 x power bank, 3 x rain jacket").
A template becomes a full-match regular expression with one named group per slot, which is how a
fitted spec recognises its family in a task it has never seen; its number and list slots become
the family's task quantities (nights, bags, a tax rate, the number of stops).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["MAX_TEMPLATE_TASK_CHARS", "SEPARATORS", "Slot", "Template", "make_template", "merge_optional"]


MAX_TEMPLATE_TASK_CHARS = 2_000  # longer task texts are not templated (and not matched)
MAX_SLOTS = 8  # a template with more slots is not one (and its lazy groups could backtrack for long)
SEPARATORS = ["->", ",", " and ", " or ", ";"]  # how prose lists join their elements
_ENTITY, _NUMBER, _LIST, _OPTIONAL = "\x01", "\x02", "\x03", "\x04"  # _OPTIONAL brackets an optional clause
_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.]*\w)")
# One list element: an entity, optionally with a quantity before it ("3 x rain jacket").
_ELEMENT = rf"(?:{_NUMBER}\s*(?:x|×|\*)\s*)?{_ENTITY}"
_LIST_RE = re.compile(rf"{_ELEMENT}(?:\s*(?:->|,\s*(?:and\s+)?|\band\b|\bor\b|;|&)\s*{_ELEMENT})+")
_SLOT_RE = re.compile(f"[{_ENTITY}{_NUMBER}{_LIST}]")
_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class Slot:
    """One variable part of a template: its kind, its group name, and a quantity name for number and list slots."""

    kind: str  # "entity" | "number" | "list"
    group: str
    quantity: str | None = None
    percent: bool = False


_GROUP_RE = {"entity": ".+?", "number": r"\d+(?:\.\d+)?", "list": ".+?"}


def _literal_re(literal: str) -> str:
    parts = []
    for i, piece in enumerate(literal.split(_OPTIONAL)):
        spaced = r"\s+".join(re.escape(chunk) for chunk in piece.split(" "))
        parts.append(f"(?:{spaced})?" if i % 2 else spaced)
    return "".join(parts)


@dataclass(frozen=True)
class Template:
    """A task template: the key that groups a family, its slots in order and the literal text between them."""

    key: str  # the task with slots as placeholders and whitespace collapsed
    slots: tuple[Slot, ...]
    literals: tuple[str, ...]  # len(slots) + 1 pieces of literal text around the slots

    @property
    def pattern(self) -> str:
        """The full-match regex with a named group per slot."""
        return "(?s)^" + self._join(lambda slot: f"(?P<{slot.group}>{_GROUP_RE[slot.kind]})") + "$"

    def _join(self, group: Callable[[Slot], str]) -> str:
        parts = [_literal_re(self.literals[0])]
        for slot, literal in zip(self.slots, self.literals[1:], strict=True):
            parts += [group(slot), _literal_re(literal)]
        return "".join(parts)

    def describe(self) -> str:
        described = self.key.replace(_ENTITY, "<name>").replace(_NUMBER, "<n>").replace(_LIST, "<list>")
        return re.sub(f"{_OPTIONAL}(.*?){_OPTIONAL}", r"[\1]", described)

    def values(self, task: str) -> dict[str, str] | None:
        """The text of each slot group in `task`, or None when the task is not of this template."""
        if len(task) > MAX_TEMPLATE_TASK_CHARS:
            return None
        match = re.fullmatch(self.pattern, " ".join(task.split()))
        return {k: v for k, v in match.groupdict().items() if v is not None} if match else None

    def slot_pattern(self, slot: Slot, tasks: Sequence[str]) -> str:
        """A pattern reading one slot as group ``value``: its literal neighbours when that reads every task right.

        The short form ("then add (?P<value>...) hotel nights") is what a person can read and edit;
        when it is ambiguous on any task given, the whole template (other slots uncaptured) is used.
        """
        index = self.slots.index(slot)
        before = " ".join(self.literals[index].split(" ")[-3:])
        after = " ".join(self.literals[index + 1].split(" ")[:3])
        short = f"{_literal_re(before)}(?P<value>{_GROUP_RE[slot.kind]}){_literal_re(after)}"
        if before.strip() and after.strip() and all(self._reads(short, slot, task) for task in tasks):
            return short
        return "(?s)^" + self._join(lambda s: f"(?P<value>{_GROUP_RE[s.kind]})" if s == slot
                                    else f"(?:{_GROUP_RE[s.kind]})") + "$"

    def _reads(self, short: str, slot: Slot, task: str) -> bool:
        values = self.values(task)
        hits = list(re.finditer(short, " ".join(task.split())))
        return values is not None and len(hits) == 1 and hits[0].group("value") == values.get(slot.group)


def merge_optional(a: Template, b: Template) -> Template | None:
    """One template for two that differ by one clause the other lacks ("... and check the weather at each stop").

    The clause becomes optional in the merged pattern; None when the two differ in any other way.
    """
    if [(s.kind, s.group) for s in a.slots] != [(s.kind, s.group) for s in b.slots]:
        return None
    differing = [i for i, (x, y) in enumerate(zip(a.literals, b.literals, strict=True)) if x != y]
    if len(differing) != 1:
        return None
    i = differing[0]
    longer, shorter = sorted((a.literals[i], b.literals[i]), key=len, reverse=True)
    if _OPTIONAL in longer or _OPTIONAL in shorter:
        return None
    prefix = 0
    while prefix < len(shorter) and longer[prefix] == shorter[prefix]:
        prefix += 1
    suffix = shorter[prefix:]
    if not longer.endswith(suffix):
        return None
    inserted = longer[prefix:len(longer) - len(suffix)]
    merged = longer[:prefix] + _OPTIONAL + inserted + _OPTIONAL + suffix
    literals = tuple(merged if j == i else literal for j, literal in enumerate(a.literals))
    key = a.key if len(a.key) >= len(b.key) else b.key
    slots = tuple(a.slots)
    return Template(key=key.replace(longer, merged, 1) if longer in key else key, slots=slots, literals=literals)


@lru_cache(maxsize=8)
def _entity_regex(values: tuple[str, ...]) -> re.Pattern[str] | None:
    """One alternation of every entity, longest first, so a task is scanned once however many there are."""
    kept = sorted({v.strip() for v in values
                   if 3 <= len(v.strip()) <= 60 and not re.fullmatch(r"[\d.,\s]+", v)}, key=len, reverse=True)
    if not kept:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(re.escape(v) for v in kept) + r")(?!\w)", re.IGNORECASE)


def _name_for(words_after: list[str], words_before: list[str], prefix: str, taken: set[str]) -> str:
    words = [w.lower() for w in (words_after[:2] or words_before[-2:])] or ["value"]
    base = prefix + "_".join(words)
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def make_template(task: str, arg_values: Iterable[str]) -> Template | None:
    """The template of `task`, given the string arguments a healthy run of it passed to its tools."""
    text = " ".join(task.split())
    if not text or len(text) > MAX_TEMPLATE_TASK_CHARS:
        return None
    entity_re = _entity_regex(tuple(sorted(v for v in arg_values if isinstance(v, str))))
    if entity_re is not None:
        text = entity_re.sub(_ENTITY, text)
    text = _NUMBER_RE.sub(_NUMBER, text)
    text = _LIST_RE.sub(_LIST, text)
    slots: list[Slot] = []
    literals: list[str] = []
    taken: set[str] = set()
    last = 0
    counts = {"entity": 0, "number": 0, "list": 0}
    for match in _SLOT_RE.finditer(text):
        literal = text[last:match.start()]
        literals.append(literal)
        after = _WORD.findall(_SLOT_RE.split(text[match.end():], maxsplit=1)[0])
        before = _WORD.findall(_SLOT_RE.split(literal)[-1])
        kind = {_ENTITY: "entity", _NUMBER: "number", _LIST: "list"}[match.group()]
        counts[kind] += 1
        group = f"{kind[0]}{counts[kind]}"
        if kind == "entity":
            slots.append(Slot(kind, group))
        elif kind == "number":
            percent = text[match.end():match.end() + 1] == "%"
            slots.append(Slot(kind, group, _name_for(["percent", *after[:1]] if percent else after, before, "",
                                                     taken), percent))
        else:
            slots.append(Slot(kind, group, _name_for([], before, "items_after_", taken)))
        last = match.end()
    literals.append(text[last:])
    if len(slots) > MAX_SLOTS:
        return None
    return Template(key=text, slots=tuple(slots), literals=tuple(literals))
