"""Many concurrent episodes through one Guard give exactly the results of running them one by one."""

from __future__ import annotations

import asyncio
import hashlib
from concurrent.futures import ThreadPoolExecutor

from guardrail import Action, Finding, Guard, Layer, Result, Severity, Step, StepKind


class RunningDigest(Layer):
    """A stateful layer: a rolling hash of everything the episode saw, alarming on a content rule."""

    name = "digest"

    def new_state(self, ctx):
        return {"digest": hashlib.sha256(ctx.episode_id.encode()).hexdigest(), "n": 0}

    def _mix(self, ctx, text: str) -> str:
        state = ctx.state(self)
        state["digest"] = hashlib.sha256((state["digest"] + text).encode()).hexdigest()
        state["n"] += 1
        return state["digest"]

    def before_action(self, ctx, action):
        digest = self._mix(ctx, action.describe())
        if digest.startswith(("0", "1", "2")):
            return [Finding(layer=self.name, check="digest", message=digest, blocking=True)]
        return None

    def after_result(self, ctx, action, result):
        self._mix(ctx, result.output)
        return None

    def on_step(self, ctx, step):
        digest = self._mix(ctx, step.text)
        ctx.record_score(self, int(digest[:4], 16) / 65535)
        if digest.startswith("f"):
            return [Finding(layer=self.name, check="digest", message=digest, severity=Severity.ALARM)]
        return None

    def on_finish(self, ctx, episode):
        return [Finding(layer=self.name, check="final", message=ctx.state(self)["digest"],
                        evidence={"n": ctx.state(self)["n"], "steps": len(episode.steps)})]


def drive(guard: Guard, episode_id: str, n_steps: int) -> list[tuple]:
    ctx = guard.start_episode(episode_id)
    trace = []
    for i in range(n_steps):
        action = Action.tool_call("lookup", {"episode": episode_id, "i": i})
        d1 = ctx.before_action(action)
        d2 = ctx.after_result(action, Result(output=f"{episode_id}:{i}"))
        d3 = ctx.on_step(Step(index=i, kind=StepKind.TOOL_CALL, text=f"{episode_id}/{i}"))
        trace.append((d1.verdict, d2.verdict, d3.verdict, d3.score))
    final = ctx.finish(answer=f"answer {episode_id}")
    trace.append((final.verdict, final.findings[0].message, final.findings[0].evidence["steps"]))
    return trace


async def adrive(guard: Guard, episode_id: str, n_steps: int) -> list[tuple]:
    ctx = guard.start_episode(episode_id)
    trace = []
    for i in range(n_steps):
        action = Action.tool_call("lookup", {"episode": episode_id, "i": i})
        d1 = await ctx.abefore_action(action)
        await asyncio.sleep(0)  # let other episodes interleave
        d2 = await ctx.aafter_result(action, Result(output=f"{episode_id}:{i}"))
        d3 = await ctx.aon_step(Step(index=i, kind=StepKind.TOOL_CALL, text=f"{episode_id}/{i}"))
        trace.append((d1.verdict, d2.verdict, d3.verdict, d3.score))
    final = await ctx.afinish(answer=f"answer {episode_id}")
    trace.append((final.verdict, final.findings[0].message, final.findings[0].evidence["steps"]))
    return trace


N_EPISODES = 200
N_STEPS = 12


def sequential_reference() -> dict[str, list[tuple]]:
    guard = Guard([RunningDigest()], mode="intervene")
    return {f"ep-{k}": drive(guard, f"ep-{k}", N_STEPS) for k in range(N_EPISODES)}


def test_threads_give_the_sequential_results():
    expected = sequential_reference()
    guard = Guard([RunningDigest()], mode="intervene")
    with ThreadPoolExecutor(max_workers=32) as pool:
        futures = {eid: pool.submit(drive, guard, eid, N_STEPS) for eid in expected}
        got = {eid: f.result() for eid, f in futures.items()}
    assert got == expected
    assert guard.running_episodes == []
    verdicts = {v for trace in got.values() for row in trace[:-1] for v in row[:3]}
    assert {"block", "alarm", "allow"} <= {v.value for v in verdicts}  # the rule really fires


async def test_asyncio_tasks_give_the_sequential_results():
    expected = sequential_reference()
    guard = Guard([RunningDigest()], mode="intervene")
    results = await asyncio.gather(*(adrive(guard, eid, N_STEPS) for eid in expected))
    assert dict(zip(expected, results, strict=True)) == expected
    assert guard.running_episodes == []
