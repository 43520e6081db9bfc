"""AutoGen AgentChat adapter: a guarded workbench, a monitored model client and a termination condition on alarm.

    guarded = AutoGenGuard(guard)
    agent = AssistantAgent("a", model_client=guarded.model_client(client), workbench=guarded.workbench(tools))
    team = RoundRobinGroupChat([agent], termination_condition=guarded.termination() | MaxMessageTermination(8))
    result = await team.run(task="...")
    decision = await guarded.afinish(result)

- `GuardedWorkbench` (a `StaticWorkbench`) runs ``guard.before_action`` on every call; a block
  returns ``ToolResult(is_error=True)`` carrying the warning and hint, so the model reads it.
  After the call, ``guard.after_result`` sees what came back.
- `GuardedChatCompletionClient` wraps the agent's model client: each model output (text, tool
  calls, token logprobs) becomes a step for ``guard.on_step``. A step with tool calls is fed once
  the workbench has all its results; a text step once the next model call starts or the run ends
  (then it is the final answer).
- `GuardAlarmTermination` stops a team on the first alarm or repair verdict since its last reset.
  With ``Guard(on_alarm="stop")`` (or ``"repair"`` in intervene mode) the guarded model client also
  answers every call after an alarm with a final "Stopped by guardrail" message instead of reaching
  the model, so a lone agent ends there too.
- The task is the one given to `AutoGenGuard`, else the first user message the model is sent.

One `AutoGenGuard` is one episode at a time: the first event starts it, `finish` closes it, and the
next event starts the next one. Use one `AutoGenGuard` per concurrent run.
"""

from __future__ import annotations

from adapters.extras import require

require("autogen", __name__)

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from autogen_agentchat.base import TerminatedException, TerminationCondition
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage, StopMessage
from autogen_core import CancellationToken
from autogen_core.models import (
    ChatCompletionClient,
    CreateResult,
    LLMMessage,
    ModelInfo,
    RequestUsage,
    UserMessage,
)
from autogen_core.tools import BaseTool, StaticWorkbench, TextResultContent, ToolResult, ToolSchema, Workbench

from adapters.common import asafe_decision, call_action, log, with_problem
from adapters.steps import step_from_autogen_result
from adapters.tool_schemas import schema_of
from guardrail.core.events import Decision, Result, Verdict
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext

__all__ = [
    "AutoGenGuard",
    "GuardAlarmTermination",
    "GuardedChatCompletionClient",
    "GuardedWorkbench",
    "ObservedChatCompletionClient",
    "ObservedWorkbench",
]


@dataclass
class _Pending:
    """A model output not fed yet: the results that came back so far, and whether a later model output followed it."""

    created: CreateResult
    agent: str | None = None
    model_latency_s: float | None = None
    executed: dict[str, Result] = field(default_factory=dict)  # call id -> what the workbench returned
    followed: bool = False

    @property
    def calls(self) -> list[Any]:
        return self.created.content if isinstance(self.created.content, list) else []

    @property
    def waiting(self) -> bool:
        return any(call.id not in self.executed for call in self.calls)


class AutoGenGuard:
    """Ties one Guard episode to an AutoGen agent or team: hands out the workbench, client and termination."""

    def __init__(self, guard: Guard, *, task: str | None = None, cwd: str | None = None,
                 framework: str = "autogen") -> None:
        self.guard = guard
        self.task = task
        self.cwd = cwd
        self.framework = framework
        self.decisions: list[Decision] = []  # every non-allow decision of the current episode
        # The current (or, after `finish`, the last) episode's id: what `guard.label` and `guardrail runs` take.
        self.episode_id: str | None = None
        self._ctx: EpisodeContext | None = None
        self._pending: list[_Pending] = []
        self._alarm: Decision | None = None

    # ----------------------------------------------------------------- parts for AutoGen
    def workbench(self, tools: Sequence[BaseTool[Any, Any]] | Workbench, **kwargs: Any) -> GuardedWorkbench:
        """A guarded workbench over `tools`: a list of tools, or any `Workbench` (an ``McpWorkbench``...)."""
        if isinstance(tools, Workbench):
            from adapters.autogen_workbench import GuardedMcpWorkbench

            return GuardedMcpWorkbench(tools, self, **kwargs)
        return GuardedWorkbench(list(tools), self, **kwargs)

    def model_client(self, client: ChatCompletionClient, *, agent: str | None = None,
                     logprobs: bool = False) -> GuardedChatCompletionClient:
        """`client` wrapped so its outputs reach the guard; ``logprobs=True`` asks every call for token logprobs.

        AssistantAgent passes no per-call arguments, so an OpenAI-compatible client only returns the
        logprobs the monitor's uncertainty channel reads when the wrapper asks for them.
        """
        return GuardedChatCompletionClient(client, self, agent=agent, logprobs=logprobs)

    def termination(self) -> GuardAlarmTermination:
        return GuardAlarmTermination(self)

    # ----------------------------------------------------------------- episode
    @property
    def context(self) -> EpisodeContext:
        """The running episode's context (started on first use)."""
        if self._ctx is None or self._ctx.finished:
            self._ctx = self.guard.start_episode(task=self.task, framework=self.framework)
            self.episode_id = self._ctx.episode_id
            self.decisions = []
        return self._ctx

    def set_task(self, task: str) -> None:
        """The task of the current episode (the termination condition reads it off the team's first message)."""
        self.task = self.task or task
        ctx = self.context
        if ctx.episode.task is None:
            ctx.episode.task = task

    @property
    def alarm(self) -> Decision | None:
        """The first alarm (or repair) decision not yet consumed by a termination reset."""
        return self._alarm

    def _record(self, decision: Decision) -> Decision:
        if decision.verdict is not Verdict.ALLOW:
            self.decisions.append(decision)
        if decision.verdict in (Verdict.ALARM, Verdict.REPAIR) and self._alarm is None:
            self._alarm = decision
        return decision

    def clear_alarm(self) -> None:
        self._alarm = None

    def learn_task(self, messages: Sequence[LLMMessage]) -> None:
        """Take the episode's task from the first user message a model call is sent, when none was given."""
        ctx = self.context
        if ctx.episode.task is not None:
            return
        first = next((m.content for m in messages if isinstance(m, UserMessage) and isinstance(m.content, str)), None)
        if isinstance(first, str):
            ctx.episode.task = first  # this episode's only: the next run's task is its own first message

    def stop_result(self) -> CreateResult | None:
        """What a model call gets instead of the model once the run alarmed and the policy ends it there."""
        alarm = self._alarm
        if alarm is None or not getattr(self.guard, "stops_on_alarm", False):
            return None
        return CreateResult(finish_reason="stop", content=f"Stopped by guardrail ({alarm.verdict.value}): "
                                                          f"{alarm.message()}",
                            usage=RequestUsage(prompt_tokens=0, completion_tokens=0), cached=False)

    # ----------------------------------------------------------------- steps
    async def _emit_ready(self, *, final: bool = False) -> None:
        """Feed, in order, the pending steps that are complete (all of them when the run ends)."""
        while self._pending:
            head = self._pending[0]
            complete = (head.followed if not head.calls else not head.waiting) or final
            if not complete:
                return
            self._pending.pop(0)
            ctx = self.context
            # The last text of the run is its answer; a text another model output followed was not.
            answer = final and not self._pending and not head.followed
            step = step_from_autogen_result(
                ctx.step_index, head.created, head.executed, task=ctx.task, model_latency_s=head.model_latency_s,
                tool_latency_s={k: r.latency_s for k, r in head.executed.items() if r.latency_s is not None},
                meta={"agent": head.agent} if head.agent else None, final=answer)
            self._record(await asafe_decision("on_step", partial(self.guard.aon_step, ctx, step)))

    async def on_model_output(self, created: CreateResult, *, agent: str | None = None,
                              latency_s: float | None = None) -> None:
        """A model call returned: a text step before it was not the answer; this one waits for its tool results."""
        for pending in self._pending:
            pending.followed = True
        self._pending.append(_Pending(created, agent=agent, model_latency_s=latency_s))
        await self._emit_ready()

    async def on_tool_result(self, call_id: str | None, name: str, result: Result) -> None:
        """The workbench finished a call: record the result on the step that asked for it."""
        for pending in self._pending:
            for call in pending.calls:
                if call.id in pending.executed:
                    continue
                if (call_id and call.id == call_id) or (not call_id and call.name == name):
                    pending.executed[call.id] = result
                    await self._emit_ready()
                    return

    async def afinish(self, result: Any = None, *, answer: str | None = None) -> Decision:
        """Close the episode: feed what is pending, run the end-of-run verifiers. `result` may be a TaskResult."""
        if answer is None and result is not None:
            answer = _answer_of(result)
        await self._emit_ready(final=True)
        ctx = self.context
        decision = self._record(await asafe_decision("on_finish", partial(self.guard.aon_finish, ctx, answer=answer)))
        # The next event starts a new episode with a clean slate (`decisions` stays readable until then).
        self._pending = []
        self._alarm = None
        self._ctx = None
        return decision

    def finish(self, result: Any = None, *, answer: str | None = None) -> Decision:
        """Sync twin of `afinish` (for code outside the event loop)."""
        import asyncio

        return asyncio.run(self.afinish(result, answer=answer))


def _answer_of(result: Any) -> str | None:
    messages = getattr(result, "messages", None) or []
    for message in reversed(messages):
        if isinstance(message, BaseChatMessage) and not isinstance(message, StopMessage):
            content = getattr(message, "content", None)
            if isinstance(content, str):
                return content
    return None


class GuardedWorkbench(StaticWorkbench):
    """A `StaticWorkbench` whose every call goes through the guard (usable as ``AssistantAgent(workbench=...)``)."""

    def __init__(self, tools: list[BaseTool[Any, Any]], guarded: AutoGenGuard | Guard,
                 tool_overrides: Any = None) -> None:
        super().__init__(tools, tool_overrides=tool_overrides)
        self.guarded = guarded if isinstance(guarded, AutoGenGuard) else AutoGenGuard(guarded)
        # The tools' own argument schemas, declared to each episode: the gate holds every call to them.
        self.schemas: dict[str, dict[str, Any]] = {}
        for tool in tools:
            try:
                name, schema = schema_of(tool)
            except Exception as exc:  # noqa: BLE001 - an unreadable schema leaves that tool unchecked
                log.warning("guardrail: cannot read the schema of tool %r: %s", getattr(tool, "name", tool), exc)
                continue
            self.schemas[name] = schema
        for override_of, override in (tool_overrides or {}).items():  # the names the model sees
            renamed = getattr(override, "name", None) or (override.get("name") if isinstance(override, dict) else None)
            if renamed and override_of in self.schemas:
                self.schemas[renamed] = self.schemas[override_of]

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> ToolResult:
        guarded = self.guarded
        guard = guarded.guard
        ctx = guarded.context
        if self.schemas and name not in ctx.tool_schemas:
            ctx.declare_tools(self.schemas)
        action, problem = call_action(name, arguments if arguments is not None else {}, call_id, cwd=guarded.cwd)
        decision = guarded._record(with_problem(
            await asafe_decision("before_action", lambda: guard.abefore_action(ctx, action)), problem, guard, ctx))
        if decision.blocked:
            message = decision.message() or "blocked by guardrail"
            await guarded.on_tool_result(call_id, name, Result(output="", is_error=True, call_id=call_id,
                                                                blocked=True, guard_message=message))
            return ToolResult(name=name, result=[TextResultContent(content=message)], is_error=True)
        started = time.perf_counter()
        tool_result = await super().call_tool(name, arguments, cancellation_token, call_id)
        latency = round(time.perf_counter() - started, 6)
        output = "".join(c.content for c in tool_result.result if isinstance(c, TextResultContent))
        result = Result(output=output, is_error=tool_result.is_error, call_id=call_id, latency_s=latency)
        after = guarded._record(await asafe_decision("after_result", lambda: guard.aafter_result(ctx, action, result)))
        if after.blocked:
            warning = after.message()
            result = Result(output=output, is_error=True, call_id=call_id, latency_s=latency, guard_message=warning)
            tool_result = ToolResult(name=name, result=[TextResultContent(content=f"{output}\n\n{warning}")],
                                     is_error=True)
        await guarded.on_tool_result(call_id, name, result)
        return tool_result


class ObservedChatCompletionClient(ChatCompletionClient):
    """Wraps a model client and hands every output and its seconds to `on_output`; delegates everything else.

    ``logprobs=True`` asks every call for token logprobs (an OpenAI-compatible client returns them only
    when asked, and AssistantAgent passes no per-call arguments).
    """

    def __init__(self, inner: ChatCompletionClient,
                 on_output: Callable[[CreateResult, float | None], Awaitable[None]], *, logprobs: bool = False) -> None:
        self.inner = inner
        self.on_output = on_output
        self.logprobs = logprobs

    def _kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if not self.logprobs:
            return kwargs
        extra = dict(kwargs.get("extra_create_args") or {})
        extra.setdefault("logprobs", True)
        return {**kwargs, "extra_create_args": extra}

    async def _observe(self, created: CreateResult, latency_s: float | None) -> None:
        try:
            await self.on_output(created, latency_s)
        except Exception as exc:  # noqa: BLE001 - an observer never breaks the agent's model call
            log.warning("guardrail could not observe a model output: %s: %s", type(exc).__name__, exc)

    async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
        started = time.perf_counter()
        created = await self.inner.create(messages, **self._kwargs(kwargs))
        await self._observe(created, round(time.perf_counter() - started, 6))
        return created

    async def create_stream(  # type: ignore[override]  # same signature, written as an async generator
        self, messages: Sequence[LLMMessage], **kwargs: Any
    ) -> AsyncGenerator[str | CreateResult, None]:
        started = time.perf_counter()
        async for chunk in self.inner.create_stream(messages, **self._kwargs(kwargs)):
            if isinstance(chunk, CreateResult):
                await self._observe(chunk, round(time.perf_counter() - started, 6))
            yield chunk

    async def close(self) -> None:
        await self.inner.close()

    def actual_usage(self) -> RequestUsage:
        return self.inner.actual_usage()

    def total_usage(self) -> RequestUsage:
        return self.inner.total_usage()

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Any] = ()) -> int:
        return self.inner.count_tokens(messages, tools=list(tools))

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Any] = ()) -> int:
        return self.inner.remaining_tokens(messages, tools=list(tools))

    @property
    def capabilities(self) -> Any:  # deprecated in AutoGen, still abstract
        return self.inner.model_info

    @property
    def model_info(self) -> ModelInfo:
        return self.inner.model_info


class GuardedChatCompletionClient(ObservedChatCompletionClient):
    """Wraps an agent's model client so every model output reaches the step monitor; delegates everything else."""

    def __init__(self, inner: ChatCompletionClient, guarded: AutoGenGuard, *, agent: str | None = None,
                 logprobs: bool = False) -> None:
        super().__init__(inner, self._to_guard, logprobs=logprobs)
        self.guarded = guarded
        self.agent = agent

    async def _to_guard(self, created: CreateResult, latency_s: float | None) -> None:
        await self.guarded.on_model_output(created, agent=self.agent, latency_s=latency_s)

    async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
        self.guarded.learn_task(messages)
        stop = self.guarded.stop_result()
        return stop if stop is not None else await super().create(messages, **kwargs)

    async def create_stream(  # type: ignore[override]  # same signature, written as an async generator
        self, messages: Sequence[LLMMessage], **kwargs: Any
    ) -> AsyncGenerator[str | CreateResult, None]:
        self.guarded.learn_task(messages)
        stop = self.guarded.stop_result()
        if stop is not None:
            yield stop
            return
        async for chunk in super().create_stream(messages, **kwargs):
            yield chunk


class ObservedWorkbench(Workbench):
    """Wraps a workbench and reports each tool call's id, name and seconds to `on_call`; delegates the rest."""

    def __init__(self, inner: Workbench, on_call: Callable[[str | None, str, float], None]) -> None:
        super().__init__()
        self.inner = inner
        self.on_call = on_call

    async def list_tools(self) -> list[ToolSchema]:
        return await self.inner.list_tools()

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None,
                        cancellation_token: CancellationToken | None = None, call_id: str | None = None) -> ToolResult:
        started = time.perf_counter()
        try:
            return await self.inner.call_tool(name, arguments, cancellation_token, call_id)
        finally:
            try:
                self.on_call(call_id, name, round(time.perf_counter() - started, 6))
            except Exception as exc:  # noqa: BLE001 - an observer never breaks the agent's tool call
                log.warning("guardrail could not observe a tool call: %s: %s", type(exc).__name__, exc)

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def reset(self) -> None:
        await self.inner.reset()

    async def save_state(self) -> Mapping[str, Any]:
        return await self.inner.save_state()

    async def load_state(self, state: Mapping[str, Any]) -> None:
        await self.inner.load_state(state)


class GuardAlarmTermination(TerminationCondition):
    """Stops a team when the guard raised an alarm (step monitor) or asked for repair since the last reset."""

    def __init__(self, guarded: AutoGenGuard) -> None:
        self.guarded = guarded
        self._terminated = False

    @property
    def terminated(self) -> bool:
        return self._terminated

    async def __call__(self, messages: Sequence[BaseAgentEvent | BaseChatMessage]) -> StopMessage | None:
        if self._terminated:
            raise TerminatedException("Termination condition has already been reached")
        for message in messages:
            content = getattr(message, "content", None)
            if getattr(message, "source", None) == "user" and isinstance(content, str):
                self.guarded.set_task(content)
                break
        alarm = self.guarded.alarm
        if alarm is None:
            return None
        self._terminated = True
        return StopMessage(content=f"guardrail {alarm.verdict.value}: {alarm.message()}", source="guardrail")

    async def reset(self) -> None:
        self._terminated = False
        self.guarded.clear_alarm()

