"""Real chat clients (ChatOpenAI, AutoGen's OpenAI client, ChatOllama) over real HTTP to a scripted loopback server.

The guarded agents run the testbed's booking tasks; the server answers with the testbed policy in
the OpenAI (or Ollama) wire format, tool calls and token logprobs included, and the tests follow
those logprobs through the client, the adapter and `adapters.steps` into the step monitor's
uncertainty channel.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from adapters.autogen import AutoGenGuard
from adapters.langchain import GuardMiddleware
from guardrail import Guard
from guardrail.core.corpus import read_corpus
from monitors import StepMonitor
from monitors.layer import MonitorLayer
from tests.layers import MissingFileGate, Recorder
from traces.agents import SYSTEM_PROMPT
from traces.openai_server import PolicyResponder, QueueResponder, ScriptedLLMServer, ScriptedReply, WireCall
from traces.policy import Policy
from traces.tasks import make_task
from traces.tools import BOOKING_TOOLS, BookingDB, booking_tools

pytest.importorskip("langchain_openai", reason="langchain-openai is not installed (pip install 'guardrail[clients]')")
pytest.importorskip("autogen_ext.models.openai", reason="autogen-ext[openai] is not installed")

CORPUS = Path(__file__).resolve().parents[1] / "traces" / "corpora" / "testbed_langgraph"
SEED = 1


@pytest.fixture(scope="module")
def monitor() -> StepMonitor:
    """A step monitor fitted on the shipped testbed corpus, whose steps carry token logprobs (so it keeps `u`)."""
    healthy = read_corpus(CORPUS).healthy()
    fitted = StepMonitor().fit(healthy[:24]).calibrate(healthy[24:40])
    assert "u" in fitted.telemetry_.channels_
    return fitted


class WatchedMonitor(MonitorLayer):
    """The real monitor layer, keeping each step's uncertainty-channel scores for the test to read."""

    def __init__(self, model: StepMonitor) -> None:
        super().__init__(model)
        self.u_scores: list[float] = []

    def on_step(self, ctx: Any, step: Any) -> Any:
        findings = super().on_step(ctx, step)
        scores = ctx.state(self).channel_scores()
        self.u_scores.append(max(v for k, v in scores.items() if k.endswith(".u")))
        return findings


class Confused:
    """A responder whose every token is far less certain than the policy's (logprobs times `factor`)."""

    def __init__(self, inner: PolicyResponder, factor: float) -> None:
        self.inner, self.factor = inner, factor

    def __call__(self, messages: list[dict[str, Any]]) -> ScriptedReply:
        reply = self.inner(messages)
        return dataclasses.replace(reply, logprobs=[v * self.factor - 2.0 for v in reply.logprobs or []])


def sent_logprobs(server: ScriptedLLMServer) -> list[list[float]]:
    return [[value for _, value in reply.token_logprobs()] for reply in server.replies]


def run_chat_openai(server: ScriptedLLMServer, guard: Guard) -> dict[str, Any]:
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    task = make_task(SEED, db=BookingDB())
    model = ChatOpenAI(base_url=server.openai_url, api_key="not-needed", model="scripted", logprobs=True,
                       max_retries=0)
    agent = create_agent(model, tools=booking_tools().langchain_tools(BOOKING_TOOLS), system_prompt=SYSTEM_PROMPT,
                         middleware=[GuardMiddleware(guard)])
    return agent.invoke({"messages": [HumanMessage(task.prompt)]}, {"recursion_limit": 60})


def test_chat_openai_logprobs_reach_the_monitors_uncertainty_channel(monitor):
    recorder, watched = Recorder(), WatchedMonitor(monitor)
    with ScriptedLLMServer(PolicyResponder(Policy(seed=SEED))) as server:
        state = run_chat_openai(server, Guard([watched, recorder]))
        sent = sent_logprobs(server)
        asked = [body.get("logprobs") for body in server.requests]

    assert asked and all(asked)  # ChatOpenAI(logprobs=True) asked on the wire for every call
    assert len(recorder.steps) == len(sent) >= 3  # one guarded step per HTTP answer
    assert [step.token_logprobs for step in recorder.steps] == sent  # the values that crossed the wire
    assert all(step.logprobs_available for step in recorder.steps)
    assert recorder.steps[0].tool_events and recorder.steps[-1].kind.value == "final"
    assert state["guardrail_verdict"] == "allow"

    confused, watched_confused = Recorder(), WatchedMonitor(monitor)
    with ScriptedLLMServer(Confused(PolicyResponder(Policy(seed=SEED)), factor=40.0)) as server:
        run_chat_openai(server, Guard([watched_confused, confused]))
    # Same task and words, only the logprobs differ: the uncertainty channel is what moved.
    assert [s.text for s in confused.steps] == [s.text for s in recorder.steps]
    assert max(watched_confused.u_scores) > 2 * max(watched.u_scores)


async def test_autogen_openai_client_logprobs_reach_the_monitor_and_every_call_is_gated(monitor, tmp_path):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.models import ModelInfo
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    task = make_task(SEED, db=BookingDB())
    recorder, watched = Recorder(), WatchedMonitor(monitor)
    guarded = AutoGenGuard(Guard([watched, recorder]), task=task.prompt)
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown",
                     structured_output=False)
    with ScriptedLLMServer(PolicyResponder(Policy(seed=SEED))) as server:
        client = OpenAIChatCompletionClient(model="scripted", base_url=server.openai_url, api_key="not-needed",
                                            model_info=info, max_retries=0)
        agent = AssistantAgent("booking_agent", model_client=guarded.model_client(client, logprobs=True),
                               workbench=guarded.workbench(booking_tools().autogen_tools(BOOKING_TOOLS)),
                               system_message=SYSTEM_PROMPT, max_tool_iterations=20)
        result = await agent.run(task=task.prompt)
        decision = await guarded.afinish(result)
        sent = sent_logprobs(server)
        await client.close()

    assert [step.token_logprobs for step in recorder.steps] == sent and len(sent) >= 3
    assert len(watched.u_scores) == len(sent)
    assert decision.verdict.value == "allow"
    calls = [e for s in recorder.steps for e in s.tool_events]
    assert calls and all(e.result is not None for e in calls)


def parallel_reply(workspace: Path) -> ScriptedReply:
    return ScriptedReply("Reading both.", [WireCall("read_file", {"path": str(workspace / "gone.txt")}, "c1"),
                                           WireCall("read_file", {"path": str(workspace / "notes.txt")}, "c2"),
                                           WireCall("read_file", {"path": str(workspace / "also-gone.txt")}, "c3")])


class Gate(MissingFileGate):
    def __init__(self) -> None:
        self.seen: list[str | None] = []

    def before_action(self, ctx, action):
        self.seen.append(action.call_id)
        return super().before_action(ctx, action)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("the meeting is at noon")
    return tmp_path


def read_file(path: str) -> str:
    """Read a file."""
    return Path(path).read_text()


def test_every_call_of_a_parallel_step_is_gated_through_chat_openai(workspace):
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    gate, recorder = Gate(), Recorder()
    with ScriptedLLMServer(QueueResponder([parallel_reply(workspace), ScriptedReply("It is at noon.")])) as server:
        model = ChatOpenAI(base_url=server.openai_url, api_key="x", model="scripted", max_retries=0)
        agent = create_agent(model, tools=[tool(read_file)],
                             middleware=[GuardMiddleware(Guard([gate, recorder], mode="intervene"))])
        state = agent.invoke({"messages": [HumanMessage("read the notes")]})

    assert sorted(gate.seen) == ["c1", "c2", "c3"]  # all three calls of the one step
    events = {e.id: e for e in recorder.steps[0].tool_events}
    assert events["c1"].is_error and events["c3"].is_error and "does not exist" in events["c1"].guard_message
    assert events["c1"].result is None  # blocked: the tool never ran, the guard's message is kept apart
    assert not events["c2"].is_error and events["c2"].result == "the meeting is at noon"
    assert state["messages"][-1].content == "It is at noon."


async def test_every_call_of_a_parallel_step_is_gated_through_the_autogen_openai_client(workspace):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.models import ModelInfo
    from autogen_core.tools import FunctionTool
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    gate, recorder = Gate(), Recorder()
    guarded = AutoGenGuard(Guard([gate, recorder], mode="intervene"))
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown",
                     structured_output=False)
    with ScriptedLLMServer(QueueResponder([parallel_reply(workspace), ScriptedReply("It is at noon.")])) as server:
        client = OpenAIChatCompletionClient(model="scripted", base_url=server.openai_url, api_key="x",
                                            model_info=info, max_retries=0)
        agent = AssistantAgent("reader", model_client=guarded.model_client(client),
                               workbench=guarded.workbench([FunctionTool(read_file, description="Read a file.")]),
                               max_tool_iterations=3)
        result = await agent.run(task="read the notes")
        await guarded.afinish(result)
        await client.close()

    assert sorted(gate.seen) == ["c1", "c2", "c3"]
    events = {e.id: e for e in recorder.steps[0].tool_events}
    assert events["c1"].is_error and events["c3"].is_error and not events["c2"].is_error
    assert recorder.episodes[0].answer == "It is at noon."


def test_chat_ollama_logprobs_reach_the_step_path(monitor):
    pytest.importorskip("langchain_ollama", reason="langchain-ollama is not installed")
    from langchain.agents import create_agent
    from langchain_ollama import ChatOllama

    task = make_task(SEED, db=BookingDB())
    recorder, watched = Recorder(), WatchedMonitor(monitor)
    with ScriptedLLMServer(PolicyResponder(Policy(seed=SEED))) as server:
        model = ChatOllama(base_url=server.ollama_url, model="scripted", logprobs=True)
        agent = create_agent(model, tools=booking_tools().langchain_tools(BOOKING_TOOLS), system_prompt=SYSTEM_PROMPT,
                             middleware=[GuardMiddleware(Guard([watched, recorder]))])
        agent.invoke({"messages": [HumanMessage(task.prompt)]}, {"recursion_limit": 60})
        sent = sent_logprobs(server)

    assert [step.token_logprobs for step in recorder.steps] == sent and len(sent) >= 3
    assert len(watched.u_scores) == len(sent)
    assert recorder.steps[-1].kind.value == "final"


def test_bench_clients_reports_one_row_per_client(capsys):
    from guardrail.core.cli import main

    assert main(["bench", "clients", "--json", "--episodes", "1", "--clients", "chat_openai", "autogen_openai"]) == 0
    import json

    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [row["client"] for row in rows] == ["chat_openai", "autogen_openai"]
    for row in rows:
        assert row["steps"] >= 3 and row["logprobs_steps"] == row["steps"]  # every step carried its logprobs
        assert row["gated_calls"] >= 3 and row["parallel_calls_gated"] == row["parallel_calls"] == 3
        assert row["median_added_ms_per_step"] is not None
