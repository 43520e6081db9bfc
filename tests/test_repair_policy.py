"""Rollback target, hint rungs, circuit breaker and escalation rules, on plain event-model objects."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import Finding, Severity, Step, StepKind, ToolEvent
from repair import CircuitBreaker, LoopDetector, RungNotApplicable, escalation_for, flagged_step, make_hint
from repair.rungs import GENERIC_TEXT, adaptive_rung
from repair.target import rollback_step


def tool_step(index: int, name: str = "search", result: str | None = "ok", is_error: bool = False,
              args: dict | None = None) -> Step:
    event = ToolEvent(id=f"c{index}", name=name, args=args or {"q": index}, result=result, is_error=is_error)
    return Step(index=index, kind=StepKind.TOOL_CALL, tool_events=[event])


def final_step(index: int) -> Step:
    return Step(index=index, kind=StepKind.FINAL, text="done")


def check_failure(step: int | None = 3, **evidence: object) -> Finding:
    return Finding(layer="verify", check="total_consistency", message="stated 40, tools say 42",
                   evidence=dict(evidence), blocking=True, step=step)


def test_rollback_resumes_after_the_last_fact_gathering_step_before_the_flag() -> None:
    steps = [tool_step(0), tool_step(1), tool_step(2), final_step(3)]
    assert rollback_step(steps, 3) == 3
    assert rollback_step(steps, 2) == 2


def test_rollback_skips_steps_whose_tools_failed() -> None:
    steps = [tool_step(0), tool_step(1, is_error=True), final_step(2)]
    assert rollback_step(steps, 2) == 1


def test_rollback_with_fact_tools_never_resumes_after_a_write() -> None:
    steps = [tool_step(0, "search"), tool_step(1, "book"), final_step(2)]
    assert rollback_step(steps, 2, fact_tools={"search"}) == 1
    assert rollback_step(steps, 2) == 2


def test_rollback_goes_to_the_task_start_when_nothing_was_gathered() -> None:
    assert rollback_step([final_step(0)], 0) == 0
    assert rollback_step([tool_step(0, is_error=True), final_step(1)], 1) == 0


def test_rollback_without_a_flagged_step_uses_the_end_of_the_run() -> None:
    assert rollback_step([tool_step(0), tool_step(1), final_step(2)], None) == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), max_size=20), st.one_of(st.none(), st.integers(-5, 30)))
def test_rollback_is_never_before_the_task_start_nor_after_the_flag(gathered: list[bool], flagged: int | None) -> None:
    steps = [tool_step(i) if ok else final_step(i) for i, ok in enumerate(gathered)]
    target = rollback_step(steps, flagged)
    assert 0 <= target <= len(steps)
    if flagged is not None:
        assert target <= max(flagged, 0)


def test_flagged_step_is_the_earliest_alarm_or_blocking_finding() -> None:
    findings = [Finding(layer="monitor", check="hybrid", message="", severity=Severity.ALARM, step=5),
                check_failure(step=7),
                Finding(layer="gate", check="file_exists", message="", step=1)]  # a warning: not a flag
    assert flagged_step(findings) == 5


def test_resample_sends_no_message_and_generic_names_nothing() -> None:
    assert make_hint("resample", [check_failure()]).text is None
    assert make_hint("generic", [check_failure()]).text == GENERIC_TEXT


def test_located_names_the_check_and_step_but_no_values() -> None:
    text = make_hint("located", [check_failure(expected=42, stated=40)]).text or ""
    assert "total_consistency" in text and "step 3" in text
    assert "42" not in text and "40" not in text


def test_specific_states_the_recomputed_values() -> None:
    text = make_hint("specific", [check_failure(expected=42, stated=40)]).text or ""
    assert "expected = 42" in text and "stated = 40" in text


def test_recompute_needs_a_calculator_the_agent_holds() -> None:
    with pytest.raises(RungNotApplicable, match="calculator"):
        make_hint("recompute", [check_failure()], tools={"search"})
    assert "`calculator`" in (make_hint("recompute", [check_failure()], tools={"calculator"}).text or "")


def test_adaptive_names_the_check_first_then_routes_arithmetic_to_the_calculator() -> None:
    findings = [check_failure()]
    assert adaptive_rung(findings, 0, {"calculator"}) == "located"
    assert adaptive_rung(findings, 1, {"calculator"}) == "recompute"
    assert adaptive_rung(findings, 1, set()) == "specific"
    assert make_hint("adaptive", findings, attempt=2).rung == "generic"


def test_loop_detector_trips_on_the_third_identical_call() -> None:
    detector = LoopDetector(repeats=3, window=6)
    same = [tool_step(i, args={"q": "x"}) for i in range(3)]
    assert [detector.update(s) for s in same] == [False, False, True]


def test_loop_detector_ignores_calls_that_make_progress() -> None:
    detector = LoopDetector(repeats=3, window=6)
    assert not any(detector.update(tool_step(i)) for i in range(20))


def test_breaker_ends_a_flagged_run_at_its_step_budget() -> None:
    run = CircuitBreaker(step_budget=10).new_run()
    trips = [run.observe(tool_step(i)) for i in range(5)]
    assert trips == [None] * 5  # unflagged runs are not budgeted
    assert run.start_attempt() is None
    trips = [run.observe(tool_step(i)) for i in range(5, 12)]
    first = next(t for t in trips if t is not None)
    assert first.reason == "step_budget" and first.step == 9


def test_breaker_stops_after_max_attempts() -> None:
    run = CircuitBreaker(max_attempts=2).new_run()
    assert run.start_attempt() is None and run.start_attempt() is None
    trip = run.start_attempt()
    assert trip is not None and trip.reason == "repair_exhausted"


def test_contract_violation_escalates_and_an_arithmetic_error_does_not() -> None:
    contract = Finding(layer="verify", check="tool_contract", message="bad shape", blocking=True, step=2)
    event = escalation_for("ep", [check_failure(), contract])
    assert event is not None and event.reason == "contract_violation" and event.step == 2
    assert escalation_for("ep", [check_failure()]) is None


def test_rollback_redoes_the_calculator_step_its_result_is_not_a_fact() -> None:
    steps = [tool_step(0, "lookup"), tool_step(1, "calculator"), final_step(2)]
    assert rollback_step(steps, 2, compute_tools={"calculator"}) == 1
