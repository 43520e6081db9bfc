"""Build and run the testbed's real agents: a LangChain v1 `create_agent` graph and an AutoGen `AssistantAgent`.

Both run the same `Task` with the same `ToolBox` through their own machinery (tool binding,
tool execution, message history; LangGraph checkpoints every super-step into the given
checkpointer) and their run is turned into an `Episode` from the framework's own messages:
LangChain ``AIMessage``/``ToolMessage`` or AutoGen ``ToolCallExecutionEvent``s.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from adapters.steps import (
    LATENCY_KEY,
    step_from_autogen_result,
    steps_from_autogen_events,
    steps_from_langchain,
)
from guardrail.core.events import Episode, Step, parse_call_arguments
from traces.models import ScriptedChatCompletionClient, ScriptedChatModel
from traces.policy import Policy
from traces.tasks import Task
from traces.tools import BOOKING_TOOLS, ToolBox, ToolCallRecord, booking_tools

__all__ = [
    "SYSTEM_PROMPT",
    "arun_autogen_episode",
    "build_autogen_agent",
    "build_langgraph_agent",
    "episode_from_autogen",
    "episode_from_langchain",
    "match_tool_log",
    "run_autogen_episode",
    "run_langgraph_episode",
]

SYSTEM_PROMPT = ("You are a careful booking assistant. Call the tools for every figure you need, never guess, "
                 "and finish with one line stating the total in USD.")


def match_tool_log(episode: Episode, log: Sequence[ToolCallRecord]) -> list[tuple[int, ToolCallRecord]]:
    """Pair each toolbox call with the step whose tool event it served (by name and arguments, in order).

    A call the framework never executed (a guard blocked it) has a tool event but no log record.
    """
    unused = list(log)
    pairs: list[tuple[int, ToolCallRecord]] = []
    for step in episode.steps:
        for event in step.tool_events:
            for position, record in enumerate(unused):
                if record.name == event.name and record.args == event.args:
                    pairs.append((step.index, unused.pop(position)))
                    break
    return pairs


def _episode(task: Task, steps: list[Step], *, framework: str, model: str, episode_id: str | None,
             policy: Policy, meta: dict[str, Any]) -> Episode:
    return Episode(
        episode_id=episode_id or f"{framework}-{task.task_id}-{policy.seed}",
        steps=steps,
        task=task.prompt,
        framework=framework,
        model=model,
        tools=list(BOOKING_TOOLS),
        meta={"seed": policy.seed, "task_id": task.task_id, "task_kind": task.kind,
              "required_calls": task.required_counts, "expected_total": task.expected_total,
              "ground_truth": task.ground_truth(), **meta},
    )


def _tool_latencies(calls: Sequence[tuple[str, str, Any]], log: Sequence[ToolCallRecord]) -> dict[str, float]:
    """Call id -> the seconds the toolbox measured, pairing (id, name, args) calls with log records in order."""
    unused = list(log)
    latencies: dict[str, float] = {}
    for call_id, name, args in calls:
        for position, record in enumerate(unused):
            if record.name == name and record.args == args:
                latencies[call_id] = round(unused.pop(position).latency_s, 6)
                break
    return latencies


# --------------------------------------------------------------------------- LangGraph
def real_model_middleware(first_turn_tool_choice: str | None = None, *, seed_per_call: int | None = None) -> Any:
    """LangChain agent middleware for a real model: stamps each model call's seconds, sets the first turn's tool choice.

    The seconds go where the scripted model and the guard's adapter put them (`LATENCY_KEY` on the
    AIMessage), so a real run's steps carry model latency too. With `first_turn_tool_choice` a model
    call that comes before any tool result is made with it: the testbed's small-model agent design
    (`traces.models.EndpointSpec`; AutoGen's side is `RecordingChatCompletionClient`). With
    `seed_per_call` the k-th model call through this middleware (forks included) carries seed
    ``seed_per_call + k``: a repair fork then samples anew, as an unseeded provider would, instead of
    replaying the original call's tokens, and the whole run stays reproducible.
    """
    from langchain.agents.middleware import AgentMiddleware

    calls = [0]

    def first(request: Any) -> Any:
        if seed_per_call is not None:
            request = request.override(model_settings={**request.model_settings, "seed": seed_per_call + calls[0]})
            calls[0] += 1
        if first_turn_tool_choice and request.tools and not any(isinstance(m, ToolMessage) for m in request.messages):
            return request.override(tool_choice=first_turn_tool_choice)
        return request

    def stamp(response: Any, started: float) -> Any:
        for message in getattr(response, "result", None) or []:
            if isinstance(message, AIMessage):
                message.response_metadata[LATENCY_KEY] = round(time.perf_counter() - started, 6)
        return response

    class RealModel(AgentMiddleware[Any, Any, Any]):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            started = time.perf_counter()
            return stamp(handler(first(request)), started)

        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            started = time.perf_counter()
            return stamp(await handler(first(request)), started)

    return RealModel()


def build_langgraph_agent(task: Task, policy: Policy, *, toolbox: ToolBox, checkpointer: Any = None,
                          middleware: Sequence[Any] = (), model: Any = None,
                          tools: Sequence[str] = BOOKING_TOOLS) -> Any:
    """A LangChain v1 `create_agent` graph over `tools` (an `InMemorySaver` when no checkpointer is given)."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    return create_agent(model or ScriptedChatModel(policy=policy), tools=toolbox.langchain_tools(tools),
                        system_prompt=SYSTEM_PROMPT, middleware=list(middleware),
                        checkpointer=checkpointer if checkpointer is not None else InMemorySaver())


def episode_from_langchain(messages: Sequence[BaseMessage], task: Task, policy: Policy, *,
                           log: Sequence[ToolCallRecord] = (), episode_id: str | None = None,
                           model: str = "scripted-policy", meta: dict[str, Any] | None = None) -> Episode:
    """An `Episode` from a LangChain agent's message list, through the adapters' one step path.

    Tool latencies the toolbox measured are stamped on ToolMessages that carry none yet (a guarded run's
    middleware stamps its own), so the stored steps are what `adapters.steps` makes of these messages.
    """
    calls = [(c["id"] or "", c["name"], c["args"]) for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    latencies = _tool_latencies(calls, log)
    for message in messages:
        if isinstance(message, ToolMessage) and LATENCY_KEY not in message.response_metadata:
            if message.tool_call_id in latencies:
                message.response_metadata[LATENCY_KEY] = latencies[message.tool_call_id]
    steps = steps_from_langchain(messages, task=task.prompt)
    return _episode(task, steps, framework="langgraph", model=model, episode_id=episode_id, policy=policy,
                    meta=meta or {})


def run_langgraph_episode(task: Task, policy: Policy, *, checkpointer: Any = None, middleware: Sequence[Any] = (),
                          thread_id: str | None = None, toolbox: ToolBox | None = None,
                          episode_id: str | None = None, model: Any = None, tools: Sequence[str] = BOOKING_TOOLS,
                          max_steps: int | None = None) -> Episode:
    """Run `task` through a real `create_agent` graph and return the episode (``meta["thread_id"]`` names the thread).

    `max_steps` bounds the model calls (a real model may never stop calling tools): the graph's
    recursion limit then ends the run, the state so far is read back from the checkpointer and
    ``meta["stopped"]`` says ``"step_limit"``.
    """
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.errors import GraphRecursionError

    box = toolbox or booking_tools()
    saver = checkpointer if checkpointer is not None else InMemorySaver()
    graph = build_langgraph_agent(task, policy, toolbox=box, checkpointer=saver, middleware=middleware,
                                  model=model, tools=tools)
    thread = thread_id or f"{task.task_id}-{policy.seed}-{uuid.uuid4().hex[:8]}"
    limit = 4 * policy.max_steps + 10 if max_steps is None else 2 * max_steps + 1
    config = {"configurable": {"thread_id": thread}, "recursion_limit": limit}
    meta: dict[str, Any] = {"thread_id": thread}
    try:
        messages = graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)["messages"]
    except GraphRecursionError:
        messages = graph.get_state(config).values.get("messages", [])
        meta["stopped"] = "step_limit"
    model_name = str(getattr(model, "model_name", None) or "scripted-policy")
    return episode_from_langchain(messages, task, policy, log=box.log, episode_id=episode_id,
                                  model=model_name, meta=meta)


# --------------------------------------------------------------------------- AutoGen
def build_autogen_agent(task: Task, policy: Policy, *, toolbox: ToolBox, workbench: Any = None,
                        client: Any = None, tools: Sequence[str] = BOOKING_TOOLS,
                        max_steps: int | None = None) -> tuple[Any, Any]:
    """An AutoGen `AssistantAgent` over `tools` (a `StaticWorkbench` when none is given), and its client."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.tools import StaticWorkbench

    model_client = client or ScriptedChatCompletionClient(policy)
    bench = workbench if workbench is not None else StaticWorkbench(toolbox.autogen_tools(tools))
    agent = AssistantAgent("booking_agent", model_client=model_client, workbench=bench, system_message=SYSTEM_PROMPT,
                           max_tool_iterations=policy.max_steps + 2 if max_steps is None else max_steps,
                           reflect_on_tool_use=False)
    return agent, model_client


def episode_from_autogen(messages: Sequence[Any], client: Any, task: Task, policy: Policy, *,
                         log: Sequence[ToolCallRecord] = (), episode_id: str | None = None,
                         meta: dict[str, Any] | None = None) -> Episode:
    """An `Episode` from an AutoGen run: one step per model reply, results from the ToolCallExecutionEvents.

    A client that keeps its replies (scripted, or `RecordingChatCompletionClient` around a real one) gives
    steps with the model's own logprobs and latencies; any other client's steps come from the event stream.
    """
    from autogen_agentchat.messages import ToolCallExecutionEvent

    if not hasattr(client, "results") or not hasattr(client, "latencies"):
        return _episode_from_autogen_messages(messages, task, policy, log=log, episode_id=episode_id,
                                              model=str(getattr(client, "model_name", None) or type(client).__name__),
                                              meta=meta)
    executed = {r.call_id: r for m in messages if isinstance(m, ToolCallExecutionEvent) for r in m.content}
    calls = [(c.id, c.name, parse_call_arguments(c.arguments)) for r in client.results
             if isinstance(r.content, list) for c in r.content]
    latencies = _tool_latencies(calls, log)
    last = len(client.results) - 1
    steps = [step_from_autogen_result(i, result, executed, task=task.prompt, model_latency_s=latency,
                                      tool_latency_s=latencies, final=i == last)
             for i, (result, latency) in enumerate(zip(client.results, client.latencies, strict=True))]
    return _episode(task, steps, framework="autogen", model=str(client.model_name), episode_id=episode_id,
                    policy=policy, meta=meta or {})


def _episode_from_autogen_messages(messages: Sequence[Any], task: Task, policy: Policy, *,
                                   log: Sequence[ToolCallRecord], episode_id: str | None, model: str,
                                   meta: dict[str, Any] | None) -> Episode:
    # Any other model client (a real endpoint): the steps come from the agent's own event stream; no logprobs.
    from autogen_agentchat.messages import ToolCallRequestEvent

    calls = [(c.id, c.name, parse_call_arguments(c.arguments)) for m in messages
             if isinstance(m, ToolCallRequestEvent) for c in m.content]
    steps = steps_from_autogen_events(messages, task=task.prompt, tool_latency_s=_tool_latencies(calls, log))
    return _episode(task, steps, framework="autogen", model=model, episode_id=episode_id, policy=policy,
                    meta=meta or {})


async def arun_autogen_episode(task: Task, policy: Policy, *, workbench: Any = None, toolbox: ToolBox | None = None,
                               episode_id: str | None = None, client: Any = None,
                               tools: Sequence[str] = BOOKING_TOOLS, max_steps: int | None = None) -> Episode:
    """Run `task` through a real AutoGen `AssistantAgent` (async); `client` replaces the scripted model.

    With `max_steps` the agent makes at most that many model calls; a run that used them all on tool
    calls has ``meta["stopped"] = "step_limit"``.
    """
    box = toolbox or booking_tools()
    agent, client = build_autogen_agent(task, policy, toolbox=box, workbench=workbench, client=client, tools=tools,
                                        max_steps=max_steps)
    result = await agent.run(task=task.prompt)
    meta: dict[str, Any] = {"autogen_messages": len(result.messages)}
    last = result.messages[-1] if result.messages else None
    if max_steps is not None and type(last).__name__ == "ToolCallSummaryMessage":
        meta["stopped"] = "step_limit"
    return episode_from_autogen(result.messages, client, task, policy, log=box.log, episode_id=episode_id,
                                meta=meta)


def run_autogen_episode(task: Task, policy: Policy, *, workbench: Any = None, toolbox: ToolBox | None = None,
                        episode_id: str | None = None, client: Any = None) -> Episode:
    """Run `task` through a real AutoGen `AssistantAgent` (blocking; use `arun_autogen_episode` inside an event loop)."""
    return asyncio.run(arun_autogen_episode(task, policy, workbench=workbench, toolbox=toolbox,
                                            episode_id=episode_id, client=client))
