"""The testbed's agents run through the real frameworks: checkpoints, ToolMessages, AutoGen execution events."""

from __future__ import annotations

import json
from typing import Any

from autogen_agentchat.messages import ToolCallExecutionEvent
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from traces.agents import (
    arun_autogen_episode,
    build_autogen_agent,
    build_langgraph_agent,
    episode_from_langchain,
    run_langgraph_episode,
)
from traces.policy import Policy
from traces.tasks import make_task
from traces.tools import BookingDB, ToolOutcome, booking_tools

DB = BookingDB()


def _final_total(text: str | None) -> float:
    assert text is not None
    import re

    return float(re.findall(r"\$(\d+(?:\.\d+)?)", text)[0])


def test_langgraph_agent_checkpoints_every_step_and_returns_real_tool_messages() -> None:
    task = make_task(3, db=DB)
    box = booking_tools(DB)
    saver = InMemorySaver()
    graph = build_langgraph_agent(task, Policy(seed=3), toolbox=box, checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "t-1"}, "recursion_limit": 100}
    state = graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)
    tool_messages = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(tool_messages) >= sum(task.required_counts.values())
    checkpoints = list(saver.list(config))
    assert len(checkpoints) > len(tool_messages)  # at least one checkpoint per super-step
    episode = episode_from_langchain(state["messages"], task, Policy(seed=3), log=box.log)
    assert episode.steps[-1].is_final
    assert _final_total(episode.answer) == task.expected_total
    assert all(step.token_logprobs and all(lp <= 0 for lp in step.token_logprobs) for step in episode.steps)


async def test_autogen_agent_executes_tools_through_its_workbench() -> None:
    task = make_task(4, db=DB)
    box = booking_tools(DB)
    agent, client = build_autogen_agent(task, Policy(seed=4), toolbox=box)
    result = await agent.run(task=task.prompt)
    executions = [m for m in result.messages if isinstance(m, ToolCallExecutionEvent)]
    assert len(executions) == len(box.log) >= sum(task.required_counts.values())
    assert len(client.results) == len(executions) + 1  # one model reply per tool round plus the answer


async def test_both_frameworks_reach_the_ground_truth_total_on_a_healthy_run() -> None:
    for seed in range(6):
        task = make_task(seed, db=DB)
        lang = run_langgraph_episode(task, Policy(seed=seed), toolbox=booking_tools(DB))
        auto = await arun_autogen_episode(task, Policy(seed=seed), toolbox=booking_tools(DB))
        assert _final_total(lang.answer) == _final_total(auto.answer) == task.expected_total
        assert [s.text for s in lang.steps] == [s.text for s in auto.steps]


def test_same_seed_gives_the_same_episode_and_another_seed_varies_it() -> None:
    task = make_task(11, db=DB)
    first = run_langgraph_episode(task, Policy(seed=5), toolbox=booking_tools(DB))
    again = run_langgraph_episode(task, Policy(seed=5), toolbox=booking_tools(DB))
    assert [(s.text, s.token_logprobs) for s in first.steps] == [(s.text, s.token_logprobs) for s in again.steps]
    others = {tuple(s.text for s in run_langgraph_episode(task, Policy(seed=k), toolbox=booking_tools(DB)).steps)
              for k in range(6, 12)}
    assert len(others) > 1


class _ChangeHotelPrice:
    def intercept(self, ordinal: int, name: str, args: dict[str, Any], run: Any) -> ToolOutcome:
        outcome = run()
        return ToolOutcome("$1000/night", injected="test") if name == "lookup_hotel" else outcome


def test_policy_answers_from_the_results_it_received() -> None:
    seed = next(s for s in range(50) if make_task(s, db=DB).kind == "route")
    task = make_task(seed, db=DB)
    episode = run_langgraph_episode(task, Policy(seed=1), toolbox=booking_tools(DB, fault=_ChangeHotelPrice()))
    nights = task.goal.nights  # type: ignore[attr-defined]
    true_hotel = task.facts[f"hotel:{task.goal.destination}"]  # type: ignore[attr-defined]
    assert _final_total(episode.answer) == task.expected_total + nights * (1000 - float(true_hotel))


def test_a_tool_error_reaches_the_agent_as_an_error_tool_message_and_it_retries() -> None:
    class FailFirst:
        def intercept(self, ordinal: int, name: str, args: dict[str, Any], run: Any) -> ToolOutcome:
            return ToolOutcome("Error: service unavailable (HTTP 503)", is_error=True) if ordinal == 0 else run()

    task = make_task(2, db=DB)
    episode = run_langgraph_episode(task, Policy(seed=2), toolbox=booking_tools(DB, fault=FailFirst()))
    first, second = episode.steps[0].tool_events[0], episode.steps[1].tool_events[0]
    assert first.is_error and not second.is_error
    assert (first.name, first.args) == (second.name, second.args)
    assert _final_total(episode.answer) == task.expected_total


async def test_another_autogen_client_runs_the_same_agent_and_the_episode_comes_from_its_events() -> None:
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, ModelInfo, RequestUsage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    task = make_task(1, db=DB, kinds=["baggage"])
    calls = task.goal.calls()
    usage = RequestUsage(prompt_tokens=10, completion_tokens=7)
    replies: list[str | CreateResult] = [
        CreateResult(finish_reason="function_calls", usage=usage, cached=False,
                     content=[FunctionCall(id=f"c{i}", name=c.tool, arguments=json.dumps(c.arg_dict))])
        for i, c in enumerate(calls)]
    replies.append(f"The total is ${task.expected_total:.0f}.")
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False)
    episode = await arun_autogen_episode(task, Policy(seed=1), toolbox=booking_tools(DB),
                                         client=ReplayChatCompletionClient(replies, model_info=info))
    assert episode.T == len(calls) + 1 and episode.steps[-1].is_final
    assert [e.name for s in episode.steps for e in s.tool_events] == [c.tool for c in calls]
    assert all(e.result and not e.is_error for s in episode.steps for e in s.tool_events)
    assert all(s.token_logprobs == [] and s.output_tokens == 7 for s in episode.steps[:-1])
    assert _final_total(episode.answer) == task.expected_total
