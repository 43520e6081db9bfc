"""The number reader: figures in agent text and tool results (currency, thousands separators, number words).

A figure the reader recognises as a figure but cannot read (``$1,23,4``, ``$12.3.4``, ``$abc``)
comes back as an `UnreadableFigure`, never silently skipped: the checks turn it into a finding.
Input is capped (`MAX_TEXT_CHARS`) so a pathological result cannot stall a step.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_TEXT_CHARS",
    "Figure",
    "NumberFormatError",
    "UnreadableFigure",
    "find_figures",
    "find_numbers",
    "read_number",
    "same_amount",
]

MAX_TEXT_CHARS = 100_000  # texts longer than this are read up to the cap (and the cap is reported)

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_SCALES = {"thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_WORD = "|".join(sorted([*_UNITS, *_TENS, "hundred", *_SCALES], key=len, reverse=True))
_WORDS_RE = rf"(?:{_WORD})(?:(?:\s+|-|\s+and\s+)(?:{_WORD}))*"

# Digits: grouped thousands (1,234,567) or a plain run, then an optional decimal part.
_DIGITS_RE = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
_NUMBER_TOKEN = re.compile(rf"^\s*(?:{_DIGITS_RE})\s*$")
_SUFFIX = {"k": 1_000, "m": 1_000_000, "bn": 1_000_000_000}
_SCALE_SUFFIX = re.compile(r"(?i)\s*(k|m|bn)$")
_CURRENCY_BEFORE = re.compile(r"^(?:\$|US\$|USD|€|EUR|£|GBP)\s*", re.IGNORECASE)
_CURRENCY_AFTER = re.compile(r"\s*(?:USD|EUR|GBP|dollars?|euros?|pounds?)$", re.IGNORECASE)
_WORDS_FULL = re.compile(_WORDS_RE, re.IGNORECASE)
_FIGURE_RUN = re.compile(r"[\w.,]*")


class NumberFormatError(ValueError):
    """A string that should be a number and is not one this reader can read."""


@dataclass(frozen=True)
class Figure:
    """One number found in a text: its value, where it is, and whether it names money or a rate."""

    value: float
    text: str
    start: int
    end: int
    monetary: bool = False  # carried a currency symbol, code or word
    rate: bool = False  # a per-unit amount ("$120/night", "$5 per item"): not a total


@dataclass(frozen=True)
class UnreadableFigure:
    """Something that looks like a figure (a currency mark with a number after it) but cannot be read."""

    text: str
    start: int
    reason: str


def _words_value(text: str) -> float:
    total = 0
    current = 0
    seen = False
    for word in re.split(r"[\s-]+", text.lower()):
        if not word or word == "and":
            continue
        seen = True
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word in _SCALES:
            total += max(current, 1) * _SCALES[word]
            current = 0
        else:
            raise NumberFormatError(f"{text!r}: {word!r} is not a number word")
    if not seen:
        raise NumberFormatError(f"{text!r}: no number words")
    return float(total + current)


def read_number(text: str) -> float:
    """Read one number: ``"1,234.50"``, ``"$1,234"``, ``"2.5k"``, ``"USD 40"``, ``"two hundred"``.

    Raises `NumberFormatError` with the reason when `text` is not a number this reader can read
    (bad digit grouping, two decimal points, stray characters, nothing at all).
    """
    if len(text) > 200:
        raise NumberFormatError(f"{text[:40]!r}...: too long to be one number ({len(text)} chars)")
    body = text.strip()
    sign = 1.0
    if body.startswith("-"):
        sign, body = -1.0, body[1:].strip()
    body = _CURRENCY_BEFORE.sub("", body)
    body = _CURRENCY_AFTER.sub("", body)
    if not body:
        raise NumberFormatError(f"{text!r}: no digits")
    scale = 1.0
    suffix = _SCALE_SUFFIX.search(body)
    if suffix and any(ch.isdigit() for ch in body):
        scale = _SUFFIX[suffix.group(1).lower()]
        body = body[: suffix.start()]
    if _NUMBER_TOKEN.match(body):
        value = float(body.replace(",", "")) * scale
    elif _WORDS_FULL.fullmatch(body):
        value = _words_value(body)
    else:
        raise NumberFormatError(f"{text!r}: not a number (expected digits like 1,234.56 or number words)")
    if not math.isfinite(value):
        raise NumberFormatError(f"{text!r}: not a finite number")
    return sign * value


def same_amount(a: float, b: float) -> bool:
    """Two money amounts are the same when they agree to the cent (the unit amounts are stated in)."""
    return abs(a - b) < 0.005 + 1e-9 * max(abs(a), abs(b))


def _currency_patterns(symbols: Sequence[str], codes: Sequence[str], words: Sequence[str]) -> re.Pattern[str]:
    sym = "|".join(re.escape(s) for s in sorted(symbols, key=len, reverse=True)) or r"(?!x)x"
    code = "|".join(re.escape(c) for c in sorted(codes, key=len, reverse=True)) or r"(?!x)x"
    word = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) or r"(?!x)x"
    # A figure: optional currency before, digits or number words, optional currency after.
    return re.compile(
        rf"(?P<pre>(?:{code})\s?(?:{sym})?|(?:{sym}))?\s?"
        rf"(?P<num>-?(?:{_DIGITS_RE})(?:\s?(?:k|bn|m)\b)?|\b{_WORDS_RE}\b)"
        rf"(?P<post>\s?(?:{code}|{word})\b)?",
        re.IGNORECASE,
    )


_PATTERN_CACHE: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], re.Pattern[str]] = {}
_RATE_AFTER = re.compile(r"^\s*(?:/\s*[a-z]+|per\s+[a-z]+|a\s+night|each)\b", re.IGNORECASE)


def find_figures(
    text: str,
    *,
    symbols: Sequence[str] = ("$",),
    codes: Sequence[str] = ("USD",),
    words: Sequence[str] = ("dollars", "dollar"),
    monetary_only: bool = False,
) -> tuple[list[Figure], list[UnreadableFigure]]:
    """Every figure in `text`, plus the currency-marked things that could not be read.

    A currency symbol followed by something that is not a readable number (``$1,23,4``,
    ``$12.3.4``, ``$X``) is an `UnreadableFigure`. With `monetary_only`, figures without a
    currency mark are left out.
    """
    key = (tuple(symbols), tuple(codes), tuple(words))
    pattern = _PATTERN_CACHE.get(key)
    if pattern is None:
        pattern = _PATTERN_CACHE[key] = _currency_patterns(*key)
    figures: list[Figure] = []
    unreadable: list[UnreadableFigure] = []
    if len(text) > MAX_TEXT_CHARS:
        unreadable.append(UnreadableFigure(text[MAX_TEXT_CHARS - 20:MAX_TEXT_CHARS], MAX_TEXT_CHARS,
                                           f"text longer than {MAX_TEXT_CHARS} characters: read up to the cap"))
        text = text[:MAX_TEXT_CHARS]
    skip_until = -1
    for match in pattern.finditer(text):
        num = match.group("num")
        if not num or match.start() < skip_until:
            continue
        monetary = bool(match.group("pre") or match.group("post"))
        end = match.end()
        # Digits glued to more digits or letters after them are a broken figure, not a short one.
        tail = text[match.end("num"):match.end("num") + 2]
        if num[-1].isdigit() and re.match(r"(?:[.,]\d|\d|[A-Za-z_]\w)", tail) and not match.group("post"):
            if monetary:
                bad = _FIGURE_RUN.match(text, match.start("num"))
                skip_until = bad.end() if bad else match.end()
                unreadable.append(UnreadableFigure(text[match.start():skip_until], match.start(),
                                                   "digits run into other characters"))
            continue
        if not monetary and monetary_only:
            continue
        # A word number with no currency mark is prose ("one of the three cities"), not a figure.
        if not monetary and not re.search(r"\d", num):
            continue
        try:
            value = read_number(num)
        except NumberFormatError as exc:
            if monetary:
                unreadable.append(UnreadableFigure(match.group(0).strip(), match.start(), str(exc)))
            continue
        rate = bool(_RATE_AFTER.match(text[end:end + 20]))
        figures.append(Figure(value, match.group(0).strip(), match.start(), end, monetary, rate))
    # A currency symbol with nothing readable after it ("$X", "$ -") is an unreadable figure too.
    # Spans already read, sorted by start, so each symbol is looked up in log time (long texts stay linear-ish).
    spans = sorted([(f.start, f.end) for f in figures] + [(u.start, u.start + len(u.text) + 1) for u in unreadable])
    starts = [start for start, _ in spans]
    for sym in symbols:
        for hit in re.finditer(re.escape(sym) + r"\s?(?P<after>\S{0,12})", text):
            at = bisect.bisect_right(starts, hit.start()) - 1
            if at >= 0 and hit.start() < spans[at][1]:
                continue
            after = hit.group("after")
            if after and not after[0].isdigit() and not re.match(_WORDS_RE, after, re.IGNORECASE):
                unreadable.append(UnreadableFigure(hit.group(0), hit.start(), f"{sym!r} is not followed by a number"))
    unreadable.sort(key=lambda u: u.start)
    return figures, unreadable


def find_numbers(text: str) -> list[float]:
    """Every plain number in `text` (for arithmetic expressions and bare tool results)."""
    return [float(m.group().replace(",", "")) for m in re.finditer(r"\d+(?:\.\d+)?", text[:MAX_TEXT_CHARS])]
