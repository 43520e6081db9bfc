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
from langchain_core.messages import HumanMessage

from adapters.langgraph_repair import (
    LangGraphCheckpoints,
    repair_langgraph,
    run_langgraph,
    sqlite_checkpointer,
)
from guardrail import Finding, Guard, Layer, Severity
from repair import CircuitBreaker, Repairer
from tests.layers import AnswerCheck
from traces.agents import build_langgraph_agent
from traces.injectors import ContextCorruption, Looping, make_injector
from traces.labeller import stated_total
from traces.models import ScriptedChatModel
from traces.policy import Policy
from traces.tasks import make_task
from traces.tools import BookingDB, booking_tools
from verifiers import VerifierLayer, pick_spec

CATALOG_SEED = 1  # a catalog task: three search_catalog calls, then the answer
TOUR_SEED = 8  # a tour task, whose tools the shipped booking spec (with tool contracts) covers




class Booking:
    """A testbed booking agent (real create_agent graph, scripted policy that always slips its arithmetic)."""

    def __init__(self, db_path: Path | str, *, seed: int = CATALOG_SEED, fault: Any = None, **policy: Any) -> None:
        self.db = BookingDB()
        self.task = make_task(seed, db=self.db)
        self.box = booking_tools(self.db, fault=fault)
        self.policy = Policy(seed=seed, **({"arithmetic_rate": 1.0} | policy))
        self.model = ScriptedChatModel(policy=self.policy)
        self.graph = build_langgraph_agent(self.task, self.policy, toolbox=self.box,
                                           checkpointer=sqlite_checkpointer(db_path), model=self.model)
        self.config: dict[str, Any] = {"configurable": {"thread_id": f"booking-{seed}"},
                                       "recursion_limit": 4 * self.policy.max_steps + 10}

    @property
    def inputs(self) -> dict[str, Any]:
        return {"messages": [HumanMessage(self.task.prompt)]}

    def run(self) -> None:
        self.graph.invoke(self.inputs, self.config)

    def answer_is_right(self, answer: str | None) -> bool:
        stated = stated_total(answer or "")
        return stated is not None and abs(stated - self.task.expected_total) < 0.5

    @property
    def tool_calls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(record.name, record.args) for record in self.box.log]


@pytest.fixture
def booking(tmp_path: Path) -> Booking:
    return Booking(tmp_path / "runs.db")


def branch_fingerprint(checkpoints: LangGraphCheckpoints) -> list[tuple[str, str]]:
    return [(s.config["configurable"]["checkpoint_id"],
             json.dumps([[type(m).__name__, m.content] for m in s.values.get("messages", [])]))
            for s in checkpoints.original_branch()]


def test_fork_starts_at_the_checkpoint_before_the_target_step_and_reruns_live(booking: Booking) -> None:
    booking.run()
    assert booking.model.calls == 4 and len(booking.tool_calls) == 3
    flag = Finding(layer="verify", check="total_consistency", message="wrong total", blocking=True, step=3)

    outcome = repair_langgraph(Repairer(Guard([AnswerCheck(booking.task)], mode="intervene"), rung="located"),
        booking.graph, booking.config, [flag])

    attempt = outcome.attempts[0]
    assert attempt.target_step == 3  # step 2 fetched the last fact before the flagged answer
    pinned = {"configurable": {**booking.config["configurable"], "checkpoint_id": attempt.checkpoint_id}}
    assert [type(m).__name__ for m in LangGraphCheckpoints(booking.graph, pinned).messages()] == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage", "ToolMessage", "AIMessage", "ToolMessage"]
    fork = booking.graph.get_state(attempt.fork_config).values["messages"]
    assert fork[7].name == "guardrail" and "total_consistency" in fork[7].content  # the hint, as a HumanMessage
    assert outcome.outcome == "repaired" and booking.answer_is_right(outcome.answer)
    # Fresh model calls after the fork; every step but the answer also made a fresh tool call.
    assert booking.model.calls == 4 + attempt.extra_model_calls
    assert len(booking.tool_calls) == 3 + attempt.extra_model_calls - 1


def test_fork_from_task_start_reexecutes_every_tool_call(booking: Booking) -> None:
    booking.run()
    original_calls = list(booking.tool_calls)
    flag = Finding(layer="verify", check="total_consistency", message="wrong total", blocking=True, step=0)

    outcome = repair_langgraph(Repairer(Guard([AnswerCheck(booking.task)], mode="intervene"), rung="generic"),
        booking.graph, booking.config, [flag])

    assert outcome.attempts[0].target_step == 0 and outcome.outcome == "repaired"
    rerun = booking.tool_calls[len(original_calls):]
    assert all(call in rerun for call in original_calls)  # the tools really ran again
    assert booking.model.calls == 4 + outcome.extra_model_calls and outcome.extra_model_calls >= 4


def test_original_branch_is_untouched_by_repair(booking: Booking) -> None:
    booking.run()
    original = LangGraphCheckpoints(booking.graph, booking.config)
    fingerprint = branch_fingerprint(original)
    wrong_answer = original.messages()[-1].content
    flag = Finding(layer="verify", check="total_consistency", message="wrong total", blocking=True, step=3)

    repair_langgraph(Repairer(Guard([AnswerCheck(booking.task)], mode="intervene"), rung="located"),
        booking.graph, booking.config, [flag])

    assert branch_fingerprint(original) == fingerprint
    assert booking.graph.get_state(original.head_config).values["messages"][-1].content == wrong_answer
    assert booking.graph.get_state(booking.config).config != original.head_config  # the head is now the fork


def test_resample_replays_a_seeded_slip_and_the_breaker_ends_the_ladder(booking: Booking) -> None:
    booking.run()
    flag = Finding(layer="verify", check="total_consistency", message="wrong total", blocking=True, step=3)

    outcome = repair_langgraph(Repairer(Guard([AnswerCheck(booking.task)], mode="intervene"), rung="resample",
                       breaker=CircuitBreaker(max_attempts=2)), booking.graph, booking.config, [flag])

    assert [a.outcome for a in outcome.attempts] == ["still_flagged", "still_flagged"]
    assert outcome.outcome == "halted" and outcome.trip is not None and outcome.trip.reason == "repair_exhausted"
    assert outcome.escalation is not None and outcome.escalation.attempts == 2
    assert outcome.answer is None and booking.model.calls == 6  # one fresh model call per attempt


def test_online_intervene_repairs_before_the_answer_and_traces_each_attempt(booking: Booking, spans: Any) -> None:
    repairer = Repairer(Guard([AnswerCheck(booking.task)], mode="intervene"))

    outcome = run_langgraph(repairer, booking.graph, booking.inputs, booking.config, tools=booking.task.tools)

    assert outcome.outcome == "repaired"
    assert not booking.answer_is_right(outcome.original_answer) and booking.answer_is_right(outcome.answer)
    assert outcome.steps[-1].text == outcome.answer  # the delivered branch is the fork
    repair_spans = [s for s in spans.get_finished_spans() if s.name == "guardrail.repair"]
    assert len(repair_spans) == 1
    attributes = dict(repair_spans[0].attributes or {})
    assert attributes["guardrail.repair.rung"] == "located"  # adaptive starts by naming the check
    assert attributes["guardrail.repair.target_step"] == 3
    assert attributes["guardrail.repair.extra_model_calls"] == outcome.extra_model_calls >= 1
    assert attributes["guardrail.repair.outcome"] == "passed"


class SpliceAlarm(Layer):
    """Test stand-in for the step monitor: alarms on a step whose price result carries a second, spliced figure."""

    name = "monitor"

    def on_step(self, ctx: Any, step: Any) -> list[Finding]:
        spliced = [e for e in step.tool_events if len(re.findall(r"\$\d+", e.result or "")) > 1]
        if not spliced:
            return []
        return [Finding(layer=self.name, check="hybrid", message="step score over threshold",
                        severity=Severity.ALARM, step=step.index, score=0.97)]


def test_live_alarm_stops_the_run_at_once_and_repairs_from_before_the_alarm(tmp_path: Path) -> None:
    booking = Booking(tmp_path / "runs.db", seed=TOUR_SEED, arithmetic_rate=0.0,
                      fault=ContextCorruption(onset=1, duration=1, seed=TOUR_SEED))  # one corrupted result

    outcome = run_langgraph(Repairer(Guard([SpliceAlarm(), AnswerCheck(booking.task)], mode="intervene", on_alarm="repair")),
        booking.graph, booking.inputs, booking.config)

    assert outcome.findings[0].check == "hybrid" and outcome.findings[0].step == 1
    # Stopped before a third model call: every later call belongs to the repair.
    assert outcome.original_answer is None and booking.model.calls == 2 + outcome.extra_model_calls
    assert outcome.attempts[0].target_step == 1  # step 0 fetched the last fact before the alarm
    assert outcome.outcome == "repaired" and booking.answer_is_right(outcome.answer)


def test_alarm_from_a_broken_tool_is_retried_then_halted(tmp_path: Path) -> None:
    booking = Booking(tmp_path / "runs.db", seed=TOUR_SEED, arithmetic_rate=0.0,
                      fault=ContextCorruption(onset=1, seed=TOUR_SEED))  # every result from call 1 on
    received = []

    outcome = run_langgraph(Repairer(Guard([SpliceAlarm()], mode="intervene", on_alarm="repair"), on_escalate=received.append),
        booking.graph, booking.inputs, booking.config)

    assert [a.outcome for a in outcome.attempts] == ["still_flagged", "still_flagged"]
    assert outcome.outcome == "halted" and [e.reason for e in received] == ["repair_exhausted"]
    assert booking.model.calls == 4  # two steps, then one re-run step per attempt: ended fast


def test_report_mode_logs_the_repair_and_forks_nothing(booking: Booking, spans: Any) -> None:
    outcome = run_langgraph(Repairer(Guard([AnswerCheck(booking.task)], mode="report")),
        booking.graph, booking.inputs, booking.config)

    assert outcome.outcome == "logged" and not booking.answer_is_right(outcome.answer)
    assert booking.model.calls == 4
    assert len(list(booking.graph.get_state_history(booking.config))) == 9  # the original run's checkpoints only
    logged = [s for s in spans.get_finished_spans() if s.name == "guardrail.repair"]
    assert [dict(s.attributes or {})["guardrail.repair.outcome"] for s in logged] == ["logged"]


def test_contract_violation_is_escalated_and_never_retried(tmp_path: Path) -> None:
    booking = Booking(tmp_path / "runs.db", seed=TOUR_SEED, arithmetic_rate=0.0,
                      fault=make_injector("malformed_json", onset=1, seed=TOUR_SEED))
    spec = pick_spec(booking.task.tools, [booking.task.prompt])
    received = []

    outcome = run_langgraph(Repairer(Guard([VerifierLayer(spec)], mode="intervene"), on_escalate=received.append),
        booking.graph, booking.inputs, booking.config)

    assert outcome.outcome == "escalated" and outcome.attempts == []
    assert [e.reason for e in received] == ["contract_violation"]
    assert received[0].step == 1 and received[0].findings[0].check == "tool_contract"
    assert booking.model.calls == 2 and len(booking.tool_calls) == 2  # stopped at the violation, no retry
    history = list(booking.graph.get_state_history(booking.config))
    assert len(history) == len(LangGraphCheckpoints(booking.graph, booking.config).original_branch())  # no fork


class ContractInForks(Layer):
    """Test check: a tool contract violation that shows up only once the run has been forked."""

    name = "contract"

    def after_result(self, ctx: Any, action: Any, result: Any) -> list[Finding]:
        if ":repair-" not in ctx.episode_id:
            return []
        return [Finding(layer=self.name, check="tool_contract", message="result matches no shape of its tool",
                        blocking=True, step=ctx.step_index)]


def test_a_fork_that_breaks_a_tool_contract_is_escalated_not_retried(booking: Booking) -> None:
    booking.run()
    flag = Finding(layer="verify", check="total_consistency", message="wrong total", blocking=True, step=0)

    def failing_handler(event: Any) -> None:
        raise RuntimeError("the application's handler is broken")  # must not break the repair

    outcome = repair_langgraph(Repairer(Guard([ContractInForks(), AnswerCheck(booking.task)], mode="intervene"),
                       on_escalate=failing_handler, max_attempts=3,
                       breaker=CircuitBreaker(max_attempts=3)), booking.graph, booking.config, [flag])

    assert [a.outcome for a in outcome.attempts] == ["still_flagged"]
    assert outcome.outcome == "escalated" and outcome.escalation is not None
    assert outcome.escalation.reason == "contract_violation" and outcome.escalation.attempts == 1


def test_circuit_breaker_ends_a_loop_trap_fast(tmp_path: Path) -> None:
    calls = {}
    for name, breaker in (("without", None), ("with", CircuitBreaker())):
        # The loop trap: a tool that keeps asking for the same query again, and an obedient agent.
        trap = Booking(tmp_path / f"{name}.db", arithmetic_rate=0.0, fault=Looping(onset=0),
                       max_steps=30, max_obeyed_retries=40)
        outcome = run_langgraph(Repairer(Guard([], mode="intervene"), breaker=breaker),
            trap.graph, trap.inputs, trap.config)
        calls[name] = trap.model.calls
        if breaker is not None:
            assert outcome.outcome == "halted" and outcome.trip is not None and outcome.trip.reason == "loop"
            assert outcome.escalation is not None and outcome.escalation.reason == "loop"
    assert calls["without"] == 30
    assert calls["with"] <= 10


KILL_SCRIPT = textwrap.dedent("""
    import json, os, signal, sys
    sys.path.insert(0, {tests!r})
    from adapters.langgraph_repair import LangGraphCheckpoints, repair_langgraph
    from guardrail import Finding, Guard, Layer, Severity
    from repair import Repairer
    import test_repair_langgraph as t

    booking = t.Booking({db!r})
    booking.run()
    with open({out!r}, "w") as handle:
        json.dump(t.branch_fingerprint(LangGraphCheckpoints(booking.graph, booking.config)), handle)

    class Kill(Layer):
        name = "kill"
        def on_step(self, ctx, step):
            if ":repair-" in ctx.episode_id and step.index >= 1:
                os.kill(os.getpid(), signal.SIGKILL)  # die mid-fork, between two checkpoint writes
    flag = Finding(layer="verify", check="total_consistency", message="wrong", blocking=True, step=0)
    repair_langgraph(Repairer(Guard([Kill()], mode="intervene"), rung="generic"), booking.graph, booking.config,
                     [flag])
""")


def test_a_run_killed_mid_repair_leaves_the_original_thread_intact(tmp_path: Path) -> None:
    db, out = tmp_path / "runs.db", tmp_path / "original.json"
    script = KILL_SCRIPT.format(tests=str(Path(__file__).parent), db=str(db), out=str(out))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]

    reopened = Booking(db)
    history = list(reopened.graph.get_state_history(reopened.config))
    assert len(history) > 9  # the fork had written checkpoints before it died
    fingerprint = [tuple(pair) for pair in json.loads(out.read_text())]
    pinned = {"configurable": {**reopened.config["configurable"], "checkpoint_id": fingerprint[-1][0]}}
    assert branch_fingerprint(LangGraphCheckpoints(reopened.graph, pinned)) == fingerprint
    assert not reopened.answer_is_right(LangGraphCheckpoints(reopened.graph, pinned).messages()[-1].content)
