"""LangChain v1 / LangGraph adapter: an `AgentMiddleware` for `create_agent`, plus a ToolNode and nodes for StateGraphs.

    agent = create_agent(model, tools, middleware=[GuardMiddleware(guard)], checkpointer=saver)

- ``wrap_tool_call`` runs ``guard.before_action``; a block returns the framework's own
  ``ToolMessage(status="error")`` carrying the warning and its repair hint, so the model reads it
  and tries again. After the tool ran, ``guard.after_result`` sees what it returned.
- ``wrap_model_call`` feeds ``guard.on_step`` (text, tool calls, token logprobs, model latency). A
  step with tool calls is fed once its tool results are in (at the next model call or the end of
  the run), so the monitor sees the same shape of step it was fitted on (the call and what came
  back). With ``stop_on_alarm=True`` an alarm answers the next model call with a final message.
- ``after_agent`` runs ``guard.on_finish``. A repair verdict goes to ``on_repair``, or, with
  ``repair=True`` (or a `repair.Repairer`), is repaired inside the same ``invoke``/``ainvoke``: the
  thread is forked at the rollback checkpoint through the graph's own checkpointer, re-run live
  under the rung ladder and circuit breaker, and the run returns the repaired messages with the
  record in ``state["guardrail_repair"]``. The original branch's checkpoints stay as they were.
  The middleware must know its graph: ``agent = middleware.bind(create_agent(..., middleware=[middleware]))``.

For a hand-built ``StateGraph``: ``middleware.tool_node(tools)`` is a ``ToolNode`` with the same
gate, ``middleware.observe_node`` feeds the steps and ``middleware.finish_node`` closes the episode.
"""

from __future__ import annotations

from adapters.extras import require

require("langgraph", __name__)

import asyncio
import contextvars
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, NotRequired, Optional

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import ModelResponse, OmitFromInput
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from opentelemetry import context as otel_context

from adapters.common import asafe_decision, call_action, safe_decision, with_problem
from adapters.langgraph_repair import AsyncLangGraphFork, LangGraphFork
from adapters.steps import LATENCY_KEY, content_text, step_from_langchain
from adapters.tool_schemas import SchemaCache
from guardrail.core.events import Action, Decision, Finding, Result, Step, Verdict
from guardrail.core.guard import Guard, GuardError
from guardrail.core.layer import EpisodeContext
from repair.driver import CheckpointError
from repair.repairer import Repairer, RepairOutcome, is_flag

__all__ = ["FORK_KEY", "GuardMiddleware", "GuardedAgentState", "RepairCallback"]

_log = logging.getLogger("guardrail.adapters")

# The configurable key marking a repair fork's run (its value names the fork's gate episode): the
# middleware gates the fork's tool calls but neither feeds its steps nor repairs it (the Repairer judges it).
FORK_KEY = "guardrail_fork"

RepairCallback = Callable[[Decision, Any, Any], "dict[str, Any] | None"]
DecisionCallback = Callable[[Decision], None]


class GuardedAgentState(AgentState[Any]):
    """The agent state plus the guard's episode id and, at the end, the episode's findings."""

    guardrail_episode: NotRequired[Annotated[str | None, OmitFromInput]]
    guardrail_findings: NotRequired[Annotated[list[dict[str, Any]], OmitFromInput]]
    guardrail_verdict: NotRequired[Annotated[str | None, OmitFromInput]]
    guardrail_repair: NotRequired[Annotated[dict[str, Any] | None, OmitFromInput]]


@dataclass
class _Run:
    """What the adapter tracks per running episode: where this run's messages start, which steps it fed."""

    start: int
    task: str | None = None
    fed: set[str] = field(default_factory=set)
    declared: bool = False  # the model call's tools were declared to the guard (their schemas)
    # Where the next scan starts: every model turn before `cursor` was fed (its results are all behind it, so
    # what is still to feed and its results lie after). Checked against the message that ends the fed part:
    # a state whose messages were removed or replaced is scanned from `start` again.
    cursor: int = 0
    cursor_message: Any = None


def _result_from(message: Any) -> Result | None:
    if isinstance(message, ToolMessage):
        return Result(output=content_text(message.content), is_error=message.status == "error",
                      call_id=message.tool_call_id, data=message.artifact)
    update = getattr(message, "update", None)  # a Command(update={"messages": [ToolMessage, ...]})
    if isinstance(update, dict):
        for item in reversed(update.get("messages") or []):
            if isinstance(item, ToolMessage):
                return _result_from(item)
    return None


def _stamp_tool_latency(reply: Any, seconds: float) -> None:
    """Put the tool's measured seconds on its ToolMessage(s), where the step path reads them back."""
    if isinstance(reply, ToolMessage):
        replies = [reply]
    else:  # a Command(update={"messages": [ToolMessage, ...]})
        update = getattr(reply, "update", None)
        replies = [m for m in (update.get("messages") or []) if isinstance(m, ToolMessage)] \
            if isinstance(update, dict) else []
    for message in replies:
        message.response_metadata[LATENCY_KEY] = round(seconds, 6)


def _last_human_text(messages: Sequence[AnyMessage]) -> str | None:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return content_text(message.content)
    return None


class GuardMiddleware(AgentMiddleware[GuardedAgentState, Any, Any]):
    """Runs a `Guard` inside a LangChain v1 agent (and, through its helpers, inside any StateGraph).

    ``on_repair(decision, state, runtime)`` is called when the end-of-run verdict is ``repair``
    (intervene mode, a blocking finding); what it returns is merged into the final state update.
    ``on_decision(decision)`` sees every non-allow decision (for logging or a UI).
    ``stop_on_alarm=True`` ends the run when the step monitor raises an alarm: the next model call is
    answered with a final "Stopped by guardrail" message instead of reaching the model; by default it
    follows the guard's alarm policy (``Guard(on_alarm="stop")``, or ``"repair"`` in intervene mode).
    ``repair=True`` (a default `Repairer` over this guard) or ``repair=Repairer(...)`` repairs a
    ``repair`` verdict inside the run (see the module docstring); the guard must be in intervene
    mode for that verdict to exist, and the graph compiled with a checkpointer and bound with `bind`.
    """

    state_schema = GuardedAgentState

    def __init__(
        self,
        guard: Guard,
        *,
        on_repair: RepairCallback | None = None,
        on_decision: DecisionCallback | None = None,
        stop_on_alarm: bool | None = None,
        cwd: str | None = None,
        framework: str = "langgraph",
        repair: bool | Repairer = False,
    ) -> None:
        super().__init__()
        self.guard = guard
        # repair=True: the assembled Guard's own repairer (Guard.default(repair=True, repair_options=...)), else a
        # default one over this guard.
        self.repairer: Repairer | None = (repair if isinstance(repair, Repairer)
                                          else (getattr(guard, "repairer", None) or Repairer(guard)) if repair
                                          else None)
        self.graph: Any = None
        self.on_repair = on_repair
        self.on_decision = on_decision
        self.stop_on_alarm = bool(getattr(guard, "stops_on_alarm", False)) if stop_on_alarm is None else stop_on_alarm
        self.cwd = cwd
        self.framework = framework
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._schemas = SchemaCache()

    def bind(self, graph: Any) -> Any:
        """Tell the middleware which compiled graph it runs in (inline repair re-runs forks of it); returns `graph`."""
        self.graph = graph
        return graph

    # ----------------------------------------------------------------- episodes
    @staticmethod
    def _config(config: Any = None) -> dict[str, Any]:
        if config is None:
            try:
                config = get_config()
            except RuntimeError:
                config = {}
        return config or {}

    def _fork_episode(self, config: Any = None) -> str | None:
        """The gate episode of the repair fork this call runs in, or None outside a fork."""
        configurable = self._config(config).get("configurable") or {}
        marker = configurable.get(FORK_KEY)
        return str(marker) if marker else None

    def _start(self, messages: Sequence[AnyMessage], episode_id: str | None = None) -> str:
        episode_id = episode_id or uuid.uuid4().hex
        fork_of = ":fork:" in episode_id
        try:
            # A repair fork's episode only gates the fork's calls; the Repairer records the attempt itself.
            self.guard.start_episode(episode_id, task=_last_human_text(messages), framework=self.framework,
                                     record=not fork_of)
        except GuardError:
            pass  # already running (a resumed thread): keep feeding the same episode
        with self._lock:
            self._runs.setdefault(episode_id, _Run(start=len(messages), task=_last_human_text(messages)))
        return episode_id

    def _episode(self, state: Any, config: Any = None, *, fork: str | None = None) -> str:
        """This run's episode id: a fork's gate episode, the agent state's, else the thread id; started lazily.

        `fork`: the caller already read the fork marker (`_fork_episode`) of this config."""
        episode_id = fork or self._fork_episode(config)
        if not episode_id:
            episode_id = state.get("guardrail_episode") if isinstance(state, dict) else None
        if not episode_id:
            configurable = self._config(config).get("configurable") or {}
            episode_id = configurable.get("guardrail_episode") or configurable.get("thread_id")
        if episode_id and episode_id in self._runs:  # the hot path: a run this adapter started (dict read)
            return str(episode_id)
        messages = state.get("messages", []) if isinstance(state, dict) else []
        # Unknown here: a hand-built graph (no before_agent) or a new process resuming a thread.
        start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1) + 1
        episode_id = self._start(messages[:start], str(episode_id) if episode_id else None)
        return episode_id

    def _ready_steps(self, episode_id: str, messages: Sequence[AnyMessage], *, final: bool) -> list[Step]:
        """Steps not fed yet whose tool results are all in (all of them when the run is ending).

        Reads only the messages after the last fed turn, so a step costs the same at step 200 as at step 2.
        """
        with self._lock:
            run = self._runs.get(episode_id)
            if run is None:
                return []
            begin = run.start
            if run.start < run.cursor <= len(messages) and messages[run.cursor - 1] is run.cursor_message:
                begin = run.cursor
            pending = messages[begin:]
            replies = [m for m in pending if isinstance(m, ToolMessage)]
            answered = {m.tool_call_id for m in replies}
            steps = []
            for offset, message in enumerate(pending):
                if not isinstance(message, AIMessage) or (message.id and message.id in run.fed):
                    continue
                missing = [c for c in message.tool_calls if c.get("id") not in answered]
                if missing and not final:
                    break  # keep order: a later turn is never fed before an earlier one
                run.fed.add(message.id or uuid.uuid4().hex)
                steps.append(step_from_langchain(len(run.fed) - 1, message, replies, task=run.task))
                run.cursor, run.cursor_message = begin + offset + 1, message
        return steps

    def _declare(self, episode_id: str, tools: Sequence[Any]) -> None:
        """Declare the agent's own tools (their argument schemas) to the episode: the gate holds every call to
        them, with no configuration. Read once per tool object, declared once per run."""
        run = self._runs.get(episode_id)
        if run is None or run.declared or not tools:
            return
        run.declared = True
        try:
            ctx = self.guard.context(episode_id)
        except GuardError:
            return
        schemas = {}
        for tool in tools:
            found = self._schemas.get(tool)
            if found is not None:
                schemas[found[0]] = found[1]
        ctx.declare_tools(schemas)

    def _declare_one(self, episode_id: str, tool: Any) -> None:
        """A tool call's own tool, for a graph whose model calls this middleware does not see (a ToolNode)."""
        if tool is None:
            return
        try:
            ctx = self.guard.context(episode_id)
        except GuardError:
            return
        name = getattr(tool, "name", None)
        if isinstance(name, str) and name in ctx.tool_schemas:
            return
        found = self._schemas.get(tool)
        if found is not None:
            ctx.declare_tools({found[0]: found[1]})

    def _step_index(self, episode_id: str) -> int:
        try:
            return self.guard.context(episode_id).step_index
        except GuardError:
            return 0

    def _notify(self, decision: Decision) -> Decision:
        if decision.verdict is not Verdict.ALLOW and self.on_decision is not None:
            try:
                self.on_decision(decision)
            except Exception:  # noqa: BLE001 - a user callback must not crash the agent either
                pass
        return decision

    def _feed(self, episode_id: str, messages: Sequence[AnyMessage], *, final: bool) -> list[Decision]:
        decisions = []
        for step in self._ready_steps(episode_id, messages, final=final):
            step.index = self._step_index(episode_id)
            decisions.append(self._notify(safe_decision("on_step", partial(self.guard.on_step, episode_id, step))))
        return decisions

    async def _afeed(self, episode_id: str, messages: Sequence[AnyMessage], *, final: bool) -> list[Decision]:
        decisions = []
        for step in self._ready_steps(episode_id, messages, final=final):
            step.index = self._step_index(episode_id)
            decision = await asafe_decision("on_step", partial(self.guard.aon_step, episode_id, step))
            decisions.append(self._notify(decision))
        return decisions

    def _finish_update(self, decision: Decision, episode_id: str, findings: list[dict[str, Any]]) -> dict[str, Any]:
        return {"guardrail_episode": episode_id, "guardrail_findings": findings,
                "guardrail_verdict": decision.verdict.value}

    def _findings_of(self, episode_id: str) -> list[dict[str, Any]]:
        try:
            ctx = self.guard.context(episode_id)
        except GuardError:
            return []
        with ctx.lock:
            return [f.model_dump(mode="json", exclude_defaults=True) for f in ctx.findings]

    def _forget(self, episode_id: str) -> None:
        with self._lock:
            self._runs.pop(episode_id, None)

    # ----------------------------------------------------------------- agent hooks
    def before_agent(self, state: GuardedAgentState, runtime: Any) -> dict[str, Any] | None:
        messages = state.get("messages", [])
        return {"guardrail_episode": self._start(messages), "guardrail_findings": [], "guardrail_verdict": None}

    async def abefore_agent(self, state: GuardedAgentState, runtime: Any) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    def after_agent(self, state: GuardedAgentState, runtime: Any) -> dict[str, Any] | None:
        if self._fork_episode() is not None:
            self._close_fork(self._fork_episode())
            return None
        episode_id = self._episode(state)
        messages = state.get("messages", [])
        self._feed(episode_id, messages, final=True)
        findings_before = self._findings_of(episode_id)
        decision = self._notify(safe_decision("on_finish", lambda: self.guard.on_finish(episode_id)))
        self._forget(episode_id)
        findings = _with_new(findings_before, decision)
        update = self._finish_update(decision, episode_id, findings)
        if self.repairer is not None and decision.verdict is Verdict.REPAIR:
            return {**update, **self._repair_inline(decision, state, episode_id)}
        return {**update, **(self._repair(decision, state, runtime) or {})}

    async def aafter_agent(self, state: GuardedAgentState, runtime: Any) -> dict[str, Any] | None:
        if self._fork_episode() is not None:
            self._close_fork(self._fork_episode())
            return None
        episode_id = self._episode(state)
        messages = state.get("messages", [])
        await self._afeed(episode_id, messages, final=True)
        findings_before = self._findings_of(episode_id)
        decision = self._notify(await asafe_decision("on_finish", lambda: self.guard.aon_finish(episode_id)))
        self._forget(episode_id)
        findings = _with_new(findings_before, decision)
        update = self._finish_update(decision, episode_id, findings)
        if self.repairer is not None and decision.verdict is Verdict.REPAIR:
            return {**update, **(await self._arepair_inline(decision, state, episode_id))}
        return {**update, **(self._repair(decision, state, runtime) or {})}

    def _repair(self, decision: Decision, state: Any, runtime: Any) -> dict[str, Any] | None:
        if decision.verdict is not Verdict.REPAIR or self.on_repair is None:
            return None
        try:
            return self.on_repair(decision, state, runtime)
        except Exception:  # noqa: BLE001 - a failed repair leaves the run as it was
            return None

    # ----------------------------------------------------------------- inline repair
    def _close_fork(self, fork_episode: str | None) -> None:
        """The end of a repair fork's run: close its gate episode; the Repairer judges the fork itself."""
        if fork_episode is not None and fork_episode in self.guard.running_episodes:
            safe_decision("on_finish", lambda: self.guard.on_finish(fork_episode))
        if fork_episode is not None:
            self._forget(fork_episode)

    def _repair_plan(self, decision: Decision, state: Any, episode_id: str) -> dict[str, Any]:
        """What a fork needs: the thread, the flags, the task, the fork runs' config; or an error record."""
        config = self._config()
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if self.graph is None:
            return {"error": "inline repair needs the graph: agent = middleware.bind(create_agent(...))"}
        if thread_id is None or getattr(self.graph, "checkpointer", None) in (None, False):
            return {"error": "inline repair needs a checkpointer and a thread_id (configurable.thread_id)"}
        fork_episode = f"{episode_id}:fork:{uuid.uuid4().hex[:8]}"
        run_config = {"configurable": {FORK_KEY: fork_episode}, "recursion_limit": config.get("recursion_limit", 25)}
        on_alarm = str(getattr(self.guard, "on_alarm", "repair"))
        flags = [f for f in decision.findings if is_flag(f, on_alarm)] or list(decision.findings)
        return {"thread": {"configurable": {"thread_id": thread_id}}, "flags": flags, "run_config": run_config,
                "task": _last_human_text(state.get("messages", [])), "messages": list(state.get("messages", [])),
                "tools": _tool_names(self.graph), "fork_episode": fork_episode}

    def _repair_inline(self, decision: Decision, state: Any, episode_id: str) -> dict[str, Any]:
        plan = self._repair_plan(decision, state, episode_id)
        if "error" in plan:
            return _plan_failed(plan["error"])
        assert self.repairer is not None
        repairer = self.repairer
        parent = otel_context.get_current()

        def work() -> tuple[RepairOutcome, LangGraphFork]:
            token = otel_context.attach(parent)  # the repair spans stay in the agent's trace
            try:
                head = _saved_head(self.graph, plan["thread"], plan["messages"])
                driver = LangGraphFork(self.graph, head, task=plan["task"],
                                       original_messages=plan["messages"], run_config=plan["run_config"])
                return repairer.repair(driver, plan["flags"], tools=plan["tools"], task=plan["task"]), driver
            finally:
                otel_context.detach(token)

        try:
            # A fresh context: the fork is a run of its own, not a subgraph call of the node running here.
            outcome, driver = contextvars.Context().run(work)
        except Exception as exc:  # noqa: BLE001 - a repair that cannot start leaves the run as it was
            _log.warning("guardrail: inline repair failed: %s: %s", type(exc).__name__, exc)
            return {"guardrail_repair": {"outcome": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]}}
        finally:
            self._close_fork(plan["fork_episode"])
        messages = driver.checkpoints.messages(outcome.config) if outcome.outcome == "repaired" else None
        return _repair_update(outcome, driver.checkpoints.head_config, messages)

    async def _arepair_inline(self, decision: Decision, state: Any, episode_id: str) -> dict[str, Any]:
        plan = self._repair_plan(decision, state, episode_id)
        if "error" in plan:
            return _plan_failed(plan["error"])
        assert self.repairer is not None
        repairer = self.repairer
        parent = otel_context.get_current()

        async def work() -> tuple[RepairOutcome, AsyncLangGraphFork]:
            otel_context.attach(parent)  # this task's own context: nothing to detach afterwards
            head = await _asaved_head(self.graph, plan["thread"], plan["messages"])
            driver = await AsyncLangGraphFork.open(self.graph, head, task=plan["task"],
                                                   original_messages=plan["messages"], run_config=plan["run_config"])
            return await repairer.arepair(driver, plan["flags"], tools=plan["tools"], task=plan["task"]), driver

        try:
            task = asyncio.get_running_loop().create_task(work(), context=contextvars.Context())
            outcome, driver = await task
        except Exception as exc:  # noqa: BLE001
            _log.warning("guardrail: inline repair failed: %s: %s", type(exc).__name__, exc)
            return {"guardrail_repair": {"outcome": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]}}
        finally:
            self._close_fork(plan["fork_episode"])
        messages = await driver.checkpoints.amessages(outcome.config) if outcome.outcome == "repaired" else None
        return _repair_update(outcome, driver.checkpoints.head_config, messages)

    # ----------------------------------------------------------------- model calls
    # Steps are fed around the model call, not from before_model/after_model hooks: each of those is a
    # graph node run every loop turn (a superstep and a checkpoint write); wrapping the call adds no node.
    def _before_model_call(self, request: Any, config: Any) -> tuple[str, list[Decision]]:
        episode_id = self._episode(request.state, config)
        self._declare(episode_id, request.tools)
        return episode_id, self._feed(episode_id, request.state.get("messages", []), final=False)

    def _stop_response(self, decisions: list[Decision]) -> ModelResponse | None:
        """With ``stop_on_alarm``, an alarm answers the model call with a final message: the agent ends there."""
        alarm = next((d for d in decisions if d.verdict in (Verdict.ALARM, Verdict.REPAIR)), None)
        if not self.stop_on_alarm or alarm is None:
            return None
        return ModelResponse(result=[AIMessage(content=f"Stopped by guardrail ({alarm.verdict.value}): "
                                                       f"{alarm.message()}", id=f"guardrail-{uuid.uuid4().hex}")])

    @staticmethod
    def _stamp_model_output(response: Any, seconds: float) -> list[AIMessage]:
        """Id and latency on what the model produced; the produced messages, when a text turn is ready to feed."""
        produced = [m for m in getattr(response, "result", None) or [] if isinstance(m, AIMessage)]
        for message in produced:
            message.id = message.id or f"guardrail-{uuid.uuid4().hex}"  # so the step is fed once
            # Stamped on the message itself, so a step read back from the checkpoint has the same latency.
            message.response_metadata[LATENCY_KEY] = round(seconds, 6)
        if not any(not m.tool_calls for m in produced):
            return []  # a tool-calling turn is fed once its results are in
        return produced

    def _after_model_call(self, episode_id: str, request: Any, response: Any, seconds: float) -> list[Decision]:
        produced = self._stamp_model_output(response, seconds)
        if not produced:
            return []
        return self._feed(episode_id, [*request.state.get("messages", []), *produced], final=False)

    async def _aafter_model_call(self, episode_id: str, request: Any, response: Any, seconds: float) -> list[Decision]:
        produced = self._stamp_model_output(response, seconds)
        if not produced:
            return []
        return await self._afeed(episode_id, [*request.state.get("messages", []), *produced], final=False)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        config = self._config()  # read once per call (a context lookup in LangGraph)
        if self._fork_episode(config) is not None:
            return handler(request)  # a repair fork: the Repairer watches its steps
        episode_id, decisions = self._before_model_call(request, config)
        stop = self._stop_response(decisions)
        if stop is not None:
            return stop
        started = time.perf_counter()
        response = handler(request)
        self._after_model_call(episode_id, request, response, time.perf_counter() - started)
        return response

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        config = self._config()
        if self._fork_episode(config) is not None:
            return await handler(request)
        episode_id = self._episode(request.state, config)
        self._declare(episode_id, request.tools)
        decisions = await self._afeed(episode_id, request.state.get("messages", []), final=False)
        stop = self._stop_response(decisions)
        if stop is not None:
            return stop
        started = time.perf_counter()
        response = await handler(request)
        await self._aafter_model_call(episode_id, request, response, time.perf_counter() - started)
        return response

    # ----------------------------------------------------------------- tool calls
    def _action(self, request: ToolCallRequest) -> tuple[Action, Finding | None]:
        call = request.tool_call
        return call_action(call.get("name"), call.get("args"), call.get("id"), cwd=self.cwd)

    def _config_of(self, request: ToolCallRequest) -> Any:
        return getattr(request.runtime, "config", None)

    @staticmethod
    def _blocked_message(request: ToolCallRequest, decision: Decision, output: str | None = None) -> ToolMessage:
        """The reply the model reads for a blocked call (`output` None) or a refused result: the guard's message,
        after the tool's output when there was one. The artifact keeps the two apart (and the decision), so the
        step path records the tool's real output, not the guard's text."""
        warning = decision.message() or "blocked by guardrail"
        content = warning if output is None else f"{output}\n\n{warning}"
        return ToolMessage(
            content=content,
            tool_call_id=request.tool_call.get("id") or "",
            name=request.tool_call["name"],
            status="error",
            artifact={"guardrail": {**decision.model_dump(mode="json"), "message": warning, "output": output}},
        )

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Any],
    ) -> Any:
        """Gate the call; if allowed run it and check what came back."""
        config = self._config_of(request)
        fork = self._fork_episode(config)
        episode_id = self._episode(request.state, config, fork=fork)
        self._declare_one(episode_id, request.tool)
        action, problem = self._action(request)
        decision = self._notify(with_problem(
            safe_decision("before_action", lambda: self.guard.before_action(episode_id, action)),
            problem, self.guard, episode_id))
        if decision.blocked:
            return self._blocked_message(request, decision)
        started = time.perf_counter()
        try:
            reply = handler(request)
        except Exception as exc:
            failed = Result(output=f"{type(exc).__name__}: {exc}", is_error=True, call_id=action.call_id)
            safe_decision("after_result", lambda: self.guard.after_result(episode_id, action, failed))
            raise
        _stamp_tool_latency(reply, time.perf_counter() - started)
        result = _result_from(reply)
        if result is None or fork is not None:
            # In a repair fork the Repairer checks results itself: the tool's own output stays unannotated.
            return reply
        after = self._notify(safe_decision("after_result", lambda: self.guard.after_result(episode_id, action, result)))
        if after.blocked:
            return self._blocked_message(request, after, output=result.output)
        return reply

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[Any]],
    ) -> Any:
        config = self._config_of(request)
        fork = self._fork_episode(config)
        episode_id = self._episode(request.state, config, fork=fork)
        self._declare_one(episode_id, request.tool)
        action, problem = self._action(request)
        decision = self._notify(with_problem(
            await asafe_decision("before_action", lambda: self.guard.abefore_action(episode_id, action)),
            problem, self.guard, episode_id))
        if decision.blocked:
            return self._blocked_message(request, decision)
        started = time.perf_counter()
        try:
            reply = await handler(request)
        except Exception as exc:
            failed = Result(output=f"{type(exc).__name__}: {exc}", is_error=True, call_id=action.call_id)
            await asafe_decision("after_result", lambda: self.guard.aafter_result(episode_id, action, failed))
            raise
        _stamp_tool_latency(reply, time.perf_counter() - started)
        result = _result_from(reply)
        if result is None or fork is not None:
            # In a repair fork the Repairer checks results itself: the tool's own output stays unannotated.
            return reply
        after = self._notify(
            await asafe_decision("after_result", lambda: self.guard.aafter_result(episode_id, action, result)))
        if after.blocked:
            return self._blocked_message(request, after, output=result.output)
        return reply

    # ----------------------------------------------------------------- hand-built StateGraph helpers
    def tool_node(self, tools: Sequence[Any], **kwargs: Any) -> ToolNode:
        """A `ToolNode` whose every call goes through this guard's gate and result checks."""
        return ToolNode(tools, wrap_tool_call=self.wrap_tool_call, awrap_tool_call=self.awrap_tool_call, **kwargs)

    def observe_node(self, state: Any, config: Optional[RunnableConfig] = None) -> dict[str, Any]:  # noqa: UP045 - LangGraph matches this text
        """A graph node (put it after the model node) that feeds the new steps to the guard.

        Decisions go to ``on_decision``; the node changes no state, so it fits any messages graph.
        """
        episode_id = self._episode(state, config)
        self._feed(episode_id, state.get("messages", []), final=False)
        return {}

    def finish_node(self, state: Any, config: Optional[RunnableConfig] = None) -> dict[str, Any]:  # noqa: UP045 - LangGraph matches this text
        """A graph node (put it before END) that closes the episode and runs the end-of-run verifiers."""
        episode_id = self._episode(state, config)
        self._feed(episode_id, state.get("messages", []), final=True)
        decision = self._notify(safe_decision("on_finish", lambda: self.guard.on_finish(episode_id)))
        self._forget(episode_id)
        repaired = self._repair(decision, state, None) or {}
        return repaired

    def context(self, episode_id: str) -> EpisodeContext:
        """The guard's context of a running episode (for tests and callbacks)."""
        return self.guard.context(episode_id)


# How long inline repair waits for the run's last checkpoint to reach the saver (LangGraph writes checkpoints
# in the background by default, so the node running after_agent can be ahead of the saver).
HEAD_WAIT_S = 10.0


def _is_head(saved: Any, messages: Sequence[Any]) -> bool:
    """True when a saved checkpoint (a CheckpointTuple) holds exactly `messages`, by message id.

    Read from the saver itself, not `get_state`: a snapshot shows the pending writes of its next
    step, so the checkpoint before the last model call would pass for the head.
    """
    if saved is None:
        return False
    values = (getattr(saved, "checkpoint", None) or {}).get("channel_values") or {}
    stored = values.get("messages", []) if isinstance(values, dict) else []
    return [getattr(m, "id", None) for m in stored] == [m.id for m in messages]


def _head_error(thread: dict[str, Any]) -> CheckpointError:
    return CheckpointError(f"the run's last checkpoint did not reach the saver within {HEAD_WAIT_S:.0f} s "
                           f"(thread {thread['configurable']['thread_id']!r})")


def _saved_head(graph: Any, thread: dict[str, Any], messages: Sequence[Any]) -> dict[str, Any]:
    """The config of the saved checkpoint holding exactly the live state's messages: the original run's head."""
    deadline = time.monotonic() + HEAD_WAIT_S
    while True:
        saved = graph.checkpointer.get_tuple(thread)
        if _is_head(saved, messages):
            return dict(saved.config)
        if time.monotonic() > deadline:
            raise _head_error(thread)
        time.sleep(0.005)


async def _asaved_head(graph: Any, thread: dict[str, Any], messages: Sequence[Any]) -> dict[str, Any]:
    deadline = time.monotonic() + HEAD_WAIT_S
    while True:
        saved = await graph.checkpointer.aget_tuple(thread)
        if _is_head(saved, messages):
            return dict(saved.config)
        if time.monotonic() > deadline:
            raise _head_error(thread)
        await asyncio.sleep(0.005)


def _tool_names(graph: Any) -> list[str]:
    """The tools of a `create_agent` graph (its ToolNode's), for hints that name them; [] when not found."""
    node = getattr(graph, "nodes", {}).get("tools")
    bound = getattr(node, "bound", None)
    names = getattr(bound, "tools_by_name", None)
    return sorted(names) if isinstance(names, dict) else []


def _with_new(findings_before: list[dict[str, Any]], decision: Decision) -> list[dict[str, Any]]:
    """The run's findings: those before the end, then the end-of-run decision's (which repeats the run's alarms)."""
    new = [f.model_dump(mode="json", exclude_defaults=True) for f in decision.findings]
    return findings_before + [f for f in new if f not in findings_before]


def _plan_failed(error: str) -> dict[str, Any]:
    """The state update when a flagged run cannot be forked (no checkpointer, no thread, no checkpoint)."""
    _log.warning("guardrail: %s", error)
    return {"guardrail_repair": {"outcome": "error", "error": error}}


def _repair_update(outcome: RepairOutcome, original_head: dict[str, Any], messages: list[Any] | None) -> dict[str, Any]:
    """The state update of an inline repair: the record, and the repaired branch's messages when one passed."""
    passed = next((a for a in outcome.attempts if a.outcome == "passed"), None)
    last = passed or (outcome.attempts[-1] if outcome.attempts else None)
    head = (outcome.config or {}).get("configurable", {}).get("checkpoint_id") if passed else None
    record = {
        "outcome": outcome.outcome,
        "rung": last.rung if last else None,
        "attempts": len(outcome.attempts),
        "fork_checkpoint": last.checkpoint_id if last else None,  # where the fork starts (a checkpoint of the original)
        "fork_head": head,  # the repaired branch's last checkpoint (None when no fork passed)
        "original_checkpoint": original_head.get("configurable", {}).get("checkpoint_id"),
        "target_step": outcome.target_step,  # the model step the forks re-ran from
        "extra_model_calls": outcome.extra_model_calls,
        "reason": outcome.reason,  # why it was not repaired: per attempt, the check still failing and the hint sent
        "answer": outcome.answer,
        "original_answer": outcome.original_answer,
        "findings": [f.model_dump(mode="json", exclude_defaults=True) for f in outcome.findings],
    }
    update: dict[str, Any] = {"guardrail_repair": record}
    if messages is not None:
        # The run returns the repaired branch: its messages replace the original's in this final state.
        update["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *messages]
    return update
