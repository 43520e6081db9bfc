"""Repair for AutoGen teams: a RoundRobinGroupChat or SelectorGroupChat rolled back with its own load_state.

The team runs a testbed booking task turn by turn (``max_turns=1``); its agent's scripted model
always slips its arithmetic. The answer check flags the total; the team is restored to its saved
state before the last fact-gathering turn, given the hint as a user message, and re-run live.
"""

from __future__ import annotations

from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat

from adapters.autogen_repair import AutoGenTeamRun, AutoGenTeamStepLog, arun_autogen_team
from guardrail import Guard
from repair import CheckpointError, Repairer
from tests.layers import AnswerCheck
from traces.agents import SYSTEM_PROMPT
from traces.labeller import stated_total
from traces.models import ScriptedChatCompletionClient
from traces.policy import Policy
from traces.tasks import make_task
from traces.tools import BookingDB, booking_tools

SEED = 1  # a catalog task: three search_catalog calls, then the answer


class TeamBooking:
    """A booking team: one scripted worker (and, for the selector, a reviewer it never picks)."""

    def __init__(self, kind: str, **policy: Any) -> None:
        db = BookingDB()
        self.task = make_task(SEED, db=db)
        self.box = booking_tools(db)
        self.client = ScriptedChatCompletionClient(Policy(seed=SEED, **({"arithmetic_rate": 1.0} | policy)))
        self.worker = AssistantAgent("booker", self.client, tools=self.box.autogen_tools(self.task.tools),
                                     system_message=SYSTEM_PROMPT, max_tool_iterations=1, reflect_on_tool_use=False)
        if kind == "round_robin":
            self.team = RoundRobinGroupChat([self.worker], max_turns=1)
        else:
            reviewer = AssistantAgent("reviewer", ScriptedChatCompletionClient(Policy(seed=SEED)),
                                      max_tool_iterations=1, reflect_on_tool_use=False)
            self.team = SelectorGroupChat([self.worker, reviewer], model_client=self.client, max_turns=1,
                                          selector_func=lambda messages: "booker")

    @property
    def model_calls(self) -> int:
        return len(self.client.results)

    def right(self, answer: str | None) -> bool:
        stated = stated_total(answer or "")
        return stated is not None and abs(stated - self.task.expected_total) < 0.5


@pytest.mark.parametrize("kind", ["round_robin", "selector"])
async def test_team_is_rolled_back_with_load_state_and_rerun_with_the_hint(kind: str) -> None:
    booking = TeamBooking(kind)
    guard = Guard([AnswerCheck(booking.task)], mode="intervene")

    outcome = await arun_autogen_team(Repairer(guard), booking.team, booking.task.prompt,
                                      tools=booking.task.tools)

    assert outcome.outcome == "repaired" and booking.right(outcome.answer)
    assert not booking.right(outcome.original_answer)
    attempt = outcome.attempts[0]
    assert attempt.target_step == 3  # after the last fact-gathering turn, before the flagged answer
    assert booking.model_calls == 4 + outcome.extra_model_calls and outcome.extra_model_calls >= 1
    repaired: AutoGenTeamRun = outcome.delivered
    assert len(repaired.states) == 3 + attempt.extra_model_calls and booking.right(repaired.answer)
    thread = repaired.states[-1]["agent_states"]
    manager = next(state for name, state in thread.items() if "message_thread" in state)
    hints = [m for m in manager["message_thread"] if m.get("source") == "user"]
    assert len(hints) == 2 and "total_consistency" in hints[1]["content"]  # the task, then the hint


async def test_the_original_run_and_its_saved_states_are_kept() -> None:
    booking = TeamBooking("round_robin")
    log = AutoGenTeamStepLog(booking.team)
    original = await log.run(booking.task.prompt)
    snapshot = [dict(state) for state in original.states]
    assert len(original.states) == 4 and not booking.right(original.answer)
    assert [s.kind.value for s in original.steps()] == ["tool_call"] * 3 + ["final"]

    forked = await log.fork(original, 3, "Recompute the total with the calculator.")

    assert booking.right(forked.answer)
    assert original.states == snapshot and not booking.right(original.answer)  # untouched
    assert forked.states[:3] == original.states[:3]


async def test_a_clean_team_run_is_not_repaired_and_a_team_without_turn_limit_is_refused() -> None:
    clean = TeamBooking("round_robin", arithmetic_rate=0.0)
    outcome = await arun_autogen_team(Repairer(Guard([AnswerCheck(clean.task)], mode="intervene")), clean.team,
                                      clean.task.prompt)
    assert outcome.outcome == "clean" and clean.right(outcome.answer) and outcome.attempts == []

    with pytest.raises(CheckpointError, match="max_turns=1"):
        AutoGenTeamStepLog(RoundRobinGroupChat([clean.worker]))


async def test_team_runs_save_and_load_as_their_own_format(tmp_path) -> None:
    booking = TeamBooking("round_robin")
    run = await AutoGenTeamStepLog(booking.team).run(booking.task.prompt)
    run.save(tmp_path / "team.json")

    loaded = AutoGenTeamRun.load(tmp_path / "team.json")
    assert loaded.states == run.states and [s.text for s in loaded.steps()] == [s.text for s in run.steps()]
    from adapters.autogen_repair import AutoGenRun

    with pytest.raises(CheckpointError, match="guardrail-autogen-run"):
        AutoGenRun.load(tmp_path / "team.json")
