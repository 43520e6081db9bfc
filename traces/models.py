"""Scripted chat models for LangChain and AutoGen, both driven by one `Policy` reading the real message history.

`ScriptedChatModel` is a LangChain `BaseChatModel` (``bind_tools`` returns itself: the policy
knows the tools from the task) returning real ``AIMessage``s with ``tool_calls``, token
logprobs in ``response_metadata["logprobs"]`` (the OpenAI shape) and ``usage_metadata``.
`ScriptedChatCompletionClient` is an AutoGen ``ChatCompletionClient`` returning
``CreateResult``s with ``FunctionCall``s and ``logprobs``. Each turns the framework's
messages into a `Transcript`, so the policy decides from exactly what the framework fed it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    ChatCompletionTokenLogprob,
    CreateResult,
    FunctionExecutionResultMessage,
    ModelInfo,
    RequestUsage,
    UserMessage,
)
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

from adapters.steps import LATENCY_KEY
from traces.policy import CallResult, Policy, Reply, Transcript

__all__ = ["EndpointSpec", "RecordingChatCompletionClient", "ScriptedChatCompletionClient", "ScriptedChatModel",
           "endpoint_model", "transcript_from_autogen", "transcript_from_langchain"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # LangChain content blocks
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content if b)
    return str(content)


# --------------------------------------------------------------------------- LangChain
def transcript_from_langchain(messages: Sequence[BaseMessage]) -> Transcript:
    """The policy's view of a LangChain message list (system messages are instructions, not the task)."""
    transcript = Transcript(task_text="")
    pending: dict[str, int] = {}
    for message in messages:
        if isinstance(message, HumanMessage):
            if not transcript.task_text:
                transcript.task_text = _text(message.content)
            else:
                transcript.hints.append(_text(message.content))
        elif isinstance(message, AIMessage):
            transcript.turns += 1
            for call in message.tool_calls:
                pending[call["id"] or ""] = len(transcript.calls)
                transcript.calls.append(CallResult(call["id"] or "", call["name"], dict(call["args"]), None))
        elif isinstance(message, ToolMessage):
            position = pending.get(message.tool_call_id)
            if position is not None:
                made = transcript.calls[position]
                transcript.calls[position] = CallResult(made.call_id, made.tool, made.args, _text(message.content),
                                                        message.status == "error")
    return transcript


def _openai_logprobs(reply: Reply) -> dict[str, Any]:
    return {"content": [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
                        for t, lp in zip(reply.tokens, reply.logprobs, strict=True)]}


class ScriptedChatModel(BaseChatModel):
    """A LangChain chat model whose replies come from a seeded `Policy` reading the messages it is given."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    policy: Policy = Field(default_factory=Policy)
    model_name: str = "scripted-policy"
    calls: int = 0  # how many times the model was invoked (tests read this)

    @property
    def _llm_type(self) -> str:
        return "guardrail-scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "seed": self.policy.seed}

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        # The policy reads the task and calls tools by name; binding changes nothing it needs.
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        started = time.perf_counter()
        reply = self.policy.decide(transcript_from_langchain(messages))
        self.calls += 1
        message = AIMessage(
            content=reply.text,
            tool_calls=[{"name": r.tool, "args": r.args, "id": r.call_id, "type": "tool_call"}
                        for r in reply.tool_calls],
            response_metadata={"logprobs": _openai_logprobs(reply), "model_name": self.model_name,
                               "finish_reason": "stop" if reply.is_final else "tool_calls",
                               LATENCY_KEY: round(time.perf_counter() - started, 6)},
            usage_metadata={"input_tokens": sum(len(_text(m.content)) // 4 for m in messages),
                            "output_tokens": len(reply.tokens),
                            "total_tokens": sum(len(_text(m.content)) // 4 for m in messages) + len(reply.tokens)},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


# --------------------------------------------------------------------------- AutoGen
def transcript_from_autogen(messages: Sequence[Any]) -> Transcript:
    """The policy's view of AutoGen LLM messages (System/User/Assistant/FunctionExecutionResultMessage)."""
    transcript = Transcript(task_text="")
    pending: dict[str, int] = {}
    for message in messages:
        if isinstance(message, UserMessage):
            text = message.content if isinstance(message.content, str) else " ".join(
                part for part in message.content if isinstance(part, str))
            if not transcript.task_text:
                transcript.task_text = text
            else:
                transcript.hints.append(text)
        elif isinstance(message, AssistantMessage):
            transcript.turns += 1
            if isinstance(message.content, list):
                for call in message.content:
                    if isinstance(call, FunctionCall):
                        try:
                            args = json.loads(call.arguments or "{}")
                        except json.JSONDecodeError:
                            args = {"_raw": call.arguments}
                        pending[call.id] = len(transcript.calls)
                        transcript.calls.append(CallResult(call.id, call.name, args if isinstance(args, dict)
                                                           else {"_raw": args}, None))
        elif isinstance(message, FunctionExecutionResultMessage):
            for result in message.content:
                position = pending.get(result.call_id)
                if position is not None:
                    made = transcript.calls[position]
                    transcript.calls[position] = CallResult(made.call_id, made.tool, made.args, result.content,
                                                            bool(result.is_error))
    return transcript


class ScriptedChatCompletionClient(ChatCompletionClient):
    """An AutoGen chat completion client whose replies come from a seeded `Policy`.

    ``results`` keeps every `CreateResult` in order, so a run's steps can be matched with the
    logprobs the model produced for them.
    """

    def __init__(self, policy: Policy | None = None, *, model_name: str = "scripted-policy") -> None:
        self.policy = policy or Policy()
        self.model_name = model_name
        self.results: list[Any] = []
        self.latencies: list[float] = []
        self._usage = RequestUsage(prompt_tokens=0, completion_tokens=0)

    async def create(self, messages: Sequence[Any], *, tools: Sequence[Any] = (), tool_choice: Any = "auto",
                     json_output: Any = None, extra_create_args: Mapping[str, Any] | None = None,
                     cancellation_token: Any = None) -> Any:
        started = time.perf_counter()
        reply = self.policy.decide(transcript_from_autogen(messages))
        prompt_tokens = sum(len(str(getattr(m, "content", ""))) // 4 for m in messages)
        usage = RequestUsage(prompt_tokens=prompt_tokens, completion_tokens=len(reply.tokens))
        self._usage = RequestUsage(prompt_tokens=self._usage.prompt_tokens + usage.prompt_tokens,
                                   completion_tokens=self._usage.completion_tokens + usage.completion_tokens)
        logprobs = [ChatCompletionTokenLogprob(token=t, logprob=lp) for t, lp in
                    zip(reply.tokens, reply.logprobs, strict=True)]
        content: Any
        if reply.tool_calls:
            content = [FunctionCall(id=r.call_id, name=r.tool, arguments=json.dumps(r.args, sort_keys=True))
                       for r in reply.tool_calls]
        else:
            content = reply.text
        result = CreateResult(finish_reason="function_calls" if reply.tool_calls else "stop", content=content,
                              usage=usage, cached=False, logprobs=logprobs,
                              thought=reply.text if reply.tool_calls and reply.text else None)
        self.results.append(result)
        self.latencies.append(time.perf_counter() - started)
        return result

    async def create_stream(self, messages: Sequence[Any], *, tools: Sequence[Any] = (), tool_choice: Any = "auto",
                            json_output: Any = None, extra_create_args: Mapping[str, Any] | None = None,
                            cancellation_token: Any = None) -> AsyncGenerator[Any, None]:
        yield await self.create(messages, tools=tools, tool_choice=tool_choice, json_output=json_output,
                                extra_create_args=extra_create_args, cancellation_token=cancellation_token)

    async def close(self) -> None:
        return None

    def actual_usage(self) -> Any:
        return self._usage

    def total_usage(self) -> Any:
        return self._usage

    def count_tokens(self, messages: Sequence[Any], *, tools: Sequence[Any] = ()) -> int:
        return sum(len(str(getattr(m, "content", ""))) // 4 for m in messages)

    def remaining_tokens(self, messages: Sequence[Any], *, tools: Sequence[Any] = ()) -> int:
        return 128_000 - self.count_tokens(messages, tools=tools)

    @property
    def model_info(self) -> Any:
        return ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown",
                         structured_output=False)

    @property
    def capabilities(self) -> Any:
        return self.model_info


# --------------------------------------------------------------------------- real endpoints
class RecordingChatCompletionClient(ChatCompletionClient):
    """A real AutoGen client that keeps each `CreateResult` (with its logprobs) and its latency, like the scripted one.

    ``first_turn_tool_choice`` (e.g. ``"required"``) replaces the agent's ``tool_choice`` on a call whose
    messages hold no tool result yet: the small-model agent design of the testbed (see `EndpointSpec`).
    With ``seed_per_call`` the k-th call carries seed ``seed_per_call + k`` (a repair fork samples anew
    instead of replaying the original's tokens; see `traces.agents.real_model_middleware`).
    """

    def __init__(self, inner: ChatCompletionClient, *, model_name: str,
                 first_turn_tool_choice: str | None = None, seed_per_call: int | None = None) -> None:
        self.inner = inner
        self.model_name = model_name
        self.first_turn_tool_choice = first_turn_tool_choice
        self.seed_per_call = seed_per_call
        self.calls = 0
        self.results: list[Any] = []
        self.latencies: list[float] = []

    async def create(self, messages: Sequence[Any], *, tools: Sequence[Any] = (), tool_choice: Any = "auto",
                     json_output: Any = None, extra_create_args: Mapping[str, Any] | None = None,
                     cancellation_token: Any = None) -> Any:
        if tools and self.first_turn_tool_choice and tool_choice == "auto" \
                and not any(isinstance(m, FunctionExecutionResultMessage) for m in messages):
            tool_choice = self.first_turn_tool_choice
        extra = dict(extra_create_args or {})
        if self.seed_per_call is not None:
            extra["seed"] = self.seed_per_call + self.calls
        self.calls += 1
        started = time.perf_counter()
        result = await self.inner.create(messages, tools=tools, tool_choice=tool_choice, json_output=json_output,
                                         extra_create_args=extra, cancellation_token=cancellation_token)
        self.results.append(result)
        self.latencies.append(time.perf_counter() - started)
        return result

    async def create_stream(self, messages: Sequence[Any], *, tools: Sequence[Any] = (), tool_choice: Any = "auto",
                            json_output: Any = None, extra_create_args: Mapping[str, Any] | None = None,
                            cancellation_token: Any = None) -> AsyncGenerator[Any, None]:
        yield await self.create(messages, tools=tools, tool_choice=tool_choice, json_output=json_output,
                                extra_create_args=extra_create_args, cancellation_token=cancellation_token)

    async def close(self) -> None:
        await self.inner.close()

    def actual_usage(self) -> Any:
        return self.inner.actual_usage()

    def total_usage(self) -> Any:
        return self.inner.total_usage()

    def count_tokens(self, messages: Sequence[Any], *, tools: Sequence[Any] = ()) -> int:
        return self.inner.count_tokens(messages, tools=tools)

    def remaining_tokens(self, messages: Sequence[Any], *, tools: Sequence[Any] = ()) -> int:
        return self.inner.remaining_tokens(messages, tools=tools)

    @property
    def model_info(self) -> Any:
        return self.inner.model_info

    @property
    def capabilities(self) -> Any:
        return self.inner.model_info


_PROVIDERS = ("openai", "ollama", "local")


@dataclass(frozen=True)
class EndpointSpec:
    """A real model behind a server, and how the testbed's agents call it (recorded in each episode's provenance).

    ``local:NAME`` and ``openai:NAME`` talk OpenAI's chat-completions API (``local`` is the project's own
    loopback server, `traces.model_server`); ``ollama:NAME`` uses Ollama's clients. The agent design for
    a small model: one call per reply (``parallel_tool_calls=False``), the first reply must call a tool
    (``first_turn_tool_choice="required"``, later ones choose freely), `max_steps` model calls at most,
    replies capped at `max_tokens`; each episode's calls carry the episode's seed.
    """

    model: str
    endpoint: str | None = None
    temperature: float = 0.2
    max_tokens: int = 64
    max_steps: int = 4
    first_turn_tool_choice: str | None = "required"
    parallel_tool_calls: bool = False
    server: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the server's /health answer, if any

    def __post_init__(self) -> None:
        provider, _, name = self.model.partition(":")
        if provider not in _PROVIDERS or not name:
            raise ValueError(f"model {self.model!r}: use local:NAME (the project's model server), openai:NAME "
                             "(with --endpoint for any OpenAI-compatible server) or ollama:NAME")

    @property
    def provider(self) -> str:
        return self.model.partition(":")[0]

    @property
    def name(self) -> str:
        return self.model.partition(":")[2]

    def describe(self, seed: int | None = None) -> dict[str, Any]:
        """What a corpus records about the model: name, file hash, server, sampling and agent settings, seed."""
        info = dict(self.server)
        return {"model": self.model, "endpoint": self.endpoint, "model_sha256": info.get("model_sha256"),
                "model_file": info.get("model_file"), "chat_format": info.get("chat_format"),
                "server_sampling_defaults": info.get("sampling_defaults"), "llama_cpp_python": info.get("llama_cpp_python"),
                "sampling": {"temperature": self.temperature, "max_tokens": self.max_tokens,
                             "parallel_tool_calls": self.parallel_tool_calls,
                             "first_turn_tool_choice": self.first_turn_tool_choice, "max_steps": self.max_steps},
                "seed": seed}

    def build(self, framework: str, seed: int | None = None) -> Any:
        """The framework's own client for this model (LangChain chat model or AutoGen client), seeded."""
        return endpoint_model(framework, self.model, self.endpoint, temperature=self.temperature, seed=seed,
                              max_tokens=self.max_tokens, parallel_tool_calls=self.parallel_tool_calls,
                              first_turn_tool_choice=self.first_turn_tool_choice)


def endpoint_model(framework: str, model: str, endpoint: str | None = None, *, temperature: float = 0.2,
                   seed: int | None = None, max_tokens: int | None = None, parallel_tool_calls: bool | None = None,
                   first_turn_tool_choice: str | None = None) -> Any:
    """A real chat model for `framework` from ``openai:NAME`` / ``local:NAME`` (OpenAI-compatible) or ``ollama:NAME``.

    The framework's own client library does the talking (``ChatOpenAI`` / AutoGen's
    ``OpenAIChatCompletionClient``, asking for token logprobs); a missing one is named with the pip
    command that installs it. Nothing is contacted until the agent runs. AutoGen clients come
    wrapped in `RecordingChatCompletionClient` (each reply and its logprobs are kept for the steps).
    """
    provider, _, name = model.partition(":")
    if provider not in _PROVIDERS or not name:
        raise ValueError(f"model {model!r}: use local:NAME, openai:NAME (with --endpoint for a compatible server) "
                         "or ollama:NAME")
    api_key = os.environ.get("OPENAI_API_KEY", "not-needed")
    try:
        if framework == "langgraph" and provider != "ollama":
            from langchain_openai import ChatOpenAI  # type: ignore[import-not-found]
            from pydantic import SecretStr

            extra: dict[str, Any] = {} if parallel_tool_calls is None else {"parallel_tool_calls": parallel_tool_calls}
            return ChatOpenAI(model=name, base_url=endpoint, api_key=SecretStr(api_key), temperature=temperature,
                              logprobs=True, seed=seed, max_completion_tokens=max_tokens, model_kwargs=extra)
        if framework == "langgraph":
            from langchain_ollama import ChatOllama  # type: ignore[import-not-found]

            return ChatOllama(model=name, base_url=endpoint or "http://localhost:11434", temperature=temperature,
                              seed=seed)
        client: Any
        if provider != "ollama":
            from autogen_ext.models.openai import OpenAIChatCompletionClient

            where: dict[str, Any] = {"base_url": endpoint} if endpoint else {}
            create: dict[str, Any] = {"logprobs": True}
            if seed is not None:
                create["seed"] = seed
            if max_tokens is not None:
                create["max_tokens"] = max_tokens
            if parallel_tool_calls is not None:
                create["parallel_tool_calls"] = parallel_tool_calls
            client = OpenAIChatCompletionClient(model=name, api_key=api_key, temperature=temperature,
                                                model_info=ModelInfo(vision=False, function_calling=True,
                                                                     json_output=False, family="unknown",
                                                                     structured_output=False), **where, **create)
        else:
            from autogen_ext.models.ollama import OllamaChatCompletionClient

            client = OllamaChatCompletionClient(model=name, host=endpoint or "http://localhost:11434",
                                                options={"temperature": temperature, "seed": seed})
        return RecordingChatCompletionClient(client, model_name=model, first_turn_tool_choice=first_turn_tool_choice)
    except ModuleNotFoundError as exc:
        package = {"langchain_openai": "langchain-openai", "langchain_ollama": "langchain-ollama",
                   "openai": "autogen-ext[openai]", "ollama": "autogen-ext[ollama]"}.get(
            (exc.name or "").split(".")[0], exc.name)
        raise RuntimeError(f"{model} on {framework} needs {exc.name}: pip install {package}") from exc
