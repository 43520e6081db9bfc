"""Grade an episode's answer against its task's ground truth: healthy, arithmetic_error, incomplete or hallucinated.

This is the script that labels organic failures after the fact (the policy's intent is never
consulted). It may read the ground truth (the true facts and total); nothing here is a
deployable check.

- **healthy**: the stated total equals the expected total.
- **incomplete**: no answer or no figure in it, or a required call never returned its true
  value and every figure in the answer is grounded in what the tools returned.
- **hallucinated**: the answer states a figure that no tool returned and that cannot be made
  from returned figures (sums of one tool's values, times small counts).
- **arithmetic_error**: every required value was received and every figure is grounded, but
  the total is wrong.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from guardrail.core.events import HEALTHY, Episode
from traces.tasks import Task, read_value

__all__ = ["ORGANIC_CLASSES", "Grade", "grade_episode", "stated_total"]

ORGANIC_CLASSES = ("arithmetic_error", "incomplete", "hallucinated")
_MONEY = re.compile(r"\$\s?(\d+(?:\.\d+)?)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
MAX_VALUES_PER_TOOL = 10  # subset sums are enumerated: 2**10 per tool at most
MAX_MULTIPLIER = 12


@dataclass(frozen=True)
class Grade:
    label: str
    tau: int | None
    reason: str
    stated_total: float | None = None
    missing: tuple[str, ...] = ()
    ungrounded: tuple[float, ...] = ()


def stated_total(answer: str) -> float | None:
    """The total an answer states: the first dollar figure (the testbed's answers lead with it), else None."""
    figures = _MONEY.findall(answer)
    return float(figures[0]) if figures else None


def _grounded(episode: Episode) -> set[float]:
    by_tool: dict[str, list[float]] = {}
    for step in episode.steps:
        for event in step.tool_events:
            if event.is_error or not event.result:
                continue
            for figure in _NUMBER.findall(event.result):
                by_tool.setdefault(event.name, []).append(float(figure))
    grounded: set[float] = set()
    for values in by_tool.values():
        distinct = sorted(set(values))[:MAX_VALUES_PER_TOOL]
        for size in range(1, len(distinct) + 1):
            for subset in itertools.combinations(distinct, size):
                total = sum(subset)
                grounded.update(round(total * k, 2) for k in range(1, MAX_MULTIPLIER + 1))
    return grounded


def _missing(episode: Episode, task: Task) -> list[str]:
    received: dict[str, list[str]] = {}
    for step in episode.steps:
        for event in step.tool_events:
            if not event.is_error and event.result is not None and isinstance(event.args, dict):
                received.setdefault(f"{event.name}:{sorted(event.args.items())}", []).append(event.result)
    missing = []
    for call in task.goal.calls():
        results = received.get(f"{call.tool}:{sorted(call.arg_dict.items())}", [])
        if not any(read_value(call, text) == task.facts[call.key] for text in results):
            missing.append(call.key)
    return missing


def grade_episode(episode: Episode, task: Task) -> Grade:
    """The organic label of `episode` for `task` (see the module docstring for the rules)."""
    final = len(episode.steps) - 1 if episode.steps else None
    answer = episode.answer
    if answer is None:
        return Grade("incomplete", final, "the run gave no final answer")
    total = stated_total(answer)
    if total is None:
        return Grade("incomplete", final, "the answer states no dollar figure")
    if abs(total - task.expected_total) < 0.5:
        return Grade(HEALTHY, None, "the stated total matches the ground truth", total)
    missing = tuple(_missing(episode, task))
    grounded = _grounded(episode)
    figures = [float(f) for f in _MONEY.findall(answer)]
    ungrounded = tuple(f for f in figures[1:] if round(f, 2) not in grounded)
    if ungrounded:
        return Grade("hallucinated", final, f"the answer states {ungrounded} that no tool returned", total, missing,
                     ungrounded)
    if missing:
        return Grade("incomplete", final, f"required values never received: {list(missing)}", total, missing)
    return Grade("arithmetic_error", final,
                 f"all values received but the total {total:g} != {task.expected_total:g}", total)
