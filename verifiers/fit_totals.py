"""The totals fit: a small linear relation between healthy answers' totals and what each run observed.

For every healthy run of a family we know the total its answer states, the figures its tools
returned (grouped by tool and by the words after the figure, so "$35 per checked bag" is its own
variable) and its quantities (the task's numbers and list lengths, a count read from a tool).
The search looks for one multiplier per group — 0, a small constant, a quantity, a product of two,
or a per-item quantity from the task — optionally "any k of the n items" for one group (the cheaper
of two routes), and optionally a percentage from the task added or taken off, such that the
relation reproduces the stated total on every run. Candidates are enumerated on one run with
numpy and checked on the rest; the simplest that holds everywhere is kept.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["GroupData", "Multiplier", "Relation", "search_relations"]

MAX_GRID = 2_000_000  # candidate combinations enumerated on the first run
MAX_SUBSET_GRID = 20_000  # the same for "any k of n", which is checked in Python
MAX_SUBSET_ITEMS = 10  # a group with more items than this is not searched for "any k of n"
_CONSTANTS = (2.0, 3.0, 4.0)


@dataclass(frozen=True)
class Multiplier:
    """One candidate multiplier: how it is written in the spec, what it costs, and its value per run."""

    expression: float | str
    cost: float
    per_run: tuple[float, ...] = ()
    keyed: bool = False  # a per-item quantity from the task: the group's items are weighted one by one


@dataclass
class GroupData:
    """One variable of the search: a tool's figures at one anchor, per run."""

    tool: str
    anchor: str
    items: list[list[float]]  # per run, the item values
    keyed_weights: list[list[float]] | None = None  # per run, each item's per-item quantity (same order)

    def sums(self) -> np.ndarray:
        return np.array([sum(values) for values in self.items])


@dataclass(frozen=True)
class Relation:
    """A relation that reproduced every run's stated total."""

    multipliers: dict[tuple[str, str], Multiplier]  # (tool, anchor) -> multiplier (groups left out are 0)
    subset: tuple[tuple[str, str], int] | None  # (group, k): any k of that group's items
    adjustment: tuple[str, str] | None  # (percent_add | percent_off, quantity name)
    places: int  # 2: to the cent; 0: to whole units (either way)
    cost: float = field(default=0.0, compare=False)


def _candidates(group: GroupData, quantities: dict[str, np.ndarray], runs: int) -> list[Multiplier]:
    ones = np.ones(runs)
    found = [Multiplier(0.0, 0.5, tuple(0 * ones)), Multiplier(1.0, 0.0, tuple(ones))]
    found += [Multiplier(c, 1.0, tuple(c * ones)) for c in _CONSTANTS]
    for name, values in quantities.items():
        found.append(Multiplier(name, 0.9, tuple(values)))  # a quantity explains more than a constant that fits
        found += [Multiplier(f"{c:g} * {name}", 2.0, tuple(c * values)) for c in _CONSTANTS]
    for (a, va), (b, vb) in itertools.combinations(quantities.items(), 2):
        found.append(Multiplier(f"{a} * {b}", 2.0, tuple(va * vb)))
    if group.keyed_weights is not None:
        found.append(Multiplier("", 0.9, (), keyed=True))
    return found


def _contribution(group: GroupData, multiplier: Multiplier) -> np.ndarray:
    if multiplier.keyed:
        assert group.keyed_weights is not None
        return np.array([sum(v * w for v, w in zip(values, weights, strict=True))
                         for values, weights in zip(group.items, group.keyed_weights, strict=True)])
    return np.asarray(multiplier.per_run) * group.sums()


def _matches(totals: np.ndarray, stated: Sequence[Sequence[float]], places: int) -> np.ndarray:
    """Per run: does any stated total equal this exact total (to the cent, or to whole units either way)."""
    out = np.zeros(len(stated), dtype=bool)
    for r, options in enumerate(stated):
        for value in options:
            if places == 2:
                out[r] |= abs(totals[r] - value) < 0.005 + 1e-9 * max(1.0, abs(value))
            else:
                out[r] |= float(value).is_integer() and abs(totals[r] - value) < 1.0
    return out


MAX_ANCHORS = 8  # runs the search is enumerated on in turn (a mislabelled first run must not hide the relation)


def search_relations(groups: Sequence[GroupData], stated: Sequence[Sequence[float]],
                     quantities: dict[str, np.ndarray], rates: dict[str, np.ndarray],
                     *, limit: int = 20, share: float = 1.0) -> list[Relation]:
    """Relations that reproduce the stated total of at least `share` of the runs, simplest first (at most `limit`).

    The candidates are enumerated on one run and checked on the rest; with `share` < 1 the first
    few runs take turns as that run, so one run that breaks the relation cannot hide it.
    """
    runs = len(stated)
    if runs == 0 or not groups:
        return []
    adjustments: list[tuple[tuple[str, str] | None, np.ndarray, float]] = [(None, np.ones(runs), 0.0)]
    for name, rate in rates.items():
        adjustments += [(("percent_add", name), 1 + rate, 1.0), (("percent_off", name), 1 - rate, 1.0)]
    candidates = [_candidates(g, quantities, runs) for g in groups]
    found: list[Relation] = []
    anchors = range(min(runs, MAX_ANCHORS) if share < 1.0 else 1)
    for places in (2, 0):
        for anchor in anchors:
            found += _full_search(groups, candidates, stated, adjustments, places, anchor=anchor, share=share)
        if not found:
            found += _subset_search(groups, candidates, stated, adjustments, places, share=share)
        if found:
            break
    unique = {(tuple(sorted((k, m.expression, m.keyed) for k, m in r.multipliers.items())), r.subset, r.adjustment,
               r.places): r for r in sorted(found, key=lambda r: -r.cost)}
    return sorted(unique.values(), key=lambda r: r.cost)[:limit]


def _grid(contributions: list[np.ndarray]) -> np.ndarray:
    """Every combination's total on one run: shape (K1, ..., KG)."""
    total = np.zeros([len(c) for c in contributions])
    for g, values in enumerate(contributions):
        shape = [1] * len(contributions)
        shape[g] = len(values)
        total = total + values.reshape(shape)
    return total


def _one_tool_each(groups: Sequence[GroupData], chosen: dict[int, Multiplier]) -> bool:
    """At most one anchor of a tool counts (the fee per bag, not also the overweight surcharge)."""
    tools = [groups[g].tool for g, m in chosen.items() if m.expression != 0.0]
    return len(tools) == len(set(tools))


def _relation(groups: Sequence[GroupData], chosen: dict[int, Multiplier], subset: tuple[int, int] | None,
              adjustment: tuple[str, str] | None, adjust_cost: float, places: int) -> Relation:
    multipliers = {(groups[g].tool, groups[g].anchor): m for g, m in chosen.items() if m.expression != 0.0}
    cost = sum(m.cost for m in chosen.values()) + adjust_cost + (0 if places == 2 else 1.0)
    if subset is not None:
        cost += 2.0
    return Relation(multipliers, ((groups[subset[0]].tool, groups[subset[0]].anchor), subset[1]) if subset else None,
                    adjustment, places, cost)


def _full_search(groups: Sequence[GroupData], candidates: list[list[Multiplier]],
                 stated: Sequence[Sequence[float]], adjustments: list[tuple[tuple[str, str] | None, np.ndarray, float]],
                 places: int, *, anchor: int = 0, share: float = 1.0) -> list[Relation]:
    contributions = [np.stack([_contribution(g, m) for m in cands]) for g, cands in zip(groups, candidates, strict=True)]
    sizes = [len(c) for c in candidates]
    if int(np.prod(sizes)) > MAX_GRID:
        return []
    first = _grid([c[:, anchor] for c in contributions])
    found: list[Relation] = []
    for adjustment, factor, adjust_cost in adjustments:
        adjusted = first * factor[anchor]
        hits = np.zeros(first.shape, dtype=bool)
        for value in stated[anchor]:
            if places == 2:
                hits |= np.abs(adjusted - value) < 0.005 + 1e-9 * max(1.0, abs(value))
            elif float(value).is_integer():
                hits |= np.abs(adjusted - value) < 1.0
        for index in zip(*np.nonzero(hits), strict=True):
            chosen = {g: candidates[g][int(i)] for g, i in enumerate(index)}
            if not _one_tool_each(groups, chosen) or all(m.expression == 0.0 for m in chosen.values()):
                continue
            totals = sum(contributions[g][int(i)] for g, i in enumerate(index)) * factor
            if _matches(np.asarray(totals), stated, places).mean() >= share - 1e-9:
                found.append(_relation(groups, chosen, None, adjustment, adjust_cost, places))
    return found


def _subset_search(groups: Sequence[GroupData], candidates: list[list[Multiplier]],
                   stated: Sequence[Sequence[float]], adjustments: list[tuple[tuple[str, str] | None, np.ndarray, float]],
                   places: int, *, share: float = 1.0) -> list[Relation]:
    found: list[Relation] = []
    for g, group in enumerate(groups):
        counts = [len(values) for values in group.items]
        if group.keyed_weights is not None or min(counts) < 2 or max(counts) > MAX_SUBSET_ITEMS:
            continue
        others = [h for h in range(len(groups)) if h != g]
        other_contrib = [np.stack([_contribution(groups[h], m) for m in candidates[h]]) for h in others]
        if int(np.prod([len(candidates[h]) for h in others] or [1])) * len(candidates[g]) > MAX_SUBSET_GRID:
            continue
        rest = _grid([c[:, 0] for c in other_contrib]) if others else np.zeros(())
        for k in range(1, min(counts)):
            subsets = [{round(sum(c), 6) for c in itertools.combinations(values, k)} for values in group.items]
            for adjustment, factor, adjust_cost in adjustments:
                for m in candidates[g]:
                    if m.keyed or m.expression == 0.0:
                        continue
                    scale = m.per_run[0]
                    for index in np.ndindex(rest.shape):
                        chosen = {h: candidates[h][int(i)] for h, i in zip(others, index, strict=True)}
                        chosen[g] = m
                        if not _one_tool_each(groups, chosen):
                            continue
                        if not _holds_with_subset(groups, chosen, g, subsets, stated, factor, places, first_only=True,
                                                  rest0=float(rest[index]) if others else 0.0, scale0=scale):
                            continue
                        if _holds_with_subset(groups, chosen, g, subsets, stated, factor, places, share=share):
                            found.append(_relation(groups, chosen, (g, k), adjustment, adjust_cost, places))
    return found


def _holds_with_subset(groups: Sequence[GroupData], chosen: dict[int, Multiplier], g: int,
                       subsets: list[set[float]], stated: Sequence[Sequence[float]], factor: np.ndarray, places: int,
                       *, first_only: bool = False, rest0: float = 0.0, scale0: float = 1.0, share: float = 1.0) -> bool:
    runs = 1 if first_only else len(stated)
    allowed = 0 if first_only else int((1.0 - share) * runs + 1e-9)  # runs that may break it
    for r in range(runs):
        if first_only:
            rest, scale = rest0, scale0
        else:
            rest = sum(float(_contribution(groups[h], m)[r]) for h, m in chosen.items() if h != g)
            scale = chosen[g].per_run[r]
        totals = np.array([(rest + scale * s) * factor[r] for s in subsets[r]])
        if not any(_matches(np.array([t]), [stated[r]], places)[0] for t in totals):
            allowed -= 1
            if allowed < 0:
                return False
    return True
