"""The labeller grades answers against ground truth: healthy, arithmetic_error, incomplete, hallucinated."""

from __future__ import annotations

import json

from guardrail.core.events import Episode, Step, StepKind, ToolEvent
from traces.agents import run_langgraph_episode
from traces.labeller import grade_episode
from traces.policy import Policy
from traces.tasks import Task, make_task
from traces.tools import BookingDB, booking_tools, format_number

DB = BookingDB()
TASK = next(t for t in (make_task(s, db=DB) for s in range(50)) if t.kind == "route")


def _episode(task: Task, answer: str | None, *, skip: str | None = None) -> Episode:
    steps: list[Step] = []
    for call in task.goal.calls():
        if call.key == skip:
            continue
        value = task.facts[call.key]
        result = f"${format_number(float(value))}" + ("/night" if call.tool == "lookup_hotel" else "")
        steps.append(Step(index=len(steps), kind=StepKind.TOOL_CALL, text="",
                          tool_events=[ToolEvent(name=call.tool, args=call.arg_dict, result=result)]))
    if answer is not None:
        steps.append(Step(index=len(steps), kind=StepKind.FINAL, text=answer))
    return Episode(episode_id="e", steps=steps)


def test_the_right_total_is_healthy() -> None:
    grade = grade_episode(_episode(TASK, f"The total is ${format_number(TASK.expected_total)}."), TASK)
    assert grade.label == "healthy" and grade.tau is None


def test_a_wrong_total_from_complete_grounded_values_is_an_arithmetic_error() -> None:
    episode = _episode(TASK, f"The total is ${format_number(TASK.expected_total + 10)}.")
    grade = grade_episode(episode, TASK)
    assert grade.label == "arithmetic_error" and grade.tau == episode.T - 1


def test_a_missing_required_value_with_grounded_figures_is_incomplete() -> None:
    hotel_key = TASK.goal.calls()[-1].key
    episode = _episode(TASK, f"The total is ${format_number(TASK.expected_total - 1)}.", skip=hotel_key)
    grade = grade_episode(episode, TASK)
    assert grade.label == "incomplete" and grade.missing == (hotel_key,)


def test_a_figure_no_tool_returned_is_hallucinated() -> None:
    episode = _episode(TASK, f"The total is ${format_number(TASK.expected_total + 3)}. Hotel at $9999 per night.")
    grade = grade_episode(episode, TASK)
    assert grade.label == "hallucinated" and 9999.0 in grade.ungrounded


def test_a_breakdown_made_of_sums_and_multiples_of_results_is_grounded() -> None:
    legs = [float(TASK.facts[c.key]) for c in TASK.goal.calls()[:2]]
    answer = f"The total is ${format_number(TASK.expected_total + 10)}. Route ${format_number(sum(legs))}."
    assert grade_episode(_episode(TASK, answer), TASK).label == "arithmetic_error"


def test_no_final_answer_is_incomplete() -> None:
    assert grade_episode(_episode(TASK, None), TASK).label == "incomplete"


def test_policy_slips_end_to_end_get_the_matching_organic_label() -> None:
    expected = {"arithmetic_rate": "arithmetic_error", "hallucinate_rate": "hallucinated"}
    for rate, label in expected.items():
        labels = set()
        for seed in range(6):
            episode = run_langgraph_episode(TASK, Policy(seed=seed, **{rate: 1.0}),  # type: ignore[arg-type]
                                            toolbox=booking_tools(DB))
            labels.add(grade_episode(episode, TASK).label)
        assert label in labels, (rate, labels)
    healthy = run_langgraph_episode(TASK, Policy(seed=0), toolbox=booking_tools(DB))
    assert grade_episode(healthy, TASK).label == "healthy"
    assert json.dumps(healthy.meta["ground_truth"]["facts"])  # ground truth travels with the episode for the labeller
