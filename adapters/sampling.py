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

import asyncio
import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from adapters.common import asafe_decision, malformed_call, safe_decision, with_problem
from adapters.steps import content_text
from guardrail.consistency import (
    CanonicalizationError,
    DryRunHarness,
    HallucinationGateError,
    PlanSample,
    PlanVerdict,
    ProposedCall,
    SelfConsistencyLayer,
    canonical_args,
)
from guardrail.core.events import Action, Decision, Finding
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext

if TYPE_CHECKING:
    from autogen_core.models import CreateResult

__all__ = ["GatedCall", "GatedStep", "SamplingChatCompletionClient", "aligned_batches", "SelfConsistencyMiddleware", "StepSampler",
           "sampling_model_node", "sandbox_tools"]

EpisodeSource = EpisodeContext | Callable[[], EpisodeContext]
_GATING_CHECKS = ("hallucinated_arguments", "ungrounded_argument", "epoch_not_fixed")


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
    """The outcome of gating one sampled step: which candidate to use and, per call of it, the Guard's decision."""

    chosen: int  # index of the candidate to hand back to the agent
    decision: Decision | None  # the step's deciding decision (the first block, else the first call's); None: no call
    verdict: PlanVerdict | None
    samples: list[PlanSample]  # the first call's samples (every call's are in `calls`)
    calls: list[GatedCall] = field(default_factory=list)  # one per tool call of the chosen candidate, in order

    @property
    def blocked(self) -> bool:
        """True when every call of the chosen candidate was blocked (the step runs no tool)."""
        return bool(self.calls) and all(call.blocked for call in self.calls)

    @property
    def blocked_call_ids(self) -> set[str]:
        return {call.call_id for call in self.calls if call.blocked}


@dataclass(frozen=True)
class GatedCall:
    """One call of a (possibly parallel) sampled step: its aligned samples and what the Guard decided."""

    position: int  # index among the chosen candidate's calls
    call_id: str
    decision: Decision
    verdict: PlanVerdict | None
    samples: list[PlanSample]

    @property
    def blocked(self) -> bool:
        return self.decision.blocked


Candidate = Sequence[ProposedCall]  # one sampled response: its tool calls (empty: it answered in text)


def aligned_batches(candidates: Sequence[Candidate], chosen: int) -> list[list[ProposedCall]]:
    """Per call of the chosen candidate, the matching call of every candidate (None-tool when it made none).

    Parallel calls come in any order, so a call is matched by tool and rank: the k-th call to a tool
    in one candidate lines up with the k-th call to that tool in every other.
    """
    batches = []
    ranks: dict[str | None, int] = {}
    for call in candidates[chosen]:
        rank = ranks.get(call.tool, 0)
        ranks[call.tool] = rank + 1
        batch = []
        for candidate in candidates:
            same = [c for c in candidate if c.tool == call.tool]
            batch.append(same[rank] if rank < len(same) else ProposedCall(None, None))
        batches.append(batch)
    return batches


class StepSampler:
    """The framework-free core every wrapper shares: dry-run N candidates, stage them, ask the Guard about each call."""

    def __init__(self, guard: Guard, layer: SelfConsistencyLayer, harness: DryRunHarness, *,
                 episode: EpisodeSource | None = None, n: int = 5, strict: bool = False) -> None:
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
        if self.episode is None:
            raise ValueError("this StepSampler has no episode: give episode= or pass ctx= to gate_step")
        return self.episode if isinstance(self.episode, EpisodeContext) else self.episode()

    def modal_candidate(self, candidates: Sequence[Candidate]) -> int:
        """The first candidate whose whole set of canonical calls is the most common (text-only counts as one)."""
        registry = self.layer.gate.registry
        try:
            keys = []
            for candidate in candidates:
                calls = []
                for call in candidate:
                    schema = registry.schema(call.tool)
                    unordered = schema.unordered_args if schema is not None else frozenset()
                    calls.append((call.tool or "", canonical_args(call.args, unordered=unordered)))
                keys.append(tuple(sorted(calls)))
        except CanonicalizationError:
            return 0  # the layer reports the samples as not comparable; the agent is never broken by them
        modal, _ = Counter(keys).most_common(1)[0]
        return keys.index(modal)

    def _action(self, proposed: ProposedCall, fallback_id: str) -> tuple[Action, Finding | None]:
        """The modal call as an `Action`; a malformed one is a stand-in plus a finding, never an exception."""
        call_id = proposed.call_id or fallback_id
        try:
            args = proposed.args
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    args = {"_unparsed_arguments": args}
            if not isinstance(args, dict):
                args = {"_arguments": args}
            return Action.tool_call(proposed.tool or "", args, call_id=call_id), None
        except Exception as exc:  # noqa: BLE001 - whatever the model sampled, the agent goes on
            action, problem = malformed_call(proposed.tool or "", proposed.args, call_id, None, exc)
            return action, problem

    def _plan(self, candidates: Sequence[Candidate]) -> tuple[int, list[list[ProposedCall]]]:
        chosen = self.modal_candidate(candidates)
        return chosen, aligned_batches(candidates, chosen)

    def _staged(self, ctx: EpisodeContext, position: int, proposed: ProposedCall,
                samples: list[PlanSample], context: Sequence[Any]) -> tuple[Action, Finding | None, str, int]:
        call_id = proposed.call_id or f"consistency-{id(samples)}-{position}"
        before = len(self.layer.verdicts(ctx))
        self.layer.stage(ctx, samples, call_id=call_id, context=context)
        action, problem = self._action(proposed, call_id)
        return action, problem, call_id, before

    def _gated_call(self, ctx: EpisodeContext, position: int, call_id: str, decision: Decision, before: int,
                    samples: list[PlanSample]) -> GatedCall:
        verdicts = self.layer.verdicts(ctx)
        verdict = verdicts[-1] if len(verdicts) > before else None
        return GatedCall(position, call_id, decision, verdict, samples)

    def _finish(self, chosen: int, calls: list[GatedCall]) -> GatedStep:
        if not calls:
            return GatedStep(chosen, None, None, [])
        deciding = next((c for c in calls if c.blocked), calls[0])
        step = GatedStep(chosen, deciding.decision, deciding.verdict, calls[0].samples, calls)
        self.steps.append(step)
        if self.strict:
            for call in calls:
                gating = [f for f in call.decision.findings
                          if f.layer == self.layer.name and f.check in _GATING_CHECKS]
                if gating:
                    raise HallucinationGateError(gating[0].message, call.verdict)
        return step

    def gate_step(self, candidates: Sequence[Candidate], *, ctx: EpisodeContext | None = None,
                  context: Sequence[Any] = ()) -> GatedStep:
        """Dry-run every call of the candidates, gate each call of the modal candidate, and say which to use.

        When the modal candidate calls no tool (most candidates answered in text) there is nothing to gate.
        `context`: what the model was shown besides the episode (user, system and tool messages; never its
        own), for the layer's provenance check.
        """
        chosen, batches = self._plan(candidates)
        if not batches:
            return self._finish(chosen, [])
        ctx = ctx or self.context()
        calls = []
        for position, batch in enumerate(batches):
            samples = self.harness.run(batch)
            action, problem, call_id, before = self._staged(ctx, position, batch[chosen], samples, context)
            decision = with_problem(safe_decision("before_action", partial(self.guard.before_action, ctx, action)),
                                    problem, self.guard, ctx)
            calls.append(self._gated_call(ctx, position, call_id, decision, before, samples))
        return self._finish(chosen, calls)

    async def agate_step(self, candidates: Sequence[Candidate], *, ctx: EpisodeContext | None = None,
                         context: Sequence[Any] = ()) -> GatedStep:
        """As `gate_step`; the dry runs of all calls go concurrently, the Guard runs off the event loop."""
        chosen, batches = self._plan(candidates)
        if not batches:
            return self._finish(chosen, [])
        ctx = ctx or self.context()
        all_samples = await asyncio.gather(*(self.harness.arun(batch) for batch in batches))
        calls = []
        for position, (batch, samples) in enumerate(zip(batches, all_samples, strict=True)):
            action, problem, call_id, before = self._staged(ctx, position, batch[chosen], samples, context)
            decision = with_problem(
                await asafe_decision("before_action", partial(self.guard.abefore_action, ctx, action)),
                problem, self.guard, ctx)
            calls.append(self._gated_call(ctx, position, call_id, decision, before, samples))
        return self._finish(chosen, calls)

    def gate(self, calls: Sequence[ProposedCall]) -> GatedStep:
        """`gate_step` for one call per candidate (a None tool: the candidate answered in text)."""
        return self.gate_step([[c] if c.tool is not None else [] for c in calls])

    async def agate(self, calls: Sequence[ProposedCall]) -> GatedStep:
        return await self.agate_step([[c] if c.tool is not None else [] for c in calls])


def _blocked_text(step: GatedStep) -> str:
    blocked = [call for call in step.calls if call.blocked]
    head = ("[guardrail] The planned tool call was not run: sampled plans for this step disagree in a way "
            "the self-consistency gate rejects.")
    if len(step.calls) > 1:
        head = (f"[guardrail] {len(blocked)} of the {len(step.calls)} planned tool calls were not run: sampled "
                "plans for them disagree in a way the self-consistency gate rejects.")
    return "\n".join([head, *(call.decision.message() for call in blocked)])


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


def _langchain_message(response: Any) -> Any:
    from langchain_core.messages import AIMessage

    messages = response.result if hasattr(response, "result") else [response]
    return next((m for m in messages if isinstance(m, AIMessage)), None)


def _langchain_calls(response: Any) -> list[ProposedCall]:
    """Every tool call of one sampled response (a ModelResponse or an AIMessage), parallel calls included."""
    message = _langchain_message(response)
    if message is None:
        return []
    return [ProposedCall(call["name"], call.get("args", {}), call_id=call.get("id")) for call in message.tool_calls]


def _langchain_seen(messages: Sequence[Any], system: Any = None) -> list[str]:
    """What the model was shown, for provenance: system, user and tool messages (never its own)."""
    from langchain_core.messages import AIMessage

    seen = [content_text(getattr(system, "content", system))] if system is not None else []
    seen += [content_text(m.content) for m in messages if not isinstance(m, AIMessage) and hasattr(m, "content")]
    return [text for text in seen if text]


def _langchain_outcome(response: Any, step: GatedStep) -> Any:
    """What the agent gets: the chosen response; without its blocked calls; or a plain message when all are blocked."""
    from langchain_core.messages import AIMessage

    if step.blocked:
        return AIMessage(content=_blocked_text(step))
    blocked = step.blocked_call_ids
    if not blocked:
        return response
    message = _langchain_message(response)
    kept = [call for call in message.tool_calls if call.get("id") not in blocked]
    text = content_text(message.content)
    trimmed = message.model_copy(update={"tool_calls": kept,
                                         "content": "\n\n".join(p for p in (text, _blocked_text(step)) if p)})
    if hasattr(response, "result"):
        return dataclasses.replace(response, result=[trimmed if m is message else m for m in response.result])
    return trimmed


class SelfConsistencyMiddleware(_MiddlewareBase):  # type: ignore[misc,valid-type]
    """LangChain v1 agent middleware: each model call becomes N calls, every tool call gated before any runs.

        sampler = SelfConsistencyMiddleware(guard, layer, harness, n=5)
        agent = create_agent(model, tools, middleware=[GuardMiddleware(guard), sampler])

    Without ``episode=`` the samples are judged in the run's own guard episode (the one
    `GuardMiddleware` keeps for the thread, started here when it runs alone). In async code
    (``ainvoke``) the N candidates are drawn concurrently.
    """

    def __init__(self, guard: Guard, layer: SelfConsistencyLayer, harness: DryRunHarness, *,
                 episode: EpisodeSource | None = None, n: int = 5, strict: bool = False) -> None:
        super().__init__()
        self.sampler = StepSampler(guard, layer, harness, episode=episode, n=n, strict=strict)

    @property
    def name(self) -> str:  # the AgentMiddleware registry keys middleware by name
        return "guardrail_self_consistency"

    def _context(self, request: Any) -> EpisodeContext:
        """The episode this model call belongs to: the given one, else the run's (a repair fork's, the state's, the thread's)."""
        if self.sampler.episode is not None:
            return self.sampler.context()
        from langgraph.config import get_config

        guard = self.sampler.guard
        try:
            configurable = get_config().get("configurable") or {}
        except RuntimeError:
            configurable = {}
        state = getattr(request, "state", None) or {}
        episode_id = (configurable.get("guardrail_fork") or state.get("guardrail_episode")
                      or configurable.get("thread_id"))
        if episode_id is not None and str(episode_id) in guard.running_episodes:
            return guard.context(str(episode_id))
        return guard.start_episode(None if episode_id is None else str(episode_id), framework="langgraph")

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        responses = [handler(request) for _ in range(self.sampler.n)]
        step = self.sampler.gate_step([_langchain_calls(response) for response in responses],
                                      ctx=self._context(request), context=_request_seen(request))
        return _langchain_outcome(responses[step.chosen], step)

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        responses = await asyncio.gather(*(handler(request) for _ in range(self.sampler.n)))
        step = await self.sampler.agate_step([_langchain_calls(response) for response in responses],
                                             ctx=self._context(request), context=_request_seen(request))
        return _langchain_outcome(responses[step.chosen], step)


def _request_seen(request: Any) -> list[str]:
    return _langchain_seen(getattr(request, "messages", None) or [], getattr(request, "system_message", None))


def sampling_model_node(model: Any, sampler: StepSampler) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A model node for a hand-built LangGraph ``StateGraph`` over ``messages``: N candidates, every call gated.

        graph.add_node("model", sampling_model_node(model.bind_tools(tools), sampler))
        graph.add_node("tools", ToolNode(tools))

    The node invokes `model` N times on the state's messages and returns the modal candidate
    without its blocked calls, or, when the Guard blocks them all, an assistant message saying why.
    """

    def node(state: dict[str, Any]) -> dict[str, Any]:
        responses = [model.invoke(state["messages"]) for _ in range(sampler.n)]
        step = sampler.gate_step([_langchain_calls(response) for response in responses],
                                 context=_langchain_seen(state["messages"]))
        return {"messages": [_langchain_outcome(responses[step.chosen], step)]}

    return node


# ---------------------------------------------------------------------- AutoGen
def _autogen_client_base() -> type:
    from autogen_core.models import ChatCompletionClient

    return ChatCompletionClient


try:
    _ClientBase: type = _autogen_client_base()
except ImportError:  # pragma: no cover - exercised only where AutoGen is absent
    _ClientBase = _LazyBase


def _autogen_calls(result: CreateResult) -> list[ProposedCall]:
    content = result.content
    if isinstance(content, list):
        return [ProposedCall(call.name, call.arguments, call_id=call.id) for call in content]
    return []


def _autogen_seen(messages: Sequence[Any]) -> list[str]:
    """What the model was shown, for provenance: system and user messages and tool results that did not fail."""
    seen: list[str] = []
    for message in messages:
        if type(message).__name__ == "AssistantMessage":
            continue  # the model's own words are not evidence
        content = getattr(message, "content", None)
        if isinstance(content, list):
            for part in content:
                if getattr(part, "is_error", False):
                    continue
                text = getattr(part, "content", part)
                if isinstance(text, str):
                    seen.append(text)
        elif isinstance(content, str):
            seen.append(content)
    return [text for text in seen if text]


def _autogen_outcome(result: CreateResult, step: GatedStep) -> CreateResult:
    from autogen_core.models import CreateResult

    if step.blocked:
        return CreateResult(finish_reason="stop", content=_blocked_text(step), usage=result.usage, cached=False)
    blocked = step.blocked_call_ids
    if not blocked or not isinstance(result.content, list):
        return result
    kept = [call for call in result.content if call.id not in blocked]
    thought = "\n\n".join(p for p in (result.thought or "", _blocked_text(step)) if p)
    return result.model_copy(update={"content": kept, "thought": thought})


class SamplingChatCompletionClient(_ClientBase):  # type: ignore[misc,valid-type]
    """An AutoGen model client that asks the wrapped client N times per step (concurrently) and gates every call.

        client = SamplingChatCompletionClient(inner, guard=guard, layer=layer, harness=harness, episode=ctx)
        agent = AssistantAgent("worker", model_client=client, tools=[...])
    """

    def __init__(self, inner: Any, *, guard: Guard, layer: SelfConsistencyLayer, harness: DryRunHarness,
                 episode: EpisodeSource, n: int = 5, strict: bool = False) -> None:
        self.inner = inner
        self.sampler = StepSampler(guard, layer, harness, episode=episode, n=n, strict=strict)

    async def create(self, messages: Sequence[Any], **kwargs: Any) -> CreateResult:
        results = await asyncio.gather(*(self.inner.create(messages, **kwargs) for _ in range(self.sampler.n)))
        step = await self.sampler.agate_step([_autogen_calls(result) for result in results],
                                             context=_autogen_seen(messages))
        return _autogen_outcome(results[step.chosen], step)

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
