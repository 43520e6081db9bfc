"""Repair on a real AutoGen AssistantAgent: state saved per step, restored with load_state, re-run live."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent

from adapters.autogen_repair import AutoGenRun, AutoGenStepLog, arepair_autogen, arun_autogen
from guardrail import Finding, Guard
from repair import CheckpointError, CircuitBreaker, Repairer
from tests.layers import AnswerCheck
from traces.agents import SYSTEM_PROMPT
from traces.injectors import Looping, make_injector
from traces.labeller import stated_total
from traces.models import ScriptedChatCompletionClient
from traces.policy import Policy
from traces.tasks import make_task
from traces.tools import BookingDB, booking_tools
from verifiers import VerifierLayer, pick_spec

CATALOG_SEED = 1  # a catalog task: three search_catalog calls, then the answer
TOUR_SEED = 8  # a tour task, whose tools the shipped booking spec (with tool contracts) covers




class Booking:
    """A testbed AutoGen AssistantAgent making one model call per run, over the real booking tools."""

    def __init__(self, *, seed: int = CATALOG_SEED, fault: Any = None, **policy: Any) -> None:
        db = BookingDB()
        self.task = make_task(seed, db=db)
        self.box = booking_tools(db, fault=fault)
        self.client = ScriptedChatCompletionClient(Policy(seed=seed, **({"arithmetic_rate": 1.0} | policy)))
        self.agent = AssistantAgent("booker", self.client, tools=self.box.autogen_tools(self.task.tools),
                                    system_message=SYSTEM_PROMPT, max_tool_iterations=1, reflect_on_tool_use=False)

    @property
    def model_calls(self) -> int:
        return len(self.client.results)

    @property
    def tool_calls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(record.name, record.args) for record in self.box.log]

    def answer_is_right(self, answer: str | None) -> bool:
        stated = stated_total(answer or "")
        return stated is not None and abs(stated - self.task.expected_total) < 0.5


async def test_step_log_saves_the_agent_state_after_every_step() -> None:
    booking = Booking()
    run = await AutoGenStepLog(booking.agent).run(booking.task.prompt)

    assert not booking.answer_is_right(run.answer)
    assert len(run.states) == 4 and run.model_steps == 4 == booking.model_calls
    assert [len(s["llm_context"]["messages"]) for s in run.states] == [3, 5, 7, 8]
    assert [s.kind.value for s in run.steps()] == ["tool_call", "tool_call", "tool_call", "final"]


async def test_fork_restores_the_state_before_the_target_step_and_reruns_live() -> None:
    booking = Booking()
    log = AutoGenStepLog(booking.agent)
    run = await log.run(booking.task.prompt)
    saved = copy.deepcopy(run.states)
    flag = Finding(layer="verify", check="total_consistency", message="wrong total", blocking=True, step=3)

    outcome = await arepair_autogen(Repairer(Guard([AnswerCheck(booking.task)], mode="intervene"), rung="located"),
        log, run, [flag])

    attempt = outcome.attempts[0]
    assert attempt.target_step == 3 and attempt.outcome == "passed"
    assert booking.answer_is_right(outcome.answer)
    assert booking.model_calls == 4 + attempt.extra_model_calls
    assert len(booking.tool_calls) == 3 + attempt.extra_model_calls - 1
    forked = outcome.delivered
    assert forked is not None and forked.states[:3] == saved[:3]  # the prefix is the saved state, reused
    hint = forked.states[-1]["llm_context"]["messages"][7]
    assert hint["type"] == "UserMessage" and hint["content"].startswith("The check `verify/total_consistency`")
    assert run.states == saved  # the original run's saved states are untouched


async def test_fork_from_task_start_calls_every_tool_again() -> None:
    booking = Booking()
    log = AutoGenStepLog(booking.agent)
    run = await log.run(booking.task.prompt)
    original_calls = list(booking.tool_calls)
    flag = Finding(layer="verify", check="total_consistency", message="wrong total", blocking=True, step=0)

    outcome = await arepair_autogen(Repairer(Guard([AnswerCheck(booking.task)], mode="intervene"), rung="located"),
        log, run, [flag])

    assert outcome.attempts[0].target_step == 0 and outcome.outcome == "repaired"
    rerun = booking.tool_calls[len(original_calls):]
    assert all(call in rerun for call in original_calls)


async def test_online_run_repairs_before_the_answer(spans: Any) -> None:
    booking = Booking()
    outcome = await arun_autogen(Repairer(Guard([AnswerCheck(booking.task)], mode="intervene")),
        booking.agent, booking.task.prompt, tools=booking.task.tools)

    assert outcome.outcome == "repaired" and booking.answer_is_right(outcome.answer)
    assert not booking.answer_is_right(outcome.original_answer)
    (span,) = [s for s in spans.get_finished_spans() if s.name == "guardrail.repair"]
    assert dict(span.attributes or {})["guardrail.repair.outcome"] == "passed"


async def test_contract_violation_is_escalated_and_never_retried() -> None:
    booking = Booking(seed=TOUR_SEED, arithmetic_rate=0.0,
                      fault=make_injector("malformed_json", onset=1, seed=TOUR_SEED))
    spec = pick_spec(booking.task.tools, [booking.task.prompt])
    received = []

    outcome = await arun_autogen(Repairer(Guard([VerifierLayer(spec)], mode="intervene"),
                             on_escalate=received.append), booking.agent, booking.task.prompt)

    assert outcome.outcome == "escalated" and outcome.attempts == []
    assert [e.reason for e in received] == ["contract_violation"]
    assert received[0].findings[0].check == "tool_contract"
    assert booking.model_calls == 2 and len(booking.tool_calls) == 2  # stopped at the violation, no retry


async def test_circuit_breaker_ends_a_loop_trap_fast() -> None:
    unbounded = Booking(arithmetic_rate=0.0, fault=Looping(onset=0), max_steps=30, max_obeyed_retries=40)
    # Report mode never ends a run, so the trap runs to the agent's own 30-step limit, as before a breaker.
    outcome = await arun_autogen(Repairer(Guard([], mode="report")), unbounded.agent, unbounded.task.prompt)
    assert outcome.outcome == "clean" and unbounded.model_calls == 30

    trapped = Booking(arithmetic_rate=0.0, fault=Looping(onset=0), max_steps=30, max_obeyed_retries=40)
    outcome = await arun_autogen(Repairer(Guard([], mode="intervene"), breaker=CircuitBreaker()),
        trapped.agent, trapped.task.prompt)
    assert outcome.outcome == "halted" and outcome.trip is not None and outcome.trip.reason == "loop"
    assert trapped.model_calls <= 10


async def test_step_log_refuses_an_agent_that_makes_several_model_calls_per_run() -> None:
    agent = AssistantAgent("multi", ScriptedChatCompletionClient(), tools=[], max_tool_iterations=3)
    with pytest.raises(CheckpointError, match="max_tool_iterations=1"):
        AutoGenStepLog(agent)


async def test_a_saved_run_loads_back_and_forks_from_disk(tmp_path: Any) -> None:
    booking = Booking()
    log = AutoGenStepLog(booking.agent)
    run = await log.run(booking.task.prompt)
    run.save(tmp_path / "run.json")

    loaded = AutoGenRun.load(tmp_path / "run.json")
    flag = Finding(layer="verify", check="total_consistency", message="wrong total", blocking=True, step=3)
    outcome = await arepair_autogen(Repairer(Guard([AnswerCheck(booking.task)], mode="intervene"), rung="located"),
        log, loaded, [flag])

    assert loaded.states == run.states and loaded.answer == run.answer
    assert outcome.outcome == "repaired"


def test_loading_a_file_of_another_version_says_so(tmp_path: Any) -> None:
    (tmp_path / "run.json").write_text('{"format": "guardrail-autogen-run", "version": 99}')
    with pytest.raises(CheckpointError, match="version 99"):
        AutoGenRun.load(tmp_path / "run.json")
