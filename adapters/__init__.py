"""Framework adapters (LangChain/LangGraph, AutoGen, SWE-agent, mini-swe-agent, SWE-ReX sandboxes, OpenTelemetry); each
is imported on first use.

Import the one you need (``from adapters.langchain import GuardMiddleware``) or take it from here:
``adapters.GuardMiddleware`` loads only LangChain, so a user without AutoGen can still use LangGraph.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "GuardMiddleware",
    "GuardedWorkbench",
    "GuardAlarmTermination",
    "SweAgentGuardHook",
    "GuardSpanProcessor",
    "guard_agent",
    "GuardedEnvironment",
    "SwerexBackend",
    "gate_in_sandbox",
]

_WHERE = {
    "GuardMiddleware": "adapters.langchain",
    "GuardedWorkbench": "adapters.autogen",
    "GuardAlarmTermination": "adapters.autogen",
    "SweAgentGuardHook": "adapters.swe_agent",
    "GuardSpanProcessor": "adapters.span_processor",
    "guard_agent": "adapters.mini_swe_agent",
    "GuardedEnvironment": "adapters.mini_swe_agent",
    "SwerexBackend": "adapters.swerex_backend",
    "gate_in_sandbox": "adapters.swerex_backend",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'adapters' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
