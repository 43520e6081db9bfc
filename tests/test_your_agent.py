"""A user's own agent, start to finish: guarded with no configuration, recorded, labelled, fitted on, redeployed.

The agent is written here, not taken from the testbed: two tools of its own (a weather lookup that
answers in Kelvin, a unit converter) and a scripted chat model that reads the conversation and
decides its next move, on LangChain `create_agent` and on AutoGen `AssistantAgent`. Everything
goes through the documented API: `Guard.default`, the adapters, `guard.label`, and the
`guardrail runs / label / fit / fit-spec` commands. The scripted policy makes every figure here a
mechanism check.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, Literal

import pytest

from guardrail import Guard
from guardrail.core.cli import main as guardrail

FIT_CITIES = ["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Prague", "Warsaw", "Dublin", "Lisbon", "Athens",
              "Cairo", "Nairobi", "Lagos", "Accra", "Dakar", "Tunis", "Rabat", "Doha", "Dubai", "Riyadh",
              "Delhi", "Mumbai", "Dhaka", "Karachi", "Tehran", "Baghdad", "Kabul", "Tashkent", "Almaty", "Baku",
              "Tokyo", "Seoul", "Beijing", "Shanghai", "Manila", "Jakarta", "Bangkok", "Sydney", "Auckland", "Denver"]
NEW_CITIES = ["Oslo", "Quito", "Hanoi", "Perth", "Tromso", "Lima"]
CONDITIONS = ["sunny", "snowy", "cloudy", "rainy", "windy"]
Fault = Literal["bad_args", "loop", "skip_convert"] | None


# --------------------------------------------------------------------------- the user's tools
def weather_of(city: str) -> tuple[float, str]:
    digest = hashlib.sha256(city.encode()).digest()
    return round(250.0 + digest[0] / 255 * 55, 2), CONDITIONS[digest[1] % len(CONDITIONS)]


def get_weather(city: str) -> str:
    """The current weather of a city, temperature in Kelvin."""
    temp_k, condition = weather_of(city)
    return json.dumps({"city": city, "temp_k": temp_k, "condition": condition})


def convert(value: float, from_unit: Literal["K", "C", "F"], to_unit: Literal["K", "C", "F"]) -> str:
    """Convert a temperature between Kelvin, Celsius and Fahrenheit."""
    celsius = {"K": value - 273.15, "C": value, "F": (value - 32) * 5 / 9}[from_unit]
    out = {"K": celsius + 273.15, "C": celsius, "F": celsius * 9 / 5 + 32}[to_unit]
    return f"{out:.2f} {to_unit}"


# --------------------------------------------------------------------------- the user's scripted model
def next_move(task: str, results: Sequence[tuple[str, str]], fault: Fault) -> dict[str, Any]:
    """What the model does next: a tool call {"name", "args"} or an answer {"answer"}, from the task and the
    tool results so far (name, text), as the user's model would; `fault` makes it slip one way."""
    city = re.search(r"weather in (.+?) in Celsius", task).group(1)  # type: ignore[union-attr]
    weather = [text for name, text in results if name == "get_weather"]
    converted = [text for name, text in results if name == "convert" and not text.startswith("[guardrail")]
    if not weather or (fault == "loop" and len(weather) < 6):
        return {"name": "get_weather", "args": {"city": city}}
    if converted:
        report = json.loads(weather[-1])
        return {"answer": f"In {city} it is {converted[-1].split()[0]} °C and {report['condition']}."}
    if fault == "skip_convert":
        return {"answer": f"In {city} it is 12.00 °C and sunny."}
    report = json.loads(weather[-1])
    if fault == "bad_args" and not any(name == "convert" for name, _ in results):
        return {"name": "convert", "args": {"value": str(report["temp_k"]), "from_unit": "K"}}
    return {"name": "convert", "args": {"value": report["temp_k"], "from_unit": "K", "to_unit": "C"}}


def task_for(city: str) -> str:
    return f"What is the weather in {city} in Celsius?"


# --------------------------------------------------------------------------- LangChain
def langchain_agent(guard: Guard, fault: Fault = None) -> Any:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    from adapters.langchain import GuardMiddleware

    class WeatherModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted-weather"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            task = next(m.content for m in messages if isinstance(m, HumanMessage))
            results = [(m.name, m.content) for m in messages if isinstance(m, ToolMessage)]
            move = next_move(task, results, fault)
            if "answer" in move:
                message = AIMessage(content=move["answer"])
            else:
                message = AIMessage(content="", tool_calls=[{"name": move["name"], "args": move["args"],
                                                             "id": f"call_{len(results)}"}])
            return ChatResult(generations=[ChatGeneration(message=message)])

    return create_agent(WeatherModel(), [tool(get_weather), tool(convert)], middleware=[GuardMiddleware(guard)])


def run_langchain(guard: Guard, city: str, fault: Fault = None) -> dict[str, Any]:
    state = langchain_agent(guard, fault).invoke({"messages": [{"role": "user", "content": task_for(city)}]},
                                                 {"recursion_limit": 40})
    return {"episode_id": state["guardrail_episode"], "verdict": state["guardrail_verdict"],
            "findings": [(f["layer"], f["check"]) for f in state["guardrail_findings"]],
            "answer": state["messages"][-1].content}


# --------------------------------------------------------------------------- AutoGen
def autogen_run(guard: Guard, city: str, fault: Fault = None, *, stream: bool = False) -> dict[str, Any]:
    import asyncio

    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.tools import FunctionTool

    from adapters.autogen import AutoGenGuard
    from tests.scripted_clients import scripted_client

    guarded = AutoGenGuard(guard, task=task_for(city))
    client = scripted_client(lambda task, results: next_move(task, results, fault))
    agent = AssistantAgent("weather", model_client=guarded.model_client(client),
                           workbench=guarded.workbench([FunctionTool(get_weather, description=get_weather.__doc__),
                                                        FunctionTool(convert, description=convert.__doc__)]),
                           max_tool_iterations=12, model_client_stream=stream)

    async def go() -> Any:
        result = await agent.run(task=task_for(city))
        return result, await guarded.afinish(result)

    result, decision = asyncio.run(go())
    findings = [(f.layer, f.check) for d in guarded.decisions for f in d.findings]
    return {"episode_id": decision.episode_id, "verdict": decision.verdict.value, "findings": findings,
            "answer": result.messages[-1].content}


RUNNERS = {"langgraph": run_langchain, "autogen": autogen_run}


# --------------------------------------------------------------------------- the loop
def runs_json(store: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert guardrail(["runs", store, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("framework", ["langgraph", "autogen"])
def test_zero_config_catches_schema_violations_and_flags_no_healthy_run(framework, tmp_path, capsys):
    run = RUNNERS[framework]
    store = f"sqlite:///{tmp_path}/runs.db"
    guard = Guard.default(record=store, mode="intervene")  # nothing configured: the agent's own tools are read

    healthy = [run(guard, city) for city in FIT_CITIES[:6]]
    slipped = run(guard, "Montevideo", fault="bad_args")
    guard.close()

    assert all(r["findings"] == [] for r in healthy)
    assert ("gate", "malformed_call") in slipped["findings"]
    temp_k, _ = weather_of("Montevideo")
    assert slipped["answer"].startswith(f"In Montevideo it is {temp_k - 273.15:.2f}")  # it read the hint, recovered
    rows = {row["episode_id"]: row for row in runs_json(store, capsys)}
    assert set(rows) == {r["episode_id"] for r in [*healthy, slipped]}
    assert [f["check"] for f in rows[slipped["episode_id"]]["findings"]] == ["malformed_call"]
    assert all(rows[r["episode_id"]]["findings"] == [] and rows[r["episode_id"]]["label"] == "unlabelled"
               for r in healthy)


def test_a_streaming_autogen_agent_is_guarded_as_one_that_is_not(tmp_path):
    guard = Guard.default(record=f"sqlite:///{tmp_path}/runs.db", mode="intervene")
    plain = [autogen_run(guard, "Montevideo", fault) for fault in (None, "bad_args")]
    streamed = [autogen_run(guard, "Montevideo", fault, stream=True) for fault in (None, "bad_args")]
    guard.close()
    assert [(r["findings"], r["answer"], r["verdict"]) for r in streamed] == \
        [(r["findings"], r["answer"], r["verdict"]) for r in plain]
    assert ("gate", "malformed_call") in streamed[1]["findings"]


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["langgraph", "autogen"])
def test_record_label_fit_and_redeploy_flags_what_zero_config_did_not(framework, tmp_path, capsys):
    run = RUNNERS[framework]
    store = f"sqlite:///{tmp_path}/runs.db"
    guard = Guard.default(record=store, mode="intervene")
    recorded = [run(guard, city) for city in FIT_CITIES]
    slipped = run(guard, "Bogota", fault="bad_args")
    guard.label(slipped["episode_id"], "failed")  # the user says so; it never becomes a healthy run
    guard.close()

    capsys.readouterr()
    assert guardrail(["label", store, "--clean-as", "healthy"]) == 0
    assert "labelled 40 clean unlabelled episode(s) 'healthy'" in capsys.readouterr().out
    rows = {row["episode_id"]: row for row in runs_json(store, capsys)}
    assert {rows[r["episode_id"]]["label"] for r in recorded} == {"healthy"}
    assert rows[slipped["episode_id"]]["label"] == "failed"
    assert {rows[r["episode_id"]]["verdict"] for r in recorded} == {r["verdict"] for r in recorded}

    assert guardrail(["fit", store, "-o", str(tmp_path / "monitor.npz"), "--quiet"]) == 0
    assert guardrail(["fit-spec", store, "-o", str(tmp_path / "spec.json")]) == 0

    zero = Guard.default(mode="report")
    deployed = Guard.default(model=str(tmp_path / "monitor.npz"), spec=str(tmp_path / "spec.json"), mode="report",
                             record=f"sqlite:///{tmp_path}/deployed.db")
    for fault, layer in (("loop", "monitor"), ("skip_convert", "verifier")):
        city = NEW_CITIES[0]
        assert not any(found == layer for found, _ in run(zero, city, fault=fault)["findings"])
        caught = run(deployed, city, fault=fault)
        assert any(found == layer for found, _ in caught["findings"]), (fault, caught)
    fresh = [run(deployed, city) for city in NEW_CITIES[1:]]
    deployed.close()
    assert [r["findings"] for r in fresh] == [[]] * len(fresh)  # new healthy runs stay clean
    deployed_rows = {row["episode_id"]: row for row in runs_json(f"sqlite:///{tmp_path}/deployed.db", capsys)}
    assert all(row["model_sha256"] and row["spec_sha256"] for row in deployed_rows.values())
    assert all(deployed_rows[r["episode_id"]]["verdict"] == r["verdict"] for r in fresh)
