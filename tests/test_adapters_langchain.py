"""The LangChain v1 middleware and the StateGraph helpers, on real `create_agent` agents and a hand-built graph."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from adapters.langchain import GuardMiddleware
from guardrail import Guard
from guardrail.core.events import Finding, Severity, StepKind
from guardrail.core.layer import Layer
from tests.layers import MissingFileGate, Recorder


class ScriptedChatModel(GenericFakeChatModel):
    """Replays scripted turns; `bind_tools` returns itself. Counts the calls the agent made."""

    calls: int = 0

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super()._generate(*args, **kwargs)


def scripted(*turns: AIMessage) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter(turns))


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(content=f"calling {name}", tool_calls=[{"name": name, "args": args, "id": call_id}])


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "notes.txt").write_text("the meeting is at noon")
    return tmp_path


@pytest.fixture
def tools(workspace):
    executed: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        executed.append(path)
        try:
            return Path(path).read_text()
        except FileNotFoundError:
            return f"ERROR: no such file {path}"

    return [read_file], executed


def run(agent, text="what does the note say?", thread="t1"):
    return agent.invoke({"messages": [{"role": "user", "content": text}]}, {"configurable": {"thread_id": thread}})


def test_blocked_call_returns_an_error_tool_message_with_the_hint_and_never_runs(workspace, tools):
    tool_list, executed = tools
    model = scripted(call("read_file", "c1", path=str(workspace / "nope.txt")),
                     call("read_file", "c2", path=str(workspace / "notes.txt")),
                     AIMessage(content="noon"))
    agent = create_agent(model, tool_list, middleware=[GuardMiddleware(Guard([MissingFileGate()], mode="intervene"))],
                         checkpointer=InMemorySaver())

    out = run(agent)

    replies = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert replies[0].status == "error"
    assert "nope.txt does not exist" in replies[0].content and "Hint: read notes.txt instead" in replies[0].content
    assert replies[0].artifact["guardrail"]["verdict"] == "block"
    assert replies[1].status == "success" and replies[1].content == "the meeting is at noon"
    assert executed == [str(workspace / "notes.txt")]
    assert out["messages"][-1].content == "noon"


def test_report_mode_lets_the_call_run_and_records_the_finding(workspace, tools):
    tool_list, executed = tools
    model = scripted(call("read_file", "c1", path=str(workspace / "nope.txt")), AIMessage(content="no file"))
    agent = create_agent(model, tool_list, middleware=[GuardMiddleware(Guard([MissingFileGate()], mode="report"))])

    out = run(agent)

    reply = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert reply.content.startswith("ERROR: no such file")  # the tool itself ran and failed
    assert executed == [str(workspace / "nope.txt")]
    assert [f["check"] for f in out["guardrail_findings"]] == ["file_exists"]


def test_steps_reach_on_step_in_order_with_their_tool_results_and_logprobs(workspace, tools):
    tool_list, _ = tools
    recorder = Recorder()
    first = call("read_file", "c1", path=str(workspace / "notes.txt"))
    first.response_metadata = {"logprobs": {"content": [{"token": "a", "logprob": -0.5},
                                                        {"token": "b", "logprob": -1.25}]}}
    agent = create_agent(scripted(first, AIMessage(content="noon")), tool_list,
                         middleware=[GuardMiddleware(Guard([recorder]))])

    run(agent)

    assert [s.kind for s in recorder.steps] == [StepKind.TOOL_CALL, StepKind.FINAL]
    assert [s.index for s in recorder.steps] == [0, 1]
    event = recorder.steps[0].tool_events[0]
    assert (event.name, event.id, event.result) == ("read_file", "c1", "the meeting is at noon")
    assert recorder.steps[0].token_logprobs == [-0.5, -1.25]
    assert recorder.steps[1].text == "noon"
    assert recorder.episodes[0].task == "what does the note say?"
    assert recorder.episodes[0].answer == "noon"


def test_a_layer_that_raises_never_crashes_the_agent(workspace, tools):
    class Broken(Layer):
        name = "broken"

        def before_action(self, ctx, action):
            raise RuntimeError("probe exploded")

        def on_step(self, ctx, step):
            raise ValueError("monitor exploded")

    tool_list, executed = tools
    model = scripted(call("read_file", "c1", path=str(workspace / "notes.txt")), AIMessage(content="noon"))
    agent = create_agent(model, tool_list, middleware=[GuardMiddleware(Guard([Broken()], mode="intervene"))])

    out = run(agent)

    assert out["messages"][-1].content == "noon"
    assert executed == [str(workspace / "notes.txt")]
    assert {f["check"] for f in out["guardrail_findings"]} == {"internal_error"}


def test_an_alarm_stops_the_run_when_asked(workspace, tools):
    class AlarmOnFirstStep(Layer):
        name = "monitor"

        def on_step(self, ctx, step):
            return [Finding(layer=self.name, check="step_score", message="score over threshold",
                            severity=Severity.ALARM, score=9.0)]

    tool_list, _ = tools
    model = scripted(call("read_file", "c1", path=str(workspace / "notes.txt")),
                     call("read_file", "c2", path=str(workspace / "notes.txt")), AIMessage(content="noon"))
    alarms = []
    middleware = GuardMiddleware(Guard([AlarmOnFirstStep()]), stop_on_alarm=True, on_decision=alarms.append)
    agent = create_agent(model, tool_list, middleware=[middleware])

    out = run(agent)

    assert model.calls == 1  # the second model call never happened
    assert alarms and alarms[0].verdict.value == "alarm"
    assert any(f["severity"] == "alarm" for f in out["guardrail_findings"])


def test_a_failed_run_goes_to_the_repair_callback(workspace, tools):
    class AnswerMustCiteTime(Layer):
        name = "verifier"

        def on_finish(self, ctx, episode):
            if "noon" not in (episode.answer or ""):
                return [Finding(layer=self.name, check="grounding", message="answer drops the time", blocking=True)]
            return None

    repairs = []

    def on_repair(decision, state, runtime):
        repairs.append((decision, state["guardrail_episode"]))
        return {"messages": [AIMessage(content="(repaired) noon")]}

    tool_list, _ = tools
    model = scripted(call("read_file", "c1", path=str(workspace / "notes.txt")), AIMessage(content="sometime"))
    agent = create_agent(model, tool_list, middleware=[
        GuardMiddleware(Guard([AnswerMustCiteTime()], mode="intervene"), on_repair=on_repair)])

    out = run(agent)

    assert out["guardrail_verdict"] == "repair"
    assert repairs[0][0].findings[0].check == "grounding"
    assert out["messages"][-1].content == "(repaired) noon"


def test_a_result_check_that_blocks_marks_the_tool_message_as_error(workspace, tools):
    class NoSecrets(Layer):
        name = "contract"

        def after_result(self, ctx, action, result):
            if "noon" in result.output:
                return [Finding(layer=self.name, check="contract", message="result leaks the schedule", blocking=True)]
            return None

    tool_list, _ = tools
    model = scripted(call("read_file", "c1", path=str(workspace / "notes.txt")), AIMessage(content="ok"))
    agent = create_agent(model, tool_list, middleware=[GuardMiddleware(Guard([NoSecrets()], mode="intervene"))])

    out = run(agent)

    reply = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert reply.status == "error"
    assert reply.content.startswith("the meeting is at noon") and "result leaks the schedule" in reply.content


async def test_async_agent_is_gated_the_same_way(workspace, tools):
    tool_list, executed = tools
    recorder = Recorder()
    model = scripted(call("read_file", "c1", path=str(workspace / "nope.txt")), AIMessage(content="none"))
    agent = create_agent(model, tool_list,
                         middleware=[GuardMiddleware(Guard([MissingFileGate(), recorder], mode="intervene"))])

    out = await agent.ainvoke({"messages": [{"role": "user", "content": "read"}]})

    reply = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert reply.status == "error" and "Hint:" in reply.content
    assert executed == []
    assert [s.kind for s in recorder.steps] == [StepKind.TOOL_CALL, StepKind.FINAL]


def test_two_runs_on_one_thread_are_two_episodes(workspace, tools):
    tool_list, _ = tools
    recorder = Recorder()
    model = scripted(AIMessage(content="first"), AIMessage(content="second"))
    agent = create_agent(model, tool_list, middleware=[GuardMiddleware(Guard([recorder]))],
                         checkpointer=InMemorySaver())

    run(agent, "one")
    run(agent, "two")

    assert [e.task for e in recorder.episodes] == ["one", "two"]
    assert [[s.text for s in e.steps] for e in recorder.episodes] == [["first"], ["second"]]


class GraphState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_hand_built_state_graph_with_guarded_tool_node(workspace, tools):
    tool_list, executed = tools
    recorder = Recorder()
    middleware = GuardMiddleware(Guard([MissingFileGate(), recorder], mode="intervene"))
    model = scripted(call("read_file", "c1", path=str(workspace / "missing.txt")),
                     call("read_file", "c2", path=str(workspace / "notes.txt")), AIMessage(content="noon"))

    def agent_node(state: GraphState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: GraphState) -> str:
        return "tools" if state["messages"][-1].tool_calls else "finish"

    graph = StateGraph(GraphState)
    graph.add_node("agent", agent_node)
    graph.add_node("observe", middleware.observe_node)
    graph.add_node("tools", middleware.tool_node(tool_list))
    graph.add_node("finish", middleware.finish_node)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "observe")
    graph.add_conditional_edges("observe", route, ["tools", "finish"])
    graph.add_edge("tools", "agent")
    graph.add_edge("finish", END)
    app = graph.compile(checkpointer=InMemorySaver())

    out = app.invoke({"messages": [{"role": "user", "content": "read it"}]}, {"configurable": {"thread_id": "g1"}})

    replies = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert replies[0].status == "error" and "missing.txt does not exist" in replies[0].content
    assert executed == [str(workspace / "notes.txt")]
    assert len(recorder.episodes) == 1
    assert [s.kind for s in recorder.episodes[0].steps] == [StepKind.TOOL_CALL, StepKind.TOOL_CALL, StepKind.FINAL]
    assert recorder.episodes[0].steps[0].tool_events[0].is_error


def test_one_middleware_serves_concurrent_runs_as_separate_episodes(workspace, tools):
    from concurrent.futures import ThreadPoolExecutor

    tool_list, _ = tools
    recorder = Recorder()
    middleware = GuardMiddleware(Guard([recorder]))

    def one(n: int) -> str:
        model = scripted(call("read_file", f"c{n}", path=str(workspace / "notes.txt")), AIMessage(content=f"done {n}"))
        agent = create_agent(model, tool_list, middleware=[middleware], checkpointer=InMemorySaver())
        return run(agent, f"task {n}", thread=f"t{n}")["guardrail_episode"]

    with ThreadPoolExecutor(4) as pool:
        episode_ids = list(pool.map(one, range(6)))

    assert len(set(episode_ids)) == 6
    by_task = {e.task: e for e in recorder.episodes}
    assert sorted(by_task) == [f"task {n}" for n in range(6)]
    for n in range(6):
        assert [s.kind for s in by_task[f"task {n}"].steps] == [StepKind.TOOL_CALL, StepKind.FINAL]
        assert by_task[f"task {n}"].answer == f"done {n}"


def test_a_long_run_feeds_every_turn_once_in_order_even_when_old_messages_are_trimmed(workspace, tools):
    """The middleware reads only the messages after the last turn it fed; a middleware that trims the history
    (as summarization does) makes it scan again, never skip or repeat a turn."""
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import RemoveMessage

    class TrimHistory(AgentMiddleware):
        def before_model(self, state, runtime):
            messages = state["messages"]
            if len(messages) > 12:  # keep the task and the last ten messages
                return {"messages": [RemoveMessage(id=m.id) for m in messages[1:-10]]}
            return None

    tool_list, executed = tools
    recorder = Recorder()
    for middleware in ([GuardMiddleware(Guard([recorder]))], [TrimHistory(), GuardMiddleware(Guard([recorder]))]):
        recorder.steps.clear()
        turns = [call("read_file", f"c{i}", path=str(workspace / "notes.txt")) for i in range(40)]
        agent = create_agent(scripted(*turns, AIMessage(content="noon")), tool_list, middleware=middleware,
                             checkpointer=InMemorySaver())
        out = run(agent, thread=f"long-{len(middleware)}")

        assert out["guardrail_verdict"] == "allow"
        assert [s.index for s in recorder.steps] == list(range(41))
        assert [s.tool_events[0].id for s in recorder.steps[:40]] == [f"c{i}" for i in range(40)]
        assert all(s.tool_events[0].result == "the meeting is at noon" for s in recorder.steps[:40])
        assert recorder.steps[-1].kind is StepKind.FINAL and recorder.steps[-1].text == "noon"
    assert len(executed) == 80
