"""Splits for `guardrail bench monitor` beyond the published one: recording order, and task entities never seen.

- ``temporal``: the healthy episodes in the order they were recorded (``collected_at`` when every
  episode has it, else the manifest's order), forward-chained: each split fits on the runs before a
  cut and tests on the runs right after it (with every injected episode); `temporal_split`. A random split makes healthy runs exchangeable by
  construction; this one asks whether a monitor fitted on yesterday's runs keeps its budget on today's.
- ``entities``: testbed runs generated for the occasion (real LangGraph / AutoGen agents, scripted
  policy, `traces.collect`) whose tasks draw their cities from two disjoint halves of the booking
  database: the monitor is fitted on healthy runs over one half and tested on healthy and injected
  runs over the other, so no test task names a city (or its hotel) any fitting run named. A control
  row tests on held-out runs over the fitting half. Each is run twice: as recorded (the first step
  carries the task, whose words are then the episode's own context), and "untold", every episode's
  task withheld from the monitor (what an adapter that never sees the user's message gives it, and
  what a run looks like whose entities first appear in a tool call). A scripted model: a mechanism check.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from guardrail.core.events import HEALTHY, Episode

__all__ = ["PROTOCOLS", "EntitySplits", "entity_splits", "fit_validation", "temporal_split", "untold"]

PROTOCOLS = ("random", "temporal")


def _recorded_order(healthy: Sequence[Episode]) -> list[Episode]:
    stamps = [e.meta.get("collected_at") for e in healthy]
    if all(isinstance(s, str) and s for s in stamps):
        return [e for _, _, e in sorted(zip(stamps, range(len(healthy)), healthy, strict=True))]
    return list(healthy)


def temporal_split(episodes: Sequence[Episode], *, min_steps: int, cut: int = 0,
                   cuts: int = 1) -> tuple[list[Episode], list[Episode], list[Episode]]:
    """(train, validation, test) in recording order, forward-chained: with `cuts` = 1 the first 60% of the healthy
    runs train, the next 20% validate, the last 20% test; with more, cut `cut` fits on the runs before a point moving
    from 50% to 90% of the healthy runs (3 : 1 train : validation) and tests on the next 50% / `cuts` of them (each
    test window is later than everything fitted). Every injected episode is in every test set."""
    kept = [e for e in episodes if len(e.steps) >= min_steps]
    healthy = _recorded_order([e for e in kept if e.is_healthy])
    n = len(healthy)
    if cuts <= 1:
        end, window = int(0.8 * n), n - int(0.8 * n)
    else:
        window = max(1, int(0.5 * n / cuts))
        end = n - (cuts - cut) * window
    n_train = int(0.75 * end)
    return (healthy[:n_train], healthy[n_train:end],
            healthy[end:end + window] + [e for e in kept if not e.is_healthy])


@dataclass
class EntitySplits:
    """Generated runs for one seed: healthy fitting runs over cities `fit_cities`, tests over each half."""

    framework: str
    fit_cities: list[str]
    test_cities: list[str]
    fit: list[Episode]  # healthy runs over fit_cities (train + validation)
    control: list[Episode]  # held-out runs over fit_cities (healthy and injected)
    disjoint: list[Episode]  # runs over test_cities (healthy and injected)


def _collect(framework: str, n: int, seed: int, cities: list[str]) -> list[Episode]:
    from traces.collect import collect
    from traces.injectors import INJECTED_CLASSES
    from traces.tools import BookingDB

    db = BookingDB()
    db.cities = cities  # tasks (and injected goals) name only these; the tools still answer for every city
    kept, _ = collect(framework, n, seed, classes=(HEALTHY, *INJECTED_CLASSES), db=db, show_progress=False)
    return kept


def entity_splits(framework: str, n: int, seed: int) -> EntitySplits:
    """Runs over two disjoint, seeded halves of the booking cities: `n` requested over each half, twice over the
    fitting half (its healthy runs fit; a second, independent batch is the control)."""
    from traces.tools import BookingDB

    cities = list(BookingDB().cities)
    random.Random(f"entities:{seed}").shuffle(cities)
    half = len(cities) // 2
    fit_cities, test_cities = sorted(cities[:half]), sorted(cities[half:])
    fit_runs = _collect(framework, n, 10_000 + seed, fit_cities)
    control = _collect(framework, n, 20_000 + seed, fit_cities)
    disjoint = _collect(framework, n, 30_000 + seed, test_cities)
    return EntitySplits(framework, fit_cities, test_cities, [e for e in fit_runs if e.is_healthy], control, disjoint)


def untold(episodes: Sequence[Episode]) -> list[Episode]:
    """Copies of `episodes` with the task withheld (no episode task, no step task)."""
    out = []
    for episode in episodes:
        copy = episode.model_copy(deep=True)
        copy.task = None
        for step in copy.steps:
            step.task = None
        out.append(copy)
    return out


def fit_validation(healthy: Sequence[Episode], seed: int) -> tuple[list[Episode], list[Episode]]:
    """A seeded 75 / 25 train / validation cut of the fitting runs (the published 60 / 20 ratio)."""
    order = np.random.default_rng(seed).permutation(len(healthy))
    n_train = int(0.75 * len(healthy))
    return [healthy[i] for i in order[:n_train]], [healthy[i] for i in order[n_train:]]
