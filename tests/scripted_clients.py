"""A scripted AutoGen chat client for agents written in the tests: it reads the conversation and asks a move function.

``move(task, results)`` gets the user's task and the tool results so far (tool name, result text)
and returns a call ``{"name", "args"}`` or an answer ``{"answer"}``, as the user's own model would.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Sequence
from typing import Any

Move = Callable[[str, list[tuple[str, str]]], dict[str, Any]]


def scripted_client_class() -> Any:
    """`ScriptedChatClient`: an AutoGen `ChatCompletionClient` whose subclasses only write `reply(messages)` (the
    usage, token counts, model info and a stream of one are shared; imported only when AutoGen is)."""
    from autogen_core.models import ChatCompletionClient, CreateResult, ModelFamily, RequestUsage

    class ScriptedChatClient(ChatCompletionClient):
        model_info_ = {"vision": False, "function_calling": True, "json_output": False,
                       "family": ModelFamily.UNKNOWN, "structured_output": False}

        @abc.abstractmethod
        def reply(self, messages: Sequence[Any]) -> CreateResult:
            """What this client's model answers to `messages` (each scripted client writes its own)."""

        async def create(self, messages: Sequence[Any], **kwargs: Any) -> CreateResult:
            return self.reply(messages)

        async def create_stream(self, messages: Sequence[Any], **kwargs: Any) -> Any:
            # A stream of one: the whole reply as its final result (an agent with model_client_stream=True).
            yield await self.create(messages, **kwargs)

        async def close(self) -> None:
            return None

        def actual_usage(self) -> RequestUsage:
            return RequestUsage(prompt_tokens=0, completion_tokens=0)

        total_usage = actual_usage

        def count_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
            return 0

        def remaining_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
            return 100_000

        @property
        def capabilities(self) -> Any:
            return self.model_info_

        @property
        def model_info(self) -> Any:
            return self.model_info_

    return ScriptedChatClient


def scripted_client(move: Move) -> Any:
    """An AutoGen `ChatCompletionClient` whose every reply is `move`'s decision (imported only when AutoGen is)."""
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, FunctionExecutionResultMessage, RequestUsage, UserMessage

    class ScriptedClient(scripted_client_class()):  # type: ignore[misc]
        def reply(self, messages: Sequence[Any]) -> CreateResult:
            task = next(m.content for m in messages if isinstance(m, UserMessage))
            names = {call.id: call.name for m in messages for call in (getattr(m, "content", None) or [])
                     if isinstance(call, FunctionCall)}
            results = [(names.get(r.call_id, r.name), r.content) for m in messages
                       if isinstance(m, FunctionExecutionResultMessage) for r in m.content]
            decided = move(task, results)
            usage = RequestUsage(prompt_tokens=10, completion_tokens=5)
            if "answer" in decided:
                return CreateResult(finish_reason="stop", content=decided["answer"], usage=usage, cached=False)
            return CreateResult(finish_reason="function_calls", usage=usage, cached=False,
                                content=[FunctionCall(id=f"call_{len(results)}", name=decided["name"],
                                                      arguments=json.dumps(decided["args"]))])

    return ScriptedClient()
