"""Result contracts from healthy results: each tool's result shapes as generalized patterns or a JSON Schema.

Digits become a number class, words that vary (names, cities, item names, weather words) a word
class, runs of such words one phrase, and a list of lines of one shape a repeated line; words most
results of a tool share ("night", "SKU") stay literal. Empty answers ("No route found.") and
errors keep their words. The figure a total counts is put in the named group ``value``: the one
whose following words (its anchor: "/night", "per checked bag") the totals fit chose.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from verifiers.spec import ResultShape

__all__ = ["FigureAt", "ShapeFit", "classify_kind", "figures_of", "fit_shapes", "is_json", "value_anchors"]

MAX_SHAPE_CHARS = 2_000  # a result longer than this is free text: its shape is not spelled out
MAX_SKELETON_TOKENS = 40
_TOKEN = re.compile(r"(?P<num>(?<!\w)-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<!\w)-?\d+(?:\.\d+)?|\d+(?:\.\d+)?)"
                    r"|(?P<word>[^\W\d_]+)|(?P<space>\s+)|(?P<other>.)", re.DOTALL)
_CURRENCY = "$€£"
_EMPTY_WORDS = re.compile(r"(?i)\b(?:no|not|unknown|none|empty|nothing|unavailable)\b")
_ERROR_START = re.compile(r"(?i)^\s*(?:error|exception|traceback|failed|failure)\b")
_NUM_RE = r"-?\d[\d,]*(?:\.\d+)?"  # a number may carry its sign (a calculator can go below zero)
_PHRASE_RE = r"[^\W\d_]+(?:[ '’.-]+[^\W\d_]+)*"
_GENERIC_ERROR = re.compile(r"(?s)(?:Error|ERROR): .*")


@dataclass(frozen=True)
class FigureAt:
    """One figure in a result: its value, its index among the result's figures, and the words after it."""

    value: float
    index: int
    anchor: str


def figures_of(text: str) -> list[FigureAt]:
    """The figures of a result: the currency-marked ones when there are any, else every number."""
    text = text[:MAX_SHAPE_CHARS]
    found: list[tuple[float, int, int, bool]] = []
    for match in re.finditer(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\w])", text):
        marked = match.start() > 0 and text[match.start() - 1] in _CURRENCY
        found.append((float(match.group(1).replace(",", "")), match.start(), match.end(), marked))
    if any(marked for *_, marked in found):
        found = [f for f in found if f[3]]
    figures = []
    for index, (value, _start, end, _marked) in enumerate(found):
        after = re.sub(r"\d+(?:\.\d+)?", "#", text[end:end + 30].lower())
        words = re.findall(r"[a-z]+|[^\sa-z#]", after.split("#")[0])
        figures.append(FigureAt(value, index, " ".join(words[:3])))
    return figures


def value_anchors(texts: Sequence[str]) -> list[str]:
    """Where a result's figure can be read, for results that all have one: "*" (the first figure), then
    every anchor present in all of them (when some have more than one figure)."""
    per_result = [figures_of(t) for t in texts]
    if not per_result or any(not figs for figs in per_result):
        return []
    if all(len(figs) == 1 for figs in per_result):
        return ["*"]
    common = set.intersection(*({f.anchor for f in figs} for figs in per_result))
    return ["*", *sorted(common)]


def is_json(text: str) -> bool:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return False
    try:
        json.loads(stripped)
    except json.JSONDecodeError:
        return False
    return True


def classify_kind(text: str, is_error: bool, tool_has_figures: bool) -> str:
    """value, empty or error, for a healthy result (errors and empty answers keep their words in the contract)."""
    if is_error or _ERROR_START.match(text):
        return "error"
    if tool_has_figures and not figures_of(text) and _EMPTY_WORDS.search(text):
        return "empty"
    return "value"


def _tokens(text: str, keep: set[str]) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or "other"
        value = match.group()
        if kind == "word":
            kind = "lit" if value.lower() in keep else "word"
        elif kind == "space":
            value = "\n" if "\n" in value else " "
        tokens.append((kind, value))
    merged: list[tuple[str, str]] = []
    for kind, value in tokens:  # word (separator word)* -> one phrase
        if kind == "word":
            if len(merged) >= 2 and merged[-2][0] == "phrase" and merged[-1][1] in (" ", "-", "'", "’"):
                merged.pop()  # the separator belongs to the phrase
            elif not merged or merged[-1][0] != "phrase":
                merged.append(("phrase", ""))
            continue
        merged.append((kind, value))
    return merged


def _regex(tokens: list[tuple[str, str]], value_index: int | None) -> str:
    parts: list[str] = []
    number = 0
    for kind, value in tokens:
        if kind == "num":
            parts.append(f"(?P<value>{_NUM_RE})" if number == value_index else _NUM_RE)
            number += 1
        elif kind == "phrase":
            parts.append(_PHRASE_RE)
        elif kind == "space":
            parts.append(r"\s+")
        else:
            parts.append(re.escape(value))
    return "".join(parts)


def _currency_numbers(tokens: list[tuple[str, str]]) -> list[int]:
    """Indexes, among the number tokens, of those right after a currency sign."""
    marked: list[int] = []
    number = 0
    for i, (kind, _value) in enumerate(tokens):
        if kind == "num":
            if i > 0 and tokens[i - 1][1] in _CURRENCY:
                marked.append(number)
            number += 1
    return marked


def _shape_of(text: str, keep: set[str], anchor: str | None, literal: bool) -> tuple[str, int]:
    """(regex, how many tokens it spells out) for one result."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not literal and len(lines) >= 2:
        line_tokens = [_tokens(line.strip(), keep) for line in lines]
        line_shapes = {_regex(tokens, None) for tokens in line_tokens}
        if len(line_shapes) == 1:
            return rf"(?:{line_shapes.pop()}(?:\s*\n\s*|\s*$))+", len(line_tokens[0])
    tokens = _tokens(text, _all_words(text) if literal else keep)
    figures = figures_of(text)
    value_index = None
    if figures and not literal:
        chosen = figures[0] if anchor in (None, "*") else next((f for f in figures if f.anchor == anchor), None)
        if chosen is not None:
            marked = _currency_numbers(tokens)
            value_index = marked[chosen.index] if marked and chosen.index < len(marked) else chosen.index
    return _regex(tokens, value_index), sum(1 for kind, _ in tokens if kind != "space")


def _all_words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[^\W\d_]+", text)}


def _free_text(anchor: str | None, texts: Sequence[str]) -> str:
    """A shape for long or varied text: anything, with the anchored figure as ``value`` when there is one.

    Text that never looked like JSON in a healthy run must not start looking like it (a JSON
    payload where prose was expected is a malformed result, not free text).
    """
    guard = "" if any(t.lstrip().startswith(("{", "[")) for t in texts) else r"(?![\[{])"
    if anchor in (None, "") or not texts:
        return rf"(?s){guard}.+"
    if anchor == "*":
        return rf"(?s){guard}[^\d]*?[{re.escape(_CURRENCY)}]?(?P<value>{_NUM_RE}).*"
    words = r"\s*".join(re.escape(w) for w in anchor.split(" "))
    return rf"(?s){guard}.*?(?P<value>{_NUM_RE})\s*{words}.*"


@dataclass
class ShapeFit:
    """What the contract fit found for one tool."""

    returns: list[ResultShape]
    json_schema: dict[str, object] | None
    messages: list[str]


_ENTITY_MARK = "\x05"  # stands for an argument value inside an error or empty answer while its shape is spelled
_QUOTED = re.compile(r"'[^'\n]{1,80}'|\"[^\"\n]{1,80}\"")


def _without_entities(text: str, arguments: Sequence[str]) -> str:
    """`text` with what the call was about (its argument values, anything quoted) marked: "unknown city 'Oslo'"
    is the shape of every "unknown city '...'", not of Oslo's alone."""
    for value in sorted({a.strip() for a in arguments if len(a.strip()) >= 2}, key=len, reverse=True):
        text = re.sub(r"(?<!\w)" + re.escape(value) + r"(?!\w)", _ENTITY_MARK, text, flags=re.IGNORECASE)
    return _QUOTED.sub(lambda m: m.group()[0] + _ENTITY_MARK + m.group()[0], text)


def fit_shapes(tool: str, results: Sequence[tuple[str, bool]], *, anchor: str | None,
               min_support: int, arguments: Sequence[Sequence[str]] | None = None) -> ShapeFit:
    """The shapes of one tool's healthy results (text, is_error); rare generalized shapes fold into free text.

    `arguments` (per result, the call's argument values) lets error and empty answers generalize over
    the entity they name, as value results generalize over their words and digits.
    """
    texts = [(text.strip(), err) for text, err in results]
    has_figures = sum(1 for t, _ in texts if figures_of(t)) > len(texts) / 2
    kinds = [(t, classify_kind(t, err, has_figures)) for t, err in texts]
    values = [t for t, k in kinds if k == "value"]
    messages: list[str] = []
    shapes: Counter[tuple[str, str]] = Counter()
    for index, (text, kind) in enumerate(kinds):
        if kind == "error" and _GENERIC_ERROR.fullmatch(text):
            continue  # the spec's error_shapes already declare it
        if kind != "value":
            marked = _without_entities(text[:MAX_SHAPE_CHARS], arguments[index] if arguments else ())
            literal, _n = _shape_of(marked, set(), None, literal=True)
            shapes[(literal.replace(_ENTITY_MARK, ".+?"), kind)] += 1
    schema: dict[str, object] | None = None
    if values and all(is_json(t) for t in values):
        from genson import SchemaBuilder  # deferred: only tools with JSON results need it

        builder = SchemaBuilder()
        for text in values:
            builder.add_object(json.loads(text))
        schema = builder.to_schema()
        schema.pop("$schema", None)
        return ShapeFit([ResultShape(pattern=p, kind=k, support=n) for (p, k), n in shapes.items()],  # type: ignore[arg-type]
                        schema, [f"{tool}: results are JSON; contract is their JSON Schema ({len(values)} results)"])
    word_counts = Counter(w for t in values for w in _all_words(t))
    keep = {w for w, n in word_counts.items() if n >= max(2, 0.6 * len(values))}
    value_shapes: Counter[str] = Counter()
    too_long = False
    for text in values:
        regex, n_tokens = _shape_of(text[:MAX_SHAPE_CHARS], keep, anchor, literal=False)
        too_long = too_long or len(text) > MAX_SHAPE_CHARS or n_tokens > MAX_SKELETON_TOKENS
        value_shapes[regex] += 1
    rare = {p: n for p, n in value_shapes.items() if n < min_support}
    if too_long or (rare and len(rare) == len(value_shapes)):
        pattern = _free_text(anchor, values)
        n = len(values)
        why = "long text" if too_long else f"{len(value_shapes)} distinct shapes, none seen {min_support} times"
        messages.append(f"{tool}: {why} over {n} results; the contract accepts any text"
                        + (" with the figure read at its anchor" if "value" in pattern else ""))
        value_shapes = Counter({pattern: n})
    elif rare:
        # Too few results to trust these shapes: fold them into free text rather than call a healthy result malformed.
        value_shapes = Counter({p: n for p, n in value_shapes.items() if n >= min_support})
        value_shapes[_free_text(anchor, values)] += sum(rare.values())
        messages.append(f"{tool}: {len(rare)} result shape(s) seen fewer than {min_support} times fold into free text")
    returns = [ResultShape(pattern=p, kind="value", support=n) for p, n in value_shapes.most_common()]
    returns += [ResultShape(pattern=p, kind=k, support=n) for (p, k), n in shapes.items()]  # type: ignore[arg-type]
    return ShapeFit(returns, None, messages)
