"""What a step-monitor alarm does to a run, on LangChain and AutoGen agents written here: on_alarm=warn|stop|repair.

The agents are a shop assistant with two tools of its own (`lookup_price`, `read_note`) and a scripted
chat model (one LangChain `BaseChatModel`, one AutoGen `ChatCompletionClient`, both deciding from the
same plan below). A real `StepMonitor` is fitted on the agent's own healthy runs (recorded by a layer
through the Guard API). The fault: the note for one topic says it is continued in another part, and a
model that chases it reads part after part; each part is a little off, so the monitor's novelty CUSUM
accumulates and the alarm fires a few steps after the first odd note (its onset). A model that follows
the repair hint reads the note once and goes on; a stubborn one chases again.
"""

from __future__ import annotations

import json
import random
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    CreateResult,
    FunctionExecutionResultMessage,
    RequestUsage,
    UserMessage,
)
from autogen_core.tools import FunctionTool
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from adapters.autogen import AutoGenGuard
from adapters.autogen_repair import arun_autogen_team
from guardrail import Guard
from guardrail.core.events import Episode, Finding, Severity, Step, StepKind
from guardrail.core.guard import GuardError
from guardrail.core.layer import EpisodeContext, Layer
from monitors import StepMonitor, Telemetry
from tests.scripted_clients import scripted_client_class

ITEMS = ["SKU-1001", "SKU-1002", "SKU-1003", "SKU-1004", "SKU-1005", "SKU-1006", "SKU-1007", "SKU-1008"]
TOPICS = {  # the shop's notes: their forms vary (words, figures, a list), so a new form alone is no surprise
    "returns": "items may be returned within 30 days with the receipt",
    "warranty": "every lamp carries a warranty of 2 years against defects",
    "delivery": "delivery takes 3 working days; 5 for islands",
    "payment": "payment is taken when the order ships from the warehouse",
    "packaging": "fragile goods travel in double walled cartons (with padding)",
    "discounts": "loyalty members receive 5% off at the checkout",
    "assembly": "assembly: instructions, tools and screws come inside every box",
    "care": "wipe the surface with a soft dry cloth - avoid solvents",
    "gifts": "gift wrapping costs $0 for orders placed before 12:00",
    "batteries": "rechargeable batteries ship separately by ground courier",
    "sizing": "measure the alcove twice before choosing shelving widths (cm)",
    "recycling": "old appliances are collected free when the new one arrives.",
    "lighting": "warm white bulbs suit living rooms; cool white suits kitchens",
    "fabrics": "linen covers wash at 40 degrees and shrink slightly",
    "outdoor": "garden chairs need a weatherproof cover over winter",
    "rugs": "wool rugs shed fibres during their first months",
    "mirrors": "heavy mirrors hang on two screws into masonry",
    "clocks": "wall clocks take one AA cell, included",
    "kitchen": "pans with copper bases heat evenly on induction hobs",
    "bedding": "duvets come in four togs for different seasons",
    "plants": "artificial plants resist sunlight fading for years",
    "storage": "stackable crates hold up to 25 kg each",
    "desks": "standing desks rise from 70 to 120 cm",
    "pets": "pet beds have removable, machine washable covers",
}
FAULTY_TOPIC = "recalls"  # its note is "continued" part after part, each further off what the shop writes about
PARTS = [  # part 1 reads like a shop note; each later part strays further
    "items may be returned within 30 days; recalled lamps too, continued in part 2",
    "owners of recalled lamps should stop using the batteries at once, continued in part 3",
    "regulators audit every recall notice before publication in the gazette, continued in part 4",
    "inspectors compile quarterly bulletins about hazardous consignments, continued in part 5",
    "tribunals adjudicate compensation disputes under consumer statutes, end of notice",
]


# ----------------------------------------------------------------------------- the shop and the plan
def task_text(items: Sequence[str], topics: Sequence[str]) -> str:
    quoted = ", ".join(items[:-1]) + f" and {items[-1]}"
    notes = " and ".join(topics)
    return f"Quote {quoted}, and tell the customer what the {notes} notes say. Report the total."


def read_note(topic: str) -> str:
    """Read the shop's note on a topic."""
    if topic.startswith(FAULTY_TOPIC):
        part = re.search(r"part (\d+)", topic)
        return PARTS[min(int(part.group(1)) - 1 if part else 0, len(PARTS) - 1)]
    return TOPICS.get(topic, "no note on that topic")


def lookup_price(item: str) -> str:
    """Look up an item's price in USD."""
    return f"${10 + 7 * ITEMS.index(item) if item in ITEMS else 0}"


@dataclass
class Seen:
    """What the model has seen: the task, its calls with their results, and any later user message (a hint)."""

    task: str
    calls: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    hinted: bool = False


def decide(seen: Seen, *, follows_hints: bool) -> tuple[str, dict[str, Any]] | str:
    """The plan: price the first item, read each note, price the other items, answer. A note "continued in part N"
    is chased (the fault), unless a hint came and the model follows hints."""
    items = re.findall(r"SKU-\d+", seen.task)
    notes = re.search(r"what the (.+) notes say", seen.task)
    topics = notes.group(1).split(" and ") if notes else []
    done = [(name, args) for name, args, _ in seen.calls]
    last = seen.calls[-1] if seen.calls else None
    if last and last[0] == "read_note" and "continued in part" in last[2] and not (seen.hinted and follows_hints):
        part = re.search(r"continued in part (\d+)", last[2])
        base = str(last[1]["topic"]).split(" part ")[0]
        return "read_note", {"topic": f"{base} part {part.group(1) if part else 2}"}
    plan = ([("lookup_price", {"item": items[0]})] + [("read_note", {"topic": t}) for t in topics]
            + [("lookup_price", {"item": item}) for item in items[1:]])
    for call in plan:
        if call not in done:
            return call
    total = sum(int(result.strip("$")) for name, _, result in seen.calls if name == "lookup_price")
    said = "; ".join(r for n, a, r in seen.calls if n == "read_note" and " part " not in str(a["topic"]))
    return f"The total is ${total}. The notes say: {said}."


# ----------------------------------------------------------------------------- LangChain
class ShopChatModel(BaseChatModel):
    """A scripted LangChain chat model following `decide`."""

    follows_hints: bool = True

    @property
    def _llm_type(self) -> str:
        return "shop-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ShopChatModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        humans = [m for m in messages if isinstance(m, HumanMessage)]
        seen = Seen(task=str(humans[0].content), hinted=len(humans) > 1)
        results = {m.tool_call_id: str(m.content) for m in messages if isinstance(m, ToolMessage)}
        for message in messages:
            if isinstance(message, AIMessage):
                seen.calls += [(c["name"], c["args"], results.get(c["id"] or "", "")) for c in message.tool_calls]
        choice = decide(seen, follows_hints=self.follows_hints)
        if isinstance(choice, str):
            reply = AIMessage(content=choice)
        else:
            reply = AIMessage(content="", tool_calls=[{"name": choice[0], "args": choice[1], "type": "tool_call",
                                                        "id": f"call-{len(seen.calls)}-{random.random():.6f}"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def langchain_tools() -> list[StructuredTool]:
    return [StructuredTool.from_function(lookup_price), StructuredTool.from_function(read_note)]


def langgraph_agent(guard: Guard, *, follows_hints: bool = True, tools: list[StructuredTool] | None = None) -> Any:
    middleware = guard.langchain_middleware()
    return guard.bind(create_agent(ShopChatModel(follows_hints=follows_hints), tools or langchain_tools(),
                                   middleware=middleware, checkpointer=InMemorySaver()))


# ----------------------------------------------------------------------------- AutoGen
class ShopChatClient(scripted_client_class()):  # type: ignore[misc]
    """A scripted AutoGen model client following `decide`."""

    def __init__(self, follows_hints: bool = True) -> None:
        self.follows_hints = follows_hints
        self.calls = 0

    def reply(self, messages: Sequence[Any]) -> CreateResult:
        self.calls += 1
        users = [m for m in messages if isinstance(m, UserMessage) and isinstance(m.content, str)]
        seen = Seen(task=users[0].content if users else "", hinted=len(users) > 1)
        results = {r.call_id: r.content for m in messages if isinstance(m, FunctionExecutionResultMessage)
                   for r in m.content}
        for message in messages:
            if isinstance(message, AssistantMessage) and isinstance(message.content, list):
                seen.calls += [(c.name, json.loads(c.arguments), results.get(c.id, "")) for c in message.content]
        choice = decide(seen, follows_hints=self.follows_hints)
        usage = RequestUsage(prompt_tokens=10, completion_tokens=5)
        if isinstance(choice, str):
            return CreateResult(finish_reason="stop", content=choice, usage=usage, cached=False)
        call = FunctionCall(id=f"call-{self.calls}", name=choice[0], arguments=json.dumps(choice[1]))
        return CreateResult(finish_reason="function_calls", content=[call], usage=usage, cached=False)


def autogen_tools() -> list[FunctionTool]:
    return [FunctionTool(lookup_price, description="Look up an item's price in USD."),
            FunctionTool(read_note, description="Read the shop's note on a topic.")]


def shop_team(client: ChatCompletionClient) -> RoundRobinGroupChat:
    agent = AssistantAgent("shop", client, tools=autogen_tools(), max_tool_iterations=1, reflect_on_tool_use=False)
    return RoundRobinGroupChat([agent], max_turns=1)


# ----------------------------------------------------------------------------- the monitor, fitted on healthy runs
class KeepRuns(Layer):
    """Keeps every finished run's episode (how a deployment records the healthy runs it fits on)."""

    name = "keep_runs"

    def __init__(self) -> None:
        self.episodes: list[Episode] = []

    def on_finish(self, ctx: EpisodeContext, episode: Episode) -> None:
        self.episodes.append(episode.model_copy(deep=True))


def healthy_tasks(n: int, seed: int = 0) -> list[str]:
    """Two or three items, one or two notes; a few topics come up often, the rest rarely (a deployment's mix)."""
    rng = random.Random(seed)
    topics = sorted(TOPICS)
    weights = [1.0 / (rank + 1) for rank in range(len(topics))]
    return [task_text(rng.sample(ITEMS, rng.choice((2, 3))),
                      list(dict.fromkeys(rng.choices(topics, weights, k=rng.choice((1, 2)))))) for _ in range(n)]


def fitted(episodes: list[Episode], telemetry: Telemetry | None = None) -> StepMonitor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return StepMonitor(telemetry=telemetry).fit(episodes)


@pytest.fixture(scope="module")
def langgraph_healthy() -> list[Episode]:
    keep = KeepRuns()
    guard = Guard.default(extra_layers=[keep])
    for i, task in enumerate(healthy_tasks(40)):
        langgraph_agent(guard).invoke({"messages": [HumanMessage(task)]}, {"configurable": {"thread_id": f"h{i}"}})
    return keep.episodes


@pytest.fixture(scope="module")
def monitor(langgraph_healthy: list[Episode]) -> StepMonitor:
    return fitted(langgraph_healthy)


FAULTY = task_text(["SKU-1002", "SKU-1005"], [FAULTY_TOPIC])
LG_CONFIG = {"recursion_limit": 60}


def run_langgraph(guard: Guard, *, follows_hints: bool = True, thread: str = "faulty") -> dict[str, Any]:
    agent = langgraph_agent(guard, follows_hints=follows_hints)
    return agent.invoke({"messages": [HumanMessage(FAULTY)]}, {"configurable": {"thread_id": thread}, **LG_CONFIG})


def alarm_of(findings: Sequence[dict[str, Any]]) -> dict[str, Any]:
    alarms = [f for f in findings if f.get("severity") == "alarm"]
    assert len(alarms) == 1, findings  # one alarm, listed once (the end-of-run decision repeats it, not the state)
    return alarms[0]


# ----------------------------------------------------------------------------- LangChain / LangGraph
def test_the_fitted_monitor_stays_quiet_on_healthy_runs_and_alarms_after_the_odd_note(monitor: StepMonitor) -> None:
    guard = Guard.default(model=monitor)
    for i, task in enumerate(healthy_tasks(8, seed=99)):
        state = langgraph_agent(guard).invoke({"messages": [HumanMessage(task)]}, {"configurable": {"thread_id": f"t{i}"}})
        assert state["guardrail_verdict"] == "allow", state["guardrail_findings"]
    state = run_langgraph(guard)
    alarm = alarm_of(state["guardrail_findings"])
    # The first odd note (step 1) stays under the threshold; the alarm fires on the next part, and marks step 1
    # as where the departure began (the novelty CUSUM's change point).
    assert alarm["step"] == 2 and alarm["evidence"]["onset_step"] == 1


def test_default_policy_lets_the_run_finish_and_the_end_of_run_verdict_warns(monitor: StepMonitor) -> None:
    state = run_langgraph(Guard.default(model=monitor))
    assert state["guardrail_verdict"] == "warn"
    assert state["messages"][-1].content.startswith("The total is $55")  # it ran to its end: every part read
    assert sum(isinstance(m, ToolMessage) for m in state["messages"]) == 7
    alarm_of(state["guardrail_findings"])


def test_on_alarm_stop_ends_the_run_at_the_alarm(monitor: StepMonitor) -> None:
    state = run_langgraph(Guard.default(model=monitor, on_alarm="stop"))
    assert state["guardrail_verdict"] == "alarm"
    assert state["messages"][-1].content.startswith("Stopped by guardrail (alarm)")
    assert sum(isinstance(m, ToolMessage) for m in state["messages"]) == 3  # nothing after the alarm's step


def test_on_alarm_repair_forks_before_the_onset_and_a_model_that_follows_the_hint_is_repaired(
        monitor: StepMonitor) -> None:
    guard = Guard.default(model=monitor, on_alarm="repair", mode="intervene")
    state = run_langgraph(guard)
    record, alarm = state["guardrail_repair"], alarm_of(state["guardrail_findings"])
    assert state["guardrail_verdict"] == "repair" and record["outcome"] == "repaired", record
    # Every step before the alarm is a fact-gathering tool step: the last one before it is step alarm - 1. The fork
    # re-runs from the alarm's onset, so it is at or before that step (not after the odd note it read).
    k = alarm["step"]
    assert record["target_step"] <= alarm["evidence"]["onset_step"] <= k - 1
    assert state["messages"][-1].content == record["answer"] and record["answer"].startswith("The total is $55")
    assert any(isinstance(m, HumanMessage) and m.name == "guardrail" for m in state["messages"])  # the hint
    reads = [m for m in state["messages"] if isinstance(m, ToolMessage) and "continued in part" in str(m.content)]
    assert len(reads) == 1  # the repaired branch read the odd note once and went on


def test_a_halted_repair_names_the_failing_check_and_the_hint_of_each_attempt(monitor: StepMonitor) -> None:
    guard = Guard.default(model=monitor, on_alarm="repair", mode="intervene")
    record = run_langgraph(guard, follows_hints=False)["guardrail_repair"]
    assert record["outcome"] == "halted" and record["attempts"] == 2 and record["answer"] is None
    reason = record["reason"]
    assert "still flagged after 2 repair attempts" in reason
    for n in (1, 2):
        line = next(line for line in reason.splitlines() if line.startswith(f"attempt {n} "))
        assert "still failed monitor/step_monitor at step" in line and "hint sent: 'The check `monitor/step_monitor`" in line


# ----------------------------------------------------------------------------- AutoGen
async def autogen_run(guard: Guard, task: str, client: ShopChatClient | None = None,
                      tools: list[FunctionTool] | None = None) -> tuple[Any, Any]:
    guarded = AutoGenGuard(guard)  # no task given: the guard reads it off the first user message
    agent = AssistantAgent("shop", guarded.model_client(client or ShopChatClient()),
                           workbench=guarded.workbench(tools or autogen_tools()), max_tool_iterations=12)
    result = await agent.run(task=task)
    return result, await guarded.afinish(result)


@pytest.fixture(scope="module")
def autogen_healthy() -> list[Episode]:
    import asyncio

    keep = KeepRuns()
    guard = Guard.default(extra_layers=[keep])
    for task in healthy_tasks(40):
        asyncio.run(autogen_run(guard, task))
    return keep.episodes


@pytest.fixture(scope="module")
def autogen_monitor(autogen_healthy: list[Episode]) -> StepMonitor:
    return fitted(autogen_healthy)


async def test_autogen_agent_end_of_run_verdict_warns_on_an_alarm(autogen_monitor: StepMonitor) -> None:
    guard = Guard.default(model=autogen_monitor)
    _, healthy = await autogen_run(guard, healthy_tasks(1, seed=7)[0])
    assert healthy.verdict.value == "allow", healthy.findings
    result, decision = await autogen_run(guard, FAULTY)
    assert decision.verdict.value == "warn" and [f.check for f in decision.findings] == ["step_monitor"]
    assert result.messages[-1].content.startswith("The total is $55")


async def test_autogen_agent_on_alarm_stop_answers_the_next_model_call_with_the_stop(
        autogen_monitor: StepMonitor) -> None:
    client = ShopChatClient()
    result, decision = await autogen_run(Guard.default(model=autogen_monitor, on_alarm="stop"), FAULTY, client)
    assert decision.verdict.value == "alarm"
    assert result.messages[-1].content.startswith("Stopped by guardrail (alarm)")
    assert client.calls == 3  # three model calls: the third step alarmed, the fourth never reached the model


@pytest.fixture(scope="module")
def team_monitor() -> StepMonitor:
    import asyncio

    keep = KeepRuns()
    guard = Guard.default(extra_layers=[keep], repair=True)
    for task in healthy_tasks(40):
        asyncio.run(arun_autogen_team(guard.repairer, shop_team(ShopChatClient()), task))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return StepMonitor().fit(keep.episodes)


async def test_autogen_team_on_alarm_repair_is_rolled_back_before_the_onset_and_repaired(
        team_monitor: StepMonitor) -> None:
    guard = Guard.default(model=team_monitor, on_alarm="repair", mode="intervene")
    outcome = await arun_autogen_team(guard.repairer, shop_team(ShopChatClient()), FAULTY)
    assert outcome.outcome == "repaired", outcome.reason
    alarm = next(f for f in outcome.findings if f.severity is Severity.ALARM)
    assert outcome.target_step is not None and outcome.target_step <= alarm.evidence["onset_step"] < alarm.step
    assert outcome.answer is not None and outcome.answer.startswith("The total is $55")


async def test_autogen_team_default_policy_delivers_the_run_as_warned(team_monitor: StepMonitor) -> None:
    guard = Guard.default(model=team_monitor, mode="intervene", repair=True)
    outcome = await arun_autogen_team(guard.repairer, shop_team(ShopChatClient()), FAULTY)
    assert outcome.outcome == "warned" and outcome.attempts == [] and outcome.answer.startswith("The total is $55")
    assert [f.check for f in outcome.findings] == ["step_monitor"]


# ----------------------------------------------------------------------------- the policy in the core pipeline
class AlarmAt(Layer):
    """Stands in for the monitor: one alarm at step 1."""

    name = "monitor"

    def on_step(self, ctx: EpisodeContext, step: Any) -> Any:
        if step.index == 1:
            return [Finding(layer=self.name, check="step_monitor", message="left the healthy range", step=1,
                            severity=Severity.ALARM, evidence={"onset_step": 0})]
        return None


@pytest.mark.parametrize(("on_alarm", "mode", "verdict"), [
    ("warn", "report", "warn"), ("warn", "intervene", "warn"), ("stop", "report", "alarm"),
    ("stop", "intervene", "alarm"), ("repair", "report", "alarm"), ("repair", "intervene", "repair")])
def test_the_end_of_run_verdict_follows_the_alarm_policy(on_alarm: str, mode: str, verdict: str) -> None:
    guard = Guard([AlarmAt()], mode=mode, on_alarm=on_alarm)  # type: ignore[arg-type]
    ctx = guard.start_episode(task="t")
    for index in range(3):
        ctx.on_step(Step(index=index, kind=StepKind.TOOL_CALL, text="x"))
    decision = ctx.finish(answer="done")
    assert decision.verdict.value == verdict and [f.check for f in decision.findings] == ["step_monitor"]
    assert guard.stops_on_alarm == (on_alarm == "stop" or (on_alarm, mode) == ("repair", "intervene"))
    quiet = Guard([], mode=mode, on_alarm=on_alarm).start_episode(task="t")  # type: ignore[arg-type]
    assert quiet.finish(answer="done").verdict.value == "allow"


def test_an_unknown_alarm_policy_is_refused() -> None:
    with pytest.raises(GuardError, match="on_alarm must be one of"):
        Guard(on_alarm="ignore")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- a host stall on a fast deployment
STALL_S = 0.45  # one stall of the machine (a garbage collection, another tenant), not a slow tool


def stalling_read_note() -> Any:
    """`read_note` whose first call stalls for STALL_S: the same tool, the same answers."""
    stalled: list[bool] = []

    def stalled_read_note(topic: str) -> str:
        if not stalled:
            stalled.append(True)
            time.sleep(STALL_S)
        return read_note(topic)

    return stalled_read_note


def test_a_host_stall_is_no_alarm_on_a_fast_langgraph_deployment(langgraph_healthy: list[Episode],
                                                                  monitor: StepMonitor) -> None:
    """The shop's model and tools answer in milliseconds, so its healthy runs have no latency spread: the monitor
    fitted on them reads latencies under half a second as equal, and one stall of 0.45 s is a healthy run."""
    task = healthy_tasks(1, seed=5)[0]

    def run(model: StepMonitor, thread: str) -> dict[str, Any]:
        tools = [StructuredTool.from_function(lookup_price),
                 StructuredTool.from_function(stalling_read_note(), name="read_note", description=read_note.__doc__)]
        agent = langgraph_agent(Guard.default(model=model), tools=tools)
        return agent.invoke({"messages": [HumanMessage(task)]}, {"configurable": {"thread_id": thread}})

    state = run(monitor, "stall")
    assert state["guardrail_verdict"] == "allow", state["guardrail_findings"]
    unfloored = fitted(langgraph_healthy, Telemetry(latency_floor_s=0.0))  # what the floor is for
    assert [f["check"] for f in run(unfloored, "stall-unfloored")["guardrail_findings"]] == ["step_monitor"]


async def test_a_host_stall_is_no_alarm_on_a_fast_autogen_deployment(autogen_healthy: list[Episode],
                                                                     autogen_monitor: StepMonitor) -> None:
    task = healthy_tasks(1, seed=5)[0]

    def tools() -> list[FunctionTool]:
        return [FunctionTool(lookup_price, description="Look up an item's price in USD."),
                FunctionTool(stalling_read_note(), name="read_note", description="Read the shop's note on a topic.")]

    _, decision = await autogen_run(Guard.default(model=autogen_monitor), task, tools=tools())
    assert decision.verdict.value == "allow", decision.findings
    unfloored = fitted(autogen_healthy, Telemetry(latency_floor_s=0.0))
    _, decision = await autogen_run(Guard.default(model=unfloored), task, tools=tools())
    assert [f.check for f in decision.findings] == ["step_monitor"]
