"""Repair inside the run: `GuardMiddleware(guard, repair=True)` forks a flagged thread and returns the repaired run.

A real `create_agent` graph runs a testbed booking task with a scripted policy that always slips its
arithmetic; the answer check flags the total at the end of the run, and the same `invoke` (or
`ainvoke`) forks the thread through its own checkpointer, re-runs it live with the hint, and
returns the repaired messages. Each LangGraph saver is exercised: InMemorySaver, SqliteSaver,
AsyncSqliteSaver and PostgresSaver (a throwaway server on loopback, skipped when none can start).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from adapters.langchain import GuardMiddleware
from adapters.langgraph_repair import LangGraphCheckpoints, sqlite_checkpointer
from guardrail import Guard
from repair import Repairer
from tests.layers import AnswerCheck
from traces.agents import build_langgraph_agent
from traces.labeller import stated_total
from traces.models import ScriptedChatModel
from traces.policy import Policy
from traces.tasks import make_task
from traces.tools import BookingDB, booking_tools

SEED = 1  # a catalog task: three search_catalog calls, then the answer


class Agent:
    """A guarded booking agent whose scripted model always slips its arithmetic (until a hint names it)."""

    def __init__(self, checkpointer: Any, *, repair: bool | Repairer = True, thread: str = "inline") -> None:
        self.task = make_task(SEED, db=BookingDB())
        self.policy = Policy(seed=SEED, arithmetic_rate=1.0)
        self.model = ScriptedChatModel(policy=self.policy)
        self.guard = Guard([AnswerCheck(self.task)], mode="intervene")
        self.middleware = GuardMiddleware(self.guard, repair=repair)
        self.graph = self.middleware.bind(build_langgraph_agent(
            self.task, self.policy, toolbox=booking_tools(), checkpointer=checkpointer, model=self.model,
            middleware=[self.middleware]))
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread}, "recursion_limit": 90}

    @property
    def inputs(self) -> dict[str, Any]:
        return {"messages": [HumanMessage(self.task.prompt)]}

    def right(self, text: str | None) -> bool:
        stated = stated_total(text or "")
        return stated is not None and abs(stated - self.task.expected_total) < 0.5


def contents(messages: list[Any]) -> list[tuple[str, str]]:
    return [(type(m).__name__, json.dumps(m.content)) for m in messages]


def reference_run() -> list[list[tuple[str, str]]]:
    """The same agent without repair: the messages of each checkpoint of its branch, oldest first."""
    from langgraph.checkpoint.memory import InMemorySaver

    agent = Agent(InMemorySaver(), repair=False, thread="reference")
    agent.graph.invoke(agent.inputs, agent.config)
    branch = LangGraphCheckpoints(agent.graph, agent.config).original_branch()
    return [contents(s.values.get("messages", [])) for s in branch]


def check_repaired(agent: Agent, state: dict[str, Any], original_branch: list[Any]) -> None:
    record = state["guardrail_repair"]
    assert state["guardrail_verdict"] == "repair"
    assert record["outcome"] == "repaired" and record["rung"] and record["attempts"] >= 1
    assert record["extra_model_calls"] >= 1 and record["fork_checkpoint"] and record["fork_head"]
    # The same invoke returned the repaired run: its answer is right, and the hint is in its messages.
    assert agent.right(state["messages"][-1].content) and agent.right(record["answer"])
    assert any(isinstance(m, HumanMessage) and m.name == "guardrail" for m in state["messages"])
    assert not agent.right(record["original_answer"])
    # The original branch is intact: checkpoint by checkpoint it holds what a run without repair holds,
    # and the fork starts at one of its checkpoints.
    reference = reference_run()
    assert [contents(s.values.get("messages", [])) for s in original_branch] == reference[:len(original_branch)]
    assert original_branch[-1].config["configurable"]["checkpoint_id"] == record["original_checkpoint"]
    assert isinstance(original_branch[-1].values["messages"][-1], AIMessage)
    assert not agent.right(original_branch[-1].values["messages"][-1].content)
    assert record["fork_checkpoint"] in {s.config["configurable"]["checkpoint_id"] for s in original_branch}


def original_branch_of(agent: Agent, state: dict[str, Any]) -> list[Any]:
    pinned = {"configurable": {**agent.config["configurable"],
                               "checkpoint_id": state["guardrail_repair"]["original_checkpoint"]}}
    return LangGraphCheckpoints(agent.graph, pinned).original_branch()


async def aoriginal_branch_of(agent: Agent, state: dict[str, Any]) -> list[Any]:
    pinned = {"configurable": {**agent.config["configurable"],
                               "checkpoint_id": state["guardrail_repair"]["original_checkpoint"]}}
    return await (await LangGraphCheckpoints.aopen(agent.graph, pinned)).aoriginal_branch()


@contextmanager
def postgres_saver(dsn: str) -> Iterator[Any]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    with psycopg.Connection.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
        saver.setup()
        yield saver


@pytest.mark.parametrize("saver", ["memory", "sqlite"])
def test_invoke_returns_the_repaired_run_and_keeps_the_original_branch(saver: str, tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    agent = Agent(InMemorySaver() if saver == "memory" else sqlite_checkpointer(tmp_path / "runs.db"))
    state = agent.graph.invoke(agent.inputs, agent.config)

    check_repaired(agent, state, original_branch_of(agent, state))
    # Every model call is either the original run's or a counted repair call.
    original_calls = sum(isinstance(m, AIMessage) for m in original_branch_of(agent, state)[-1].values["messages"])
    assert agent.model.calls == original_calls + state["guardrail_repair"]["extra_model_calls"]
    # The thread continues from the repaired run.
    assert agent.right(agent.graph.get_state(agent.config).values["messages"][-1].content)
    assert agent.guard.running_episodes == []  # the fork's gate episodes were closed


def test_postgres_saver_repairs_inline(postgres_dsn: str) -> None:
    with postgres_saver(postgres_dsn) as saver:
        agent = Agent(saver, thread=f"inline-pg-{id(saver)}")
        state = agent.graph.invoke(agent.inputs, agent.config)
        check_repaired(agent, state, original_branch_of(agent, state))


async def test_ainvoke_with_async_sqlite_saver_repairs_inline(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "runs.db")) as saver:
        agent = Agent(saver)
        state = await agent.graph.ainvoke(agent.inputs, agent.config)
        branch = await aoriginal_branch_of(agent, state)
        check_repaired(agent, state, branch)
        assert agent.right((await agent.graph.aget_state(agent.config)).values["messages"][-1].content)


def test_a_clean_run_is_not_repaired_and_an_unbound_middleware_says_what_to_do(tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    clean = Agent(InMemorySaver())
    clean.policy = Policy(seed=SEED)
    clean.model.policy = clean.policy
    state = clean.graph.invoke(clean.inputs, clean.config)
    assert state["guardrail_verdict"] == "allow" and "guardrail_repair" not in state

    unbound = Agent(InMemorySaver())
    unbound.middleware.graph = None
    state = unbound.graph.invoke(unbound.inputs, unbound.config)
    assert state["guardrail_repair"]["outcome"] == "error" and "bind" in state["guardrail_repair"]["error"]
    assert not unbound.right(state["messages"][-1].content)  # the run is returned as it was


def test_bench_repair_inline_reports_one_row_per_configuration():
    from traces.bench.repair_inline import run_inline

    rows = run_inline(episodes=4, seed=0, configurations=(("langgraph", "memory"), ("autogen_team", "team_state")))

    assert [(r["framework"], r["checkpointer"]) for r in rows] == [("langgraph", "memory"),
                                                                   ("autogen_team", "team_state")]
    for row in rows:
        assert {"n", "recovered", "broken", "original_intact", "extra_model_calls"} <= set(row)
        assert row["n"] >= 1 and row["original_intact"] == row["n"]  # every flagged original kept
        assert row["recovered"] >= 1 and row["extra_model_calls"] > 0


def test_inline_bench_on_an_openai_endpoint_pairs_rungs_on_the_same_per_call_seeds():
    """The real-model path over real HTTP (a scripted server stands in for the model): both frameworks, both rungs."""
    from traces.bench.repair_inline import run_inline
    from traces.models import EndpointSpec
    from traces.openai_server import PolicyResponder, ScriptedLLMServer

    # The policy invents its figures every time and turns careful only for a hint that names its slip.
    with ScriptedLLMServer(PolicyResponder(Policy(seed=1, hallucinate_rate=1.0, hint_response="relevant"))) as server:
        rows = run_inline(episodes=2, seed=0, configurations=(("langgraph", "memory"), ("autogen_team", "team_state")),
                          rungs=("resample", "adaptive"), spec=EndpointSpec("openai:scripted", server.openai_url))
        seeds = [body.get("seed") for body in server.requests]

    by = {(r["framework"], r["rung"]): r for r in rows}
    for framework in ("langgraph", "autogen_team"):
        control, hinted = by[(framework, "resample")], by[(framework, "adaptive")]
        assert control["episodes"] == hinted["episodes"] == 2 and control["n"] == hinted["n"] == 2
        assert control["original_intact"] == hinted["original_intact"] == 2
        assert control["recovered"] == 0 and hinted["recovered"] == hinted["right_after"] == 2
        assert hinted["pairs"] == hinted["pairs_same_original"] == 2 and hinted["p_vs_resample"] == 0.5
        assert "p_vs_resample" not in control
    # The k-th call of episode i carries seed 64 * i + k, forks included: a fork samples anew, rungs pair.
    first_run = seeds[:seeds.index(64)]
    assert first_run == list(range(len(first_run))) and len(first_run) >= 3


def test_a_real_runs_original_branch_is_checked_against_its_own_messages():
    from traces.bench.repair_inline import _intact_against

    original = [("HumanMessage", '"q"'), ("AIMessage", '""'), ("ToolMessage", '"$5"'), ("AIMessage", '"$5"')]
    assert _intact_against([original[:1], original[:3], original], original)
    assert not _intact_against([original[:1], original[:3]], original)  # the head lost the answer
    assert not _intact_against([original[:1], [original[0], ("AIMessage", '"x"')], original], original)
    assert not _intact_against([], original) and not _intact_against([original], None)
