"""`guardrail demo`: the deployment loop end to end on real framework agents -- guard, record, label, fit, redeploy.

Five scenes on the testbed's booking agents (real LangGraph ``create_agent`` graphs and AutoGen
``AssistantAgent``s, scripted seeded models, real tools), in the order a user lives them:

1. **guard with no configuration, record** -- ``Guard.default(record="sqlite:///.../runs.db")`` and
   nothing else: the gate holds every call to the schema its tool declares (read from the agents'
   own tools). 40 LangGraph and 40 AutoGen runs are recorded; in one, the model drops a required
   argument: blocked with the tool's signature as the hint, and the agent recovers.
2. **label** -- every clean unlabelled run becomes ``healthy`` (``guardrail label --clean-as healthy``);
   the slipped run is labelled ``failed`` by hand (``guard.label``).
3. **fit** -- ``guardrail fit`` (the step monitor) and ``guardrail fit-spec`` (the verifier spec) read
   the store's healthy runs.
4. **redeploy** -- ``Guard.default(model=..., spec=..., record=..., repair=True)``: a LangGraph run
   that slips its sum is caught by the fitted spec and repaired inside the run (the thread forked
   at its checkpoint in SQLite and re-run live); an AutoGen team whose tools start failing raises
   the fitted monitor's alarm and stops.
5. **look** -- ``guardrail runs`` over the store, and the report.

Everything lands in ``out/demo/``: ``runs.db`` (the run store), ``monitor.npz`` and ``spec.json``
(fitted on it), ``runs.txt`` (what ``guardrail runs`` printed), ``report/index.html``, ``spans.json``
(every guard span) and ``summary.json``. No network, no LLM: the models are seeded scripted policies.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json
from guardrail.core.fileio import atomic_write_text

__all__ = ["DEMO", "run_demo", "span_record"]

FIT_RUNS = 40  # per framework: the cross-fit conformal threshold holds its 5% budget from 19 healthy runs up
TASK_KINDS = ("tour",)  # one deployment: tour bookings (flights, hotels, weather, a calculator)
SEED = 25


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


# --------------------------------------------------------------------------- the agents
def _drop_first_argument() -> Any:
    """A model slip, as middleware: the first tool call of the run loses one of its arguments."""
    from langchain.agents.middleware import AgentMiddleware

    class DropArgument(AgentMiddleware[Any, Any, Any]):
        done = False

        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            response = handler(request)
            for message in getattr(response, "result", None) or []:
                calls = getattr(message, "tool_calls", None) or []
                if calls and not self.done and calls[0]["args"]:
                    self.done = True
                    calls[0]["args"] = dict(list(calls[0]["args"].items())[1:])
            return response

    return DropArgument()


def _langgraph_run(guard: Any, index: int, *, tracer: Any, slip: str | None = None,
                   checkpointer: Any = None, repair: bool = False) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from adapters.langchain import GuardMiddleware
    from traces.agents import build_langgraph_agent
    from traces.policy import Policy
    from traces.tasks import make_task
    from traces.tools import BookingDB, booking_tools

    db = BookingDB()
    task = make_task(SEED * 1000 + index, db=db, kinds=TASK_KINDS)
    policy = Policy(seed=SEED * 1000 + index, arithmetic_rate=1.0 if slip == "arithmetic" else 0.0)
    guarded = GuardMiddleware(guard, repair=repair)
    middleware: list[Any] = [_drop_first_argument()] if slip == "drop_argument" else []
    graph = build_langgraph_agent(task, policy, toolbox=booking_tools(db), checkpointer=checkpointer,
                                  middleware=[*middleware, guarded])
    guarded.bind(graph)
    config = {"configurable": {"thread_id": f"demo-langgraph-{index}"}, "recursion_limit": 4 * policy.max_steps + 10}
    with tracer.start_as_current_span(f"invoke_agent demo-langgraph-{index}"):
        state = graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)
    blocked = [m.content for m in state["messages"] if getattr(m, "type", "") == "tool" and m.status == "error"]
    return {"episode_id": state["guardrail_episode"], "verdict": state["guardrail_verdict"], "blocked": blocked,
            "answer": state["messages"][-1].content, "expected_total": task.expected_total,
            "repair": state.get("guardrail_repair")}


async def _autogen_run(guard: Any, index: int, *, tracer: Any, fault: str | None = None) -> dict[str, Any]:
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat

    from adapters.autogen import AutoGenGuard
    from traces.agents import build_autogen_agent
    from traces.injectors import make_injector
    from traces.models import ScriptedChatCompletionClient
    from traces.policy import Policy
    from traces.tasks import make_task
    from traces.tools import BOOKING_TOOLS, BookingDB, booking_tools

    db = BookingDB()
    task = make_task(SEED * 2000 + index, db=db, kinds=TASK_KINDS)
    policy = Policy(seed=SEED * 2000 + index)
    box = booking_tools(db, fault=make_injector(fault, onset=1, seed=index) if fault else None)
    guarded = AutoGenGuard(guard, task=task.prompt)
    agent, _ = build_autogen_agent(task, policy, toolbox=box, workbench=guarded.workbench(box.autogen_tools(BOOKING_TOOLS)),
                                   client=guarded.model_client(ScriptedChatCompletionClient(policy), agent="booking_agent"))
    team = RoundRobinGroupChat([agent], termination_condition=guarded.termination() | MaxMessageTermination(6))
    with tracer.start_as_current_span(f"invoke_agent demo-autogen-{index}"):
        result = await team.run(task=task.prompt)
        decision = await guarded.afinish(result)
    alarms = [f for d in guarded.decisions for f in d.findings if f.severity.value == "alarm"]
    return {"episode_id": decision.episode_id, "verdict": decision.verdict.value, "stop_reason": result.stop_reason,
            "alarm": alarms[0].message if alarms else None, "alarm_step": alarms[0].step if alarms else None}


# --------------------------------------------------------------------------- the scenes
def _record(store: str, tracer: Any) -> dict[str, Any]:
    from guardrail import Guard

    guard = Guard.default(record=store, mode="intervene", tracer=tracer)  # nothing else: zero configuration
    langgraph = [_langgraph_run(guard, i, tracer=tracer) for i in range(FIT_RUNS)]
    slipped = _langgraph_run(guard, FIT_RUNS, tracer=tracer, slip="drop_argument")

    async def autogen_runs() -> list[dict[str, Any]]:
        return [await _autogen_run(guard, i, tracer=tracer) for i in range(FIT_RUNS)]

    autogen = asyncio.run(autogen_runs())
    guard.label(slipped["episode_id"], "failed")  # the user looked at it
    guard.close()
    return {"langgraph_runs": len(langgraph), "autogen_runs": len(autogen), "slipped": slipped,
            "flagged": sum(r["verdict"] != "allow" for r in [*langgraph, *autogen])}


def _cli(*argv: str) -> tuple[int, str]:
    """Run a `guardrail` command in this process, as a user types it; (exit status, what it printed)."""
    from guardrail.core.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue() + err.getvalue()


def _redeploy(store: str, out: Path, scratch: Path, tracer: Any) -> dict[str, Any]:
    from adapters.langgraph_repair import sqlite_checkpointer
    from guardrail import Guard

    guard = Guard.default(model=str(out / "monitor.npz"), spec=str(out / "spec.json"), record=store,
                          mode="intervene", repair=True, repair_options={"tracer": tracer}, tracer=tracer)
    repaired = _langgraph_run(guard, FIT_RUNS + 1, tracer=tracer, slip="arithmetic", repair=True,
                              checkpointer=sqlite_checkpointer(scratch / "checkpoints.sqlite"))
    healthy = _langgraph_run(guard, FIT_RUNS + 2, tracer=tracer)
    alarmed = asyncio.run(_autogen_run(guard, FIT_RUNS + 1, tracer=tracer, fault="tool_cascade"))
    guard.close()
    return {"repaired": repaired, "healthy": healthy, "alarmed": alarmed}


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


def run_demo(out_dir: str | Path = "out/demo") -> dict[str, Any]:
    """Run the five scenes; write the store, the fitted files, runs.txt, the report, spans and summary under `out_dir`."""
    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("runs.db", "runs.db-wal", "runs.db-shm"):
        (out / stale).unlink(missing_ok=True)  # each demo records a fresh deployment
    store = f"sqlite:///{out / 'runs.db'}"
    provider, exporter, tracer = _tracing()
    summary: dict[str, Any] = {"store": store}
    with tempfile.TemporaryDirectory(prefix="guardrail-demo-") as scratch:
        summary["record"] = _record(store, tracer)
        status, said = _cli("label", store, "--clean-as", "healthy")
        summary["label"] = said.strip()
        status_fit, said_fit = _cli("fit", store, "-o", str(out / "monitor.npz"), "--quiet")
        status_spec, said_spec = _cli("fit-spec", store, "-o", str(out / "spec.json"))
        if status or status_fit or status_spec:
            raise RuntimeError(f"the demo's own commands failed:\n{said}\n{said_fit}\n{said_spec}")
        summary["fit"] = said_fit.strip().splitlines()[-1]
        summary["fit_spec"] = [line for line in said_spec.splitlines() if line.startswith(("fitted", "wrote"))]
        summary["redeploy"] = _redeploy(store, out, Path(scratch), tracer)
    _, runs = _cli("runs", store)
    atomic_write_text(out / "runs.txt", runs)
    summary["runs"] = runs.strip().splitlines()[-1]
    from guardrail.app.report import build_report

    report, _ = build_report([store], out / "monitor.npz", out / "report", spec=str(out / "spec.json"),
                             show_progress=False)
    summary["report"] = str(report)
    provider.force_flush()
    spans = [span_record(s) for s in exporter.get_finished_spans()]
    atomic_write_text(out / "spans.json", json.dumps(spans, indent=1, default=str))
    summary["spans"] = dict(Counter(s["name"] for s in spans if s["name"].startswith("guardrail.")))
    summary["out_dir"] = str(out)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=str))
    return summary


def _print_summary(summary: dict[str, Any]) -> None:
    write = sys.stdout.write
    record, redeploy = summary["record"], summary["redeploy"]
    slipped = record["slipped"]
    write("guardrail demo: guard, record, label, fit, redeploy\n\n")
    write(f"1. guard with no configuration, record to {summary['store']}\n")
    write(f"   {record['langgraph_runs']} LangGraph + {record['autogen_runs']} AutoGen runs recorded; "
          f"the one whose model dropped an argument:\n")
    for message in slipped["blocked"][:1]:
        write(f"   BLOCKED {message}\n")
    write(f"   the agent read the hint and finished: {slipped['answer'][:90]}\n")
    write(f"\n2. label\n   {summary['label']}; the slipped run labelled 'failed' (guard.label)\n")
    write(f"\n3. fit on the healthy runs\n   {summary['fit']}\n")
    for line in summary["fit_spec"]:
        write(f"   {line}\n")
    repaired, alarmed = redeploy["repaired"], redeploy["alarmed"]
    record_ = repaired["repair"] or {}
    write("\n4. redeploy with the fitted model and spec\n")
    write(f"   LangGraph run with a slipped sum: {record_.get('original_answer', '')[:70]}\n")
    write(f"   -> {record_.get('outcome')} inside the run (rung {record_.get('rung')}, forked at checkpoint "
          f"{record_.get('fork_checkpoint')}): {repaired['answer'][:70]}\n")
    write(f"   AutoGen team, tools start failing: ALARM {alarmed['alarm']}\n   team stopped: {alarmed['stop_reason'][:100]}\n")
    write(f"\n5. look\n   guardrail runs {summary['store']}: {summary['runs']} (all of it in runs.txt)\n")
    write(f"\nwrote {summary['out_dir']}/runs.db, monitor.npz, spec.json, runs.txt, spans.json, summary.json and "
          f"{summary['report']} in {summary['seconds']} s\n")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--out", default="out/demo", help="output directory (default: out/demo)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def _run(args: argparse.Namespace) -> int:
    summary = run_demo(args.out)
    if args.json:
        emit_json(summary)
    else:
        _print_summary(summary)
    ok = summary["record"]["slipped"]["blocked"] and (summary["redeploy"]["repaired"]["repair"] or {}).get(
        "outcome") == "repaired" and summary["redeploy"]["alarmed"]["alarm"]
    return 0 if ok else 1


DEMO = Command(help="guard, record, label, fit and redeploy real LangGraph and AutoGen agents, end to end",
               add_arguments=_add_arguments, run=_run)
