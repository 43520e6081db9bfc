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

A real model's run that went wrong is then put down to its first cause (`classify_real`):
**loop** (the same call three times, or the step budget spent on calls), **fabricated_argument**
(a required value never arrived and a call asked for arguments no planned call has: an invented
city, origin and destination swapped), **wrong_tool** (a required value never arrived and a tool no
planned call uses was called), a stated total no tool result supports with values missing
(**hallucinated**), else the grade above.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from guardrail.core.events import HEALTHY, Episode
from traces.tasks import Task, read_value

__all__ = ["ORGANIC_CLASSES", "REAL_ORGANIC_CLASSES", "Grade", "classify_real", "grade_episode", "stated_total"]

ORGANIC_CLASSES = ("arithmetic_error", "incomplete", "hallucinated")
REAL_ORGANIC_CLASSES = ("loop", "fabricated_argument", "wrong_tool", "hallucinated", "incomplete", "arithmetic_error")
# "$1,250.50", "$ 232", and (what small models write) "232 USD" / "232 dollars"; thousands commas dropped.
_AMOUNT = r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
_MONEY_TEXT = re.compile(r"\$\s?" + _AMOUNT + r"|" + _AMOUNT + r"\s?(?:USD|dollars?)\b")
LOOP_REPEATS = 3
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

    @property
    def answer_missing(self) -> bool:
        """No answer, or no figure in it."""
        return self.stated_total is None


def _money_figures(text: str) -> list[float]:
    return [float((a or b).replace(",", "")) for a, b in _MONEY_TEXT.findall(text)]


def stated_total(answer: str) -> float | None:
    """The total an answer states: the first dollar figure (the testbed's answers lead with it), else None."""
    figures = _money_figures(answer)
    return figures[0] if figures else None


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
    figures = _money_figures(answer)
    ungrounded = tuple(f for f in figures[1:] if round(f, 2) not in grounded)
    if ungrounded:
        return Grade("hallucinated", final, f"the answer states {ungrounded} that no tool returned", total, missing,
                     ungrounded)
    if missing:
        return Grade("incomplete", final, f"required values never received: {list(missing)}", total, missing)
    return Grade("arithmetic_error", final,
                 f"all values received but the total {total:g} != {task.expected_total:g}", total)


def _normal(args: object) -> tuple[tuple[str, str], ...] | None:
    if not isinstance(args, dict):
        return None
    return tuple(sorted((str(k), " ".join(str(v).split()).lower()) for k, v in args.items()))


def classify_real(episode: Episode, task: Task, grade: Grade | None = None) -> tuple[str, int | None, dict[str, object]]:
    """(label, tau, findings) of a real model's run: healthy when the answer is right, else its first cause.

    `findings` lists every slip seen (also in runs whose answer came out right), each with the step
    it happened at; tau is the step of the cause (the final step for answer-level classes).
    """
    grade = grade or grade_episode(episode, task)
    planned = {(c.tool, _normal(c.arg_dict)) for c in task.goal.calls()}
    planned_tools = {c.tool for c in task.goal.calls()}
    seen: dict[tuple[str, object], int] = {}
    fabricated: list[dict[str, object]] = []
    wrong_tool: list[dict[str, object]] = []
    repeats: list[dict[str, object]] = []
    for step in episode.steps:
        for event in step.tool_events:
            key = (event.name, _normal(event.args))
            seen[key] = seen.get(key, 0) + 1
            if seen[key] == LOOP_REPEATS:
                repeats.append({"step": step.index, "tool": event.name, "args": event.args})
            if event.name == "calculator":
                continue
            if event.name not in planned_tools:
                wrong_tool.append({"step": step.index, "tool": event.name, "args": event.args})
            elif key not in planned:
                fabricated.append({"step": step.index, "tool": event.name, "args": event.args})
    findings: dict[str, object] = {"fabricated_argument": fabricated, "wrong_tool": wrong_tool, "loop": repeats,
                                   "grade": grade.label, "grade_reason": grade.reason}
    if grade.label == HEALTHY:
        return HEALTHY, None, findings
    final = len(episode.steps) - 1 if episode.steps else None
    if repeats or episode.meta.get("stopped") == "step_limit":
        first = repeats[0]["step"] if repeats else final
        return "loop", first if isinstance(first, int) else final, findings
    values_missing = grade.answer_missing or bool(grade.missing) or bool(_missing(episode, task))
    if values_missing and fabricated:
        return "fabricated_argument", int(fabricated[0]["step"]), findings  # type: ignore[call-overload]
    if values_missing and wrong_tool:
        return "wrong_tool", int(wrong_tool[0]["step"]), findings  # type: ignore[call-overload]
    if values_missing and grade.stated_total is not None and round(grade.stated_total, 2) not in _grounded(episode):
        return "hallucinated", final, findings
    return grade.label, final if grade.tau is None else grade.tau, findings
