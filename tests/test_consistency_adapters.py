"""Sampling N plans per step on a real LangChain v1 agent (LangGraph underneath) and a real AutoGen agent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import TextMessage, ToolCallSummaryMessage
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from adapters.sampling import SamplingChatCompletionClient, SelfConsistencyMiddleware
from guardrail import Guard
from guardrail.consistency import (
    ConsistencyGate,
    DeterminismRegistry,
    DryRunHarness,
    HallucinationGateError,
    SelfConsistencyLayer,
    ToolSchema,
)
from guardrail.core.events import Verdict

ORDERS = {"ORD-1": {"id": "ORD-1", "status": "shipped"}, "ORD-2": {"id": "ORD-2", "status": "paid"}}


def lookup_order(order_id: str) -> dict[str, Any]:
    """The order record for `order_id`."""
    if order_id not in ORDERS:
        raise LookupError(f"no order {order_id!r}")
    return ORDERS[order_id]


class ScriptedChatModel(GenericFakeChatModel):
    """Replays scripted turns; `bind_tools` returns itself. Counts the calls made."""

    calls: int = 0

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super()._generate(*args, **kwargs)


def get_order_call(order_id: str, call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "get_order", "args": {"order_id": order_id}, "id": call_id}])


def gated_guard(mode: str = "intervene") -> tuple[Guard, SelfConsistencyLayer, DryRunHarness]:
    registry = DeterminismRegistry([ToolSchema("get_order", deterministic=True, probe_args={"order_id": "ORD-1"})])
    harness = DryRunHarness({"get_order": lookup_order}, epoch="orders-snapshot-1")
    harness.probe(registry)
    layer = SelfConsistencyLayer(ConsistencyGate(registry))
    return Guard([layer], mode=mode), layer, harness  # type: ignore[arg-type]


def langchain_agent(turns: list[AIMessage], *, strict: bool = False, mode: str = "intervene"):
    guard, layer, harness = gated_guard(mode)
    ctx = guard.start_episode(task="status of my order", framework="langchain")
    executed: list[str] = []

    @tool
    def get_order(order_id: str) -> str:
        """Look up an order by id."""
        executed.append(order_id)
        return json.dumps(lookup_order(order_id))

    model = ScriptedChatModel(messages=iter(turns))
    middleware = SelfConsistencyMiddleware(guard, layer, harness, episode=ctx, n=5, strict=strict)
    agent = create_agent(model, [get_order], middleware=[middleware])
    return agent, model, layer, ctx, executed, middleware


def test_langchain_agent_runs_the_call_its_samples_agree_on():
    turns = [get_order_call("ORD-1", f"c{i}") for i in range(5)] + [AIMessage(content="It shipped.")] * 5
    agent, model, layer, ctx, executed, middleware = langchain_agent(turns)
    out = agent.invoke({"messages": [("user", "where is ORD-1?")]})
    assert model.calls == 10  # 5 candidates per model call, two model calls
    assert executed == ["ORD-1"]  # the agent ran the agreed call once, for real
    assert out["messages"][-1].content == "It shipped."
    assert [v.decision.value for v in layer.verdicts(ctx)] == ["accept"]
    assert middleware.sampler.steps[0].decision.verdict is Verdict.ALLOW


def test_langchain_agent_never_runs_a_call_with_fabricated_arguments():
    turns = [get_order_call(f"ORD-9{i}", f"c{i}") for i in range(5)]
    agent, model, layer, ctx, executed, _ = langchain_agent(turns)
    out = agent.invoke({"messages": [("user", "where is my order?")]})
    assert executed == []
    assert not any(isinstance(m, ToolMessage) for m in out["messages"])
    assert "[guardrail]" in out["messages"][-1].content
    assert "hallucinated_arguments" in out["messages"][-1].content
    assert layer.verdicts(ctx)[0].decision.value == "reject"


def test_langchain_strict_mode_raises_the_typed_error():
    turns = [get_order_call(f"ORD-9{i}", f"c{i}") for i in range(5)]
    agent, *_ = langchain_agent(turns, strict=True)
    with pytest.raises(HallucinationGateError) as caught:
        agent.invoke({"messages": [("user", "where is my order?")]})
    assert caught.value.verdict is not None and caught.value.verdict.arg_agreement == 0.0


def test_langchain_report_mode_records_the_finding_and_lets_the_agent_go_on():
    turns = [get_order_call(f"ORD-{1 + i % 2}", f"c{i}") for i in range(5)] + [AIMessage(content="done")] * 5
    agent, model, layer, ctx, executed, middleware = langchain_agent(turns, mode="report")
    agent.invoke({"messages": [("user", "which order?")]})
    assert executed == ["ORD-1"]  # counts 3 vs 2: agreement 0.4, accepted; the modal call runs
    assert layer.verdicts(ctx)[0].arg_agreement == pytest.approx(0.4)


async def test_langchain_async_agent_is_gated_the_same_way():
    turns = [get_order_call(f"ORD-9{i}", f"c{i}") for i in range(5)]
    agent, model, layer, ctx, executed, _ = langchain_agent(turns)
    out = await agent.ainvoke({"messages": [("user", "where is my order?")]})
    assert executed == []
    assert "[guardrail]" in out["messages"][-1].content


TOOL_MODEL = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown",
                       structured_output=False)


def autogen_result(order_id: str, call_id: str) -> CreateResult:
    return CreateResult(finish_reason="function_calls", cached=False,
                        usage=RequestUsage(prompt_tokens=10, completion_tokens=5),
                        content=[FunctionCall(id=call_id, name="get_order",
                                              arguments=json.dumps({"order_id": order_id}))])


def autogen_agent(results: list[CreateResult | str], *, strict: bool = False):
    guard, layer, harness = gated_guard()
    ctx = guard.start_episode(task="status of my order", framework="autogen")
    executed: list[str] = []

    def get_order(order_id: str) -> str:
        """Look up an order by id."""
        executed.append(order_id)
        return json.dumps(lookup_order(order_id))

    client = SamplingChatCompletionClient(ReplayChatCompletionClient(results, model_info=TOOL_MODEL), guard=guard, layer=layer,
                                          harness=harness, episode=ctx, n=5, strict=strict)
    return AssistantAgent("worker", model_client=client, tools=[get_order]), layer, ctx, executed


async def test_autogen_agent_runs_the_call_its_samples_agree_on():
    # One sample spells the same arguments differently (key order and spacing): still the same call.
    results: list[CreateResult | str] = [autogen_result("ORD-2", f"c{i}") for i in range(4)]
    results.append(CreateResult(finish_reason="function_calls", cached=False,
                                usage=RequestUsage(prompt_tokens=1, completion_tokens=1),
                                content=[FunctionCall(id="c4", name="get_order", arguments='{ "order_id" : "ORD-2" }')]))
    agent, layer, ctx, executed = autogen_agent(results)
    result = await agent.run(task="where is ORD-2?")
    assert executed == ["ORD-2"]
    assert isinstance(result.messages[-1], ToolCallSummaryMessage)
    assert layer.verdicts(ctx)[0].arg_agreement == 1.0


async def test_autogen_agent_never_runs_a_call_with_fabricated_arguments():
    agent, layer, ctx, executed = autogen_agent([autogen_result(f"ORD-7{i}", f"c{i}") for i in range(5)])
    result = await agent.run(task="where is my order?")
    assert executed == []
    assert isinstance(result.messages[-1], TextMessage)
    assert "[guardrail]" in result.messages[-1].content
    assert layer.verdicts(ctx)[0].decision.value == "reject"


async def test_autogen_strict_mode_raises_the_typed_error():
    agent, *_ = autogen_agent([autogen_result(f"ORD-7{i}", f"c{i}") for i in range(5)], strict=True)
    with pytest.raises(HallucinationGateError):
        await agent.run(task="where is my order?")


async def test_text_only_candidates_pass_through_ungated():
    agent, layer, ctx, executed = autogen_agent(["It is on its way."] * 5)
    result = await agent.run(task="hello")
    assert result.messages[-1].content == "It is on its way."
    assert layer.verdicts(ctx) == []


async def test_when_most_candidates_answer_in_text_no_tool_runs_and_nothing_is_gated():
    results: list[CreateResult | str] = ["Please tell me the order id."] * 3
    results += [autogen_result("ORD-71", "c3"), autogen_result("ORD-72", "c4")]
    agent, layer, ctx, executed = autogen_agent(results)
    result = await agent.run(task="where is my order?")
    assert executed == []
    assert result.messages[-1].content == "Please tell me the order id."
    assert layer.verdicts(ctx) == []


async def test_harness_runs_autogen_function_tools_asynchronously():
    from autogen_core.tools import FunctionTool

    from adapters.sampling import sandbox_tools
    from guardrail.consistency import ProposedCall

    async def get_order(order_id: str) -> str:
        """Look up an order by id."""
        return json.dumps(lookup_order(order_id))

    harness = DryRunHarness(sandbox_tools([FunctionTool(get_order, description="order lookup", name="get_order")]),
                            epoch="s1")
    ok, missing = await harness.arun([ProposedCall("get_order", {"order_id": "ORD-1"}),
                                      ProposedCall("get_order", {"order_id": "ORD-404"})])
    assert json.loads(ok.result)["status"] == "shipped"
    assert missing.error is not None and "ORD-404" in missing.error
    (sync_attempt,) = harness.run([ProposedCall("get_order", {"order_id": "ORD-1"})])
    assert sync_attempt.error is not None and "arun()" in sync_attempt.error


def test_hand_built_langgraph_graph_with_a_sampling_model_node():
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from adapters.sampling import StepSampler, sampling_model_node

    guard, layer, harness = gated_guard()
    ctx = guard.start_episode(framework="langgraph")
    executed: list[str] = []

    @tool
    def get_order(order_id: str) -> str:
        """Look up an order by id."""
        executed.append(order_id)
        return json.dumps(lookup_order(order_id))

    turns = [get_order_call("ORD-2", f"c{i}") for i in range(5)] + [AIMessage(content="Paid.")] * 5
    turns += [get_order_call(f"ORD-8{i}", f"d{i}") for i in range(5)]
    model = ScriptedChatModel(messages=iter(turns))
    sampler = StepSampler(guard, layer, harness, episode=ctx, n=5)
    graph = StateGraph(MessagesState)
    graph.add_node("model", sampling_model_node(model, sampler))
    graph.add_node("tools", ToolNode([get_order]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}

    first = app.invoke({"messages": [("user", "status of ORD-2?")]}, config)
    assert executed == ["ORD-2"] and first["messages"][-1].content == "Paid."
    second = app.invoke({"messages": [("user", "and my other order?")]}, config)
    assert executed == ["ORD-2"]  # the fabricated lookup never reached the ToolNode
    assert "[guardrail]" in second["messages"][-1].content
    assert [v.decision.value for v in layer.verdicts(ctx)] == ["accept", "reject"]


def test_oversized_candidates_become_a_finding_not_a_crash():
    from adapters.sampling import StepSampler
    from guardrail.consistency import ProposedCall

    guard, layer, harness = gated_guard()
    ctx = guard.start_episode()
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    step = StepSampler(guard, layer, harness, episode=ctx).gate([ProposedCall("get_order", {"order_id": deep})] * 5)
    assert step.chosen == 0
    assert step.decision is not None
    assert [f.check for f in step.decision.findings] == ["samples_not_comparable"]


# ---------------------------------------------------------------------------- parallel steps, concurrent samples
def parallel_turn(i: int) -> AIMessage:
    """Two calls in one step: the order the user named (all samples agree) and one the model invents (they do not)."""
    return AIMessage(content="", tool_calls=[
        {"name": "get_order", "args": {"order_id": f"ORD-5{i}"}, "id": f"x{i}"},
        {"name": "get_order", "args": {"order_id": "ORD-1"}, "id": f"k{i}"}])


def test_langchain_every_call_of_a_parallel_step_is_gated_and_only_the_fabricated_one_is_dropped():
    turns = [parallel_turn(i) for i in range(5)] + [AIMessage(content="ORD-1 shipped.")] * 5
    agent, model, layer, ctx, executed, middleware = langchain_agent(turns)
    out = agent.invoke({"messages": [("user", "where is ORD-1, and my other order?")]})

    step = middleware.sampler.steps[0]
    assert [(c.call_id, c.blocked) for c in step.calls] == [("x0", True), ("k0", False)]
    assert [v.decision.value for v in layer.verdicts(ctx)] == ["reject", "accept"]
    assert executed == ["ORD-1"]  # the agreed call ran; the invented one never reached the tool
    asked = next(m for m in out["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert [c["id"] for c in asked.tool_calls] == ["k0"] and "hallucinated_arguments" in asked.content
    assert out["messages"][-1].content == "ORD-1 shipped."


def autogen_parallel(i: int) -> CreateResult:
    return CreateResult(finish_reason="function_calls", cached=False,
                        usage=RequestUsage(prompt_tokens=10, completion_tokens=5),
                        content=[FunctionCall(id=f"k{i}", name="get_order", arguments='{"order_id": "ORD-2"}'),
                                 FunctionCall(id=f"x{i}", name="get_order", arguments=f'{{"order_id": "ORD-6{i}"}}')])


async def test_autogen_every_call_of_a_parallel_step_is_gated_and_only_the_fabricated_one_is_dropped():
    agent, layer, ctx, executed = autogen_agent([autogen_parallel(i) for i in range(5)])
    await agent.run(task="where is ORD-2, and my other order?")

    assert executed == ["ORD-2"]
    assert sorted(v.decision.value for v in layer.verdicts(ctx)) == ["accept", "reject"]


class InFlight:
    """Counts model calls in flight at once (each takes a real 50 ms on the event loop)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    async def hold(self) -> None:
        import asyncio

        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.05)
        self.now -= 1


async def test_async_samples_are_drawn_concurrently_in_both_frameworks():
    flight = InFlight()

    class SlowChat(ScriptedChatModel):
        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            await flight.hold()
            return self._generate(*args, **kwargs)

    guard, layer, harness = gated_guard()
    ctx = guard.start_episode()
    model = SlowChat(messages=iter([get_order_call("ORD-1", f"c{i}") for i in range(5)] + [AIMessage("ok")] * 5))
    agent = create_agent(model, [tool(lookup_order)],
                         middleware=[SelfConsistencyMiddleware(guard, layer, harness, episode=ctx, n=5)])
    await agent.ainvoke({"messages": [("user", "where is ORD-1?")]})
    assert flight.most == 5

    autogen_flight = InFlight()

    class SlowClient(ReplayChatCompletionClient):
        async def create(self, *args: Any, **kwargs: Any) -> Any:
            await autogen_flight.hold()
            return await super().create(*args, **kwargs)

    guard, layer, harness = gated_guard()
    ctx = guard.start_episode()
    client = SamplingChatCompletionClient(SlowClient([autogen_result("ORD-1", f"c{i}") for i in range(5)],
                                                     model_info=TOOL_MODEL),
                                          guard=guard, layer=layer, harness=harness, episode=ctx, n=5)
    await client.create([])
    assert autogen_flight.most == 5


# ---------------------------------------------------------------------------- provenance from the conversation
def test_langchain_a_coincident_invention_is_blocked_and_a_named_order_is_grounded_in_the_messages():
    # All five samples invent the same order: agreement 1.0, so only provenance can see it.
    turns = [get_order_call("ORD-77", f"c{i}") for i in range(5)]
    agent, model, layer, ctx, executed, _ = langchain_agent(turns)
    out = agent.invoke({"messages": [("user", "where is my order?")]})
    assert executed == []
    assert "ungrounded_argument" in out["messages"][-1].content
    assert (layer.verdicts(ctx)[0].reason, layer.verdicts(ctx)[0].record_decision.value) == (
        "ungrounded_identifier", "accept")
    # The episode's task does not name ORD-1; the user's message does, and the middleware passes it on.
    turns = [get_order_call("ORD-1", f"c{i}") for i in range(5)] + [AIMessage(content="It shipped.")] * 5
    agent, model, layer, ctx, executed, _ = langchain_agent(turns)
    agent.invoke({"messages": [("user", "where is ORD-1?")]})
    assert executed == ["ORD-1"]
    assert layer.verdicts(ctx)[0].provenance.checked[0].grounded_by == "context"


async def test_autogen_a_coincident_invention_is_blocked_and_strict_mode_raises():
    agent, layer, ctx, executed = autogen_agent([autogen_result("ORD-77", f"c{i}") for i in range(5)])
    result = await agent.run(task="where is my order?")
    assert executed == [] and "ungrounded_argument" in result.messages[-1].content
    agent, *_ = autogen_agent([autogen_result("ORD-77", f"c{i}") for i in range(5)], strict=True)
    with pytest.raises(HallucinationGateError):
        await agent.run(task="where is my order?")
