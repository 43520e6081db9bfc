"""The async path runs a layer's sync hooks in a worker thread unless the layer says they are short CPU work."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

from guardrail import Guard, Layer
from guardrail.core.events import Action, Result, Step, StepKind
from monitors.layer import MonitorLayer
from verifiers.layer import VerifierLayer


class Where(Layer):
    """Notes the thread each hook ran in."""

    name = "where"

    def __init__(self) -> None:
        self.threads: list[str] = []

    def before_action(self, ctx, action):
        self.threads.append(threading.current_thread().name)

    def on_step(self, ctx, step):
        self.threads.append(threading.current_thread().name)


class Inline(Where):
    name = "inline"
    offload = False


def _episode(guard: Guard) -> None:
    async def run() -> None:
        ctx = guard.start_episode(task="t")
        action = Action.tool_call("lookup", {"q": "x"}, call_id="c1")
        await guard.abefore_action(ctx, action)
        await guard.aafter_result(ctx, action, Result(output="ok", call_id="c1"))
        await guard.aon_step(ctx, Step(index=0, kind=StepKind.FINAL, text="done"))
        await guard.aon_finish(ctx)

    asyncio.run(run())


def test_sync_layers_leave_the_loop_and_short_cpu_layers_stay_on_it():
    blocking, inline = Where(), Inline()
    guard = Guard([blocking, inline])

    for _ in range(2):  # two event loops: the worker pool outlives the first
        _episode(guard)

    loop_thread = threading.main_thread().name
    assert len(blocking.threads) == len(inline.threads) == 4
    assert all(name.startswith("guardrail-layers") for name in blocking.threads)
    assert inline.threads == [loop_thread] * 4
    # The shipped CPU-only layers say so; a layer that does not is offloaded.
    assert MonitorLayer.offload is False and VerifierLayer.offload is False and Layer.offload is True


def test_the_worker_pool_is_made_anew_in_a_forked_child():
    if not hasattr(os, "fork"):
        return
    guard = Guard([Where()])
    _episode(guard)  # the parent's pool exists
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its inherited pool has no threads; a hook must still finish
        signal.alarm(30)  # a hook stuck on a dead pool ends the child without its "ok"
        try:
            _episode(guard)
            os.write(write, b"ok")
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 2) == b"ok"
