"""Repair for AutoGen: drive an agent or a team one step at a time, saving its own state, and fork from it.

    outcome = await arun_autogen(Repairer(guard), agent, task)   # AssistantAgent(max_tool_iterations=1)
    outcome = await arun_autogen_team(Repairer(guard), team, task)  # RoundRobinGroupChat/SelectorGroupChat(max_turns=1)
    outcome.delivered                                           # the delivered run with its saved states

Restoring is the agent's (or team's) own ``load_state``; the original run's saved states are never modified.
"""

from __future__ import annotations

from adapters.extras import require

require("autogen", __name__)

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.autogen import ObservedChatCompletionClient, ObservedWorkbench
from adapters.steps import step_from_autogen_result, steps_from_autogen_context, steps_from_autogen_events
from guardrail.core.events import Finding, Step
from repair.breaker import BreakerRun
from repair.driver import CheckpointError
from repair.repairer import RepairAttempt, Repairer, RepairOutcome, StepWatch
from repair.rungs import Hint, Rung

__all__ = ["AutoGenFork", "AutoGenRun", "AutoGenStepLog", "AutoGenTeamRun", "AutoGenTeamStepLog", "arepair_autogen",
           "arun_autogen", "arun_autogen_team"]

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
    # What the saved state does not hold, recorded as the run went: each model call's output (logprobs,
    # token usage) and seconds, and each tool call's seconds when a guarded workbench measured them.
    model_outputs: list[dict[str, Any]] = field(default_factory=list)
    latencies: list[float | None] = field(default_factory=list)
    tool_latencies: dict[str, float] = field(default_factory=dict)

    def steps(self) -> list[Step]:
        """The run's steps through the adapters' one step path, from the saved context and what was recorded."""
        state = self.states[-1] if self.states else self.initial_state
        context = _context_messages(state)
        replies = [m for m in context if getattr(m, "type", None) == "AssistantMessage"]
        if len(self.model_outputs) != len(replies):  # a run saved without its outputs: the context alone
            return steps_from_autogen_context(context, task=self.task, model_latency_s=self.latencies,
                                              tool_latency_s=self.tool_latencies)
        from autogen_core.models import CreateResult

        executed = {item.call_id: item for m in context if getattr(m, "type", None) == "FunctionExecutionResultMessage"
                    for item in m.content}
        last = len(replies) - 1
        return [step_from_autogen_result(i, CreateResult.model_validate(output), executed, task=self.task,
                                         model_latency_s=self.latencies[i] if i < len(self.latencies) else None,
                                         tool_latency_s=self.tool_latencies, final=i == last)
                for i, output in enumerate(self.model_outputs)]

    format_name = AUTOGEN_RUN_FORMAT

    def save(self, path: str | Path) -> None:
        """Write the run (task, every saved state, answer) as versioned JSON, atomically."""
        from guardrail.core.fileio import atomic_write_text

        payload = {"format": self.format_name, "version": AUTOGEN_RUN_VERSION, **dataclasses.asdict(self)}
        atomic_write_text(path, json.dumps(payload, sort_keys=True))

    @classmethod
    def load(cls, path: str | Path) -> AutoGenRun:
        """Read a run written by `save`; a file of another format or version is refused with a clear error."""
        try:
            payload = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"cannot read AutoGen run {path}: {exc}") from exc
        if not isinstance(payload, dict) or payload.get("format") != cls.format_name:
            raise CheckpointError(f"{path} is not a {cls.format_name} file")
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


def _opening(task: str, step: int, hint: str | None) -> list[str]:
    """The user messages a fork at `step` starts with: the task when forking before step 0 (it was not yet sent),
    then the hint."""
    return ([task] if step == 0 else []) + ([hint] if hint else [])


def _check_one_call_per_run(agent: Any) -> None:
    if getattr(agent, "_max_tool_iterations", 1) != 1 or getattr(agent, "_reflect_on_tool_use", False):
        raise CheckpointError("step checkpoints need AssistantAgent(max_tool_iterations=1, reflect_on_tool_use=False)")


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
        _check_one_call_per_run(agent)
        self.agent = agent
        self.name = str(agent.name)
        self.max_steps = max_steps
        self._recording: AutoGenRun | None = None
        # Record every model output where the saved state would lose it (logprobs, usage, seconds).
        client = getattr(agent, "_model_client", None)
        if client is not None and not isinstance(client, ObservedChatCompletionClient):
            agent._model_client = ObservedChatCompletionClient(client, self._on_output)
        benches = getattr(agent, "_workbench", None)
        if isinstance(benches, list):
            agent._workbench = [b if isinstance(b, ObservedWorkbench) else ObservedWorkbench(b, self._on_tool)
                                for b in benches]

    def _on_tool(self, call_id: str | None, name: str, seconds: float) -> None:
        if self._recording is not None and call_id:
            self._recording.tool_latencies[call_id] = seconds

    async def _on_output(self, created: Any, latency_s: float | None) -> None:
        if self._recording is not None:
            self._recording.model_outputs.append(created.model_dump(mode="json"))
            self._recording.latencies.append(latency_s)

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
                            model_steps=step, model_outputs=list(run.model_outputs[:step]),
                            latencies=list(run.latencies[:step]), tool_latencies=dict(run.tool_latencies))
        await self._drive(forked, _opening(run.task, step, hint), on_step=on_step)
        return forked

    async def _drive(self, record: AutoGenRun, first: list[str], *, on_step: Any) -> None:
        from autogen_agentchat.messages import TextMessage

        pending: list[Any] | None = [TextMessage(content=text, source="user") for text in first] or None
        self._recording = record
        while record.model_steps < self.max_steps:
            result = await self.agent.run(task=pending)
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

    def __init__(self, log: AutoGenStepLog | AutoGenTeamStepLog, run: AutoGenRun, *,
                 episode_id: str | None = None) -> None:
        self.log = log
        self.run = run
        self.episode_id = episode_id or f"{log.name}:{uuid.uuid4().hex[:8]}"
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
    early = repairer.before_repair(episode_id, flags, steps, watch.trip, answer, watch.alarms)
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


# ----------------------------------------------------------------------------- teams
AUTOGEN_TEAM_RUN_FORMAT = "guardrail-autogen-team-run"


@dataclass
class AutoGenTeamRun(AutoGenRun):
    """A stepwise team run: ``states[i]`` is the team's ``save_state`` after turn i (every agent and the manager)."""

    format_name = AUTOGEN_TEAM_RUN_FORMAT

    def steps(self) -> list[Step]:
        """The run's steps from the group chat manager's own message thread (thoughts, calls, results, text)."""
        state = self.states[-1] if self.states else self.initial_state
        return steps_from_autogen_events(_thread_messages(state), task=self.task, model_latency_s=self.latencies)


def _thread_messages(state: dict[str, Any]) -> list[Any]:
    """The manager's message thread inside a team's saved state, as AgentChat message objects."""
    from autogen_agentchat.messages import MessageFactory

    factory = MessageFactory()
    for agent_state in (state.get("agent_states") or {}).values():
        if isinstance(agent_state, dict) and "message_thread" in agent_state:
            return [factory.create(message) for message in agent_state["message_thread"]]
    return []


class AutoGenTeamStepLog:
    """Drive an AgentChat team one turn at a time, saving the team's own state after every turn.

    The team must stop after each turn (``RoundRobinGroupChat(..., max_turns=1)`` or the same for
    ``SelectorGroupChat``) and each participant make one model call per turn
    (``AssistantAgent(max_tool_iterations=1, reflect_on_tool_use=False)``), so turn i is model step i
    and every saved state sits on a step boundary. The run ends at the first text answer from a
    participant, when the team's own termination condition fires, or after `max_steps` turns. A
    stateful termination condition (``MaxMessageTermination``) restarts its count each turn (AgentChat
    resets conditions when a turn limit stops the team): the driver's `max_steps` bounds the run.
    """

    def __init__(self, team: Any, *, max_steps: int = 30) -> None:
        if getattr(team, "_max_turns", None) != 1:
            raise CheckpointError("team step checkpoints need the team built with max_turns=1 "
                                  "(e.g. RoundRobinGroupChat(agents, max_turns=1)); it is resumed turn by turn")
        for agent in getattr(team, "_participants", []):
            _check_one_call_per_run(agent)
        self.team = team
        self.name = str(getattr(team, "name", None) or type(team).__name__)
        self.max_steps = max_steps

    async def run(self, task: str, *, on_step: Any = None) -> AutoGenTeamRun:
        """Run `task` from the team's current state; `on_step(run, step)` may return True to stop early."""
        record = AutoGenTeamRun(task=task, initial_state=dict(await self.team.save_state()))
        await self._drive(record, [task], on_step=on_step)
        return record

    async def fork(self, run: AutoGenRun, step: int, hint: str | None, *, on_step: Any = None) -> AutoGenTeamRun:
        """Restore the team's state before `step` with ``load_state`` and run onward, the hint sent as a user message."""
        await self.team.load_state(run.state_before(step))
        forked = AutoGenTeamRun(task=run.task, initial_state=run.initial_state, states=list(run.states[:step]),
                                model_steps=step, latencies=list(run.latencies[:step]))
        await self._drive(forked, _opening(run.task, step, hint), on_step=on_step)
        return forked

    async def _drive(self, record: AutoGenRun, first: list[str], *, on_step: Any) -> None:
        from autogen_agentchat.messages import TextMessage

        pending: list[Any] | None = [TextMessage(content=text, source="user") for text in first] or None
        while record.model_steps < self.max_steps:
            started = time.perf_counter()
            result = await self.team.run(task=pending)
            record.latencies.append(round(time.perf_counter() - started, 6))
            pending = None
            record.model_steps += 1
            record.states.append(dict(await self.team.save_state()))
            last = result.messages[-1] if result.messages else None
            answered = isinstance(last, TextMessage) and last.source != "user"
            if answered and last is not None:
                record.answer = last.content
            # A turn limit stopped it (the usual case): go on; anything else is the team's own termination.
            ended = not (result.stop_reason or "").startswith("Maximum number of turns")
            if on_step is not None and await asyncio.to_thread(on_step, record, record.steps()[-1]):
                record.stopped = record.stopped or "breaker"
                return
            if answered or ended:
                return
        record.stopped = "max_steps"


async def arun_autogen_team(repairer: Repairer, team: Any, task: str, *, tools: Collection[str] = (),
                            max_steps: int = 30,
                            on_original: Callable[[AutoGenTeamRun], None] | None = None) -> RepairOutcome:
    """Run an AgentChat team turn by turn under the Guard (team state saved per turn), repairing on a flag.

    A flagged run is rolled back with the team's ``load_state`` to the state before its last
    fact-gathering step and re-run with the hint, under the rung ladder and circuit breaker;
    ``outcome.delivered`` is the delivered `AutoGenTeamRun` (the repaired one when a fork passed);
    `on_original` sees the original run as soon as it ends, before any fork.
    """
    log = AutoGenTeamStepLog(team, max_steps=max_steps)
    episode_id = f"{log.name}:{uuid.uuid4().hex[:8]}"
    breaker_run = repairer.new_breaker_run()
    ctx = repairer.new_context(episode_id, task, "autogen_team", tools)
    watch = repairer.watch(ctx, breaker_run)
    run = await log.run(task, on_step=lambda record, step: watch.feed(record.steps()))
    if on_original is not None:
        on_original(run)
    steps = run.steps()
    answer = None if watch.trip else run.answer
    flags = await asyncio.to_thread(watch.finish, answer)
    early = repairer.before_repair(episode_id, flags, steps, watch.trip, answer, watch.alarms)
    if early is not None:
        early.delivered = run
        return early
    driver = AutoGenFork(log, run, episode_id=episode_id)
    driver.framework = "autogen_team"
    return await repairer.arepair(driver, flags, tools=tools, task=task, breaker_run=breaker_run,
                                  original_answer=answer)
