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
    ModelFamily,
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
from guardrail.core.events import Episode, Severity
from guardrail.core.layer import EpisodeContext, Layer
from monitors.monitor import StepMonitor

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


def langgraph_agent(guard: Guard, *, follows_hints: bool = True) -> Any:
    middleware = guard.langchain_middleware()
    return guard.bind(create_agent(ShopChatModel(follows_hints=follows_hints), langchain_tools(),
                                   middleware=middleware, checkpointer=InMemorySaver()))


# ----------------------------------------------------------------------------- AutoGen
MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": ModelFamily.UNKNOWN,
              "structured_output": False}


class ShopChatClient(ChatCompletionClient):
    """A scripted AutoGen model client following `decide`."""

    def __init__(self, follows_hints: bool = True) -> None:
        self.follows_hints = follows_hints
        self.calls = 0

    async def create(self, messages: Sequence[Any], **kwargs: Any) -> CreateResult:
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

    async def create_stream(self, messages: Sequence[Any], **kwargs: Any) -> Any:  # type: ignore[override]
        yield await self.create(messages, **kwargs)

    async def close(self) -> None:
        return None

    def actual_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=0, completion_tokens=0)

    def total_usage(self) -> RequestUsage:
        return RequestUsage(prompt_tokens=0, completion_tokens=0)

    def count_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return 0

    def remaining_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        return 100_000

    @property
    def capabilities(self) -> Any:
        return MODEL_INFO

    @property
    def model_info(self) -> Any:
        return MODEL_INFO


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


@pytest.fixture(scope="module")
def monitor() -> StepMonitor:
    keep = KeepRuns()
    guard = Guard.default(extra_layers=[keep])
    for i, task in enumerate(healthy_tasks(40)):
        langgraph_agent(guard).invoke({"messages": [HumanMessage(task)]}, {"configurable": {"thread_id": f"h{i}"}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return StepMonitor().fit(keep.episodes)


FAULTY = task_text(["SKU-1002", "SKU-1005"], [FAULTY_TOPIC])
