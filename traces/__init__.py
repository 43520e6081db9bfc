"""The testbed: real LangGraph and AutoGen agents driven by a seeded scripted policy over real tools, and its corpora.

Public API (small on purpose):

- ``make_task(seed, db=None, kinds=TASK_KINDS) -> Task``: a booking task with its ground truth.
- ``Policy(seed, arithmetic_rate=..., skip_rate=..., hallucinate_rate=..., ...)``: the agent policy.
- ``ScriptedChatModel(policy=policy)`` (LangChain) / ``ScriptedChatCompletionClient(policy)`` (AutoGen).
- ``BookingDB()``, ``booking_tools(db, fault=None) -> ToolBox`` (``.langchain_tools()``, ``.autogen_tools()``).
- ``run_langgraph_episode(task, policy, *, checkpointer=None, middleware=(), thread_id=None, toolbox=None)``
  and ``run_autogen_episode(task, policy, *, workbench=None, toolbox=None)`` (``arun_autogen_episode`` in a loop)
  return a ``guardrail.core.events.Episode``; ``build_langgraph_agent`` / ``build_autogen_agent`` give the agents.

Beyond the agents: ``traces.injectors.make_injector(class, onset=, seed=)`` (tool-layer faults),
``traces.labeller.grade_episode(episode, task)`` (organic labels from ground truth),
``traces.collect.write_collected(dir, framework, n, seed)`` (``guardrail collect``),
``traces.specs.verifier_spec(task_text)`` (the task's verifier spec), ``traces.models.endpoint_model``
(a real chat model by name) and ``traces.models.EndpointSpec`` (a real model and the agent design used with
it), ``traces.model_server`` (SmolLM2-135M on loopback: ``guardrail model serve``, ``LocalModelServer``),
and ``traces.coding`` (the coding-agent testbed, ``python -m traces.coding``).
Committed corpora: ``traces/corpora/`` (see its README).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traces.agents import (
        arun_autogen_episode,
        build_autogen_agent,
        build_langgraph_agent,
        run_autogen_episode,
        run_langgraph_episode,
    )
    from traces.models import ScriptedChatCompletionClient, ScriptedChatModel
    from traces.policy import Policy
    from traces.tasks import Task, make_task
    from traces.tools import BookingDB, ToolBox, booking_tools

# Loaded on first use: `guardrail --help` imports this package's command table, which must not pull in
# LangChain and AutoGen (the agents' modules do).
_WHERE = {
    "arun_autogen_episode": "traces.agents",
    "build_autogen_agent": "traces.agents",
    "build_langgraph_agent": "traces.agents",
    "run_autogen_episode": "traces.agents",
    "run_langgraph_episode": "traces.agents",
    "ScriptedChatCompletionClient": "traces.models",
    "ScriptedChatModel": "traces.models",
    "Policy": "traces.policy",
    "Task": "traces.tasks",
    "make_task": "traces.tasks",
    "BookingDB": "traces.tools",
    "ToolBox": "traces.tools",
    "booking_tools": "traces.tools",
}

__all__ = [
    "BookingDB",
    "Policy",
    "ScriptedChatCompletionClient",
    "ScriptedChatModel",
    "Task",
    "ToolBox",
    "arun_autogen_episode",
    "booking_tools",
    "build_autogen_agent",
    "build_langgraph_agent",
    "make_task",
    "run_autogen_episode",
    "run_langgraph_episode",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'traces' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
