"""`guardrail bench clients`: the chat clients users run, guarded, over real HTTP to the scripted loopback server.

For each client (LangChain's ``ChatOpenAI`` and ``ChatOllama``, AutoGen's ``OpenAIChatCompletionClient``)
the testbed's booking tasks run through a real agent (``create_agent`` with `GuardMiddleware`, or an
``AssistantAgent`` with `AutoGenGuard`) against `traces.openai_server.ScriptedLLMServer`, which
answers with the testbed policy in the client's wire format, tool calls and token logprobs
included. The guard is the full assembly the arguments allow here: the gate on the task's
workspace, the step monitor fitted on the shipped testbed corpus, and the task's verifier spec.

Per client: how many steps reached the guard and how many of them carried logprobs (the monitor's
uncertainty channel), how many tool calls were gated, and, on extra episodes whose script makes
parallel tool calls, how many of those calls were gated (all of them, or the figure says otherwise).
``median_added_ms_per_step`` is the median over alternating guarded/unguarded pairs of the same
episode of (guarded - unguarded) wall seconds per step: loopback HTTP and a shared machine make it
noisy, so read it as an order of magnitude (one unmeasured pair warms the clients up first).
``loop_lag_ms_max`` is the longest a 1 ms probe on the agent's event loop waited past its time
during the guarded episodes, ``loop_lag_ms_max_unguarded`` the same without the guard: the
framework's and the machine's own stalls, which the guarded figure includes.
The scripted model makes these mechanism checks, not model behaviour.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table, progress
from guardrail.core.layer import Layer

__all__ = ["BENCH", "CLIENTS", "run_clients"]

CLIENTS = ("chat_openai", "autogen_openai", "chat_ollama")
KEYS = ("client", "episodes", "steps", "logprobs_steps", "gated_calls", "parallel_calls", "parallel_calls_gated",
        "median_added_ms_per_step", "loop_lag_ms_max", "loop_lag_ms_max_unguarded")
CORPUS = Path(__file__).resolve().parents[1] / "corpora" / "testbed_langgraph"


class _Count(Layer):
    """A Guard layer counting what reached the guard: steps (with logprobs) and gated calls, by call id."""

    name = "count"

    def __init__(self) -> None:
        self.gated: list[str | None] = []
        self.steps = 0
        self.logprobs_steps = 0

    def before_action(self, ctx: Any, action: Any) -> None:
        self.gated.append(action.call_id)

    def on_step(self, ctx: Any, step: Any) -> None:
        self.steps += 1
        self.logprobs_steps += bool(step.logprobs_available)


def _monitor() -> Any:
    from guardrail.core.corpus import read_corpus
    from monitors import StepMonitor

    healthy = read_corpus(CORPUS).healthy()
    return StepMonitor().fit(healthy[:24]).calibrate(healthy[24:40])


def _guard(task: Any, monitor: Any, workspace: Path, counter: _Count | None) -> Any:
    from guardrail import Guard
    from traces.bench.repair import task_spec

    extra = [counter] if counter is not None else []
    return Guard.default(workspace=workspace, model=monitor, spec=task_spec(task), extra_layers=extra)


def _parallel_script(box: Any) -> list[Any]:
    from traces.openai_server import ScriptedReply, WireCall

    items = ["sun hat", "water bottle", "first-aid kit"]
    return [ScriptedReply("Looking up all three.", [WireCall("search_catalog", {"query": q}, f"par-{i}")
                                                   for i, q in enumerate(items)]),
            ScriptedReply("Answer: done looking.")]


def _langchain_model(client: str, server: Any) -> Any:
    from pydantic import SecretStr

    if client == "chat_openai":
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(base_url=server.openai_url, api_key=SecretStr("not-needed"), model="scripted",
                          logprobs=True, max_retries=0)
    from langchain_ollama import ChatOllama

    return ChatOllama(base_url=server.ollama_url, model="scripted", logprobs=True)


async def _run_langchain(client: str, server: Any, task: Any, guard: Any, box: Any) -> int:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from adapters.langchain import GuardMiddleware
    from traces.agents import SYSTEM_PROMPT
    from traces.tools import BOOKING_TOOLS

    middleware = [GuardMiddleware(guard)] if guard is not None else []
    agent = create_agent(_langchain_model(client, server), tools=box.langchain_tools(BOOKING_TOOLS),
                         system_prompt=SYSTEM_PROMPT, middleware=middleware)
    state = await agent.ainvoke({"messages": [HumanMessage(task.prompt)]}, {"recursion_limit": 60})
    return sum(1 for m in state["messages"] if m.type == "ai")


async def _run_autogen(server: Any, task: Any, guard: Any, box: Any) -> int:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.models import ModelInfo
    from autogen_core.tools import StaticWorkbench
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    from adapters.autogen import AutoGenGuard
    from traces.agents import SYSTEM_PROMPT
    from traces.tools import BOOKING_TOOLS

    info = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown",
                     structured_output=False)
    inner = OpenAIChatCompletionClient(model="scripted", base_url=server.openai_url, api_key="not-needed",
                                       model_info=info, max_retries=0)
    before = len(server.requests)
    try:
        if guard is None:
            agent = AssistantAgent("booking_agent", model_client=inner,
                                   workbench=StaticWorkbench(box.autogen_tools(BOOKING_TOOLS)),
                                   system_message=SYSTEM_PROMPT, max_tool_iterations=20)
            await agent.run(task=task.prompt)
        else:
            guarded = AutoGenGuard(guard, task=task.prompt)
            agent = AssistantAgent("booking_agent", model_client=guarded.model_client(inner, logprobs=True),
                                   workbench=guarded.workbench(box.autogen_tools(BOOKING_TOOLS)),
                                   system_message=SYSTEM_PROMPT, max_tool_iterations=20)
            await guarded.afinish(await agent.run(task=task.prompt))
    finally:
        await inner.close()
    return len(server.requests) - before


async def _probed(run: Callable[[], Any]) -> tuple[Any, float]:
    """Run `run()` while a 1 ms probe wakes on the loop; (its result, the worst wait past 1 ms in seconds)."""
    worst = 0.0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal worst
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - before - 0.001)

    prober = asyncio.create_task(tick())
    try:
        return await run(), worst
    finally:
        done.set()
        await prober


def _episode(client: str, server: Any, task: Any, guard: Any, box: Any) -> tuple[int, float, float]:
    """One episode: (steps, wall seconds, worst loop lag)."""
    async def run() -> int:
        if client == "autogen_openai":
            return await _run_autogen(server, task, guard, box)
        return await _run_langchain(client, server, task, guard, box)

    started = time.perf_counter()
    steps, lag = asyncio.run(_probed(run))
    return steps, time.perf_counter() - started, lag


def run_clients(*, episodes: int = 6, seed: int = 0, clients: tuple[str, ...] = CLIENTS,
                show_progress: bool = False) -> list[dict[str, Any]]:
    """One row per client (see the module docstring)."""
    from traces.openai_server import PolicyResponder, QueueResponder, ScriptedLLMServer
    from traces.policy import Policy
    from traces.tasks import make_task
    from traces.tools import BookingDB, booking_tools

    monitor = _monitor()
    rows = []
    with tempfile.TemporaryDirectory(prefix="guardrail-clients-") as workdir:
        for client in clients:
            counter = _Count()
            added: list[float] = []
            lags: dict[bool, list[float]] = {True: [], False: []}
            for index in progress(range(-1, episodes), desc=client, enabled=show_progress):
                task_seed = seed * 1000 + max(index, 0)
                task = make_task(task_seed, db=BookingDB())
                warmup = index < 0  # one unmeasured pair: imports, connection pools, the first HTTP round trips
                guard = _guard(task, monitor, Path(workdir), None if warmup else counter)
                timings = {}
                for guarded in (False, True) if index % 2 == 0 else (True, False):  # alternate: cancel drift
                    with ScriptedLLMServer(PolicyResponder(Policy(seed=task_seed))) as server:
                        steps, seconds, lag = _episode(client, server, task, guard if guarded else None,
                                                       booking_tools())
                    timings[guarded] = (steps, seconds)
                    if not warmup:
                        lags[guarded].append(lag)
                if not warmup:
                    added.append((timings[True][1] - timings[False][1]) / max(1, timings[True][0]) * 1e3)
            gated_before = len(counter.gated)
            box = booking_tools()
            task = make_task(seed * 1000, db=BookingDB())
            with ScriptedLLMServer(QueueResponder(_parallel_script(box))) as server:
                _episode(client, server, task, _guard(task, monitor, Path(workdir), counter), box)
            parallel = counter.gated[gated_before:]  # the episode's one tool step: three calls in parallel
            rows.append({
                "client": client,
                "episodes": episodes,
                "steps": counter.steps,
                "logprobs_steps": counter.logprobs_steps,
                "gated_calls": len(counter.gated),
                "parallel_calls": 3,
                "parallel_calls_gated": len(parallel),
                "median_added_ms_per_step": round(statistics.median(added), 3) if added else None,
                "loop_lag_ms_max": round(max(lags[True]) * 1e3, 2) if lags[True] else None,
                "loop_lag_ms_max_unguarded": round(max(lags[False]) * 1e3, 2) if lags[False] else None,
            })
    return rows


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=int, default=6, help="testbed episodes per client (default 6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=list(CLIENTS))
    parser.add_argument("--json", action="store_true", help="one JSON object per client on stdout")


def _run(args: argparse.Namespace) -> int:
    import sys

    if args.episodes < 1:
        sys.stderr.write("guardrail bench clients: --episodes must be at least 1\n")
        return 2
    missing = []
    for module, package in (("langchain_openai", "langchain-openai"), ("autogen_ext.models.openai",
                                                                        "autogen-ext[openai]"),
                            ("langchain_ollama", "langchain-ollama")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        sys.stderr.write(f"guardrail bench clients needs {', '.join(missing)}: pip install 'guardrail[clients]'\n")
        return 2
    rows = run_clients(episodes=args.episodes, seed=args.seed, clients=tuple(args.clients),
                       show_progress=not args.json)
    if args.json:
        for row in rows:
            emit_json(row)
        return 0
    print_table(rows, KEYS)
    print("\nscripted loopback server (real HTTP, real client code): mechanism checks, not model behaviour; "
          "added ms is a median over alternating guarded/unguarded pairs on a shared machine")
    return 0


BENCH = Command(
    help="real chat clients (ChatOpenAI, AutoGen OpenAI, ChatOllama) guarded over loopback HTTP",
    add_arguments=_add_arguments,
    run=_run,
)
