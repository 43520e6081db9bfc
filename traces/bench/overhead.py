"""`guardrail bench overhead`: guarded vs unguarded runs of the same scripted agent, added milliseconds per step.

For each framework (LangGraph ``create_agent`` with `GuardMiddleware`, AutoGen ``AssistantAgent`` with
`AutoGenGuard`, and ``guard``: the Guard's hooks alone on a replayed run, no framework) the same seeded task
runs in every variant, one after another in a rotated order within each repeat:

- ``bare``: the unguarded agent;
- ``floor``: the agent with no-op hooks at exactly the places the adapter hooks in (LangGraph: a middleware
  with ``before_agent``, ``after_agent``, ``wrap_model_call`` and ``wrap_tool_call``; AutoGen: a workbench
  overriding ``call_tool`` and a model client wrapping ``create``): what the framework charges for hosting
  any middleware;
- ``none``: the adapter with an empty Guard (no layer); ``gate``: the gate alone; ``all``: gate, step
  monitor and verifiers; ``record``: all of them plus a run recorder writing to SQLite.

Each repeat gives, per step, ``floor - bare`` (`floor_median_ms`), ``none - floor`` (`adapter_median_ms`:
the adapter's own cost), ``configuration - none`` (`layers_median_ms`) and ``configuration - bare``
(`median_added_ms_per_step`; for ``record``, ``record - all``: what recording adds, writer thread
included: each recorded run ends with a flush, so its episode is written inside its own timing, in a
transaction of its own); rows report medians over repeats, and the same differences between each variant's fastest
run (``best_*_ms``: the least disturbed runs). ``adapter_self_ms`` is measured apart, after the paired
repeats: as many episodes of the empty adapter with its hooks timed from inside (CPU time, less the
model and tool calls they make: of the thread running each hook in LangGraph, of the process in
AutoGen, whose hooks hand work to a worker thread): the adapter's own code, which a
shared machine's noise on whole runs (tenths of a millisecond per step) would otherwise hide. Running every variant in each repeat cancels a shared
machine's slow drift; the median ignores the odd repeat a neighbour's burst landed on. Time is the
process's CPU time (all its threads), not wall time: the guard's cost is CPU work, and on a shared
machine wall time mostly measures the neighbours. What exists after the warm-up runs is frozen out of the
garbage collector's full passes and each LangGraph run's checkpoints are deleted after it (outside the
timing), so a collection costs the same late in the benchmark as early. Each row carries the 1-minute
load average before and after its framework's runs.

``--growth`` adds two rows per framework from a 200-step scripted loop (a tool call a step): the guard's
own CPU time per step (its hooks timed from inside, as for ``adapter_self_ms``), with an empty Guard and
with all layers, at steps 10, 50 and 200 (each the mean of the 10 steps ending there, read at every model
call), with the garbage collector paused during those runs (a collection lands on an arbitrary step). ``--profile`` runs each variant
under cProfile and writes ``.prof`` files, their top functions and per-function differences
(floor - bare, none - floor, all - none) under ``out/overhead-profile/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import cProfile
import functools
import gc
import io
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table, progress

__all__ = ["BENCH", "measure_overhead"]

FRAMEWORKS = ("langgraph", "autogen", "guard")  # "guard": the Guard alone, replaying a recorded run (no framework)
# "none": the adapters with an empty Guard (no layer): what hosting the hooks costs in each framework.
# "record": every layer plus a run recorder writing to SQLite, measured against "all" (what recording adds).
CONFIGURATIONS = ("none", "gate", "all", "record")
TASK_SEED = 3
GROWTH_STEPS = 200  # the loop agent's tool steps (then one final answer)
GROWTH_AT = (10, 50, 200)  # steps whose added cost the growth row reports
GROWTH_WINDOW = 10  # each figure is the mean of the steps (k - 10, k]


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


def _runner(framework: str, task: Any, policy: Any, guard: Any, *,
            floor: bool = False) -> Callable[[], tuple[float, int]]:
    """Build the agent once (as a user does) and return a function running one episode: (CPU seconds, steps).

    `guard` None: the bare agent, or with ``floor=True`` the agent with the framework's no-op hooks.
    """
    from traces.tools import BOOKING_TOOLS, booking_tools

    box = booking_tools()
    if framework == "guard":
        return _replay_runner(task, policy, guard)
    if framework == "langgraph":
        from langchain_core.messages import HumanMessage

        from traces.agents import build_langgraph_agent
        from traces.models import ScriptedChatModel

        graph = build_langgraph_agent(task, policy, toolbox=box, middleware=_langgraph_middleware(guard, floor),
                                      model=ScriptedChatModel(policy=policy))
        counter = iter(range(1 << 30))

        def run_langgraph() -> tuple[float, int]:
            thread = f"bench-{next(counter)}"
            config = {"configurable": {"thread_id": thread}, "recursion_limit": 4 * policy.max_steps + 10}
            started = time.process_time()
            state = graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)
            elapsed = time.process_time() - started
            graph.checkpointer.delete_thread(thread)  # a flat heap: saved runs would slow every later collection
            return elapsed, sum(1 for m in state["messages"] if m.type == "ai")

        return run_langgraph

    from traces.agents import build_autogen_agent
    from traces.models import ScriptedChatCompletionClient

    client = ScriptedChatCompletionClient(policy)
    agent, guarded = _autogen_agent(guard, floor, box.autogen_tools(BOOKING_TOOLS), client, task.prompt,
                                    lambda c, w: build_autogen_agent(task, policy, toolbox=box, client=c,
                                                                     workbench=w)[0])

    async def arun() -> tuple[float, int]:
        from autogen_core import CancellationToken

        await agent.on_reset(CancellationToken())
        before = len(client.results)
        started = time.process_time()
        result = await agent.run(task=task.prompt)
        if guarded is not None:
            await guarded.afinish(result)
        return time.process_time() - started, len(client.results) - before

    return lambda: asyncio.run(arun())


def _langgraph_middleware(guard: Any, floor: bool) -> list[Any]:
    if guard is not None:
        from adapters.langchain import GuardMiddleware

        return [GuardMiddleware(guard)]
    return [_noop_middleware()] if floor else []


def _noop_middleware() -> Any:
    """A middleware with exactly the hooks `GuardMiddleware` uses, each doing nothing: the framework's floor."""
    from langchain.agents.middleware import AgentMiddleware

    class NoOpMiddleware(AgentMiddleware):  # type: ignore[type-arg]
        def before_agent(self, state: Any, runtime: Any) -> None:
            return None

        def after_agent(self, state: Any, runtime: Any) -> None:
            return None

        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return handler(request)

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return handler(request)

    return NoOpMiddleware()


def _autogen_agent(guard: Any, floor: bool, tools: list[Any], client: Any, task: str,
                   build: Callable[[Any, Any], Any]) -> tuple[Any, Any]:
    """(the agent, its AutoGenGuard or None): bare, on the no-op floor, or guarded."""
    if guard is not None:
        from adapters.autogen import AutoGenGuard

        guarded = AutoGenGuard(guard, task=task)
        return build(guarded.model_client(client), guarded.workbench(tools)), guarded
    if not floor:
        return build(client, None), None
    from autogen_core.tools import StaticWorkbench

    from adapters.autogen import ObservedChatCompletionClient

    class NoOpWorkbench(StaticWorkbench):
        async def call_tool(self, name: str, arguments: Any = None, cancellation_token: Any = None,
                            call_id: str | None = None) -> Any:
            return await super().call_tool(name, arguments, cancellation_token, call_id)

    class NoOpClient(ObservedChatCompletionClient):
        async def create(self, messages: Any, **kwargs: Any) -> Any:
            return await self.inner.create(messages, **kwargs)

    async def ignore(created: Any, latency_s: float | None) -> None:
        return None

    return build(NoOpClient(client, ignore), NoOpWorkbench(tools)), None


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


class _SelfTime:
    """CPU time the adapter's own hooks spend, less the framework calls they make (the model, the tool): what the
    adapter itself costs, measured on the thread running it, so a neighbour's burst between hooks does not count."""

    def __init__(self, clock: Callable[[], float] = time.thread_time) -> None:
        # thread_time for LangGraph (its checkpoint writer threads run meanwhile); process_time for AutoGen, whose
        # guard hooks hand the gate to a worker thread while the loop's thread waits.
        self.clock = clock
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._inner: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("inner", default=None)

    def _add(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds

    def hook(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A hook that calls nothing of the framework's (before_agent, after_agent)."""
        @functools.wraps(fn)  # frameworks read the hook's signature
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self._add(self.clock() - started)
        return timed

    def wrap(self, fn: Callable[[Any, Callable[[Any], Any]], Any]) -> Callable[[Any, Callable[[Any], Any]], Any]:
        """A wrap hook (request, handler): the handler's time is the framework's."""
        @functools.wraps(fn)  # frameworks read the hook's signature
        def timed(request: Any, handler: Callable[[Any], Any]) -> Any:
            inner = [0.0]

            def framework(req: Any) -> Any:
                started = self.clock()
                try:
                    return handler(req)
                finally:
                    inner[0] += self.clock() - started
            started = self.clock()
            try:
                return fn(request, framework)
            finally:
                self._add(self.clock() - started - inner[0])
        return timed

    def acall(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """An async hook; what it awaits through `aframework` is the framework's."""
        @functools.wraps(fn)  # frameworks read the hook's signature
        async def timed(*args: Any, **kwargs: Any) -> Any:
            inner: list[float] = [0.0]
            token = self._inner.set(inner)
            started = self.clock()
            try:
                return await fn(*args, **kwargs)
            finally:
                self._add(self.clock() - started - inner[0])
                self._inner.reset(token)
        return timed

    def aframework(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)  # frameworks read the hook's signature
        async def timed(*args: Any, **kwargs: Any) -> Any:
            inner = self._inner.get()
            started = self.clock()
            try:
                return await fn(*args, **kwargs)
            finally:
                if inner is not None:
                    inner[0] += self.clock() - started
        return timed


def _adapter_self_ms(framework: str, task: Any, policy: Any, guard: Any, runs: int) -> float | None:
    """Median over `runs` episodes of the adapter's own CPU ms per step (an empty Guard's hooks included)."""
    from traces.tools import BOOKING_TOOLS, booking_tools

    timer = _SelfTime(time.process_time if framework == "autogen" else time.thread_time)
    per_step: list[float] = []
    box = booking_tools()
    if framework == "langgraph":
        from langchain_core.messages import HumanMessage

        from traces.agents import build_langgraph_agent
        from traces.models import ScriptedChatModel

        graph = build_langgraph_agent(task, policy, toolbox=box, middleware=[_timed_middleware(guard, timer)],
                                      model=ScriptedChatModel(policy=policy))
        for run in range(runs + 2):
            timer.seconds = 0.0
            thread = f"self-{run}"
            state = graph.invoke({"messages": [HumanMessage(task.prompt)]},
                                 {"configurable": {"thread_id": thread}, "recursion_limit": 4 * policy.max_steps + 10})
            graph.checkpointer.delete_thread(thread)
            if run >= 2:  # two warm-up runs
                per_step.append(timer.seconds * 1000.0 / sum(1 for m in state["messages"] if m.type == "ai"))
        return _median(per_step)
    if framework != "autogen":
        return None
    from autogen_core import CancellationToken

    from traces.agents import build_autogen_agent
    from traces.models import ScriptedChatCompletionClient

    client = ScriptedChatCompletionClient(policy)
    model_client, workbench, finish = _timed_autogen(guard, client, box.autogen_tools(BOOKING_TOOLS), task.prompt,
                                                     timer)
    agent, _ = build_autogen_agent(task, policy, toolbox=box, client=model_client, workbench=workbench)

    async def arun() -> float:
        await agent.on_reset(CancellationToken())
        before = len(client.results)
        timer.seconds = 0.0
        await finish(await agent.run(task=task.prompt))
        return timer.seconds * 1000.0 / (len(client.results) - before)

    with _timed_static_workbench(timer):
        values = [asyncio.run(arun()) for _ in range(runs + 2)]
    return _median(values[2:])


def _timed_middleware(guard: Any, timer: _SelfTime) -> Any:
    """A `GuardMiddleware` over `guard` whose hooks add their own CPU time to `timer`."""
    from adapters.langchain import GuardMiddleware

    middleware = GuardMiddleware(guard)
    for name in ("before_agent", "after_agent"):
        setattr(middleware, name, timer.hook(getattr(middleware, name)))
    for name in ("wrap_model_call", "wrap_tool_call"):
        setattr(middleware, name, timer.wrap(getattr(middleware, name)))
    return middleware


def _timed_autogen(guard: Any, client: Any, tools: list[Any], task: str,
                   timer: _SelfTime) -> tuple[Any, Any, Callable[..., Awaitable[Any]]]:
    """(model client, workbench, afinish) of an `AutoGenGuard` over `guard`, their own CPU time added to `timer`;
    the wrapped client's calls are the framework's (run the agent inside `_timed_static_workbench`)."""
    from adapters.autogen import AutoGenGuard

    guarded = AutoGenGuard(guard, task=task)
    model_client, workbench = guarded.model_client(client), guarded.workbench(tools)
    client.create = timer.aframework(client.create)
    model_client.create = timer.acall(model_client.create)  # type: ignore[method-assign,assignment]
    workbench.call_tool = timer.acall(workbench.call_tool)  # type: ignore[method-assign,assignment]
    return model_client, workbench, timer.acall(guarded.afinish)


@contextlib.contextmanager
def _timed_static_workbench(timer: _SelfTime) -> Iterator[None]:
    """`StaticWorkbench.call_tool` (the guarded workbench's super() call: running the tool) counted as the
    framework's while the block runs."""
    from autogen_core.tools import StaticWorkbench

    static_call = StaticWorkbench.call_tool
    StaticWorkbench.call_tool = timer.aframework(static_call)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        StaticWorkbench.call_tool = static_call  # type: ignore[method-assign]


def _variants(framework: str, configurations: Sequence[str]) -> list[str]:
    """What one repeat runs: the bare agent, the floor (frameworks only), the empty adapter, then each asked
    configuration (``record`` brings ``all``, its baseline)."""
    wanted = {"none", *configurations, *(["all"] if "record" in configurations else [])}
    return ["bare", *(["floor"] if framework != "guard" else []), *(c for c in CONFIGURATIONS if c in wanted)]


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _charging_the_writer(run: Callable[[], tuple[float, int]], recorder: Any) -> Callable[[], tuple[float, int]]:
    """`run`, whose time includes writing its episode: the recorder writes on a thread every 50 ms, which would
    otherwise land in whichever variant runs then. Flushing at the end writes each episode in a transaction of its
    own, as a deployment does whose episodes are further apart than that (the dearer case)."""
    if recorder is None:
        return run

    def run_and_write() -> tuple[float, int]:
        seconds, steps = run()
        started = time.process_time()
        recorder.flush()
        return seconds + time.process_time() - started, steps

    return run_and_write


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def measure_overhead(frameworks: Sequence[str] = FRAMEWORKS, configurations: Sequence[str] = CONFIGURATIONS, *,
                     repeats: int = 30, warmup: int = 3, model: str | None = None,
                     show_progress: bool = True) -> list[dict[str, Any]]:
    """One row per (framework, configuration): medians over `repeats` of added ms per step (see the module doc)."""
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
            monitor = _monitor(framework, configurations, model)
            variants = _variants(framework, configurations)
            guards: dict[str, Any] = {}
            runners: dict[str, Callable[[], tuple[float, int]]] = {}
            for variant in variants:
                if variant in ("bare", "floor"):
                    runners[variant] = _runner(framework, task, policy, None, floor=variant == "floor")
                    continue
                guards[variant] = _guard(variant, Path(workspace), tools, monitor, spec,
                                         store=f"sqlite:///{workspace}/{framework}-runs.db")
                runners[variant] = _charging_the_writer(_runner(framework, task, policy, guards[variant][0]),
                                                        guards[variant][0].recorder)
            for _ in range(warmup):  # imports, caches, the gate's first index build
                for variant in variants:
                    runners[variant]()
            # What exists now (modules, agents, fitted monitor) is never garbage: kept out of the collector's
            # full passes, which would otherwise cost in proportion to it at whichever run they land on.
            gc.collect()
            gc.freeze()
            load_before = _load()
            writer_before = {v: g.recorder.writer_cpu_s for v, (g, _) in guards.items() if g.recorder is not None}
            per_step: list[dict[str, float]] = []  # one {variant: ms per step} per comparable repeat
            steps = 0
            for repeat in progress(range(repeats), desc=framework, total=repeats, enabled=show_progress):
                order = variants[repeat % len(variants):] + variants[:repeat % len(variants)]
                times: dict[str, tuple[float, int]] = {}
                for variant in order:
                    times[variant] = runners[variant]()
                for _, exporter in guards.values():
                    exporter.clear()
                counts = {n for _, n in times.values()}
                if len(counts) != 1 or 0 in counts:
                    continue  # a repeat whose runs differ is not comparable (never expected: same seed)
                n = counts.pop()
                per_step.append({v: seconds / n * 1000.0 for v, (seconds, _) in times.items()})
                steps += n
            load_after = _load()
            gc.unfreeze()
            adapter_self = _adapter_self_ms(framework, task, policy, guards["none"][0], repeats) \
                if framework != "guard" else None
            # The fastest run of each variant: on a shared machine the least disturbed, so differences of these
            # move far less between benchmark runs than the medians of paired differences do.
            best = {v: min(t[v] for t in per_step) for v in variants} if per_step else {}
            floor = [t["floor"] - t["bare"] for t in per_step] if "floor" in variants else [0.0] * len(per_step)
            adapter = [t["none"] - t.get("floor", t["bare"]) for t in per_step]
            for configuration in configurations:
                guard = guards[configuration][0]
                baseline = "all" if configuration == "record" else "bare"
                added = [t[configuration] - t[baseline] for t in per_step]
                recorder = guard.recorder
                if recorder is not None:
                    recorder.close()
                rows.append({
                    "framework": framework,
                    "configuration": configuration,
                    "baseline": "all" if configuration == "record" else "unguarded",
                    "layers": [layer.name for layer in guard.layers] + (["record"] if recorder is not None else []),
                    "recorder_dropped": recorder.dropped if recorder is not None else None,
                    # of the recorded runs' cost, what the writer thread spent (serializing and writing to SQLite)
                    "writer_ms_per_step": round((recorder.writer_cpu_s - writer_before[configuration]) * 1000.0
                                                / steps, 4) if recorder is not None and steps else None,
                    "median_added_ms_per_step": _median(added),
                    "p95_added_ms_per_step": round(_percentile(added, 0.95), 4) if added else None,
                    "floor_median_ms": _median(floor) if framework != "guard" else None,
                    "adapter_median_ms": _median(adapter),
                    "layers_median_ms": _median([t[configuration] - t["none"] for t in per_step]),
                    "best_added_ms": _gap(best, configuration, baseline),
                    "best_floor_ms": _gap(best, "floor", "bare") if framework != "guard" else None,
                    "best_adapter_ms": _gap(best, "none", "floor" if framework != "guard" else "bare"),
                    "best_layers_ms": _gap(best, configuration, "none"),
                    "adapter_self_ms": adapter_self,
                    "steps": steps,
                    "load_average": [load_before, load_after],
                })
    return rows


def _gap(best: dict[str, float], variant: str, baseline: str) -> float | None:
    return round(best[variant] - best[baseline], 4) if variant in best and baseline in best else None


def _monitor(framework: str, configurations: Sequence[str], model: str | None) -> Any:
    if not {"all", "record"} & set(configurations):
        return None
    if model:
        from monitors.model_file import load_monitor

        return load_monitor(model)
    return _fit_monitor(framework)


# ----------------------------------------------------------------------------- per-step cost along a long run
def _loop_call(turn: int) -> tuple[str, dict[str, Any]]:
    """The loop agent's call at `turn`: calculator and weather look-ups in turn, each with its own arguments."""
    cities = ("Prague", "Cusco", "Lisbon", "Bergen", "Osaka")
    if turn % 2:
        return "get_weather", {"city": cities[(turn // 2) % len(cities)]}
    return "calculator", {"expression": f"{turn} * 3 + 1"}


def _loop_langgraph(guard: Any, steps: int, timer: _SelfTime) -> Callable[[], list[float]]:
    """A LangGraph agent calling one tool a step for `steps` steps; a run returns, at each model call, the CPU
    time the guard's hooks had spent so far (`timer`)."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from traces.agents import build_langgraph_agent
    from traces.policy import Policy
    from traces.tasks import make_task
    from traces.tools import booking_tools

    class LoopChatModel(BaseChatModel):
        turn: int = 0
        stamps: list[float] = []

        @property
        def _llm_type(self) -> str:
            return "guardrail-loop"

        def bind_tools(self, tools: Any, **kwargs: Any) -> LoopChatModel:  # type: ignore[override]
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            self.stamps.append(timer.seconds)
            turn, self.turn = self.turn, self.turn + 1
            if turn >= steps:
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content="Done: the answer is 42."))])
            name, args = _loop_call(turn)
            call = {"name": name, "args": args, "id": f"call-{turn}", "type": "tool_call"}
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])

    task = make_task(TASK_SEED)
    policy = Policy(seed=TASK_SEED)
    model = LoopChatModel()
    graph = build_langgraph_agent(task, policy, toolbox=booking_tools(), model=model,
                                  middleware=[_timed_middleware(guard, timer)])
    counter = iter(range(1 << 30))

    def run() -> list[float]:
        model.turn, model.stamps, timer.seconds = 0, [], 0.0
        thread = f"loop-{next(counter)}"
        graph.invoke({"messages": [HumanMessage(task.prompt)]},
                     {"configurable": {"thread_id": thread}, "recursion_limit": 2 * steps + 10})
        graph.checkpointer.delete_thread(thread)
        return model.stamps

    return run


def _loop_autogen(guard: Any, steps: int, timer: _SelfTime) -> Callable[[], list[float]]:
    """The AutoGen twin of `_loop_langgraph`."""
    import json

    from autogen_core import CancellationToken, FunctionCall
    from autogen_core.models import CreateResult, RequestUsage

    from traces.agents import build_autogen_agent
    from traces.models import ScriptedChatCompletionClient
    from traces.policy import Policy
    from traces.tasks import make_task
    from traces.tools import BOOKING_TOOLS, booking_tools

    class LoopClient(ScriptedChatCompletionClient):
        def __init__(self) -> None:
            super().__init__(Policy(seed=TASK_SEED))
            self.turn = 0
            self.stamps: list[float] = []

        async def create(self, messages: Any, **kwargs: Any) -> Any:
            self.stamps.append(timer.seconds)
            turn, self.turn = self.turn, self.turn + 1
            usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
            if turn >= steps:
                return CreateResult(finish_reason="stop", content="Done: the answer is 42.", usage=usage, cached=False)
            name, args = _loop_call(turn)
            call = FunctionCall(id=f"call-{turn}", name=name, arguments=json.dumps(args))
            return CreateResult(finish_reason="function_calls", content=[call], usage=usage, cached=False)

    task = make_task(TASK_SEED)
    policy = Policy(seed=TASK_SEED)
    box = booking_tools()
    client = LoopClient()
    model_client, workbench, finish = _timed_autogen(guard, client, box.autogen_tools(BOOKING_TOOLS), task.prompt,
                                                     timer)
    agent, _ = build_autogen_agent(task, policy, toolbox=box, client=model_client, workbench=workbench,
                                   max_steps=steps + 2)

    async def arun() -> list[float]:
        await agent.on_reset(CancellationToken())
        client.turn, client.stamps, timer.seconds = 0, [], 0.0
        await finish(await agent.run(task=task.prompt))
        return client.stamps

    def run() -> list[float]:
        with _timed_static_workbench(timer):
            return asyncio.run(arun())

    return run


def _without_gc(run: Callable[[], list[float]]) -> list[float]:
    """One run with the cyclic garbage collector paused: a collection lands on whichever step crosses its
    threshold and costs the whole heap's objects, which would show as that step growing."""
    gc.collect()
    gc.disable()
    try:
        return run()
    finally:
        gc.enable()


def _window_ms(stamps: Sequence[float], at: int) -> float:
    """Mean CPU ms of the steps (at - GROWTH_WINDOW, at]: step k runs from model call k to model call k + 1."""
    return (stamps[at] - stamps[at - GROWTH_WINDOW]) / GROWTH_WINDOW * 1000.0


def measure_growth(frameworks: Sequence[str] = ("langgraph", "autogen"), *, repeats: int = 5,
                   steps: int = GROWTH_STEPS, model: str | None = None,
                   show_progress: bool = True) -> list[dict[str, Any]]:
    """Two rows per framework, the adapter with an empty Guard (``growth-none``) and with all layers
    (``growth-all``): the guard's own CPU ms per step (adapter, Guard and layers, timed from inside its hooks)
    at steps 10, 50 and 200 of a 200-step run (with fewer `steps`, at those of them within the run, and at its
    last step); medians over `repeats` runs."""
    from traces.tasks import make_task
    from traces.tools import BOOKING_TOOLS, booking_tools
    from verifiers.spec import pick_spec

    task = make_task(TASK_SEED)
    spec = pick_spec(task.tools, [task.prompt])
    tools = {t.name: t.func for t in booking_tools().langchain_tools(BOOKING_TOOLS) if getattr(t, "func", None)}
    rows = []
    points = sorted({*(at for at in GROWTH_AT if GROWTH_WINDOW <= at <= steps), steps})
    with tempfile.TemporaryDirectory(prefix="guardrail-bench-") as workspace:
        for framework in frameworks:
            if framework == "guard":
                continue
            loop = _loop_langgraph if framework == "langgraph" else _loop_autogen
            for arm in ("none", "all"):
                guard, exporter = _guard(arm, Path(workspace), tools, _monitor(framework, [arm], model), spec)
                run = loop(guard, steps, _SelfTime(time.process_time if framework == "autogen" else time.thread_time))
                run()  # warm up
                load_before = _load()
                at_step: dict[int, list[float]] = {at: [] for at in points}
                for _ in progress(range(repeats), desc=f"{framework}/growth-{arm}", total=repeats,
                                  enabled=show_progress):
                    stamps = _without_gc(run)
                    exporter.clear()
                    if len(stamps) != steps + 1:
                        continue
                    for at in points:
                        at_step[at].append(_window_ms(stamps, at))
                rows.append({
                    "framework": framework,
                    "configuration": f"growth-{arm}",
                    "layers": [layer.name for layer in guard.layers],
                    "steps_per_run": steps,
                    "self_ms_at_step": {str(at): _median(at_step[at]) for at in points},
                    "repeats": len(at_step[steps]),
                    "load_average": [load_before, _load()],
                })
    return rows


# ----------------------------------------------------------------------------- profile
def profile_overhead(frameworks: Sequence[str], configurations: Sequence[str], out: Path, *, repeats: int = 20,
                     warmup: int = 3, model: str | None = None) -> list[Path]:
    """Each variant's runs under cProfile: ``<framework>-<variant>.prof`` and ``.txt`` (top functions by own
    time and by cumulative time), and ``<framework>-diff.txt``: per function, what each layer of cost adds."""
    from traces.policy import Policy
    from traces.tasks import make_task
    from traces.tools import BOOKING_TOOLS, booking_tools
    from verifiers.spec import pick_spec

    out.mkdir(parents=True, exist_ok=True)
    task = make_task(TASK_SEED)
    policy = Policy(seed=TASK_SEED)
    spec = pick_spec(task.tools, [task.prompt])
    tools = {t.name: t.func for t in booking_tools().langchain_tools(BOOKING_TOOLS) if getattr(t, "func", None)}
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="guardrail-bench-") as workspace:
        for framework in frameworks:
            monitor = _monitor(framework, configurations, model)
            stats: dict[str, pstats.Stats] = {}
            for variant in _variants(framework, configurations):
                exporter = None
                if variant in ("bare", "floor"):
                    run = _runner(framework, task, policy, None, floor=variant == "floor")
                else:
                    guard, exporter = _guard(variant, Path(workspace), tools, monitor, spec,
                                             store=f"sqlite:///{workspace}/{framework}-profile.db")
                    run = _runner(framework, task, policy, guard)
                for _ in range(warmup):
                    run()
                profiler = cProfile.Profile(time.thread_time)  # CPU time: wall time on a shared machine is the neighbours
                for _ in range(repeats):
                    profiler.enable()
                    run()
                    profiler.disable()
                    if exporter is not None:
                        exporter.clear()
                path = out / f"{framework}-{variant}.prof"
                profiler.dump_stats(path)
                stats[variant] = pstats.Stats(str(path))
                text = out / f"{framework}-{variant}.txt"
                text.write_text(_top(stats[variant], "tottime") + _top(stats[variant], "cumulative"))
                written += [path, text]
            diff = out / f"{framework}-diff.txt"
            pairs = [("bare", "floor"), ("floor", "none"), ("bare", "none"), ("none", "gate"), ("none", "all"),
                     ("all", "record")]
            diff.write_text("".join(_diff(stats[a], stats[b], f"{b} - {a}", repeats)
                                    for a, b in pairs if a in stats and b in stats))
            written.append(diff)
    return written


def _top(stats: pstats.Stats, key: str, limit: int = 40) -> str:
    buffer = io.StringIO()
    stats.stream = buffer  # type: ignore[attr-defined]
    stats.sort_stats(key).print_stats(limit)
    return buffer.getvalue()


def _where(func: tuple[str, int, str]) -> str:
    path, line, name = func
    for marker in ("site-packages/", str(Path.cwd()) + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{line}({name})"


def _diff(before: pstats.Stats, after: pstats.Stats, title: str, runs: int, limit: int = 50) -> str:
    """Functions by how much more cumulative time `after` spent in them than `before` (ms per run)."""
    old: dict[Any, Any] = before.stats  # type: ignore[attr-defined]
    new: dict[Any, Any] = after.stats  # type: ignore[attr-defined]
    rows = []
    for func in set(old) | set(new):
        a, b = old.get(func, (0, 0, 0.0, 0.0, {})), new.get(func, (0, 0, 0.0, 0.0, {}))
        rows.append(((b[3] - a[3]) / runs * 1000, (b[2] - a[2]) / runs * 1000, (b[1] - a[1]) / runs, func))
    rows.sort(key=lambda r: -r[0])
    lines = [f"== {title}: per run, CPU ms of cumulative / own time and calls added (cProfile: inflated, the profiled thread only) ==",
             f"{'cum ms':>9} {'own ms':>9} {'calls':>8}  function"]
    lines += [f"{cum:9.3f} {own:9.3f} {calls:8.1f}  {_where(func)}" for cum, own, calls, func in rows[:limit]]
    return "\n".join(lines) + "\n\n"




def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS),
                        help="langgraph, autogen: guarded vs unguarded agents; guard: the Guard alone on a replay")
    parser.add_argument("--configs", nargs="+", choices=CONFIGURATIONS, default=list(CONFIGURATIONS),
                        help="gate: the gate alone; all: gate, step monitor and verifiers")
    parser.add_argument("--repeats", type=int, default=30, help="repeats of every variant per framework (default 30)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--model", default=None, help="a monitor model file (default: fit one on testbed runs)")
    parser.add_argument("--growth", action="store_true",
                        help=f"also the added cost at steps {', '.join(map(str, GROWTH_AT))} of a "
                             f"{GROWTH_STEPS}-step run (all layers)")
    parser.add_argument("--growth-repeats", type=int, default=5, help="paired long runs per framework (default 5)")
    parser.add_argument("--growth-steps", type=int, default=GROWTH_STEPS,
                        help=f"tool steps of the long run (default {GROWTH_STEPS})")
    parser.add_argument("--profile", action="store_true",
                        help="profile every variant with cProfile instead of timing (files under --out)")
    parser.add_argument("--out", type=Path, default=Path("out/overhead-profile"),
                        help="where --profile writes (default out/overhead-profile)")
    parser.add_argument("--json", action="store_true", help="one JSON object per (framework, configuration)")


def _run(args: argparse.Namespace) -> int:
    if args.repeats < 1:
        sys.stderr.write("guardrail bench overhead: --repeats must be at least 1\n")
        return 2
    if args.growth_steps < GROWTH_WINDOW:
        sys.stderr.write(f"guardrail bench overhead: --growth-steps must be at least {GROWTH_WINDOW}\n")
        return 2
    if args.profile:
        for path in profile_overhead(args.frameworks, args.configs, args.out, repeats=args.repeats,
                                     warmup=args.warmup, model=args.model):
            print(path)
        return 0
    rows = measure_overhead(args.frameworks, args.configs, repeats=args.repeats, warmup=args.warmup,
                            model=args.model)
    if args.growth and args.growth_repeats > 0:
        rows += measure_growth(args.frameworks, repeats=args.growth_repeats, steps=args.growth_steps, model=args.model)
    if args.json:
        for row in rows:
            emit_json(row)
    else:
        print_table([{k: ("+".join(v) if k == "layers" else v) for k, v in row.items()} for row in rows
                     if not row["configuration"].startswith("growth")])
        for row in rows:
            if row["configuration"].startswith("growth"):
                print(f"{row['framework']} {row['configuration']}: the guard's own ms per step at step " +
                      ", ".join(f"{k}: {v}" for k, v in row["self_ms_at_step"].items()))
    return 0


BENCH = Command(help="added time per step of a guarded vs an unguarded scripted agent, per framework",
                add_arguments=_add_arguments, run=_run)
