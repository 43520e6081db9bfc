"""`guardrail demo`: the whole stack on real agents -- a gate block, a verifier catch, a rollback repair, a monitor alarm.

Four short scenes, each on real framework objects with scripted models and real tools:

1. **gate** -- a LangGraph ``create_agent`` with `GuardMiddleware` and the StateMirror gate on real
   files: the agent asks for a file that does not exist, gets the gate's warning and hint as a
   ``ToolMessage(status="error")``, and reads the right file.
2. **verifier** -- the testbed's booking agent (LangGraph, SQLite checkpointer) slips its arithmetic;
   the deterministic verifiers catch the wrong total at the end of the run.
3. **repair** -- the same slip, run under the `Repairer`: the thread is forked from the checkpoint
   before the flagged step with a hint and re-run live; the original branch is untouched.
4. **monitor** -- a step monitor fitted on healthy AutoGen runs watches an AutoGen team whose tools
   start failing; it raises an alarm and the termination condition stops the team.

Everything the guard did lands in ``out/demo/``: ``spans.json`` (every guard span), ``summary.json``,
``monitor.npz`` (the fitted monitor), ``corpus/`` (the episodes) and ``report/index.html`` with PNG plots.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json
from guardrail.core.events import Episode, Finding, Severity
from guardrail.core.fileio import atomic_write_text
from guardrail.core.layer import EpisodeContext, Layer

__all__ = ["DEMO", "run_demo", "span_record"]

# The gate scene's workspace: a small project an agent is asked to summarize.
_WORKSPACE_FILES = {
    "notes/todos.md": "- ship the gate\n- fit the monitor\n- write the report\n",
    "notes/meeting.md": "Decided: intervene mode by default for the demo.\n",
    "README.md": "# demo project\n",
}
TOUR_SEED = 25  # a testbed tour task (flights, hotels, weather, calculator); its spec comes from its prompt
MONITOR_HEALTHY_RUNS = 40  # healthy AutoGen runs the demo's monitor is fitted and cross-fit calibrated on (19+ hold the 5% budget)
MONITOR_SEED = 7


def span_record(span: Any) -> dict[str, Any]:
    """One finished OpenTelemetry span as plain JSON (what `spans.json` holds)."""
    ctx = span.get_span_context()
    return {
        "name": span.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


# --------------------------------------------------------------------------- scene 1: gate
def _file_tools(workspace: Path) -> list[Any]:
    from langchain_core.tools import tool

    def inside(path: str) -> Path:
        resolved = (workspace / path).resolve()
        if workspace.resolve() not in (resolved, *resolved.parents):
            raise ValueError(f"{path!r} is outside the workspace")
        return resolved

    @tool
    def read_file(path: str) -> str:
        """Read a text file of the workspace."""
        return inside(path).read_text(encoding="utf-8")

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a text file in the workspace."""
        target = inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} chars to {path}"

    return [read_file, write_file]


def _gate_script() -> Iterator[Any]:
    """The scripted model's turns: a wrong path (blocked with a hint), the right one, a write, an answer."""
    from langchain_core.messages import AIMessage

    yield AIMessage(content="Reading the todo list.",
                    tool_calls=[{"name": "read_file", "args": {"path": "notes/todo.md"}, "id": "call_1"}])
    yield AIMessage(content="The guard says the file is notes/todos.md.",
                    tool_calls=[{"name": "read_file", "args": {"path": "notes/todos.md"}, "id": "call_2"}])
    yield AIMessage(content="Writing the summary.",
                    tool_calls=[{"name": "write_file", "args": {"path": "summary.md",
                                                               "content": "3 open items: gate, monitor, report\n"},
                                 "id": "call_3"}])
    yield AIMessage(content="There are 3 open items: ship the gate, fit the monitor, write the report.")


def _scene_gate(scratch: Path, tracer: Any) -> dict[str, Any]:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langgraph.checkpoint.sqlite import SqliteSaver

    from adapters.langchain import GuardMiddleware
    from guardrail.core.guard import Guard
    from guardrail.gate.layer import GateLayer

    class ScriptedChatModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self  # the turns are scripted; the tools are real

    root = scratch / "workspace"
    for rel, text in _WORKSPACE_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    tools = _file_tools(root)
    gate = GateLayer(root, tools={t.name: t.func for t in tools})
    guard = Guard([gate], mode="intervene", tracer=tracer)
    connection = sqlite3.connect(scratch / "gate-checkpoints.sqlite", check_same_thread=False)
    try:
        saver = SqliteSaver(connection)
        agent = create_agent(ScriptedChatModel(messages=_gate_script()), tools, middleware=[GuardMiddleware(guard)],
                             checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "demo-gate"}}
        with tracer.start_as_current_span("invoke_agent demo-gate", attributes={"gen_ai.operation.name": "invoke_agent"}):
            final = agent.invoke({"messages": [{"role": "user", "content": "Summarize the open todos."}]}, config)
        checkpoints = len(list(saver.list(config)))
    finally:
        connection.close()
    blocked = [{"tool": m.name, "message": m.content}
               for m in final["messages"] if getattr(m, "type", "") == "tool" and m.status == "error"]
    return {"blocked": blocked, "answer": final["messages"][-1].content, "checkpoints": checkpoints,
            "summary_file_written": (root / "summary.md").is_file(),
            "findings": [Finding.model_validate(f) for f in final.get("guardrail_findings", [])]}


# --------------------------------------------------------------------------- scenes 2 and 3: verifier, repair
def _task_spec(task: Any) -> Any:
    """The verifier spec of a testbed task, built from its prompt alone (never from its ground truth)."""
    from traces.specs import verifier_spec
    from verifiers.spec import VerifierSpec

    return VerifierSpec.model_validate(verifier_spec(task.prompt))


def _tour_agent(scratch: Path, name: str, middleware: Any = ()) -> tuple[Any, Any, Any, dict[str, Any]]:
    from adapters.langgraph_repair import sqlite_checkpointer
    from traces.agents import build_langgraph_agent
    from traces.models import ScriptedChatModel
    from traces.policy import Policy
    from traces.tasks import make_task
    from traces.tools import BookingDB, booking_tools

    db = BookingDB()
    task = make_task(TOUR_SEED, db=db)
    policy = Policy(seed=TOUR_SEED, arithmetic_rate=1.0)
    graph = build_langgraph_agent(task, policy, toolbox=booking_tools(db), model=ScriptedChatModel(policy=policy),
                                  checkpointer=sqlite_checkpointer(scratch / f"{name}.sqlite"),
                                  middleware=list(middleware))
    config = {"configurable": {"thread_id": f"demo-{name}"}, "recursion_limit": 4 * policy.max_steps + 10}
    return graph, task, policy, config


def _scene_verifier(scratch: Path, tracer: Any) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from adapters.langchain import GuardMiddleware
    from guardrail.core.guard import Guard
    from traces.tasks import make_task
    from verifiers import VerifierLayer

    guard = Guard([VerifierLayer(_task_spec(make_task(TOUR_SEED)))], mode="report", tracer=tracer)
    graph, task, _, config = _tour_agent(scratch, "verifier", middleware=[GuardMiddleware(guard)])
    with tracer.start_as_current_span("invoke_agent demo-verifier", attributes={"gen_ai.operation.name": "invoke_agent"}):
        final = graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)
    findings = [Finding.model_validate(f) for f in final.get("guardrail_findings", [])]
    return {"answer": final["messages"][-1].content, "expected_total": task.expected_total,
            "findings": findings, "caught": [f.check for f in findings if f.blocking]}


def _scene_repair(scratch: Path, tracer: Any) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from adapters.langgraph_repair import run_langgraph
    from guardrail.core.guard import Guard
    from repair import CircuitBreaker, Repairer
    from verifiers import VerifierLayer

    graph, task, policy, config = _tour_agent(scratch, "repair")
    guard = Guard([VerifierLayer(_task_spec(task))], mode="intervene", tracer=tracer)
    repairer = Repairer(guard, breaker=CircuitBreaker(step_budget=4 * policy.max_steps), tracer=tracer)
    outcome = run_langgraph(repairer, graph, {"messages": [HumanMessage(task.prompt)]}, config, task=task.prompt,
                                     tools=task.tools)
    attempt = outcome.attempts[0] if outcome.attempts else None
    return {"outcome": outcome.outcome, "original_answer": outcome.original_answer, "answer": outcome.answer,
            "expected_total": task.expected_total, "rung": attempt.rung if attempt else None,
            "target_step": attempt.target_step if attempt else None,
            "fork_checkpoint": attempt.checkpoint_id if attempt else None,
            "hint": attempt.hint if attempt else None, "attempts": len(outcome.attempts),
            "extra_model_calls": sum(a.extra_model_calls for a in outcome.attempts)}


# --------------------------------------------------------------------------- scene 4: monitor
def _fit_monitor(out: Path) -> tuple[Any, list[Episode]]:
    from monitors import StepMonitor
    from monitors.model_file import save_monitor
    from traces.collect import collect

    healthy, _ = collect("autogen", MONITOR_HEALTHY_RUNS, MONITOR_SEED, classes=["healthy"], healthy_share=1.0,
                         show_progress=False)
    monitor = StepMonitor().fit(healthy)  # the cross-fit conformal threshold over every healthy run
    save_monitor(monitor, out / "monitor.npz")
    return monitor, healthy


async def _team_run(monitor: Any, tracer: Any) -> tuple[dict[str, Any], Episode]:
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    from adapters.autogen import AutoGenGuard
    from guardrail.core.guard import Guard
    from monitors.layer import MonitorLayer
    from traces.agents import build_autogen_agent
    from traces.injectors import make_injector
    from traces.models import ScriptedChatCompletionClient
    from traces.policy import Policy
    from traces.tasks import make_task
    from traces.tools import BOOKING_TOOLS, BookingDB, booking_tools

    db = BookingDB()
    task = make_task(MONITOR_SEED + 100, db=db)
    policy = Policy(seed=MONITOR_SEED + 100)
    box = booking_tools(db, fault=make_injector("tool_cascade", onset=1, seed=MONITOR_SEED))
    recorder = _EpisodeRecorder()
    guarded = AutoGenGuard(Guard([MonitorLayer(monitor), recorder], tracer=tracer), task=task.prompt)
    agent, _ = build_autogen_agent(task, policy, toolbox=box, workbench=guarded.workbench(box.autogen_tools(BOOKING_TOOLS)),
                                   client=guarded.model_client(ScriptedChatCompletionClient(policy), agent="booking_agent"))
    team = RoundRobinGroupChat([agent], termination_condition=guarded.termination() | MaxMessageTermination(6))
    with tracer.start_as_current_span("invoke_agent demo-monitor", attributes={"gen_ai.operation.name": "invoke_agent"}):
        result = await team.run(task=task.prompt)
        await guarded.afinish(result)
    alarms = [f for d in guarded.decisions for f in d.findings if f.severity is Severity.ALARM]
    episode = recorder.episodes[0]
    episode.label, episode.tau = "tool_cascade", 1
    return ({"stop_reason": result.stop_reason, "alarm": alarms[0].message if alarms else None,
             "alarm_step": alarms[0].step if alarms else None, "steps": len(episode.steps)}, episode)


class _EpisodeRecorder(Layer):
    """Keeps the finished episode (with the steps the adapter fed) for the report."""

    name = "recorder"

    def __init__(self) -> None:
        self.episodes: list[Episode] = []

    def on_finish(self, ctx: EpisodeContext, episode: Episode) -> None:
        self.episodes.append(episode.model_copy(deep=True))


# --------------------------------------------------------------------------- the whole demo
def _tracing() -> tuple[Any, Any, Any]:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)  # the CLI: AutoGen's own spans land in spans.json too
    return provider, exporter, provider.get_tracer("guardrail")


def _report(out: Path, monitor: Any, healthy: list[Episode], monitored: Episode, scenes: dict[str, Any]) -> Path:
    from guardrail.app.report import ReportData, _row, _table, write_report
    from guardrail.core.corpus import write_corpus

    episodes = [monitored, *healthy[(len(healthy) * 3) // 5:]]
    write_corpus(out / "corpus", episodes, name="demo", generator={"tool": "guardrail demo"})
    data = ReportData(title="guardrail demo", threshold=float(monitor.threshold_),
                      rows=[_row("demo", e, monitor, None) for e in episodes],
                      gate_findings=scenes["gate"]["findings"],
                      other_findings=[("verifier scene", f) for f in scenes["verifier"]["findings"]])
    verifier = scenes["verifier"]
    catch_table = _table([{"check": f.check, "step": f.step, "message": f.message, "hint": f.hint}
                          for f in verifier["findings"]], ["check", "step", "message", "hint"])
    repair = scenes["repair"]
    repair_table = _table([{k: repair[k] for k in ("outcome", "original_answer", "answer", "expected_total", "rung",
                                                   "target_step", "fork_checkpoint", "extra_model_calls")}],
                          ["outcome", "original_answer", "answer", "expected_total", "rung", "target_step",
                           "fork_checkpoint", "extra_model_calls"])
    sections = [("Verifier catch (LangGraph testbed agent, the task's spec)", catch_table),
                ("Rollback repair (LangGraph, SQLite checkpointer)", repair_table)]
    return write_report(data, out / "report", extra_sections=sections)


def run_demo(out_dir: str | Path = "out/demo") -> dict[str, Any]:
    """Run the four scenes; write spans.json, summary.json, monitor.npz, corpus/ and report/ under `out_dir`."""
    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    provider, exporter, tracer = _tracing()
    scenes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="guardrail-demo-") as scratch_name:
        scratch = Path(scratch_name)
        scenes["gate"] = _scene_gate(scratch, tracer)
        scenes["verifier"] = _scene_verifier(scratch, tracer)
        scenes["repair"] = _scene_repair(scratch, tracer)
        monitor, healthy = _fit_monitor(out)
        scenes["monitor"], monitored = asyncio.run(_team_run(monitor, tracer))
    report = _report(out, monitor, healthy, monitored, scenes)
    provider.force_flush()
    spans = [span_record(s) for s in exporter.get_finished_spans()]
    atomic_write_text(out / "spans.json", json.dumps(spans, indent=1, default=str))
    summary = {
        "gate": {k: v for k, v in scenes["gate"].items() if k != "findings"},
        "verifier": {**{k: v for k, v in scenes["verifier"].items() if k != "findings"},
                     "findings": [f.message for f in scenes["verifier"]["findings"]]},
        "repair": scenes["repair"],
        "monitor": scenes["monitor"],
        "spans": dict(Counter(s["name"] for s in spans)),
        "report": str(report),
        "out_dir": str(out),
        "seconds": round(time.perf_counter() - started, 2),
    }
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=str))
    return summary


def _print_summary(summary: dict[str, Any]) -> None:
    write = sys.stdout.write
    gate, verifier, repair, monitor = (summary[k] for k in ("gate", "verifier", "repair", "monitor"))
    write("guardrail demo\n\n1. gate (LangGraph create_agent + GuardMiddleware, SQLite checkpointer)\n")
    for item in gate["blocked"]:
        write(f"   BLOCKED {item['tool']}: {item['message']}\n")
    write(f"   the agent's next reply (pre-written in this scripted demo): {gate['answer']}\n")
    write("\n2. verifier (testbed booking agent on LangGraph, arithmetic slip)\n")
    write(f"   answer: {verifier['answer'][:100]}  (true total ${verifier['expected_total']:g})\n")
    for message in verifier["findings"]:
        write(f"   CAUGHT {message}\n")
    write("\n3. rollback repair (Repairer forks the LangGraph thread from its checkpoint)\n")
    write(f"   {repair['original_answer'][:80] if repair['original_answer'] else None}\n")
    write(f"   -> forked before step {repair['target_step']} (checkpoint {repair['fork_checkpoint']}), "
          f"rung {repair['rung']}: {repair['answer'][:80] if repair['answer'] else None}\n")
    write(f"   outcome: {repair['outcome']} after {repair['attempts']} attempt(s), "
          f"{repair['extra_model_calls']} extra model call(s)\n")
    write("\n4. monitor (AutoGen team, tools start failing; monitor fitted on healthy AutoGen runs)\n")
    write(f"   ALARM {monitor['alarm']}\n   team stopped: {monitor['stop_reason']}\n")
    write("\nspans (GenAI and guard spans; all of them are in spans.json):\n")
    shown = {n: c for n, c in summary["spans"].items() if n.startswith(_SHOWN_SPANS)}
    for name, count in sorted(shown.items()):
        write(f"  {count:4d}  {name}\n")
    write(f"  {sum(summary['spans'].values()) - sum(shown.values()):4d}  others (AutoGen runtime messaging)\n")
    write(f"\nwrote {summary['out_dir']}/spans.json, summary.json, monitor.npz, corpus/ and {summary['report']} "
          f"in {summary['seconds']} s\n")


_SHOWN_SPANS = ("guardrail.", "invoke_agent", "execute_tool", "chat")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--out", default="out/demo", help="output directory (default: out/demo)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def _run(args: argparse.Namespace) -> int:
    summary = run_demo(args.out)
    if args.json:
        emit_json(summary)
    else:
        _print_summary(summary)
    return 0 if summary["gate"]["blocked"] else 1


DEMO = Command(help="run guarded LangGraph and AutoGen agents end to end and show what the guard did",
               add_arguments=_add_arguments, run=_run)
