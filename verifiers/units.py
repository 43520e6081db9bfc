"""Numbers with their units: "277.15 K", "4 °C", "12.5 km", "3 h", "42%", read and compared through pint.

The extractor is a regular expression (a number, then a unit word or symbol right after it); what
the unit is, which dimension it has and how to convert it is pint's. quantulum3 was measured for
this (docs/verifiers-fit.md): 2.3 ms a sentence after a 2.7 s first load, against about 20 us here,
and it read "12 km at" as kilometre ampere-turns and "a $35" as dollars to the 35th, so the hot path
(every step's text) keeps this reader and `tests/test_verifiers_units.py` holds its unit resolution
equal to pint's own parser. Money is the number reader's (`verifiers.numbers`): currencies are
one unit family, read there.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["Amount", "convert", "find_amounts", "field_unit", "resolve_unit", "same_amount_in"]

MAX_UNIT_TEXT_CHARS = 100_000
PERCENT = "percent"
# After a number these are English, not units, though pint knows them ("at" = technical atmosphere,
# "a" = year, "in" = inch, "pm" = picometre, "am" = attometre...).
_NOT_UNITS = frozenset({
    "a", "an", "at", "am", "pm", "in", "and", "or", "of", "to", "is", "as", "by", "for", "on", "the", "it", "be",
    "are", "was", "were", "x", "no", "nos", "per", "each", "from", "with", "if", "so", "up", "out", "off", "its",
    "st", "nd", "rd", "th", "times", "point", "degree", "degrees", "rad", "bit", "bits", "count", "counts", "item", "items",
    # Words pint reads as units that, after a number in an answer, almost always count things instead.
    "bag", "bags", "unit", "units", "line", "lines", "hand", "hands", "link", "links", "chain", "chains", "pole",
    "poles", "rod", "rods", "points", "stone", "stones", "sheet", "sheets", "block", "blocks", "ball", "balls",
    "barn", "barns", "nit", "nits", "gal", "cup", "cups", "drop", "drops", "shot", "shots", "quad", "quads",
})
# How the units a tool's field names carry are spelled ("temp_k", "distance_km", "duration_s").
_FIELD_UNITS = {"k": "kelvin", "c": "degree_Celsius", "f": "degree_Fahrenheit", "pct": PERCENT, "percent": PERCENT,
                "kph": "kilometer_per_hour", "kmh": "kilometer_per_hour", "mph": "mile_per_hour", "sec": "second",
                "secs": "second", "mins": "minute", "hrs": "hour", "hr": "hour"}
# The unit words and symbols this reader tries: a symbol glued to the number or a word after a space,
# with an optional "per ..." or "/..." rate part; degree forms first so "°C" is not read as "°".
_UNIT_RE = (r"(?P<unit>°\s?[CFK]\b|degrees?\s+(?:celsius|centigrade|fahrenheit|kelvin|C|F)\b|%|"
            r"[A-Za-zµ]+(?:²|³|\^?[23])?(?:\s?(?:/|per\s)\s?[A-Za-z]+)?)")
_AMOUNT = re.compile(
    r"(?<![\w.,])(?P<num>[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+−]?\.\d+)"
    r"(?:\s?(?P<scale>thousand|million|billion)\b)?\s?" + _UNIT_RE, re.IGNORECASE)
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9}
_SINGLE_LETTER_UNITS = frozenset("KmsghWLVJN")  # other lone letters after a number are list markers, grades, variables
_ALIASES = {"metre": "meter", "metres": "meter", "litre": "liter", "litres": "liter", "feet": "foot", "lbs": "pound",
            "celsius": "degree_Celsius", "centigrade": "degree_Celsius", "fahrenheit": "degree_Fahrenheit",
            "kb": "kilobyte", "mb": "megabyte", "gb": "gigabyte", "tb": "terabyte", "ml": "milliliter", "l": "liter"}
_DEGREE_WORDS = {"celsius": "degree_Celsius", "centigrade": "degree_Celsius", "fahrenheit": "degree_Fahrenheit",
                 "kelvin": "kelvin", "c": "degree_Celsius", "f": "degree_Fahrenheit"}


@dataclass(frozen=True)
class Amount:
    """One number stated with its unit: its value, the pint unit's name, its dimension, how precisely it was written."""

    value: float
    unit: str  # pint's canonical name ("kelvin", "kilometer"), or "percent"
    dimension: str  # pint's dimensionality ("[temperature]", "[length] / [time]") or "percent"
    text: str
    start: int
    end: int
    decimals: int = 0


@lru_cache(maxsize=1)
def _registry() -> Any:
    import pint  # deferred: half a second to build, and only texts with units need it

    return pint.UnitRegistry(autoconvert_offset_to_baseunit=True)


@lru_cache(maxsize=4096)
def resolve_unit(token: str) -> tuple[str, str] | None:
    """(pint's name, dimensionality) of a unit word or symbol, or None when it is not a unit (or is English)."""
    text = " ".join(token.split())
    if not text or len(text) > 40:
        return None
    if text == "%":
        return PERCENT, PERCENT
    degree = re.fullmatch(r"(?i)°\s?([CFK])|degrees?\s+(\w+)", text)
    if degree:
        word = (degree.group(1) or degree.group(2)).lower()
        name = "kelvin" if word == "k" else _DEGREE_WORDS.get(word)
        return (name, "[temperature]") if name else None
    if len(text) == 1 and text not in _SINGLE_LETTER_UNITS:
        return None
    if text.lower() in _NOT_UNITS or text.lower().split("/")[0].split(" per ")[0] in _NOT_UNITS:
        return None
    alias = _ALIASES.get(text.lower()) if text.lower() != "l" or text == "L" else None
    if alias is not None and not (text.lower() == "mb" and text == "mb"):  # "mb" is millibar's symbol too
        text = alias
    if text.lower() in (PERCENT, "percentage", "per cent"):
        return PERCENT, PERCENT
    rate = re.split(r"\s*(?:/|\sper\s)\s*", text, maxsplit=1)
    if len(rate) == 2:  # "km/h", "miles per hour": each side must be a unit in its own right
        if resolve_unit(rate[0]) is None or resolve_unit(rate[1]) is None:
            return None
        text = f"{rate[0]}/{rate[1]}"
    registry = _registry()
    try:
        unit = registry.parse_units(text)
    except Exception:  # noqa: BLE001 - pint raises several types for what is not a unit
        return None
    if len(rate) == 1 and not _spelled_as(text, unit):
        return None
    dimension = str(unit.dimensionality)
    if dimension == "dimensionless":
        return None  # a count word ("dozen") or a ratio pint cannot tell from a plain number
    return str(unit), dimension


def _spelled_as(text: str, unit: Any) -> bool:
    """Whether `text` is the unit's own symbol or name (plural too), not a prefix glued to some other unit
    ("units" parses as micro-nits): pint reads far more than a writer means."""
    symbol = f"{unit:~}".replace(" ", "")
    name = str(unit).lower()
    folded = text.lower().replace(" ", "_")
    if folded in {a.lower() for a in _ALIASES.values()}:
        return True
    return text.replace(" ", "") == symbol or folded in (name, name + "s", name + "es") or \
        (folded.endswith("s") and folded[:-1] in (name,)) or folded in ("kph", "kmh", "mph", "hr", "hrs", "secs",
                                                                        "mins", "sec")


def field_unit(name: str) -> tuple[str, str] | None:
    """The unit a field name carries in its last part ("temp_k" -> kelvin, "distance_km", "speedKph"), or None."""
    parts = [p for p in re.split(r"[_\W]+|(?<=[a-z])(?=[A-Z])", name) if p]
    if len(parts) < 2:
        return resolve_unit(name) if name.lower() in ("kelvin", "celsius", "fahrenheit") else None
    last = parts[-1]
    named = _FIELD_UNITS.get(last.lower())
    if named is not None:
        return (named, PERCENT) if named == PERCENT else resolve_unit(named)
    if last.lower() in ("celsius", "fahrenheit", "kelvin"):
        return resolve_unit(f"degrees {last}")
    return resolve_unit(last) if len(last) >= 2 else None


def _decimals(number: str) -> int:
    return len(number.split(".")[1]) if "." in number else 0


def find_amounts(text: str) -> list[Amount]:
    """Every number in `text` written with a (non-money) unit, in order."""
    found: list[Amount] = []
    for match in _AMOUNT.finditer(text[:MAX_UNIT_TEXT_CHARS]):
        unit_text = match.group("unit")
        resolved = resolve_unit(unit_text)
        if resolved is None and (" " in unit_text or "/" in unit_text):
            unit_text = re.split(r"\s?(?:/|per\s)", unit_text, maxsplit=1)[0]  # "3 km per day" -> km
            resolved = resolve_unit(unit_text)
        if resolved is None:
            continue
        number = match.group("num").replace("−", "-").replace(",", "")
        try:
            value = float(number)
        except ValueError:
            continue
        scale = match.group("scale")
        if scale:
            value *= _SCALES[scale.lower()]
        if not math.isfinite(value):
            continue
        end = match.start("unit") + len(unit_text)
        # "1.2 million km" is stated to a tenth of a million: its precision moves with the scale word.
        decimals = _decimals(number) - (round(math.log10(_SCALES[scale.lower()])) if scale else 0)
        found.append(Amount(value, resolved[0], resolved[1], text[match.start():end], match.start(), end, decimals))
    return found


@lru_cache(maxsize=8192)
def convert(value: float, unit: str, to_unit: str) -> float | None:
    """`value` in `unit` expressed in `to_unit` (offset temperatures included), None when they do not convert."""
    if unit == to_unit:
        return value
    if PERCENT in (unit, to_unit):
        return None
    registry = _registry()
    try:
        return float(registry.Quantity(value, unit).to(to_unit).magnitude)
    except Exception:  # noqa: BLE001 - incompatible or unknown units
        return None


def same_amount_in(stated: Amount, value: float, unit: str | None) -> bool:
    """Whether `value` (in `unit`; None: a bare number, read in the stated unit) is what `stated` says, to its precision."""
    converted = value if unit is None else convert(value, unit, stated.unit)
    if converted is None:
        return False
    tolerance = 0.5 * 10.0 ** -stated.decimals + 1e-9 * max(1.0, abs(stated.value))
    return abs(converted - stated.value) <= tolerance
