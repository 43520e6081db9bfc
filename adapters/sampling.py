"""Sample N candidate plans for one agent step and pass them through the self-consistency gate.

Two model-call wrappers, one per framework, doing the same thing: ask the model N times for the
step, run every candidate's tool call in one sandbox epoch with a `DryRunHarness`, stage the
samples on the `SelfConsistencyLayer`, and ask the Guard about the modal call.

- LangChain v1 / LangGraph: `SelfConsistencyMiddleware`, an ``AgentMiddleware`` whose
  ``wrap_model_call`` calls the model N times (``create_agent(..., middleware=[...])``).
- a hand-built LangGraph ``StateGraph``: `sampling_model_node`, a model node doing the same.
- AutoGen: `SamplingChatCompletionClient`, a ``ChatCompletionClient`` wrapping the real one
  (``AssistantAgent(model_client=SamplingChatCompletionClient(inner, ...))``).

What the Guard decides is enacted in the framework's own terms: allowed, the agent gets the
modal candidate's response and runs its call for real; blocked (a rejection in intervene mode,
or samples not in one epoch), it gets a plain assistant message saying why and no tool call.
With ``strict=True`` a rejection raises `HallucinationGateError` instead, for callers that
escalate. A deferral is a warning finding on the Guard's Decision; the tool is quarantined.

Each wrapper subclasses its framework's base class when that framework is installed; the module
still imports without either.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.common import asafe_decision, malformed_call, safe_decision, with_problem
from guardrail.consistency import (
    CanonicalizationError,
    DryRunHarness,
    HallucinationGateError,
    PlanSample,
    PlanVerdict,
    ProposedCall,
    SelfConsistencyLayer,
    modal_index,
)
from guardrail.core.events import Action, Decision, Finding
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext

if TYPE_CHECKING:
    from autogen_core.models import CreateResult

__all__ = ["GatedStep", "SamplingChatCompletionClient", "SelfConsistencyMiddleware", "StepSampler",
           "sampling_model_node", "sandbox_tools"]

EpisodeSource = EpisodeContext | Callable[[], EpisodeContext]
_GATING_CHECKS = ("hallucinated_arguments", "epoch_not_fixed")


def sandbox_tools(tools: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
    """Framework tools as what a `DryRunHarness` calls: AutoGen tools become coroutine functions.

    A list is keyed by each tool's ``name``; LangChain tools and plain callables pass through unchanged.
    """
    named = dict(tools) if isinstance(tools, Mapping) else {tool.name: tool for tool in tools}
    out: dict[str, Any] = {}
    for name, tool in named.items():
        if hasattr(tool, "run_json") and not callable(getattr(tool, "invoke", None)):
            out[name] = _autogen_runner(tool)
        else:
            out[name] = tool
    return out


def _autogen_runner(tool: Any) -> Callable[..., Any]:
    from autogen_core import CancellationToken

    async def run(**args: Any) -> Any:
        return await tool.run_json(args, CancellationToken())

    return run


@dataclass(frozen=True)
class GatedStep:
    """The outcome of gating one sampled step."""

    chosen: int  # index of the candidate to hand back to the agent
    decision: Decision | None  # None when no candidate called a tool (nothing to gate)
    verdict: PlanVerdict | None
    samples: list[PlanSample]

    @property
    def blocked(self) -> bool:
        return self.decision is not None and self.decision.blocked


class StepSampler:
    """The framework-free core both wrappers share: dry-run N candidates, stage them, ask the Guard."""

    def __init__(self, guard: Guard, layer: SelfConsistencyLayer, harness: DryRunHarness, *,
                 episode: EpisodeSource, n: int = 5, strict: bool = False) -> None:
        if n < 2:
            raise ValueError(f"sampling needs n >= 2 candidates per step, got {n}")
        if layer not in guard.layers:
            raise ValueError("the SelfConsistencyLayer must be one of the guard's layers")
        self.guard = guard
        self.layer = layer
        self.harness = harness
        self.episode = episode
        self.n = n
        self.strict = strict
        self.steps: list[GatedStep] = []

    def context(self) -> EpisodeContext:
        return self.episode if isinstance(self.episode, EpisodeContext) else self.episode()

    def _prepare(self, samples: list[PlanSample],
                 calls: Sequence[ProposedCall]) -> tuple[int, Action, str, Finding | None]:
        try:
            chosen = modal_index(samples, self.layer.gate.registry)
        except CanonicalizationError:
            chosen = 0  # the layer reports the samples as not comparable; the agent is never broken by them
        proposed = calls[chosen]
        call_id = proposed.call_id or f"consistency-{id(samples)}"
        args = proposed.args
        try:  # a malformed candidate call is a finding, never an exception out of the agent's model call
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    args = {"_unparsed_arguments": args}
            if not isinstance(args, dict):
                args = {"_arguments": args}
            return chosen, Action.tool_call(proposed.tool or "", args, call_id=call_id), call_id, None
        except Exception as exc:  # noqa: BLE001
            action, problem = malformed_call(proposed.tool or "", proposed.args, call_id, None, exc)
            return chosen, action, action.call_id or call_id, problem

    def _finish(self, ctx: EpisodeContext, chosen: int, decision: Decision, before: int,
                samples: list[PlanSample]) -> GatedStep:
        verdicts = self.layer.verdicts(ctx)
        verdict = verdicts[-1] if len(verdicts) > before else None
        step = GatedStep(chosen, decision, verdict, samples)
        self.steps.append(step)
        if self.strict:
            gating = [f for f in decision.findings if f.layer == self.layer.name and f.check in _GATING_CHECKS]
            if gating:
                raise HallucinationGateError(gating[0].message, verdict)
        return step

    def gate(self, calls: Sequence[ProposedCall]) -> GatedStep:
        """Dry-run `calls` (one per candidate), gate the batch, and say which candidate to use.

        When no candidate calls a tool, or most candidates answer without one, the modal
        candidate runs nothing and there is nothing to gate.
        """
        if all(call.tool is None for call in calls):
            return GatedStep(0, None, None, [])
        ctx = self.context()
        samples = self.harness.run(calls)
        chosen, action, call_id, problem = self._prepare(samples, calls)
        if calls[chosen].tool is None:
            return GatedStep(chosen, None, None, samples)
        before = len(self.layer.verdicts(ctx))
        self.layer.stage(ctx, samples, call_id=call_id)
        decision = safe_decision("before_action", lambda: self.guard.before_action(ctx, action))
        return self._finish(ctx, chosen, with_problem(decision, problem, self.guard, ctx), before, samples)

    async def agate(self, calls: Sequence[ProposedCall]) -> GatedStep:
        if all(call.tool is None for call in calls):
            return GatedStep(0, None, None, [])
        ctx = self.context()
        samples = await self.harness.arun(calls)
        chosen, action, call_id, problem = self._prepare(samples, calls)
        if calls[chosen].tool is None:
            return GatedStep(chosen, None, None, samples)
        before = len(self.layer.verdicts(ctx))
        self.layer.stage(ctx, samples, call_id=call_id)
        decision = await asafe_decision("before_action", lambda: self.guard.abefore_action(ctx, action))
        return self._finish(ctx, chosen, with_problem(decision, problem, self.guard, ctx), before, samples)


def _blocked_text(step: GatedStep) -> str:
    assert step.decision is not None
    return ("[guardrail] The planned tool call was not run: sampled plans for this step disagree in a way "
            "the self-consistency gate rejects.\n" + step.decision.message())


# ---------------------------------------------------------------------- LangChain v1 / LangGraph
def _langchain_middleware_base() -> type:
    from langchain.agents.middleware import AgentMiddleware

    return AgentMiddleware


class _LazyBase:
    pass


try:  # The middleware subclasses the framework's own base; without LangChain the name still imports.
    _MiddlewareBase: type = _langchain_middleware_base()
except ImportError:  # pragma: no cover - exercised only where LangChain is absent
    _MiddlewareBase = _LazyBase


def _first_tool_call(response: Any) -> tuple[Any, ProposedCall]:
    from langchain_core.messages import AIMessage

    messages = response.result if hasattr(response, "result") else [response]
    message = next((m for m in messages if isinstance(m, AIMessage)), None)
    if message is None or not message.tool_calls:
        return message, ProposedCall(None, None)
    call = message.tool_calls[0]  # one call per step is gated; parallel calls beyond the first pass as they are
    return message, ProposedCall(call["name"], call.get("args", {}), call_id=call.get("id"))


class SelfConsistencyMiddleware(_MiddlewareBase):  # type: ignore[misc,valid-type]
    """LangChain v1 agent middleware: each model call becomes N calls, gated before any tool runs.

        sampler = SelfConsistencyMiddleware(guard, layer, harness, episode=ctx, n=5)
        agent = create_agent(model, tools, middleware=[sampler])
    """

    def __init__(self, guard: Guard, layer: SelfConsistencyLayer, harness: DryRunHarness, *,
                 episode: EpisodeSource, n: int = 5, strict: bool = False) -> None:
        super().__init__()
        self.sampler = StepSampler(guard, layer, harness, episode=episode, n=n, strict=strict)

    @property
    def name(self) -> str:  # the AgentMiddleware registry keys middleware by name
        return "guardrail_self_consistency"

    def _respond(self, responses: list[Any], step: GatedStep) -> Any:
        from langchain_core.messages import AIMessage

        if step.blocked:
            return AIMessage(content=_blocked_text(step))
        return responses[step.chosen]

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        responses = [handler(request) for _ in range(self.sampler.n)]
        calls = [_first_tool_call(response)[1] for response in responses]
        return self._respond(responses, self.sampler.gate(calls))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        responses = [await handler(request) for _ in range(self.sampler.n)]
        calls = [_first_tool_call(response)[1] for response in responses]
        return self._respond(responses, await self.sampler.agate(calls))


def sampling_model_node(model: Any, sampler: StepSampler) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A model node for a hand-built LangGraph ``StateGraph`` over ``messages``: N candidates, gated.

        graph.add_node("model", sampling_model_node(model.bind_tools(tools), sampler))
        graph.add_node("tools", ToolNode(tools))

    The node invokes `model` N times on the state's messages and returns the modal candidate,
    or, when the Guard blocks it, an assistant message without tool calls saying why.
    """
    from langchain_core.messages import AIMessage

    def node(state: dict[str, Any]) -> dict[str, Any]:
        responses = [model.invoke(state["messages"]) for _ in range(sampler.n)]
        step = sampler.gate([_first_tool_call(response)[1] for response in responses])
        message = AIMessage(content=_blocked_text(step)) if step.blocked else responses[step.chosen]
        return {"messages": [message]}

    return node


# ---------------------------------------------------------------------- AutoGen
def _autogen_client_base() -> type:
    from autogen_core.models import ChatCompletionClient

    return ChatCompletionClient


try:
    _ClientBase: type = _autogen_client_base()
except ImportError:  # pragma: no cover - exercised only where AutoGen is absent
    _ClientBase = _LazyBase


def _autogen_call(result: CreateResult) -> ProposedCall:
    content = result.content
    if isinstance(content, list) and content:
        call = content[0]  # as in LangChain: the first call of a step is gated
        return ProposedCall(call.name, call.arguments, call_id=call.id)
    return ProposedCall(None, None)


class SamplingChatCompletionClient(_ClientBase):  # type: ignore[misc,valid-type]
    """An AutoGen model client that asks the wrapped client N times per step and gates the candidates.

        client = SamplingChatCompletionClient(inner, guard=guard, layer=layer, harness=harness, episode=ctx)
        agent = AssistantAgent("worker", model_client=client, tools=[...])
    """

    def __init__(self, inner: Any, *, guard: Guard, layer: SelfConsistencyLayer, harness: DryRunHarness,
                 episode: EpisodeSource, n: int = 5, strict: bool = False) -> None:
        self.inner = inner
        self.sampler = StepSampler(guard, layer, harness, episode=episode, n=n, strict=strict)

    async def create(self, messages: Sequence[Any], **kwargs: Any) -> CreateResult:
        from autogen_core.models import CreateResult

        results = [await self.inner.create(messages, **kwargs) for _ in range(self.sampler.n)]
        step = await self.sampler.agate([_autogen_call(result) for result in results])
        if step.blocked:
            chosen = results[step.chosen]
            return CreateResult(finish_reason="stop", content=_blocked_text(step), usage=chosen.usage, cached=False)
        return results[step.chosen]

    async def create_stream(self, messages: Sequence[Any], **kwargs: Any) -> Any:
        # The N candidates must all be complete before the gate can compare them: no token streaming.
        yield await self.create(messages, **kwargs)

    async def close(self) -> None:
        await self.inner.close()

    def actual_usage(self) -> Any:
        return self.inner.actual_usage()

    def total_usage(self) -> Any:
        return self.inner.total_usage()

    def count_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return int(self.inner.count_tokens(messages, **kwargs))

    def remaining_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return int(self.inner.remaining_tokens(messages, **kwargs))

    @property
    def capabilities(self) -> Any:
        return self.inner.model_info

    @property
    def model_info(self) -> Any:
        return self.inner.model_info
