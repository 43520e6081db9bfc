"""The span processor on real spans: AutoGen's own GenAI tracing, and chat spans with recorded content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelFamily, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from adapters.span_processor import GuardSpanProcessor
from guardrail import Guard
from guardrail.core.events import Finding, Severity, StepKind
from guardrail.core.layer import Layer

MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": ModelFamily.UNKNOWN,
              "structured_output": False}


class _Switch(SpanProcessor):
    """Sits on the global provider once; each test points it at its own processor."""

    target: SpanProcessor | None = None

    def on_start(self, span, parent_context=None):
        if self.target is not None:
            self.target.on_start(span, parent_context)

    def on_end(self, span):
        if self.target is not None:
            self.target.on_end(span)


_SWITCH = _Switch()
trace.get_tracer_provider().add_span_processor(_SWITCH)  # the SDK provider conftest installed


class Recorder(Layer):
    name = "recorder"

    def __init__(self) -> None:
        self.actions, self.results, self.steps, self.episodes = [], [], [], []
        self.outcomes: dict[str | None, bool] = {}  # call id -> is_error, as paired by the guard

    def before_action(self, ctx, action):
        self.actions.append(action)
        if action.tool == "delete_file":
            return [Finding(layer=self.name, check="destructive", message="delete_file ran")]
        return None

    def after_result(self, ctx, action, result):
        self.results.append(result)
        self.outcomes[action.call_id] = result.is_error

    def on_step(self, ctx, step):
        self.steps.append(step)

    def on_finish(self, ctx, episode):
        self.episodes.append(episode)


@pytest.fixture
def processor_for():
    def attach(guard: Guard) -> GuardSpanProcessor:
        processor = GuardSpanProcessor(guard, framework="autogen")
        _SWITCH.target = processor
        return processor

    yield attach
    _SWITCH.target = None


async def test_autogen_builtin_tracing_becomes_guard_steps_without_touching_the_agent(tmp_path, processor_for):
    (tmp_path / "notes.txt").write_text("noon")

    def read_file(path: str) -> str:
        """Read a file."""
        return Path(path).read_text()

    def delete_file(path: str) -> str:
        """Delete a file."""
        Path(path).unlink()
        return "deleted"

    recorder = Recorder()
    processor = processor_for(Guard([recorder]))
    client = ReplayChatCompletionClient([
        CreateResult(finish_reason="function_calls", cached=False, usage=RequestUsage(prompt_tokens=1, completion_tokens=1),
                     content=[FunctionCall(id="c1", name="read_file", arguments=json.dumps({"path": str(tmp_path / "notes.txt")})),
                              FunctionCall(id="c2", name="read_file", arguments=json.dumps({"path": str(tmp_path / "gone.txt")}))]),
        CreateResult(finish_reason="function_calls", cached=False, usage=RequestUsage(prompt_tokens=1, completion_tokens=1),
                     content=[FunctionCall(id="c3", name="delete_file", arguments=json.dumps({"path": str(tmp_path / "notes.txt")}))]),
    ], model_info=MODEL_INFO)
    agent = AssistantAgent("plain", model_client=client,
                           tools=[FunctionTool(read_file, description="Read a file."),
                                  FunctionTool(delete_file, description="Delete a file.")],
                           max_tool_iterations=2)

    await agent.run(task="read then clean up")
    assert processor.force_flush()

    # AutoGen runs the two read_file calls of one model turn concurrently: their order is not fixed.
    calls = [(a.tool, a.call_id) for a in recorder.actions]
    assert sorted(calls[:2]) == [("read_file", "c1"), ("read_file", "c2")] and calls[2] == ("delete_file", "c3")
    assert recorder.outcomes == {"c1": False, "c2": True, "c3": False}  # gone.txt raised inside the tool span
    assert [s.kind for s in recorder.steps] == [StepKind.TOOL_CALL] * 3
    assert len(recorder.episodes) == 1  # the agent's root invoke_agent span ended the episode
    episode_id, decision = processor.finished[0]
    assert episode_id.startswith("trace-") and recorder.episodes[0].episode_id == episode_id
    assert decision.verdict.value == "allow"


def test_chat_spans_with_content_carry_text_tool_calls_and_results(processor_for):
    recorder = Recorder()
    processor = processor_for(Guard([recorder]))
    tracer = trace.get_tracer("some.instrumentation")
    output = [{"role": "assistant", "parts": [
        {"type": "text", "content": "Let me look."},
        {"type": "tool_call", "id": "t1", "name": "search", "arguments": "{\"q\": \"weather\"}"}]}]

    with tracer.start_as_current_span("invoke_agent helper", attributes={"gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat",
                                                               "gen_ai.output.messages": json.dumps(output),
                                                               "gen_ai.usage.output_tokens": 12}):
            pass
        with tracer.start_as_current_span("execute_tool search", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search", "gen_ai.tool.call.id": "t1",
                "gen_ai.tool.call.result": "sunny"}):
            pass
        with tracer.start_as_current_span("chat m", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "It is sunny."}]}])}):
            pass

    assert processor.force_flush()
    steps = recorder.episodes[0].steps
    assert [s.kind for s in steps] == [StepKind.TOOL_CALL, StepKind.FINAL]
    assert steps[0].text == "Let me look. [search({\"q\": \"weather\"}) -> sunny]" and steps[0].output_tokens == 12
    assert steps[0].tool_events[0].args == {"q": "weather"} and steps[0].tool_events[0].result == "sunny"
    assert recorder.episodes[0].answer == "It is sunny."
    assert len(processor.finished) == 1


def test_spans_without_genai_operations_start_no_episode(processor_for):
    recorder = Recorder()
    processor = processor_for(Guard([recorder]))

    with trace.get_tracer("x").start_as_current_span("http GET"):
        pass

    assert processor.force_flush()
    assert processor.finished == [] and recorder.episodes == []


def test_a_raising_layer_never_breaks_the_instrumented_code(processor_for):
    class Broken(Layer):
        name = "broken"

        def on_step(self, ctx, step):
            raise RuntimeError("boom")

    processor = processor_for(Guard([Broken()]))
    with trace.get_tracer("x").start_as_current_span("execute_tool t", attributes={"gen_ai.tool.name": "t"}):
        pass

    assert processor.force_flush()
    assert processor.finished[0][1].verdict.value == "allow"


def test_guard_spans_on_the_same_provider_are_not_fed_back():
    provider = TracerProvider()
    recorder = Recorder()
    guard = Guard([recorder], tracer=provider.get_tracer("guardrail"))
    processor = GuardSpanProcessor(guard)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("agent")

    with tracer.start_as_current_span("invoke_agent a"):
        with tracer.start_as_current_span("execute_tool t", attributes={"gen_ai.operation.name": "execute_tool",
                                                                        "gen_ai.tool.name": "t"}):
            pass

    assert processor.force_flush()
    assert len(recorder.actions) == 1 and len(recorder.episodes) == 1
    provider.shutdown()


def test_on_end_only_queues_the_layers_run_on_the_worker_and_overload_is_counted():
    import threading

    release, entered = threading.Event(), threading.Event()

    class Slow(Recorder):
        threads: list[str] = []

        def before_action(self, ctx, action):
            self.threads.append(threading.current_thread().name)
            entered.set()
            release.wait(10)  # a layer far slower than the agent: the agent must not wait for it
            return super().before_action(ctx, action)

    provider = TracerProvider()
    slow = Slow()
    processor = GuardSpanProcessor(Guard([slow], tracer=provider.get_tracer("guardrail")), max_queue_size=4)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("agent")

    with tracer.start_as_current_span("invoke_agent a"):
        for i in range(12):  # the first is taken by the (blocked) worker, four wait, the rest are dropped
            with tracer.start_as_current_span(f"execute_tool t{i}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"t{i}"}):
                pass
            if i == 0:
                assert entered.wait(10)  # the worker holds t0 inside the layer
    ended_while_blocked = len(slow.actions)
    release.set()
    assert processor.force_flush()

    assert ended_while_blocked == 0  # every span ended with the layer still blocked: on_end never ran it
    assert set(slow.threads) == {"guardrail-span-processor"}
    assert processor.dropped_spans == 13 - 1 - 4  # twelve tool spans and the root: one in the worker, four queued
    assert [a.tool for a in slow.actions] == ["t0", "t1", "t2", "t3", "t4"]
    provider.shutdown()


async def test_the_end_of_run_decision_warns_when_a_step_alarmed(processor_for):
    class AlarmOnFirstStep(Layer):
        name = "monitor"

        def on_step(self, ctx, step):
            return [Finding(layer=self.name, check="step_monitor", message="off the healthy range",
                            severity=Severity.ALARM, step=step.index)] if step.index == 0 else None

    def lookup(city: str) -> str:
        """Look up a city."""
        return f"{city}: sunny"

    processor = processor_for(Guard([AlarmOnFirstStep()]))
    client = ReplayChatCompletionClient([
        CreateResult(finish_reason="function_calls", cached=False, usage=RequestUsage(prompt_tokens=1, completion_tokens=1),
                     content=[FunctionCall(id="c1", name="lookup", arguments=json.dumps({"city": "Oslo"}))]),
        "Sunny in Oslo."], model_info=MODEL_INFO)
    agent = AssistantAgent("plain", model_client=client, tools=[FunctionTool(lookup, description="Look up a city.")],
                           max_tool_iterations=2)
    await agent.run(task="weather in Oslo")
    assert processor.force_flush()
    (_, decision), = processor.finished
    assert decision.verdict.value == "warn" and decision.findings[0].check == "step_monitor"
