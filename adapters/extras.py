"""Which extra brings which framework: an adapter whose framework is missing says what to install."""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtraError", "require"]

# extra -> (what it is, the top-level modules it must make importable)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "langgraph": ("LangChain v1 / LangGraph", ("langchain", "langchain_core", "langgraph")),
    "autogen": ("AutoGen AgentChat", ("autogen_agentchat", "autogen_core")),
    "swe": ("SWE-ReX", ("swerex",)),
    "mcp": ("the Model Context Protocol SDK", ("mcp",)),
}


class MissingExtraError(ImportError):
    """An adapter was imported without the framework it wraps; the message names the extra to install."""


def require(extra: str, adapter: str) -> None:
    """Raise `MissingExtraError` naming ``guardrail[extra]`` when a module of that extra cannot be found.

    Looks modules up without importing them, so a present framework costs nothing here.
    """
    what, modules = EXTRAS[extra]
    missing = [name for name in modules if _find(name) is None]
    if missing:
        raise MissingExtraError(
            f"{adapter} needs {what} ({', '.join(missing)} not importable): pip install 'guardrail[{extra}]'",
            name=missing[0])


def _find(name: str) -> object | None:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a module blocked or half-installed counts as missing
        return None
