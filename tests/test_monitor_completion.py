"""The completion check: a final step that is empty or a bare tool call means the run did not finish."""

from __future__ import annotations

from guardrail.events import Episode, Step, StepKind
from monitors.completion import completion_finding, is_incomplete


def _episode(*steps: tuple[StepKind, str]) -> Episode:
    return Episode(episode_id="e", steps=[Step(index=i, kind=k, text=t) for i, (k, t) in enumerate(steps)])


def test_a_real_answer_is_complete() -> None:
    episode = _episode((StepKind.TOOL_CALL, "[calc({}) -> 4]"), (StepKind.FINAL, "The total is $1108."))
    assert is_incomplete(episode) is None and completion_finding(episode) is None


def test_empty_final_answer_is_incomplete() -> None:
    assert is_incomplete(_episode((StepKind.FINAL, "   "))) == "the final answer is empty"


def test_final_answer_that_is_a_bare_tool_call_is_incomplete() -> None:
    reason = is_incomplete(_episode((StepKind.FINAL, 'lookup_hotel({"city": "Lisbon"})')))
    assert reason is not None and "bare tool call" in reason


def test_run_that_ends_on_a_tool_call_is_incomplete() -> None:
    finding = completion_finding(_episode((StepKind.TOOL_CALL, "[calc({}) -> 4]")))
    assert finding is not None and finding.check == "completion" and finding.step == 0


def test_an_answer_given_at_finish_overrides_the_steps() -> None:
    episode = _episode((StepKind.TOOL_CALL, "[calc({}) -> 4]"))
    assert is_incomplete(episode, answer="It is 4.") is None
    assert is_incomplete(Episode(episode_id="e")) == "the run has no steps"
