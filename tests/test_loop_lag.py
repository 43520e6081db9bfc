"""A loop-lag probe: a guarded step never holds the event loop, however slow a layer is.

The layers here block for 150 ms in every hook (a gate probe or monitor maths on a slow machine,
made deterministic). A probe coroutine wakes every millisecond and counts its wakes; each layer
call reads the count when it starts and when it ends. With the Guard's async path the layers run
in a worker thread, so the probe keeps waking during every block; run inline (``offload=False``,
what the async path did before) the count cannot move while a layer holds the loop, which is what
makes the probe able to fail. Wall-clock lag bounds are not asserted here (a shared machine stalls
any process now and then): `guardrail bench clients` reports the loop lag of real layers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from adapters.autogen import AutoGenGuard
from adapters.langchain import GuardMiddleware
from guardrail import Guard, Layer
from traces.agents import build_autogen_agent, build_langgraph_agent
from traces.policy import Policy
from traces.tasks import make_task
from traces.tools import BookingDB, booking_tools

BLOCK_S = 0.15


class Probe:
    """Wakes every millisecond on the loop and counts its wakes."""

    def __init__(self) -> None:
        self.ticks = 0
        self.worst_gap_s = 0.0


class Blocking(Layer):
    """Holds its thread for BLOCK_S in every hook, noting how often the loop's probe woke meanwhile."""

    name = "blocking"

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.ticks_during: list[int] = []
        self.on_loop: list[bool] = []

    def _block(self) -> None:
        before = self.probe.ticks
        self.on_loop.append(threading.current_thread() is threading.main_thread())
        time.sleep(BLOCK_S)  # the GIL is free: only the caller's thread waits
        self.ticks_during.append(self.probe.ticks - before)

    def before_action(self, ctx, action):
        self._block()

    def on_step(self, ctx, step):
        self._block()

    def on_finish(self, ctx, episode):
        self._block()


async def probed(probe: Probe, work: Callable[[], Awaitable[Any]]) -> Any:
    """Run `work` while `probe` wakes every millisecond on the same loop."""
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            probe.ticks += 1
            probe.worst_gap_s = max(probe.worst_gap_s, time.perf_counter() - before)

    prober = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the probe is running before the work starts
    try:
        return await work()
    finally:
        done.set()
        await prober


def booking(seed: int = 1) -> tuple[Any, Policy]:
    return make_task(seed, db=BookingDB()), Policy(seed=seed)


async def run_autogen(guard: Guard) -> Any:
    task, policy = booking()
    guarded = AutoGenGuard(guard, task=task.prompt)
    box = booking_tools()
    from traces.models import ScriptedChatCompletionClient

    agent, _ = build_autogen_agent(task, policy, toolbox=box, workbench=guarded.workbench(box.autogen_tools()),
                                   client=guarded.model_client(ScriptedChatCompletionClient(policy)))
    result = await agent.run(task=task.prompt)
    return await guarded.afinish(result)


async def run_langgraph(guard: Guard) -> Any:
    from langchain_core.messages import HumanMessage

    task, policy = booking()
    graph = build_langgraph_agent(task, policy, toolbox=booking_tools(), middleware=[GuardMiddleware(guard)])
    return await graph.ainvoke({"messages": [HumanMessage(task.prompt)]},
                               {"configurable": {"thread_id": "lag"}, "recursion_limit": 60})


@pytest.mark.parametrize("run", [run_autogen, run_langgraph], ids=["autogen", "langgraph"])
async def test_a_slow_layer_never_blocks_the_event_loop(run):
    probe = Probe()
    blocking = Blocking(probe)
    await probed(probe, lambda: run(Guard([blocking], mode="intervene")))

    assert len(blocking.ticks_during) >= 4  # the layer blocked several times during the run
    assert not any(blocking.on_loop)
    # The loop kept running through every block (about 150 wakes each on an idle machine).
    assert min(blocking.ticks_during) >= 1, blocking.ticks_during


async def test_the_probe_sees_a_layer_run_on_the_loop():
    probe = Probe()
    blocking = Blocking(probe)
    await probed(probe, lambda: run_autogen(Guard([blocking], mode="intervene", offload=False)))

    assert all(blocking.on_loop) and blocking.ticks_during and max(blocking.ticks_during) == 0
    assert probe.worst_gap_s >= BLOCK_S  # inline, a hook held the loop for a whole block


async def test_a_layer_with_its_own_async_hook_is_awaited_on_the_loop_in_pipeline_order():
    order: list[str] = []

    class Native(Layer):
        name = "native"

        def on_step(self, ctx, step):  # never called by the async path: the async twin is
            raise AssertionError("the sync twin ran")

        async def aon_step(self, ctx, step):
            order.append("native")
            await asyncio.sleep(0)

    class Sync(Layer):
        def __init__(self, name: str) -> None:
            self.name = name  # type: ignore[misc]

        def on_step(self, ctx, step):
            import threading

            order.append(f"{self.name}:{'loop' if threading.current_thread() is threading.main_thread() else 'worker'}")

    from guardrail import Step, StepKind

    guard = Guard([Sync("a"), Sync("b"), Native(), Sync("c")])
    ctx = guard.start_episode("e")
    decision = await guard.aon_step(ctx, Step(index=0, kind=StepKind.TEXT, text="hi"))

    assert order == ["a:worker", "b:worker", "native", "c:worker"]
    assert decision.verdict.value == "allow"
