"""Repair on a real LangGraph agent with a SQLite checkpointer: fork from the right checkpoint, original untouched."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from guardrail import Finding, Guard, Layer
from repair import CircuitBreaker, Repairer, sqlite_checkpointer
from repair.checkpoints import LangGraphCheckpoints

PRICES = {"flight": 120, "hotel": 75}
TRUE_TOTAL = sum(PRICES.values())


class BookingModel(BaseChatModel):
    """Scripted booking agent: prices each item, then answers with a total that is 10 off unless a hint arrived."""

    calls: int = 0
    loop_forever: bool = False

    @property
    def _llm_type(self) -> str:
        return "scripted-booking"

    def bind_tools(self, tools: Any, **kwargs: Any) -> BookingModel:
        return self

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls += 1
        asked = [m.tool_calls[0]["args"]["item"] for m in messages if isinstance(m, AIMessage) and m.tool_calls]
        if self.loop_forever:
            reply = AIMessage(content="", tool_calls=[{"name": "price", "args": {"item": "flight"},
                                                       "id": f"call-{self.calls}"}])
            return ChatResult(generations=[ChatGeneration(message=reply)])
        missing = [item for item in PRICES if item not in asked]
        if missing:
            reply = AIMessage(content="", tool_calls=[{"name": "price", "args": {"item": missing[0]},
                                                       "id": f"call-{self.calls}"}])
        else:
            prices = [int(m.content) for m in messages if isinstance(m, ToolMessage)]
            hinted = any(isinstance(m, HumanMessage) and m.name == "guardrail" for m in messages)
            total = sum(prices) + (0 if hinted else 10)
            reply = AIMessage(content=f"total = {total}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


class ToolLog:
    def __init__(self) -> None:
        self.calls: list[str] = []


def make_tools(log: ToolLog) -> list[Any]:
    @tool
    def price(item: str) -> str:
        """The price of one booking item, in euros."""
        log.calls.append(item)
        return str(PRICES[item])

    return [price]


class TotalCheck(Layer):
    """Test verifier: the stated total must equal the sum of the prices the run received."""

    name = "verify"

    def on_finish(self, ctx: Any, episode: Any) -> list[Finding]:
        answer = episode.answer or ""
        match = re.search(r"total = (\d+)", answer)
        if match is None:
            return []
        received = sum(int(e.result) for s in episode.steps for e in s.tool_events if e.result)
        stated = int(match.group(1))
        if stated == received:
            return []
        return [Finding(layer=self.name, check="total_consistency", message=f"stated {stated}, tools say {received}",
                        evidence={"expected": received, "stated": stated}, blocking=True,
                        step=len(episode.steps) - 1)]


class ContractCheck(Layer):
    """Test tool-contract check: every price result must be a number (here: a flagged result shape)."""

    name = "contract"

    def after_result(self, ctx: Any, action: Any, result: Any) -> list[Finding]:
        if action.args.get("item") == "hotel":
            return [Finding(layer=self.name, check="tool_contract", message="price returned an unexpected shape",
                            blocking=True, step=ctx.step_index)]
        return []


@pytest.fixture
def booking(tmp_path: Path) -> dict[str, Any]:
    saver = sqlite_checkpointer(tmp_path / "runs.db")
    model = BookingModel()
    log = ToolLog()
    graph = create_agent(model, make_tools(log), checkpointer=saver)
    return {"graph": graph, "model": model, "log": log, "config": {"configurable": {"thread_id": "booking-1"}}}


def branch_fingerprint(checkpoints: LangGraphCheckpoints) -> list[tuple[str, str]]:
    return [(s.config["configurable"]["checkpoint_id"],
             json.dumps([[type(m).__name__, m.content] for m in s.values.get("messages", [])]))
            for s in checkpoints.original_branch()]


def test_fork_starts_at_the_checkpoint_before_the_target_step_and_reruns_live(booking: dict[str, Any]) -> None:
    graph, model, log, config = booking["graph"], booking["model"], booking["log"], booking["config"]
    graph.invoke({"messages": [HumanMessage("Book the flight and hotel; give the total.")]}, config)
    assert (model.calls, log.calls) == (3, ["flight", "hotel"])
    flag = Finding(layer="verify", check="total_consistency", message="off by 10", blocking=True, step=2)

    outcome = Repairer(Guard([TotalCheck()], mode="intervene"), rung="located").repair_langgraph(
        graph, config, [flag])

    attempt = outcome.attempts[0]
    assert attempt.target_step == 2  # step 1 fetched the last fact before the flagged final step
    before = LangGraphCheckpoints(graph, {"configurable": {"thread_id": "booking-1",
                                                           "checkpoint_id": attempt.checkpoint_id}})
    assert [type(m).__name__ for m in before.messages()] == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage", "ToolMessage"]
    fork_parent = graph.get_state(attempt.fork_config)
    assert outcome.outcome == "repaired"
    assert outcome.answer == f"total = {TRUE_TOTAL}"
    assert attempt.extra_model_calls == 1 and model.calls == 4  # one fresh model call after the fork
    assert fork_parent.values["messages"][-2].name == "guardrail"  # the hint, as a HumanMessage in the thread


def test_fork_from_task_start_reexecutes_every_tool_call(booking: dict[str, Any]) -> None:
    graph, model, log, config = booking["graph"], booking["model"], booking["log"], booking["config"]
    graph.invoke({"messages": [HumanMessage("Book the flight and hotel; give the total.")]}, config)
    flag = Finding(layer="verify", check="total_consistency", message="off", blocking=True, step=0)

    outcome = Repairer(Guard([TotalCheck()], mode="intervene"), rung="generic").repair_langgraph(
        graph, config, [flag])

    assert outcome.attempts[0].target_step == 0
    assert log.calls == ["flight", "hotel", "flight", "hotel"]  # the tools really ran again
    assert model.calls == 6 and outcome.extra_model_calls == 3
    assert outcome.outcome == "repaired"


def test_original_branch_is_untouched_by_repair(booking: dict[str, Any]) -> None:
    graph, config = booking["graph"], booking["config"]
    graph.invoke({"messages": [HumanMessage("Book the flight and hotel; give the total.")]}, config)
    original = LangGraphCheckpoints(graph, config)
    fingerprint = branch_fingerprint(original)
    flag = Finding(layer="verify", check="total_consistency", message="off", blocking=True, step=2)

    Repairer(Guard([TotalCheck()], mode="intervene"), rung="resample", max_attempts=2,
             breaker=CircuitBreaker(max_attempts=2)).repair_langgraph(graph, config, [flag])

    assert branch_fingerprint(original) == fingerprint
    head = graph.get_state(original.head_config)
    assert head.values["messages"][-1].content == f"total = {TRUE_TOTAL + 10}"
    assert graph.get_state(config).config != original.head_config  # the thread's head is the latest fork


def test_resample_without_hint_does_not_recover_a_deterministic_error(booking: dict[str, Any]) -> None:
    graph, model, config = booking["graph"], booking["model"], booking["config"]
    graph.invoke({"messages": [HumanMessage("Book the flight and hotel; give the total.")]}, config)
    flag = Finding(layer="verify", check="total_consistency", message="off", blocking=True, step=2)

    outcome = Repairer(Guard([TotalCheck()], mode="intervene"), rung="resample",
                       breaker=CircuitBreaker(max_attempts=2)).repair_langgraph(graph, config, [flag])

    assert [a.outcome for a in outcome.attempts[:2]] == ["still_flagged", "still_flagged"]
    assert outcome.outcome == "halted" and outcome.trip is not None and outcome.trip.reason == "repair_exhausted"
    assert outcome.answer is None and model.calls == 5


def test_online_intervene_repairs_before_the_answer_and_traces_each_attempt(booking: dict[str, Any],
                                                                             spans: Any) -> None:
    graph, config = booking["graph"], booking["config"]
    repairer = Repairer(Guard([TotalCheck()], mode="intervene"))

    outcome = repairer.run_langgraph(graph, {"messages": [HumanMessage("Book both; give the total.")]}, config,
                                     tools=["price"])

    assert outcome.outcome == "repaired"
    assert outcome.original_answer == f"total = {TRUE_TOTAL + 10}"
    assert outcome.answer == f"total = {TRUE_TOTAL}"
    repair_spans = [s for s in spans.get_finished_spans() if s.name == "guardrail.repair"]
    assert len(repair_spans) == 1
    attributes = dict(repair_spans[0].attributes or {})
    assert attributes["guardrail.repair.rung"] == "located"  # adaptive starts by naming the check
    assert attributes["guardrail.repair.target_step"] == 2
    assert attributes["guardrail.repair.extra_model_calls"] == 1
    assert attributes["guardrail.repair.outcome"] == "passed"


def test_report_mode_logs_the_repair_and_forks_nothing(booking: dict[str, Any], spans: Any) -> None:
    graph, model, config = booking["graph"], booking["model"], booking["config"]
    repairer = Repairer(Guard([TotalCheck()], mode="report"))

    outcome = repairer.run_langgraph(graph, {"messages": [HumanMessage("Book both.")]}, config)

    assert outcome.outcome == "logged"
    assert outcome.answer == f"total = {TRUE_TOTAL + 10}"
    assert model.calls == 3
    assert len(list(graph.get_state_history(config))) == 7  # the original run's checkpoints only
    logged = [s for s in spans.get_finished_spans() if s.name == "guardrail.repair"]
    assert [dict(s.attributes or {})["guardrail.repair.outcome"] for s in logged] == ["logged"]


def test_contract_violation_is_escalated_and_never_retried(booking: dict[str, Any]) -> None:
    graph, model, log, config = booking["graph"], booking["model"], booking["log"], booking["config"]
    received = []
    repairer = Repairer(Guard([ContractCheck(), TotalCheck()], mode="intervene"), on_escalate=received.append)

    outcome = repairer.run_langgraph(graph, {"messages": [HumanMessage("Book both.")]}, config)

    assert outcome.outcome == "escalated" and outcome.attempts == []
    assert [e.reason for e in received] == ["contract_violation"]
    assert received[0].step == 1
    assert model.calls == 2 and log.calls == ["flight", "hotel"]  # the run stopped at the violation, no retry
    checkpoint_count = len(list(graph.get_state_history(config)))
    assert all(s.parent_config is None or s.next != () for s in list(graph.get_state_history(config))[1:])
    assert checkpoint_count == len(LangGraphCheckpoints(graph, config).original_branch())  # no fork was written


def test_circuit_breaker_ends_a_loop_trap_fast(tmp_path: Path) -> None:
    budgets = {}
    for name, breaker in (("without", None), ("with", CircuitBreaker())):
        model = BookingModel(loop_forever=True)
        graph = create_agent(model, make_tools(ToolLog()), checkpointer=sqlite_checkpointer(tmp_path / f"{name}.db"))
        config = {"configurable": {"thread_id": name}, "recursion_limit": 60}  # 30 model steps
        repairer = Repairer(Guard([], mode="intervene"), breaker=breaker)
        if breaker is None:
            with pytest.raises(Exception, match="[Rr]ecursion"):
                repairer.run_langgraph(graph, {"messages": [HumanMessage("Book the flight.")]}, config)
        else:
            outcome = repairer.run_langgraph(graph, {"messages": [HumanMessage("Book the flight.")]}, config)
            assert outcome.outcome == "halted" and outcome.trip is not None and outcome.trip.reason == "loop"
            assert outcome.escalation is not None and outcome.escalation.reason == "loop"
        budgets[name] = model.calls
    assert budgets["without"] == 30
    assert budgets["with"] <= 10


KILL_SCRIPT = textwrap.dedent("""
    import json, os, signal, sys
    sys.path.insert(0, {tests!r})
    from langchain_core.messages import HumanMessage
    from langchain.agents import create_agent
    from guardrail import Finding, Guard
    from repair import Repairer, sqlite_checkpointer
    from repair.checkpoints import LangGraphCheckpoints
    import test_repair_langgraph as t

    log = t.ToolLog()
    graph = create_agent(t.BookingModel(), t.make_tools(log), checkpointer=sqlite_checkpointer({db!r}))
    config = {{"configurable": {{"thread_id": "killed"}}}}
    graph.invoke({{"messages": [HumanMessage("Book both.")]}}, config)
    original = LangGraphCheckpoints(graph, config)
    with open({out!r}, "w") as handle:
        json.dump(t.branch_fingerprint(original), handle)

    class Kill(t.Layer):
        name = "kill"
        def on_step(self, ctx, step):
            if ":repair-" in ctx.episode_id and step.index >= 1:
                os.kill(os.getpid(), signal.SIGKILL)  # die mid-fork, between two checkpoint writes
    flag = Finding(layer="verify", check="total_consistency", message="off", blocking=True, step=0)
    Repairer(Guard([Kill()], mode="intervene"), rung="generic").repair_langgraph(graph, config, [flag])
""")


def test_a_run_killed_mid_repair_leaves_the_original_thread_intact(tmp_path: Path) -> None:
    db, out = tmp_path / "runs.db", tmp_path / "original.json"
    script = KILL_SCRIPT.format(tests=str(Path(__file__).parent), db=str(db), out=str(out))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]

    graph = create_agent(BookingModel(), make_tools(ToolLog()), checkpointer=sqlite_checkpointer(db))
    history = list(graph.get_state_history({"configurable": {"thread_id": "killed"}}))
    assert len(history) > 7  # the fork had written checkpoints before it died
    fingerprint = [tuple(pair) for pair in json.loads(out.read_text())]
    head_id = fingerprint[-1][0]
    pinned = LangGraphCheckpoints(graph, {"configurable": {"thread_id": "killed", "checkpoint_id": head_id}})
    assert branch_fingerprint(pinned) == fingerprint
    assert pinned.messages()[-1].content == f"total = {TRUE_TOTAL + 10}"
