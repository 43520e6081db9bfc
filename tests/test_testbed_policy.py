"""The policy's reaction to later user messages (repair hints): any hint, or only a relevant one, ends a slip."""

from __future__ import annotations

from traces.policy import CallResult, Policy, Transcript
from traces.tasks import make_task
from traces.tools import BookingDB, booking_tools

DB = BookingDB()
TASK = make_task(8, db=DB, kinds=["route"])
GENERIC = "Before you give your final answer, re-check your work against the tool results you received."
LOCATED = "The check `total_consistency` failed at step 5. Re-check that step against the tool results."


def _final_total(policy: Policy, hints: list[str]) -> float:
    box = booking_tools(DB)
    calls = [CallResult(f"c{i}", c.tool, c.arg_dict, getattr(box, c.tool)(**c.arg_dict))
             for i, c in enumerate(TASK.goal.calls())]
    reply = policy.decide(Transcript(task_text=TASK.prompt, turns=len(calls), calls=calls, hints=hints))
    assert reply.is_final
    return float(reply.text.split("$", 1)[1].split()[0].rstrip("."))


def test_an_arithmetic_slip_without_a_hint_gives_a_wrong_total() -> None:
    assert _final_total(Policy(seed=2, arithmetic_rate=1.0, calculator_rate=0.0), []) != TASK.expected_total


def test_by_default_any_hint_ends_the_slip() -> None:
    policy = Policy(seed=2, arithmetic_rate=1.0, calculator_rate=0.0)
    assert _final_total(policy, [GENERIC]) == TASK.expected_total


def test_under_relevant_response_only_a_hint_about_the_slip_ends_it() -> None:
    policy = Policy(seed=2, arithmetic_rate=1.0, calculator_rate=0.0, hint_response="relevant",
                    hint_fix_relevant=1.0, hint_fix_generic=0.0)
    assert _final_total(policy, [GENERIC]) != TASK.expected_total
    assert _final_total(policy, [LOCATED]) == TASK.expected_total
