"""Every hook call is a real OpenTelemetry span with GenAI attribute names, and content stays out unless opted in."""

from __future__ import annotations

import json

from opentelemetry import trace
from opentelemetry.trace import StatusCode

from guardrail import Action, Finding, Guard, Layer, Result, Severity, Step, StepKind
from guardrail.core import spans as tm


class Gate(Layer):
    name = "gate"

    def before_action(self, ctx, action):
        return [Finding(layer=self.name, check="file_exists", predicate="file_exists", args=["a.csv"],
                        message="a.csv does not exist", blocking=True)]


class Monitor(Layer):
    name = "monitor"

    def on_step(self, ctx, step):
        ctx.record_score(self, 3.5)
        return [Finding(layer=self.name, check="esn_cusum", message="alarm", severity=Severity.ALARM, score=3.5)]


class Broken(Layer):
    name = "broken"

    def after_result(self, ctx, action, result):
        raise KeyError("boom")


def test_each_layer_hook_is_a_span_named_after_the_layer(spans):
    guard = Guard([Gate(), Monitor(), Broken()], mode="intervene")
    ep = guard.start_episode("ep-span")
    action = Action.tool_call("read_file", {"path": "a.csv"}, call_id="call-7")
    ep.before_action(action)
    ep.after_result(action, Result(output="x"))
    ep.on_step(Step(index=0, kind=StepKind.TOOL_CALL))
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert set(finished) == {"guardrail.gate", "guardrail.monitor", "guardrail.broken"}

    gate = finished["guardrail.gate"].attributes
    assert gate[tm.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert gate[tm.GEN_AI_TOOL_NAME] == "read_file"
    assert gate[tm.GEN_AI_TOOL_CALL_ID] == "call-7"
    assert gate[tm.GEN_AI_CONVERSATION_ID] == "ep-span"
    assert gate[tm.GUARDRAIL_DECISION] == "block"
    assert gate[tm.GUARDRAIL_FINDING_COUNT] == 1
    assert json.loads(gate[tm.GUARDRAIL_FINDINGS])[0]["check"] == "file_exists"

    monitor = finished["guardrail.monitor"].attributes
    assert monitor[tm.GUARDRAIL_SCORE] == 3.5
    assert monitor[tm.GUARDRAIL_DECISION] == "alarm"

    broken = finished["guardrail.broken"]
    assert broken.status.status_code is StatusCode.ERROR
    assert any(event.name == "exception" for event in broken.events)


def test_guard_spans_are_children_of_the_agents_current_span(spans):
    guard = Guard([Gate()])
    ep = guard.start_episode()
    tracer = trace.get_tracer("agent")
    with tracer.start_as_current_span("execute_tool read_file") as parent:
        ep.before_action(Action.tool_call("read_file", {"path": "a.csv"}))
    child = next(s for s in spans.get_finished_spans() if s.name == "guardrail.gate")
    assert child.parent is not None
    assert child.parent.span_id == parent.get_span_context().span_id


def test_arguments_and_results_stay_off_spans_unless_opted_in(spans):
    secret_args = {"path": "a.csv", "api_key": "sk-abcdefghijklmnopqrstuvwx"}
    action = Action.tool_call("read_file", secret_args)
    Guard([Gate(), Broken()]).start_episode().before_action(action)
    for span in spans.get_finished_spans():
        assert tm.GEN_AI_TOOL_CALL_ARGUMENTS not in span.attributes
        assert "sk-abc" not in json.dumps(dict(span.attributes))

    spans.clear()
    guard = Guard([Gate(), Broken()], capture_content=True)
    ep = guard.start_episode()
    ep.before_action(action)
    ep.after_result(action, Result(output="token=supersecretvalue\n" + "x" * 5000))
    attrs = {s.name: s.attributes for s in spans.get_finished_spans()}
    captured = attrs["guardrail.gate"][tm.GEN_AI_TOOL_CALL_ARGUMENTS]
    assert "a.csv" in captured and "sk-abc" not in captured and "[REDACTED]" in captured
    result_attr = attrs["guardrail.broken"][tm.GEN_AI_TOOL_CALL_RESULT]
    assert "supersecretvalue" not in result_attr
    assert len(result_attr) < 2200 and "chars cut" in result_attr


def test_the_guard_works_with_no_exporter_configured():
    from opentelemetry.trace import NoOpTracer

    guard = Guard([Gate(), Monitor()], tracer=NoOpTracer())
    ep = guard.start_episode()
    assert ep.before_action(Action.shell("cat a.csv")).findings
    assert ep.on_step(Step(index=0, kind=StepKind.TEXT)).score == 3.5


def test_a_broken_span_processor_never_breaks_the_agent():
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    class Exploding(SpanProcessor):
        def on_start(self, span, parent_context=None):
            raise RuntimeError("processor start failed")

        def on_end(self, span):
            raise RuntimeError("processor end failed")

    provider = TracerProvider()
    provider.add_span_processor(Exploding())
    guard = Guard([Gate(), Monitor()], mode="intervene", tracer=provider.get_tracer("t"))
    ep = guard.start_episode()
    assert ep.before_action(Action.shell("cat a.csv")).blocked
    assert ep.on_step(Step(index=0, kind=StepKind.TEXT)).score == 3.5
