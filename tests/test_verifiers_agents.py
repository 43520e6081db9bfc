"""Verifiers fitted on a user's own agents catch slips on entities the fitting runs never saw, and flag no healthy run.

Three agents written here, each with its own tools and a scripted model that reads the conversation
and decides its next move, on LangChain `create_agent` (+ `GuardMiddleware`) and on AutoGen
`AssistantAgent` (+ `AutoGenGuard`): a weather lookup in Kelvin with a converter, a dataset
statistics tool, an inventory lookup. Each records 40 healthy runs through `Guard.default(record=...)`,
they are labelled with `guardrail label --clean-as healthy`, `guardrail fit-spec` fits on the store,
and the redeployed guard meets 20 healthy runs per agent about cities, datasets and SKUs no fitting
run named, then one run per slip. Scripted models: every figure here is a mechanism check.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from guardrail import Guard
from guardrail.core.cli import main as guardrail

# --------------------------------------------------------------------------- the user's tools
FIT_CITIES = ["Oslo", "Bergen", "Tromso", "Lyon", "Porto", "Graz", "Turin", "Malmo", "Gdansk", "Ghent"]
NEW_CITIES = ["Reykjavik", "Nuuk", "Kiruna", "Bodo", "Alta"]
CONDITIONS = ["sunny", "snowy", "cloudy", "rainy", "foggy"]
FIT_DATASETS = [("iris", "sepal_length"), ("iris", "petal_width"), ("wine", "alcohol"), ("wine", "acidity"),
                ("penguins", "bill_depth"), ("penguins", "flipper_length"), ("cars", "wheelbase"), ("cars", "height")]
NEW_DATASETS = [("abalone", "shell_weight"), ("abalone", "diameter"), ("seeds", "kernel_width"), ("seeds", "groove")]
FIT_SKUS = [f"SKU-{1000 + 7 * i}" for i in range(12)]
NEW_SKUS = [f"SKU-{5000 + 11 * i}" for i in range(8)]
MISSING_SKUS = {"SKU-1063", "SKU-5044"}  # the inventory has no such item: the tool answers with an error
DATES = ["2025-05-12", "2025-06-01", "2025-07-15", "2025-08-30"]


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def get_weather(city: str) -> str:
    """The current weather of a city, temperature in Kelvin."""
    digest = _digest(city)
    return json.dumps({"city": city, "temp_k": round(250.0 + digest[0] / 255 * 55, 2),
                       "condition": CONDITIONS[digest[1] % len(CONDITIONS)]})


def convert(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a temperature between Kelvin (K), Celsius (C) and Fahrenheit (F)."""
    celsius = {"K": value - 273.15, "C": value, "F": (value - 32) * 5 / 9}[from_unit]
    out = {"K": celsius + 273.15, "C": celsius, "F": celsius * 9 / 5 + 32}[to_unit]
    return f"{out:.2f} {to_unit}"


def get_stat(dataset: str, column: str, stat: str) -> str:
    """One statistic (mean, median) of a dataset's column, in centimetres."""
    digest = _digest(f"{dataset}/{column}")
    mean = round(1 + digest[0] / 255 * 40, 2)
    value = mean if stat == "mean" else round(mean * (0.9 + digest[1] / 255 * 0.2), 2)
    return json.dumps({"dataset": dataset, "column": column, "stat": stat, "value": value, "unit": "cm"})


def lookup_sku(sku: str, as_of: str) -> str:
    """Stock of an item on a date: units in stock and the warehouse holding them."""
    if sku in MISSING_SKUS:
        return f"Error: unknown SKU {sku!r}"
    digest = _digest(f"{sku}/{as_of}")
    return json.dumps({"sku": sku, "name": ["kettle", "lamp", "toaster", "fan"][digest[0] % 4],
                       "stock": digest[1] % 40 + 1, "warehouse": ["north", "south", "east"][digest[2] % 3]})


# --------------------------------------------------------------------------- the user's scripted models
Results = Sequence[tuple[str, str]]  # (tool name, result text) so far
Move = dict[str, Any]  # {"name", "args"} for a call, {"answer"} for the answer


def weather_move(task: str, results: Results, fault: str | None) -> Move:
    city = re.search(r"weather in (.+?) in Celsius", task).group(1)  # type: ignore[union-attr]
    weather = [json.loads(text) for name, text in results if name == "get_weather"]
    converted = [text for name, text in results if name == "convert"]
    if not weather:
        return {"name": "get_weather", "args": {"city": city}}
    if not converted:
        return {"name": "convert", "args": {"value": weather[-1]["temp_k"], "from_unit": "K", "to_unit": "C"}}
    celsius, condition = converted[-1].split()[0], weather[-1]["condition"]
    if fault == "wrong_conversion":  # converts on its own, off by ten degrees
        celsius = f"{weather[-1]['temp_k'] - 263.15:.2f}"
    if fault == "contradicted_fact":
        condition = next(c for c in CONDITIONS if c != condition)
    return {"answer": f"In {city} it is {celsius} °C and {condition}."}


def stats_move(task: str, results: Results, fault: str | None) -> Move:
    column, dataset = re.search(r"median of (\w+) in (\w+)\?", task).groups()  # type: ignore[union-attr]
    stats = {json.loads(text)["stat"]: json.loads(text)["value"] for name, text in results if name == "get_stat"}
    for stat in ("mean", "median"):
        if stat not in stats:
            return {"name": "get_stat", "args": {"dataset": dataset, "column": column, "stat": stat}}
    mean, median = stats["mean"], stats["median"]
    if fault == "wrong_statistic":
        mean = round(mean * 1.25, 2)
    if fault == "missing_value":
        return {"answer": f"In {dataset}, {column} has a mean of {mean:.2f} cm."}
    return {"answer": f"In {dataset}, {column} has a mean of {mean:.2f} cm and a median of {median:.2f} cm."}


def stock_move(task: str, results: Results, fault: str | None) -> Move:
    sku, date = re.search(r"of (SKU-\d+) were in stock on (\d{4}-\d\d-\d\d)", task).groups()  # type: ignore[union-attr]
    looked = [text for name, text in results if name == "lookup_sku"]
    if not looked:
        if fault == "invented_identifier":  # reaches for an item number nobody gave it
            sku = f"SKU-{int(sku[4:]) + 4321}"
        return {"name": "lookup_sku", "args": {"sku": sku, "as_of": date}}
    if looked[-1].startswith("Error"):
        if fault == "ignored_error":
            return {"answer": f"{sku} had 12 units in stock on {date}, in the north warehouse."}
        return {"answer": f"I could not find {sku} in the inventory: the lookup failed."}
    item = json.loads(looked[-1])
    return {"answer": f"{item['sku']} ({item['name']}) had {item['stock']} units in stock on {date}, "
                      f"in the {item['warehouse']} warehouse."}


@dataclass(frozen=True)
class Agent:
    """One of the user's agents: its tools, how it words a task about an entity, and its scripted model."""

    name: str
    tools: tuple[Callable[..., str], ...]
    task: Callable[[Any], str]
    move: Callable[[str, Results, str | None], Move]
    fit: tuple[Any, ...]
    new: tuple[Any, ...]


def _stock_tasks(skus: Sequence[str]) -> tuple[tuple[str, str], ...]:
    return tuple((sku, date) for sku in skus for date in DATES)


AGENTS = {
    "weather": Agent("weather", (get_weather, convert), lambda city: f"What is the weather in {city} in Celsius?",
                     weather_move, tuple(FIT_CITIES), tuple(NEW_CITIES)),
    "stats": Agent("stats", (get_stat,), lambda dc: f"What are the mean and the median of {dc[1]} in {dc[0]}?",
                   stats_move, tuple(FIT_DATASETS), tuple(NEW_DATASETS)),
    "stock": Agent("stock", (lookup_sku,), lambda sd: f"How many units of {sd[0]} were in stock on {sd[1]}, and where?",
                   stock_move, _stock_tasks(FIT_SKUS), _stock_tasks(NEW_SKUS)),
}
# Each slip, the agent and entity it happens on (one the fitting runs never saw), and the check that must catch it.
SLIPS = [
    ("weather", "wrong_conversion", NEW_CITIES[0], "grounding"),
    ("stats", "wrong_statistic", NEW_DATASETS[0], "grounding"),
    ("weather", "contradicted_fact", NEW_CITIES[1], "grounding"),
    ("stock", "invented_identifier", (NEW_SKUS[0], DATES[0]), "provenance"),
    ("stock", "ignored_error", ("SKU-5044", DATES[1]), "tool_error"),
    ("stats", "missing_value", NEW_DATASETS[1], "answer_parts"),
]


# --------------------------------------------------------------------------- LangChain
def run_langchain(guard: Guard, agent: Agent, entity: Any, fault: str | None = None) -> dict[str, Any]:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    from adapters.langchain import GuardMiddleware

    class ScriptedModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return f"scripted-{agent.name}"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            task = next(m.content for m in messages if isinstance(m, HumanMessage))
            move = agent.move(task, [(m.name, m.content) for m in messages if isinstance(m, ToolMessage)], fault)
            if "answer" in move:
                message = AIMessage(content=move["answer"])
            else:
                message = AIMessage(content="", tool_calls=[{"name": move["name"], "args": move["args"],
                                                             "id": f"call_{len(messages)}"}])
            return ChatResult(generations=[ChatGeneration(message=message)])

    graph = create_agent(ScriptedModel(), [tool(t) for t in agent.tools], middleware=[GuardMiddleware(guard)])
    state = graph.invoke({"messages": [{"role": "user", "content": agent.task(entity)}]}, {"recursion_limit": 30})
    return {"episode_id": state["guardrail_episode"], "answer": state["messages"][-1].content,
            "findings": [(f["layer"], f["check"], f.get("severity", "warning")) for f in state["guardrail_findings"]]}


# --------------------------------------------------------------------------- AutoGen
def run_autogen(guard: Guard, agent: Agent, entity: Any, fault: str | None = None) -> dict[str, Any]:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.tools import FunctionTool

    from adapters.autogen import AutoGenGuard
    from tests.scripted_clients import scripted_client

    client = scripted_client(lambda task, results: agent.move(task, results, fault))
    task = agent.task(entity)
    guarded = AutoGenGuard(guard, task=task)
    assistant = AssistantAgent(agent.name, model_client=guarded.model_client(client),
                               workbench=guarded.workbench([FunctionTool(t, description=t.__doc__ or t.__name__)
                                                            for t in agent.tools]), max_tool_iterations=8)

    async def go() -> Any:
        result = await assistant.run(task=task)
        return result, await guarded.afinish(result)

    result, decision = asyncio.run(go())
    return {"episode_id": decision.episode_id, "answer": result.messages[-1].content,
            "findings": [(f.layer, f.check, f.severity.value) for d in guarded.decisions for f in d.findings]}


RUNNERS = {"langgraph": run_langchain, "autogen": run_autogen}


def flagged(run: dict[str, Any]) -> list[tuple[str, str]]:
    """What the verifiers said about a run (informational notes aside)."""
    return [(layer, check) for layer, check, severity in run["findings"] if layer == "verifier" and severity != "info"]


def _healthy_entities(entities: Sequence[Any], n: int) -> list[Any]:
    return [entities[i % len(entities)] for i in range(n)]


# --------------------------------------------------------------------------- the test
@pytest.mark.parametrize("framework", ["langgraph", "autogen"])
def test_fitted_verifiers_catch_each_slip_on_unseen_entities_and_flag_no_healthy_run(framework, tmp_path, capsys):
    run = RUNNERS[framework]
    store = str(tmp_path / "runs")
    recorder = Guard.default(record=store)
    for agent in AGENTS.values():
        for entity in _healthy_entities(agent.fit, 40):
            run(recorder, agent, entity)
    recorder.close()
    assert guardrail(["label", store, "--clean-as", "healthy"]) == 0
    spec = tmp_path / "spec.json"
    assert guardrail(["fit-spec", store, "-o", str(spec)]) == 0
    report = capsys.readouterr().out
    assert "120 healthy episode(s) of 120 given" in report

    deployed = Guard.default(spec=str(spec))
    for agent in AGENTS.values():
        fresh = [run(deployed, agent, entity) for entity in _healthy_entities(agent.new, 20)]
        assert [r["episode_id"] for r in fresh if flagged(r)] == [], [flagged(r) for r in fresh if flagged(r)]
        assert any(not r["answer"].startswith("I could not") for r in fresh)
    for agent_name, fault, entity, check in SLIPS:
        caught = run(deployed, AGENTS[agent_name], entity, fault)
        assert ("verifier", check) in flagged(caught), (agent_name, fault, caught)
