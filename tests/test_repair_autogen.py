"""Repair on a real AutoGen AssistantAgent: state saved per step, restored with load_state, re-run live."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    CreateResult,
    FunctionExecutionResultMessage,
    RequestUsage,
    UserMessage,
)
from autogen_ext.models.replay import ReplayChatCompletionClient

from guardrail import Finding, Guard, Layer
from repair import AutoGenStepLog, CheckpointError, CircuitBreaker, Repairer

PRICES = {"flight": 120, "hotel": 75}
TRUE_TOTAL = sum(PRICES.values())
HINT_PREFIX = "The check"  # located / specific hints start this way; generic does not


class BookingClient(ReplayChatCompletionClient):
    """Scripted booking model: prices each item, then states a total 10 off unless a repair hint arrived."""

    def __init__(self, *, loop_forever: bool = False) -> None:
        super().__init__(["unused"], model_info={"vision": False, "function_calling": True, "json_output": False,
                                                 "family": "unknown", "structured_output": False})
        self.calls = 0
        self.loop_forever = loop_forever

    async def create(self, messages: Any, **kwargs: Any) -> CreateResult:  # type: ignore[override]
        self.calls += 1
        asked = [json.loads(c.arguments)["item"] for m in messages if isinstance(m, AssistantMessage)
                 and isinstance(m.content, list) for c in m.content]
        missing = [item for item in PRICES if item not in asked]
        if self.loop_forever or missing:
            item = "flight" if self.loop_forever else missing[0]
            call = FunctionCall(id=f"call-{self.calls}", name="price", arguments=json.dumps({"item": item}))
            return CreateResult(finish_reason="function_calls", content=[call], cached=False,
                                usage=RequestUsage(prompt_tokens=0, completion_tokens=0))
        prices = [int(r.content) for m in messages if isinstance(m, FunctionExecutionResultMessage) for r in m.content]
        hinted = any(isinstance(m, UserMessage) and str(m.content).startswith(HINT_PREFIX) for m in messages)
        total = sum(prices) + (0 if hinted else 10)
        return CreateResult(finish_reason="stop", content=f"total = {total}", cached=False,
                            usage=RequestUsage(prompt_tokens=0, completion_tokens=0))


class Booking:
    def __init__(self, *, loop_forever: bool = False) -> None:
        self.client = BookingClient(loop_forever=loop_forever)
        self.tool_calls: list[str] = []

        async def price(item: str) -> str:
            """The price of one booking item, in euros."""
            self.tool_calls.append(item)
            return str(PRICES[item])

        self.agent = AssistantAgent("booker", self.client, tools=[price], max_tool_iterations=1,
                                    reflect_on_tool_use=False)


class TotalCheck(Layer):
    name = "verify"

    def on_finish(self, ctx: Any, episode: Any) -> list[Finding]:
        match = re.search(r"total = (\d+)", episode.answer or "")
        if match is None:
            return []
        received = sum(int(e.result) for s in episode.steps for e in s.tool_events if e.result)
        if int(match.group(1)) == received:
            return []
        return [Finding(layer=self.name, check="total_consistency", message="total does not match the prices",
                        evidence={"expected": received}, blocking=True, step=len(episode.steps) - 1)]


class ContractCheck(Layer):
    name = "contract"

    def after_result(self, ctx: Any, action: Any, result: Any) -> list[Finding]:
        if action.args.get("item") == "flight":
            return [Finding(layer=self.name, check="tool_contract", message="unexpected result shape",
                            blocking=True, step=ctx.step_index)]
        return []


async def test_step_log_saves_the_agent_state_after_every_step() -> None:
    booking = Booking()
    run = await AutoGenStepLog(booking.agent).run("Book the flight and hotel; give the total.")

    assert run.answer == f"total = {TRUE_TOTAL + 10}"
    assert len(run.states) == 3 and run.model_steps == 3
    assert [len(s["llm_context"]["messages"]) for s in run.states] == [3, 5, 6]
    assert [s.kind.value for s in run.steps()] == ["tool_call", "tool_call", "final"]


async def test_fork_restores_the_state_before_the_target_step_and_reruns_live() -> None:
    booking = Booking()
    log = AutoGenStepLog(booking.agent)
    run = await log.run("Book the flight and hotel; give the total.")
    saved = copy.deepcopy(run.states)
    flag = Finding(layer="verify", check="total_consistency", message="off", blocking=True, step=2)

    outcome = await Repairer(Guard([TotalCheck()], mode="intervene"), rung="located").arepair_autogen(
        log, run, [flag])

    attempt = outcome.attempts[0]
    assert attempt.target_step == 2 and attempt.outcome == "passed"
    assert outcome.answer == f"total = {TRUE_TOTAL}"
    assert booking.client.calls == 4 and attempt.extra_model_calls == 1
    forked = outcome.autogen_run
    assert forked is not None and forked.states[:2] == saved[:2]  # the prefix is the saved state, reused
    hint = forked.states[-1]["llm_context"]["messages"][5]
    assert hint["type"] == "UserMessage" and hint["content"].startswith("The check `verify/total_consistency`")
    assert run.states == saved  # the original run's saved states are untouched


async def test_fork_from_task_start_calls_every_tool_again() -> None:
    booking = Booking()
    log = AutoGenStepLog(booking.agent)
    run = await log.run("Book the flight and hotel; give the total.")
    flag = Finding(layer="verify", check="total_consistency", message="off", blocking=True, step=0)

    outcome = await Repairer(Guard([TotalCheck()], mode="intervene"), rung="located").arepair_autogen(
        log, run, [flag])

    assert outcome.attempts[0].target_step == 0 and outcome.outcome == "repaired"
    assert booking.tool_calls == ["flight", "hotel", "flight", "hotel"]
    assert booking.client.calls == 6


async def test_online_run_repairs_before_the_answer(spans: Any) -> None:
    booking = Booking()
    outcome = await Repairer(Guard([TotalCheck()], mode="intervene")).arun_autogen(
        booking.agent, "Book the flight and hotel; give the total.", tools=["price"])

    assert outcome.outcome == "repaired" and outcome.answer == f"total = {TRUE_TOTAL}"
    assert outcome.original_answer == f"total = {TRUE_TOTAL + 10}"
    (span,) = [s for s in spans.get_finished_spans() if s.name == "guardrail.repair"]
    assert dict(span.attributes or {})["guardrail.repair.outcome"] == "passed"


async def test_contract_violation_is_escalated_and_never_retried() -> None:
    booking = Booking()
    received = []
    outcome = await Repairer(Guard([ContractCheck()], mode="intervene"), on_escalate=received.append).arun_autogen(
        booking.agent, "Book the flight and hotel; give the total.")

    assert outcome.outcome == "escalated" and outcome.attempts == []
    assert [e.reason for e in received] == ["contract_violation"]
    assert booking.client.calls == 1 and booking.tool_calls == ["flight"]


async def test_circuit_breaker_ends_a_loop_trap_fast() -> None:
    looping = Booking(loop_forever=True)
    unbounded = await Repairer(Guard([]), breaker=None).arun_autogen(looping.agent, "Book the flight.", max_steps=30)
    assert unbounded.outcome == "clean" and looping.client.calls == 30

    trapped = Booking(loop_forever=True)
    outcome = await Repairer(Guard([], mode="intervene"), breaker=CircuitBreaker()).arun_autogen(
        trapped.agent, "Book the flight.", max_steps=30)
    assert outcome.outcome == "halted" and outcome.trip is not None and outcome.trip.reason == "loop"
    assert trapped.client.calls <= 10


async def test_step_log_refuses_an_agent_that_makes_several_model_calls_per_run() -> None:
    agent = AssistantAgent("multi", BookingClient(), tools=[], max_tool_iterations=3)
    with pytest.raises(CheckpointError, match="max_tool_iterations=1"):
        AutoGenStepLog(agent)
