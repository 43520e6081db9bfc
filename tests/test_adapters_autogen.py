"""The AutoGen adapter on a real AssistantAgent and a RoundRobinGroupChat, driven by a replayed model."""

from __future__ import annotations

from pathlib import Path

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import ToolCallExecutionEvent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelFamily, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient

from adapters.autogen import AutoGenGuard, GuardedWorkbench
from guardrail import Guard
from guardrail.core.events import Finding, Severity, StepKind
from guardrail.core.layer import Layer
from tests.layers import MissingFileGate, Recorder

MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": ModelFamily.UNKNOWN,
              "structured_output": False}


def calls(*pairs: tuple[str, str, str]) -> CreateResult:
    return CreateResult(finish_reason="function_calls", cached=False,
                        usage=RequestUsage(prompt_tokens=5, completion_tokens=7),
                        content=[FunctionCall(id=i, name=n, arguments=a) for i, n, a in pairs])


def replay(*turns) -> ReplayChatCompletionClient:
    return ReplayChatCompletionClient(list(turns), model_info=MODEL_INFO)


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "notes.txt").write_text("the meeting is at noon")
    return tmp_path


@pytest.fixture
def read_tool():
    executed: list[str] = []

    def read_file(path: str) -> str:
        """Read a file."""
        executed.append(path)
        return Path(path).read_text()

    return FunctionTool(read_file, description="Read a file."), executed


async def test_assistant_agent_gets_an_error_tool_result_for_a_blocked_call(workspace, read_tool):
    tool, executed = read_tool
    recorder = Recorder()
    guarded = AutoGenGuard(Guard([MissingFileGate(), recorder], mode="intervene"), task="read the note")
    client = replay(calls(("c1", "read_file", f'{{"path": "{workspace / "nope.txt"}"}}'),
                          ("c2", "read_file", f'{{"path": "{workspace / "notes.txt"}"}}')),
                    "It is at noon.")
    agent = AssistantAgent("reader", model_client=guarded.model_client(client, agent="reader"),
                           workbench=guarded.workbench([tool]), reflect_on_tool_use=True)

    result = await agent.run(task="read the note")
    decision = await guarded.afinish(result)

    execution = next(m for m in result.messages if isinstance(m, ToolCallExecutionEvent))
    blocked, allowed = execution.content
    assert blocked.is_error and "nope.txt does not exist" in blocked.content and "Hint: read notes.txt" in blocked.content
    assert not allowed.is_error and allowed.content == "the meeting is at noon"
    assert executed == [str(workspace / "notes.txt")]
    assert [s.kind for s in recorder.steps] == [StepKind.TOOL_CALL, StepKind.FINAL]
    assert [e.result for e in recorder.steps[0].tool_events][1] == "the meeting is at noon"
    assert recorder.steps[0].tool_events[0].is_error
    assert recorder.steps[0].meta["agent"] == "reader"
    assert recorder.episodes[0].answer == "It is at noon."
    assert decision.verdict.value == "allow"


async def test_report_mode_runs_the_call_and_keeps_the_warning(workspace, read_tool):
    tool, executed = read_tool
    guarded = AutoGenGuard(Guard([MissingFileGate()], mode="report"))
    client = replay(calls(("c1", "read_file", f'{{"path": "{workspace / "nope.txt"}"}}')))
    agent = AssistantAgent("reader", model_client=guarded.model_client(client), workbench=guarded.workbench([tool]))

    result = await agent.run(task="read")

    execution = next(m for m in result.messages if isinstance(m, ToolCallExecutionEvent))
    assert execution.content[0].is_error and "No such file" in execution.content[0].content
    assert executed == [str(workspace / "nope.txt")]
    assert [f.check for d in guarded.decisions for f in d.findings] == ["file_exists"]


async def test_a_raising_layer_never_crashes_the_agent(workspace, read_tool):
    class Broken(Layer):
        name = "broken"

        def before_action(self, ctx, action):
            raise RuntimeError("boom")

        def on_step(self, ctx, step):
            raise RuntimeError("boom")

    tool, executed = read_tool
    guarded = AutoGenGuard(Guard([Broken()], mode="intervene"))
    client = replay(calls(("c1", "read_file", f'{{"path": "{workspace / "notes.txt"}"}}')))
    agent = AssistantAgent("reader", model_client=guarded.model_client(client), workbench=guarded.workbench([tool]))

    result = await agent.run(task="read")
    await guarded.afinish(result)

    assert executed == [str(workspace / "notes.txt")]
    assert {f.check for d in guarded.decisions for f in d.findings} == {"internal_error"}


async def test_team_stops_on_a_monitor_alarm(workspace, read_tool):
    class AlarmOnToolStep(Layer):
        name = "monitor"

        def on_step(self, ctx, step):
            if step.kind is StepKind.TOOL_CALL:
                return [Finding(layer=self.name, check="step_score", message="score 9.0 over threshold 3.1",
                                severity=Severity.ALARM, score=9.0)]
            return None

    tool, executed = read_tool
    recorder = Recorder()
    guarded = AutoGenGuard(Guard([AlarmOnToolStep(), recorder]))
    first = AssistantAgent("first", model_client=guarded.model_client(replay(
        calls(("c1", "read_file", f'{{"path": "{workspace / "notes.txt"}"}}'))), agent="first"),
        workbench=guarded.workbench([tool]))
    second = AssistantAgent("second", model_client=guarded.model_client(replay("never said"), agent="second"))
    team = RoundRobinGroupChat([first, second],
                               termination_condition=guarded.termination() | MaxMessageTermination(6))

    result = await team.run(task="summarize the note")
    await guarded.afinish(result)

    assert result.stop_reason.startswith("guardrail alarm:") and "score 9.0 over threshold" in result.stop_reason
    assert all(getattr(m, "source", "") != "second" for m in result.messages)
    assert recorder.episodes[0].task == "summarize the note"


async def test_team_of_two_agents_shares_one_episode(workspace, read_tool):
    tool, _ = read_tool
    recorder = Recorder()
    guarded = AutoGenGuard(Guard([MissingFileGate(), recorder], mode="intervene"))
    first = AssistantAgent("first", model_client=guarded.model_client(replay(
        calls(("c1", "read_file", f'{{"path": "{workspace / "gone.txt"}"}}'))), agent="first"),
        workbench=guarded.workbench([tool]))
    second = AssistantAgent("second", model_client=guarded.model_client(replay("the file is missing"),
                                                                        agent="second"))
    team = RoundRobinGroupChat([first, second], termination_condition=MaxMessageTermination(3))

    result = await team.run(task="check the note")
    await guarded.afinish(result)

    execution = next(m for m in result.messages if isinstance(m, ToolCallExecutionEvent))
    assert execution.content[0].is_error and "Hint:" in execution.content[0].content
    episode = recorder.episodes[0]
    assert [s.meta.get("agent") for s in episode.steps] == ["first", "second"]
    assert episode.steps[-1].kind is StepKind.FINAL and episode.answer == "the file is missing"


async def test_workbench_alone_takes_a_plain_guard(workspace, read_tool):
    tool, executed = read_tool
    bench = GuardedWorkbench([tool], Guard([MissingFileGate()], mode="intervene"))

    blocked = await bench.call_tool("read_file", {"path": str(workspace / "x.txt")}, call_id="c9")
    allowed = await bench.call_tool("read_file", {"path": str(workspace / "notes.txt")}, call_id="c10")

    assert blocked.is_error and "x.txt does not exist" in blocked.result[0].content
    assert not allowed.is_error and allowed.result[0].content == "the meeting is at noon"
    assert executed == [str(workspace / "notes.txt")]
