"""`guardrail bench overhead`: guarded vs unguarded runs of the same scripted agent, added milliseconds per step.

For each framework (LangGraph ``create_agent`` with `GuardMiddleware`, AutoGen ``AssistantAgent`` with
`AutoGenGuard`, and ``guard``: the Guard's hooks alone on a replayed run, to separate the guard's
own cost from the framework's cost of hosting a middleware) and each configuration (``none``: the adapters
with an empty Guard, the cost of hosting the hooks; ``gate`` alone; ``all``: gate, step monitor and verifiers;
``record``: all of them plus a run recorder writing to SQLite, paired with ``all`` instead of the unguarded run,
so its figure is what recording adds, writer thread included),
the same seeded task runs unguarded and guarded in alternation, with the guard's spans exported to
memory. Each pair gives one figure, (guarded - unguarded) / steps; the benchmark reports the median
and 95th percentile over pairs. Alternating pairs cancels slow drift of a shared machine; the
median ignores the odd pair a neighbour's burst landed on. Time is the process's CPU time (all its
threads), not wall time: the guard's cost is CPU work, and on a shared machine wall time mostly
measures the neighbours.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table, progress

__all__ = ["BENCH", "measure_overhead"]

FRAMEWORKS = ("langgraph", "autogen", "guard")  # "guard": the Guard alone, replaying a recorded run (no framework)
# "none": the adapters with an empty Guard (no layer): what hosting the hooks costs in each framework.
# "record": every layer plus a run recorder writing to SQLite, measured against "all" (what recording adds).
CONFIGURATIONS = ("none", "gate", "all", "record")
TASK_SEED = 3


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _guard(configuration: str, workspace: Path, tools: dict[str, Any], monitor: Any, spec: Any,
           store: str | None = None) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from guardrail.core.guard import Guard
    from guardrail.gate.layer import GateLayer

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    layers: list[Any] = [] if configuration == "none" else [GateLayer(workspace, tools=tools)]
    recorder = None
    if configuration in ("all", "record"):
        from monitors.layer import MonitorLayer
        from verifiers import VerifierLayer

        layers += [MonitorLayer(monitor), VerifierLayer(spec)]
    if configuration == "record":
        from guardrail.core.runstore import RunRecorder

        recorder = RunRecorder(store or f"sqlite:///{workspace}/runs.db")
    return Guard(layers, mode="intervene", tracer=provider.get_tracer("guardrail"), recorder=recorder), exporter


def _runner(framework: str, task: Any, policy: Any, guard: Any) -> Callable[[], tuple[float, int]]:
    """Build the agent once (as a user does) and return a function running one episode: (CPU seconds, steps)."""
    from traces.tools import BOOKING_TOOLS, booking_tools

    box = booking_tools()
    if framework == "guard":
        return _replay_runner(task, policy, guard)
    if framework == "langgraph":
        from langchain_core.messages import HumanMessage

        from adapters.langchain import GuardMiddleware
        from traces.agents import build_langgraph_agent
        from traces.models import ScriptedChatModel

        middleware = [GuardMiddleware(guard)] if guard is not None else []
        graph = build_langgraph_agent(task, policy, toolbox=box, middleware=middleware,
                                      model=ScriptedChatModel(policy=policy))
        counter = iter(range(1 << 30))

        def run_langgraph() -> tuple[float, int]:
            config = {"configurable": {"thread_id": f"bench-{next(counter)}"},
                      "recursion_limit": 4 * policy.max_steps + 10}
            started = time.process_time()
            state = graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)
            elapsed = time.process_time() - started
            return elapsed, sum(1 for m in state["messages"] if m.type == "ai")

        return run_langgraph

    from autogen_core import CancellationToken

    from adapters.autogen import AutoGenGuard
    from traces.agents import build_autogen_agent
    from traces.models import ScriptedChatCompletionClient

    client = ScriptedChatCompletionClient(policy)
    guarded = AutoGenGuard(guard, task=task.prompt) if guard is not None else None
    if guarded is None:
        agent, _ = build_autogen_agent(task, policy, toolbox=box, client=client)
    else:
        agent, _ = build_autogen_agent(task, policy, toolbox=box, client=guarded.model_client(client),
                                       workbench=guarded.workbench(box.autogen_tools(BOOKING_TOOLS)))

    async def arun() -> tuple[float, int]:
        await agent.on_reset(CancellationToken())
        before = len(client.results)
        started = time.process_time()
        result = await agent.run(task=task.prompt)
        if guarded is not None:
            await guarded.afinish(result)
        return time.process_time() - started, len(client.results) - before

    return lambda: asyncio.run(arun())


def _replay_runner(task: Any, policy: Any, guard: Any) -> Callable[[], tuple[float, int]]:
    """The guard's own cost: every hook of a recorded LangGraph run, called directly (the unguarded run costs 0)."""
    from adapters.common import action_from_call
    from guardrail.core.events import Result
    from traces.agents import run_langgraph_episode

    recorded = run_langgraph_episode(task, policy)

    def replay() -> tuple[float, int]:
        if guard is None:
            return 0.0, len(recorded.steps)
        started = time.process_time()
        ctx = guard.start_episode(task=task.prompt)
        for step in recorded.steps:
            for event in step.tool_events:
                action = action_from_call(event.name, event.args, event.id)
                guard.before_action(ctx, action)
                guard.after_result(ctx, action, Result(output=event.result or "", is_error=event.is_error,
                                                       call_id=event.id))
            guard.on_step(ctx, step.model_copy())
        guard.on_finish(ctx)
        return time.process_time() - started, len(recorded.steps)

    return replay


def _fit_monitor(framework: str) -> Any:
    from monitors import StepMonitor
    from traces.collect import collect

    # 20 healthy runs: enough for the cross-fit conformal threshold at the default budget (19 or more).
    healthy, _ = collect("langgraph" if framework == "guard" else framework, 20, 11, classes=["healthy"],
                         healthy_share=1.0, show_progress=False)
    return StepMonitor().fit(healthy)


def measure_overhead(frameworks: Sequence[str] = FRAMEWORKS, configurations: Sequence[str] = CONFIGURATIONS, *,
                     repeats: int = 30, warmup: int = 3, model: str | None = None,
                     show_progress: bool = True) -> list[dict[str, Any]]:
    """One row per (framework, configuration): median and p95 added ms per step over `repeats` pairs."""
    from traces.policy import Policy
    from traces.tasks import make_task
    from traces.tools import BOOKING_TOOLS, booking_tools
    from verifiers.spec import pick_spec

    rows = []
    task = make_task(TASK_SEED)
    policy = Policy(seed=TASK_SEED)
    spec = pick_spec(task.tools, [task.prompt])
    tools = {t.name: t.func for t in booking_tools().langchain_tools(BOOKING_TOOLS) if getattr(t, "func", None)}
    with tempfile.TemporaryDirectory(prefix="guardrail-bench-") as workspace:
        for framework in frameworks:
            plain = _runner(framework, task, policy, None)
            monitor = None
            if {"all", "record"} & set(configurations):
                if model:
                    from monitors.model_file import load_monitor

                    monitor = load_monitor(model)
                else:
                    monitor = _fit_monitor(framework)
            for configuration in configurations:
                guard, exporter = _guard(configuration, Path(workspace), tools, monitor, spec,
                                         store=f"sqlite:///{workspace}/{framework}-runs.db")
                guarded = _runner(framework, task, policy, guard)
                baseline = plain
                if configuration == "record":  # recording's own cost: paired with the same layers unrecorded
                    baseline = _runner(framework, task, policy, _guard("all", Path(workspace), tools, monitor, spec)[0])
                for _ in range(warmup):  # imports, caches, the gate's first index build
                    baseline()
                    guarded()
                added: list[float] = []
                steps = 0
                for _ in progress(range(repeats), desc=f"{framework}/{configuration}", total=repeats,
                                  enabled=show_progress):
                    plain_s, plain_steps = baseline()
                    guarded_s, guarded_steps = guarded()
                    exporter.clear()
                    if plain_steps != guarded_steps or guarded_steps == 0:
                        continue  # a pair whose runs differ is not comparable (never expected: same seed)
                    added.append((guarded_s - plain_s) / guarded_steps * 1000.0)
                    steps += guarded_steps
                recorder = guard.recorder
                if recorder is not None:
                    recorder.close()
                rows.append({
                    "framework": framework,
                    "configuration": configuration,
                    "baseline": "all" if configuration == "record" else "unguarded",
                    "layers": [layer.name for layer in guard.layers] + (["record"] if recorder is not None else []),
                    "recorder_dropped": recorder.dropped if recorder is not None else None,
                    "median_added_ms_per_step": round(statistics.median(added), 4) if added else None,
                    "p95_added_ms_per_step": round(_percentile(added, 0.95), 4) if added else None,
                    "steps": steps,
                })
    return rows


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS),
                        help="langgraph, autogen: guarded vs unguarded agents; guard: the Guard alone on a replay")
    parser.add_argument("--configs", nargs="+", choices=CONFIGURATIONS, default=list(CONFIGURATIONS),
                        help="gate: the gate alone; all: gate, step monitor and verifiers")
    parser.add_argument("--repeats", type=int, default=30, help="guarded/unguarded pairs per row (default 30)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--model", default=None, help="a monitor model file (default: fit one on testbed runs)")
    parser.add_argument("--json", action="store_true", help="one JSON object per (framework, configuration)")


def _run(args: argparse.Namespace) -> int:
    if args.repeats < 1:
        sys.stderr.write("guardrail bench overhead: --repeats must be at least 1\n")
        return 2
    rows = measure_overhead(args.frameworks, args.configs, repeats=args.repeats, warmup=args.warmup,
                            model=args.model)
    if args.json:
        for row in rows:
            emit_json(row)
    else:
        print_table([{**row, "layers": "+".join(row["layers"])} for row in rows])
    return 0


BENCH = Command(help="added time per step of a guarded vs an unguarded scripted agent, per framework",
                add_arguments=_add_arguments, run=_run)
