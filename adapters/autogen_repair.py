"""Repair for AutoGen: drive an AssistantAgent one model call at a time, saving its own state, and fork from it.

    outcome = await arun_autogen(Repairer(guard), agent, task)   # AssistantAgent(max_tool_iterations=1)
    outcome.delivered                                           # the delivered AutoGenRun with its saved states

Restoring is the agent's own ``load_state``; the original run's saved states are never modified.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.steps import steps_from_autogen_context
from guardrail.core.events import Finding, Step
from repair.breaker import BreakerRun
from repair.driver import CheckpointError
from repair.repairer import RepairAttempt, Repairer, RepairOutcome, StepWatch
from repair.rungs import Hint, Rung

__all__ = ["AutoGenFork", "AutoGenRun", "AutoGenStepLog", "arepair_autogen", "arun_autogen"]

AUTOGEN_RUN_FORMAT = "guardrail-autogen-run"
AUTOGEN_RUN_VERSION = 1


@dataclass
class AutoGenRun:
    """What one stepwise AutoGen run produced: the state after each step and the final answer."""

    task: str
    initial_state: dict[str, Any]
    states: list[dict[str, Any]] = field(default_factory=list)  # states[i]: the agent's state after step i
    answer: str | None = None
    model_steps: int = 0
    stopped: str | None = None  # why the run ended early ("max_steps", "breaker"), None when it answered
    latencies: list[float] = field(default_factory=list)  # latencies[i]: seconds model step i took (tools included)

    def steps(self) -> list[Step]:
        state = self.states[-1] if self.states else self.initial_state
        return steps_from_autogen_context(_context_messages(state), task=self.task,
                                          model_latency_s=self.latencies)

    def save(self, path: str | Path) -> None:
        """Write the run (task, every saved state, answer) as versioned JSON, atomically."""
        from guardrail.core.fileio import atomic_write_text

        payload = {"format": AUTOGEN_RUN_FORMAT, "version": AUTOGEN_RUN_VERSION, **dataclasses.asdict(self)}
        atomic_write_text(path, json.dumps(payload, sort_keys=True))

    @classmethod
    def load(cls, path: str | Path) -> AutoGenRun:
        """Read a run written by `save`; a file of another format or version is refused with a clear error."""
        try:
            payload = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"cannot read AutoGen run {path}: {exc}") from exc
        if not isinstance(payload, dict) or payload.get("format") != AUTOGEN_RUN_FORMAT:
            raise CheckpointError(f"{path} is not a {AUTOGEN_RUN_FORMAT} file")
        if payload.get("version") != AUTOGEN_RUN_VERSION:
            raise CheckpointError(f"{path} has version {payload.get('version')!r}; this guardrail reads "
                                  f"version {AUTOGEN_RUN_VERSION}")
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = {"task", "initial_state"} - payload.keys()
        if missing:
            raise CheckpointError(f"{path} lacks {sorted(missing)}")
        return cls(**{k: v for k, v in payload.items() if k in fields})

    def state_before(self, step: int) -> dict[str, Any]:
        """The saved agent state just before model step `step` (step 0: before the task)."""
        if step < 0 or step > len(self.states):
            raise CheckpointError(f"no saved state before step {step} (the run saved {len(self.states)} steps)")
        return self.initial_state if step == 0 else self.states[step - 1]


def _context_messages(state: dict[str, Any]) -> list[Any]:
    """The LLM context inside an AssistantAgent's saved state, as autogen_core message objects."""
    from autogen_core.models import LLMMessage
    from pydantic import TypeAdapter

    raw = state.get("llm_context", {}).get("messages", [])
    return list(TypeAdapter(list[LLMMessage]).validate_python(raw))


class AutoGenStepLog:
    """Drive an AutoGen ``AssistantAgent`` one model call at a time, saving its own state after every step.

    The agent must make one model call per ``run`` (``max_tool_iterations=1``, no reflection),
    so each saved state sits on a step boundary. Restoring is the agent's own ``load_state``.
    """

    def __init__(self, agent: Any, *, max_steps: int = 30) -> None:
        if getattr(agent, "_max_tool_iterations", 1) != 1 or getattr(agent, "_reflect_on_tool_use", False):
            raise CheckpointError("step checkpoints need AssistantAgent(max_tool_iterations=1, reflect_on_tool_use=False)")
        self.agent = agent
        self.max_steps = max_steps

    async def run(self, task: str, *, on_step: Any = None) -> AutoGenRun:
        """Run `task` from the agent's current state; `on_step(run, step)` may return True to stop early."""
        record = AutoGenRun(task=task, initial_state=await self.agent.save_state())
        await self._drive(record, [task], on_step=on_step)
        return record

    async def fork(self, run: AutoGenRun, step: int, hint: str | None, *, on_step: Any = None) -> AutoGenRun:
        """Restore the state before `step` with ``load_state`` and run onward, the hint (if any) sent as a user message.

        `run` is not modified: the fork is a new AutoGenRun sharing its prefix.
        """
        await self.agent.load_state(run.state_before(step))
        forked = AutoGenRun(task=run.task, initial_state=run.initial_state, states=list(run.states[:step]),
                            model_steps=step, latencies=list(run.latencies[:step]))
        first: list[str] = [run.task] if step == 0 else []  # before step 0 the task itself was not yet sent
        if hint:
            first.append(hint)
        await self._drive(forked, first, on_step=on_step)
        return forked

    async def _drive(self, record: AutoGenRun, first: list[str], *, on_step: Any) -> None:
        from autogen_agentchat.messages import TextMessage

        pending: list[Any] | None = [TextMessage(content=text, source="user") for text in first] or None
        while record.model_steps < self.max_steps:
            started = time.perf_counter()
            result = await self.agent.run(task=pending)
            record.latencies.append(round(time.perf_counter() - started, 6))
            pending = None
            record.model_steps += 1
            record.states.append(await self.agent.save_state())
            last = result.messages[-1] if result.messages else None
            is_answer = isinstance(last, TextMessage) and last.source == self.agent.name
            if is_answer and last is not None:
                record.answer = last.content
            # on_step feeds the guard (sync layers): a worker thread keeps the event loop free.
            if on_step is not None and await asyncio.to_thread(on_step, record, record.steps()[-1]):
                record.stopped = record.stopped or "breaker"
                return
            if is_answer:
                return
        record.stopped = "max_steps"


class AutoGenFork:
    """The `repair.driver.AsyncForkDriver` of a flagged stepwise AutoGen run."""

    framework = "autogen"

    def __init__(self, log: AutoGenStepLog, run: AutoGenRun, *, episode_id: str | None = None) -> None:
        self.log = log
        self.run = run
        self.episode_id = episode_id or f"{log.agent.name}:{uuid.uuid4().hex[:8]}"
        self._last: AutoGenRun | None = None  # the latest fork (delivered when it passed)

    async def original_steps(self) -> list[Step]:
        return self.run.steps()

    async def fork(self, target: int, hint: Hint, watch: StepWatch, attempt: RepairAttempt) -> list[Step]:
        watch.feed(self.run.steps()[:target])  # the reused prefix
        forked = await self.log.fork(self.run, target, hint.text,
                                     on_step=lambda record, step: watch.feed(record.steps()))
        self._last = forked
        return forked.steps()

    async def deliver(self, outcome: RepairOutcome, passed: RepairAttempt | None) -> None:
        delivered = self._last if passed is not None and self._last is not None else self.run
        outcome.delivered = delivered
        outcome.steps = delivered.steps()


async def arun_autogen(repairer: Repairer, agent: Any, task: str, *, tools: Collection[str] = (),
                       max_steps: int = 30) -> RepairOutcome:
    """Run an AutoGen AssistantAgent step by step under the Guard (state saved per step), repairing on a flag."""
    log = AutoGenStepLog(agent, max_steps=max_steps)
    episode_id = f"{agent.name}:{uuid.uuid4().hex[:8]}"
    breaker_run = repairer.new_breaker_run()
    ctx = repairer.new_context(episode_id, task, "autogen", tools)
    watch = repairer.watch(ctx, breaker_run)
    run = await log.run(task, on_step=lambda record, step: watch.feed(record.steps()))
    steps = run.steps()
    answer = None if watch.trip else run.answer
    flags = watch.finish(answer)
    early = repairer.before_repair(episode_id, flags, steps, watch.trip, answer)
    if early is not None:
        early.delivered = run
        return early
    return await arepair_autogen(repairer, log, run, flags, tools=tools, episode_id=episode_id,
                                 breaker_run=breaker_run, original_answer=answer)


async def arepair_autogen(repairer: Repairer, log: AutoGenStepLog, run: AutoGenRun, findings: Sequence[Finding], *,
                          tools: Collection[str] = (), episode_id: str | None = None,
                          breaker_run: BreakerRun | None = None, original_answer: str | None = None,
                          rung: Rung | None = None) -> RepairOutcome:
    """Repair a flagged AutoGen run: ``load_state`` the state before the target step and run onward."""
    driver = AutoGenFork(log, run, episode_id=episode_id)
    return await repairer.arepair(driver, findings, tools=tools, task=run.task, breaker_run=breaker_run,
                                  original_answer=original_answer if original_answer is not None else run.answer,
                                  rung=rung)
