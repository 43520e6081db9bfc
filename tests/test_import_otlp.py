"""`guardrail import otlp`: GenAI spans a real instrumentation emitted, written by real exporters, into a run store.

Two instrumentations: AutoGen's own tracing (through the global TracerProvider) and
`opentelemetry-instrumentation-langchain` on a `create_agent` agent, each agent written here with its
own tools and scripted model. The spans go to a file the way a deployment writes them (OTLP JSON
lines as a collector's file exporter writes, encoded by the OTLP exporter's own encoder; the SDK's
`ConsoleSpanExporter`; flat span records) and, at the same time, live through `GuardSpanProcessor`
into a recording Guard: the imported steps must be the ones the live processor recorded. Then a span
file with hostile items: one problem per bad item, the rest imported.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from adapters.span_processor import GuardSpanProcessor
from guardrail import Guard
from guardrail.core.cli import main
from guardrail.core.runstore import open_store

REPO = Path(__file__).resolve().parents[1]

encoder = pytest.importorskip("opentelemetry.exporter.otlp.proto.common.trace_encoder",
                              reason="the OTLP encoder comes with guardrail[scale]")
json_format = pytest.importorskip("google.protobuf.json_format")


# ----------------------------------------------------------------------------- exporters to files
class OtlpJsonLines(SpanExporter):
    """Writes each export as one OTLP JSON line, as a collector's file exporter does (ids in hex, or base64 as
    protobuf's own JSON mapping writes them), encoded by the OTLP exporter's own encoder."""

    def __init__(self, path: Path, *, hex_ids: bool = True) -> None:
        self.path, self.hex_ids = path, hex_ids

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        export = json.loads(json_format.MessageToJson(encoder.encode_spans(spans), indent=None))
        if self.hex_ids:
            for resource in export["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    for span in scope["spans"]:
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if key in span:
                                span[key] = base64.b64decode(span[key]).hex()
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(export) + "\n")
        return SpanExportResult.SUCCESS


class Switch(SpanProcessor):
    """Sits on the global provider (conftest's) once; each test points it at its own processors."""

    targets: list[SpanProcessor] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        for target in self.targets:
            target.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for target in self.targets:
            target.on_end(span)


SWITCH = Switch()
if hasattr(trace.get_tracer_provider(), "add_span_processor"):  # the SDK provider conftest installed (not in a child)
    trace.get_tracer_provider().add_span_processor(SWITCH)  # type: ignore[attr-defined]


def live_processor(store: str) -> tuple[Guard, GuardSpanProcessor]:
    guard = Guard.default(record=store)
    return guard, GuardSpanProcessor(guard)


def step_bodies(store: str) -> dict[str, list[dict[str, Any]]]:
    """Episode id -> its stored steps as JSON (the guard's verdict on a step set apart: only a live run has one)."""
    out = {}
    with open_store(store, create=False) as opened:
        for episode in opened.episodes():
            bodies = [step.model_dump(mode="json") for step in episode.steps]
            for body in bodies:
                body["meta"].pop("guard", None)
            out[episode.episode_id] = bodies
    return out


def import_otlp(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["import", "otlp", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def runs_json(store: str, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["runs", store, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


# ----------------------------------------------------------------------------- AutoGen's own tracing
async def run_autogen_agents(runs: int) -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, ModelFamily, RequestUsage
    from autogen_core.tools import FunctionTool
    from autogen_ext.models.replay import ReplayChatCompletionClient

    def weather(city: str) -> str:
        """Today's temperature in a city, in degrees Celsius."""
        if city == "Atlantis":
            raise ValueError("no such city")
        return json.dumps({"city": city, "celsius": 18})

    def convert(value: float, unit: str) -> str:
        """Convert a temperature from Celsius to Fahrenheit."""
        return f"{value * 9 / 5 + 32:.1f}"

    def turn(*calls: FunctionCall) -> CreateResult:
        return CreateResult(finish_reason="function_calls", content=list(calls), cached=False,
                            usage=RequestUsage(prompt_tokens=3, completion_tokens=2))

    info = {"vision": False, "function_calling": True, "json_output": False, "family": ModelFamily.UNKNOWN,
            "structured_output": False}
    for n in range(runs):
        city = "Atlantis" if n == 0 else "Paris"
        client = ReplayChatCompletionClient([
            turn(FunctionCall(id=f"w{n}", name="weather", arguments=json.dumps({"city": city}))),
            turn(FunctionCall(id=f"c{n}", name="convert", arguments=json.dumps({"value": 18, "unit": "c_to_f"}))),
            "It is 64.4F."], model_info=info)
        agent = AssistantAgent("forecaster", model_client=client, max_tool_iterations=3,
                               tools=[FunctionTool(weather, description="Today's temperature in a city."),
                                      FunctionTool(convert, description="Celsius to Fahrenheit.")])
        await agent.run(task=f"How warm is {city} in Fahrenheit?")


def test_autogen_spans_from_an_otlp_file_are_the_steps_the_live_processor_recorded(tmp_path: Path, capsys):
    spans_file, live = tmp_path / "spans.jsonl", f"sqlite:///{tmp_path / 'live.db'}"
    guard, processor = live_processor(live)
    SWITCH.targets = [SimpleSpanProcessor(OtlpJsonLines(spans_file, hex_ids=False)), processor]
    try:
        asyncio.run(run_autogen_agents(6))
    finally:
        SWITCH.targets = []
        processor.shutdown()
        guard.close()

    imported = str(tmp_path / "runs")
    code, out, err = import_otlp(capsys, str(spans_file), "-o", imported)
    assert code == 0, err
    assert out.startswith("imported 6 episode(s)")
    recorded, read_back = step_bodies(live), step_bodies(imported)
    assert len(recorded) == 6 and read_back == recorded  # same episode ids (trace-<id>), same steps, byte for byte

    runs = runs_json(imported, capsys)
    assert {r["framework"] for r in runs} == {"autogen"} and {r["n_steps"] for r in runs} == {2}
    first = read_back[runs[0]["episode_id"]]
    assert [e["name"] for s in first for e in s["tool_events"]] == ["weather", "convert"]
    assert first[0]["tool_events"][0]["is_error"] is True  # Atlantis raised inside AutoGen's tool span

    capsys.readouterr()
    assert main(["label", imported, "--clean-as", "healthy", "--include-imported"]) == 0
    assert main(["fit-spec", imported, "-o", str(tmp_path / "spec.json")]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "spec.json").read_text())


# ----------------------------------------------------------------------------- opentelemetry-instrumentation-langchain
def run_langchain_agent(cities: Sequence[str]) -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    class ScriptedChat(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def weather(city: str) -> str:
        """Today's temperature in a city, in degrees Celsius."""
        return json.dumps({"city": city, "celsius": 18})

    @tool
    def convert(value: float, unit: str) -> str:
        """Convert a temperature from Celsius to Fahrenheit."""
        return f"{value * 9 / 5 + 32:.1f}"

    for city in cities:
        script = [AIMessage(content="Let me look.", tool_calls=[{"name": "weather", "args": {"city": city}, "id": "w"}]),
                  AIMessage(content="", tool_calls=[{"name": "convert", "args": {"value": 18, "unit": "c_to_f"},
                                                     "id": "c"}]),
                  AIMessage(content=f"It is 64.4F in {city}.")]
        agent = create_agent(ScriptedChat(messages=iter(script)), [weather, convert])
        agent.invoke({"messages": [{"role": "user", "content": f"How warm is {city} in Fahrenheit?"}]})


def record_instrumented_langchain(directory: Path) -> None:
    """In a process of its own (the instrumentation patches LangChain for the whole process, past `uninstrument`):
    the agent instrumented by opentelemetry-instrumentation-langchain, its spans written as OTLP JSON lines and by the
    SDK's ConsoleSpanExporter, and fed live through `GuardSpanProcessor` into a recording Guard."""
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    provider = TracerProvider()
    LangchainInstrumentor().instrument(tracer_provider=provider)
    console = (directory / "console.json").open("w", encoding="utf-8")
    guard, processor = live_processor(f"sqlite:///{directory / 'live.db'}")
    for sink in (SimpleSpanProcessor(OtlpJsonLines(directory / "spans.jsonl")),
                 SimpleSpanProcessor(ConsoleSpanExporter(out=console)), processor):
        provider.add_span_processor(sink)
    try:
        run_langchain_agent(["Paris", "Rome"])
    finally:
        provider.shutdown()
        console.close()
        guard.close()


def test_langchain_instrumentation_spans_import_with_the_results_the_model_read(tmp_path: Path, capsys):
    pytest.importorskip("opentelemetry.instrumentation.langchain",
                        reason="opentelemetry-instrumentation-langchain is not installed")
    done = subprocess.run([sys.executable, "-c", "from pathlib import Path; from tests.test_import_otlp import "
                           f"record_instrumented_langchain as run; run(Path({str(tmp_path)!r}))"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    otlp_file, console_file, live = tmp_path / "spans.jsonl", tmp_path / "console.json", f"sqlite:///{tmp_path / 'live.db'}"

    imported = f"sqlite:///{tmp_path / 'imported.db'}"
    code, out, err = import_otlp(capsys, str(otlp_file), "-o", imported)
    assert code == 0, err
    recorded, read_back = step_bodies(live), step_bodies(imported)
    assert len(read_back) == 2 and read_back == recorded
    paris = next(steps for steps in read_back.values() if "Paris" in steps[0]["text"])
    assert [s["kind"] for s in paris] == ["tool_call", "tool_call", "final"]
    # The instrumentation wraps gen_ai.tool.call.result in its own JSON; the step keeps what the model read.
    assert paris[0]["text"] == 'Let me look. [weather({"city": "Paris"}) -> {"city": "Paris", "celsius": 18}]'
    assert paris[1]["tool_events"][0]["result"] == "64.4" and paris[2]["text"] == "It is 64.4F in Paris."
    runs = runs_json(imported, capsys)
    assert {r["framework"] for r in runs} == {"langchain"}
    assert sorted(r["task"] for r in runs) == ["How warm is Paris in Fahrenheit?", "How warm is Rome in Fahrenheit?"]

    # The same spans as the SDK's ConsoleSpanExporter printed them (pretty JSON, one after another): the same
    # steps, but for latencies (its times are in microseconds).
    code, _, err = import_otlp(capsys, str(console_file), "-o", str(tmp_path / "from-console"))
    assert code == 0, err

    def without_latency(bodies: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        return {key: [{k: v for k, v in s.items() if k != "latency_s"} | {"tool_events": [
            {k: v for k, v in e.items() if k != "latency_s"} for e in s["tool_events"]]} for s in steps]
            for key, steps in bodies.items()}

    assert without_latency(step_bodies(str(tmp_path / "from-console"))) == without_latency(read_back)


def test_span_records_in_a_json_array_are_read_too(tmp_path: Path, capsys):
    """The flat records `traces/demo.py` writes to spans.json (a JSON array), from real SDK spans."""
    provider, records = TracerProvider(), []

    class Records(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            for span in spans:
                context = span.get_span_context()
                records.append({"name": span.name, "trace_id": f"{context.trace_id:032x}",
                                "span_id": f"{context.span_id:016x}",
                                "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
                                "start_time_unix_nano": span.start_time, "end_time_unix_nano": span.end_time,
                                "status": span.status.status_code.name, "attributes": dict(span.attributes or {})})
            return SpanExportResult.SUCCESS

    provider.add_span_processor(SimpleSpanProcessor(Records()))
    tracer = provider.get_tracer("someone.elses.agent")
    with tracer.start_as_current_span("invoke_agent helper", attributes={"gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span("execute_tool lookup", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "l1",
                "gen_ai.tool.call.arguments": '{"q": "x"}', "gen_ai.tool.call.result": "found",
                "gen_ai.conversation.id": "conv-7"}):
            pass
    (tmp_path / "spans.json").write_text(json.dumps(records, indent=1))

    code, out, err = import_otlp(capsys, str(tmp_path / "spans.json"), "-o", str(tmp_path / "runs"))
    assert code == 0, err
    steps = step_bodies(str(tmp_path / "runs"))["conv-7"]  # grouped by the conversation id
    assert steps[0]["text"] == '[lookup({"q": "x"}) -> found]'


# ----------------------------------------------------------------------------- hostile span files
def spans_line(attributes: dict[str, Any], *, name: str = "execute_tool lookup") -> str:
    """One OTLP JSON export line of one real SDK span (its own trace) with these attributes."""
    out = io.StringIO()
    provider = TracerProvider()

    class Line(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            out.write(json_format.MessageToJson(encoder.encode_spans(spans), indent=None))
            return SpanExportResult.SUCCESS

    provider.add_span_processor(SimpleSpanProcessor(Line()))
    with provider.get_tracer("agent").start_as_current_span(name, attributes=attributes):
        pass
    return out.getvalue()


def test_a_hostile_span_file_gives_one_problem_per_bad_item_and_the_rest_is_imported(tmp_path: Path, capsys,
                                                                                      monkeypatch):
    from guardrail.app.importers import otlp

    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "l1",
            "gen_ai.tool.call.arguments": '{"q": "x"}'}
    good = spans_line({**tool, "gen_ai.tool.call.result": "found", "gen_ai.conversation.id": "good"})
    huge_result = spans_line({**tool, "gen_ai.tool.call.result": "r" * 3_000_000, "gen_ai.conversation.id": "long"})
    deep_arguments = spans_line({**tool, "gen_ai.tool.call.arguments": "[" * 200 + "]" * 200,
                                 "gen_ai.conversation.id": "deep-args"})
    huge_messages = spans_line({"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "huge-chat",
                                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                                    {"type": "text", "content": "w" * 2_000_000}]}])}, name="chat m")
    kvlist: dict[str, Any] = {"stringValue": "leaf"}
    for _ in range(100):
        kvlist = {"kvlistValue": {"values": [{"key": "k", "value": kvlist}]}}
    nested_attribute = json.loads(good)
    span = nested_attribute["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"].append({"key": "deep", "value": kvlist})
    span["traceId"] = "ab" * 16
    no_ids = json.loads(good)
    del no_ids["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    two_spans = json.loads(spans_line({**tool, "gen_ai.conversation.id": "second"}))
    two_spans["resourceSpans"][0]["scopeSpans"][0]["spans"].append({"spanId": "x", "name": "no trace"})
    not_a_time = json.loads(spans_line({**tool, "gen_ai.conversation.id": "no-end"}))
    not_a_time["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["endTimeUnixNano"] = "END"
    monkeypatch.setattr(otlp, "MAX_LINE_BYTES", 6_000_000)
    lines = [
        good,                                          # 1: imported
        "{not json",                                   # 2: not JSON
        "[" * 100_000 + "]" * 100_000,                 # 3: nested far too deep to parse
        json.dumps({"hello": "world"}),                # 4: JSON, but no spans
        json.dumps(nested_attribute),                  # 5: one span, an attribute nested 100 deep
        json.dumps(no_ids),                            # 6: a span without a trace id
        deep_arguments,                                # 7: the episode of a span whose arguments nest 200 deep
        huge_messages,                                 # 8: the episode of a chat span with 2 MB of output messages
        huge_result,                                   # 9: imported: a 3 MB tool result is capped like any result
        json.dumps(two_spans),                         # 10: one good span imported, one without ids
        "x" * 7_000_000,                               # 11: a line over the limit
        json.dumps({"resourceSpans": "not a list"}),   # 12: an export that is not one
        json.dumps(not_a_time).replace('"END"', "NaN"),       # 13: a span ending at NaN (found by make fuzz)
        json.dumps(not_a_time).replace('"END"', "Infinity"),  # 14: and at infinity
    ]
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n")

    store = str(tmp_path / "runs")
    code, out, err = import_otlp(capsys, str(path), "-o", store, "--json")
    assert code == 1
    report = json.loads(out)
    assert sorted(report["episodes"]) == ["good", "long", "second"]
    problems = report["problems"]
    where = sorted(p.split(": ", 1)[0] for p in problems)
    assert where == sorted([f"{path}:2", f"{path}:3", f"{path}:4", f"{path}:5", f"{path}:6", "deep-args", "huge-chat",
                            f"{path}:10", f"{path}:11", f"{path}:12", f"{path}:13", f"{path}:14"]), problems
    text = "\n".join(problems)
    assert "not valid JSON" in text and "nested deeper than 512 levels" in text and "not an OTLP export" in text
    assert "nests deeper than 64 levels: span skipped" in text and "no trace id: span skipped" in text
    assert "gen_ai.tool.call.arguments nests deeper than 64" in text and "more than the 1048576 read" in text
    assert "line longer than 6000000 bytes" in text
    assert "end time is nan, not a time" in text and "end time is inf, not a time" in text
    long_step = step_bodies(store)["long"][0]["tool_events"][0]
    assert len(long_step["result"]) == 20_000 and long_step["result_truncated"] is True


def test_missing_files_and_stores_are_clear_errors(tmp_path: Path, capsys):
    code, out, err = import_otlp(capsys, str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "runs"))
    assert code == 1 and "imported 0 episode(s)" in out and "no such file" in err
    (tmp_path / "spans.jsonl").write_text("")
    code, _, err = import_otlp(capsys, str(tmp_path / "spans.jsonl"), "-o", "mysql://x/y")
    assert code == 2 and "unknown store URL" in err


# ----------------------------------------------------------------------------- fuzz
def _otlp_exports() -> Any:
    from hypothesis import strategies as st

    from tests.fuzzing import json_values, nasty_text

    keys = st.sampled_from(["gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id",
                            "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.output.messages",
                            "gen_ai.input.messages", "gen_ai.conversation.id", "gen_ai.usage.output_tokens"]) | nasty_text
    strings = st.sampled_from(["chat", "execute_tool", '[{"role": "assistant", "parts": [{"type": "tool_call"}]}]',
                               '{"q": 1}']) | nasty_text | json_values.map(json.dumps)
    any_value = (st.builds(lambda v: {"stringValue": v}, strings) | st.builds(lambda v: {"intValue": v}, json_values)
                 | st.builds(lambda v: {"kvlistValue": {"values": v}}, st.lists(json_values, max_size=3)) | json_values)
    ids = st.sampled_from(["ab" * 16, "cd" * 8, "q83v", ""]) | json_values
    span = st.fixed_dictionaries({"traceId": ids, "spanId": ids, "name": st.sampled_from(["chat m", "execute_tool t"])
                                  | nasty_text, "startTimeUnixNano": json_values, "endTimeUnixNano": json_values,
                                  "status": json_values,
                                  "attributes": st.lists(st.fixed_dictionaries({"key": keys, "value": any_value}),
                                                         max_size=5) | json_values})
    scope = st.fixed_dictionaries({"scope": json_values, "spans": st.lists(span, max_size=3) | json_values})
    export = st.fixed_dictionaries({"resourceSpans": st.lists(st.fixed_dictionaries(
        {"scopeSpans": st.lists(scope, max_size=2) | json_values}), max_size=2) | json_values})
    return st.lists(export | json_values, min_size=1, max_size=5)


@pytest.mark.fuzz
def test_fuzzed_span_files_never_raise_and_every_line_is_accounted_for(tmp_path_factory):
    from hypothesis import given

    from guardrail.app.importers import otlp_episodes
    from guardrail.core.corpus import CorpusIssue
    from guardrail.core.events import Episode
    from tests.fuzzing import FUZZ

    @FUZZ
    @given(_otlp_exports())
    def check(values: list[Any]) -> None:
        path = tmp_path_factory.mktemp("fuzz") / "spans.jsonl"
        path.write_text("\n".join(json.dumps(v) for v in values) + "\n")
        items = list(otlp_episodes([path]))
        assert all(isinstance(item, Episode | CorpusIssue) for item in items)

    check()
