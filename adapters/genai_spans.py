"""GenAI spans (the OpenTelemetry semantic conventions) as guard steps: what the live span processor and the OTLP importer share.

A ``chat`` span (a model call) is a step: its words and tool calls from ``gen_ai.output.messages``
when the instrumentation records content. An ``execute_tool`` span is one tool call: it fills the
call its model step announced (by call id, else by name), or is a step of its own when no model
span announced it. The call keeps the arguments and id the model span announced (an
instrumentation may wrap what it puts on the tool span in its own envelope). A model call's
``gen_ai.input.messages`` carry the ``tool_call_response`` parts the model read: they are the
results of the calls before it (for the same reason, they win over ``gen_ai.tool.call.result``). `SpanSteps` holds one
trace's pending steps and hands them out, in order, once they are complete; `finished_step` gives
each the corpora's shape through `adapters.steps.build_step`, so a step fed live by
`GuardSpanProcessor` and one imported from a span file by `guardrail import otlp` are the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from adapters.steps import RESULT_CAP, build_step, tool_event
from guardrail.core import spans as tm
from guardrail.core.events import Step, StepKind, ToolEvent

__all__ = [
    "CHAT_OPERATIONS",
    "MAX_ATTRIBUTE_CHARS",
    "OPERATIONS",
    "SpanSteps",
    "ToolCallSpan",
    "finished_step",
    "is_guard_span",
    "model_step",
    "operation_of",
    "parse_json_attribute",
    "tool_call_of",
]

GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_COMPLETION = "gen_ai.completion"  # older instrumentations: the completion text
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ERROR_TYPE = "error.type"
MAX_ATTRIBUTE_CHARS = 1 << 20  # content attributes longer than this are not parsed (bounded work)
OPERATIONS = ("chat", "execute_tool", "invoke_agent", "text_completion", "generate_content")
CHAT_OPERATIONS = ("chat", "text_completion", "generate_content")


def operation_of(span: ReadableSpan) -> str | None:
    """The GenAI operation of a span (attribute first, then the conventional span-name prefix)."""
    attributes = span.attributes or {}
    value = attributes.get(tm.GEN_AI_OPERATION_NAME)
    if isinstance(value, str):
        return value
    first = span.name.split(" ", 1)[0]
    return first if first in OPERATIONS else None


def is_guard_span(span: ReadableSpan) -> bool:
    """A span the guard itself emitted (``guardrail.*``): never a step of the agent's, even on a shared provider."""
    scope = span.instrumentation_scope
    return span.name.startswith("guardrail.") or (scope is not None and scope.name == tm.TRACER_NAME)


def parse_json_attribute(value: Any) -> Any:
    """A JSON-text attribute parsed, or None (not text, longer than `MAX_ATTRIBUTE_CHARS`, junk, nested too deep)."""
    if not isinstance(value, str) or len(value) > MAX_ATTRIBUTE_CHARS:
        return None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):  # junk, or nested past the parser's limit: nothing to read
        return None


def _seconds(span: ReadableSpan) -> float | None:
    if span.start_time is None or span.end_time is None:
        return None
    return (span.end_time - span.start_time) / 1e9


def _parts(messages: Any, role: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or (role is not None and message.get("role") != role):
            continue
        out += [part for part in message.get("parts") or [] if isinstance(part, dict)]
    return out


def model_step(span: ReadableSpan) -> Step:
    """A chat span as a pending step: its words and announced tool calls from gen_ai.output.messages when recorded.

    Until `finished_step`, ``text`` holds the model's words and ``latency_s`` the model call's own duration.
    """
    attributes = span.attributes or {}
    texts: list[str] = []
    events: list[ToolEvent] = []
    for part in _parts(parse_json_attribute(attributes.get(GEN_AI_OUTPUT_MESSAGES))):
        if part.get("type") == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif part.get("type") == "tool_call":
            args = part.get("arguments")
            events.append(tool_event(str(part.get("id") or ""), str(part.get("name") or "tool"),
                                     parse_json_attribute(args) if isinstance(args, str) else (args or {}), None))
    completion = attributes.get(GEN_AI_COMPLETION)
    if not texts and isinstance(completion, str):
        texts.append(completion[:MAX_ATTRIBUTE_CHARS])
    tokens = attributes.get(GEN_AI_USAGE_OUTPUT_TOKENS)
    return Step(index=0, kind=StepKind.TOOL_CALL if events else StepKind.TEXT, text="\n".join(texts),
                tool_events=events, output_tokens=int(tokens) if isinstance(tokens, int) else None,
                latency_s=_seconds(span), meta={"span": span.name})


def tool_responses(span: ReadableSpan) -> dict[str, str]:
    """Call id -> the tool response the model read, from a chat span's gen_ai.input.messages."""
    out: dict[str, str] = {}
    for part in _parts(parse_json_attribute((span.attributes or {}).get(GEN_AI_INPUT_MESSAGES))):
        if part.get("type") != "tool_call_response" or not part.get("id"):
            continue
        response = part.get("response")
        out[str(part["id"])] = response if isinstance(response, str) else json.dumps(response, default=str)
    return out


def first_user_text(span: ReadableSpan) -> str | None:
    """The first user text a chat span's gen_ai.input.messages carry (the run's task, when the run starts there)."""
    for part in _parts(parse_json_attribute((span.attributes or {}).get(GEN_AI_INPUT_MESSAGES)), role="user"):
        if part.get("type") == "text" and isinstance(part.get("content"), str) and part["content"].strip():
            return str(part["content"])
    return None


@dataclass(frozen=True)
class ToolCallSpan:
    """What an execute_tool span says about its call: name, call id, arguments (None: not recorded), output, error."""

    name: str
    call_id: str | None
    args: Any
    output: str
    failed: bool
    latency_s: float | None
    span_name: str = ""

    def event(self) -> ToolEvent:
        return tool_event(self.call_id, self.name, self.args if self.args is not None else {}, self.output,
                          is_error=self.failed, latency_s=self.latency_s)


def tool_call_of(span: ReadableSpan) -> ToolCallSpan:
    """An execute_tool span's call (gen_ai.tool.name, .call.id, .call.arguments, .call.result; error status)."""
    attributes = span.attributes or {}
    name = str(attributes.get(tm.GEN_AI_TOOL_NAME) or span.name.removeprefix("execute_tool ").strip() or "tool")
    call_id = attributes.get(tm.GEN_AI_TOOL_CALL_ID)
    raw_args = attributes.get(tm.GEN_AI_TOOL_CALL_ARGUMENTS)
    output = attributes.get(tm.GEN_AI_TOOL_CALL_RESULT)
    failed = span.status.status_code is StatusCode.ERROR or ERROR_TYPE in attributes
    text = output if isinstance(output, str) else (span.status.description or "" if failed else "")
    return ToolCallSpan(name=name, call_id=str(call_id) if call_id is not None else None,
                        args=parse_json_attribute(raw_args) if isinstance(raw_args, str) else None,
                        output=text[:MAX_ATTRIBUTE_CHARS], failed=failed, latency_s=_seconds(span),
                        span_name=span.name)


def _answered(event: ToolEvent, response: str) -> ToolEvent:
    return event.model_copy(update={"result": response[:RESULT_CAP], "result_chars": len(response),
                                    "result_truncated": len(response) > RESULT_CAP})


class SpanSteps:
    """One trace's pending steps, fed its GenAI spans in the order they ended; hands out the complete ones in order."""

    def __init__(self) -> None:
        self.pending: list[Step] = []

    def chat(self, span: ReadableSpan) -> list[Step]:
        """A model call: the steps before it are complete (their results are what this call read)."""
        responses = tool_responses(span)
        for step in self.pending:
            step.tool_events = [_answered(e, responses[e.id]) if e.id in responses else e for e in step.tool_events]
        done = self.take(final=False)
        self.pending.append(model_step(span))
        return done

    def tool(self, call: ToolCallSpan) -> list[Step]:
        """A tool call: it fills the call its model step announced, or is a step of its own (the steps before it done)."""
        event = call.event()
        owner = next((s for s in reversed(self.pending) if s.kind is StepKind.TOOL_CALL), None)
        match = None
        if owner is not None:
            match = next((i for i, e in enumerate(owner.tool_events)
                          if (call.call_id and e.id == call.call_id)
                          or (not call.call_id and e.name == call.name and e.result is None)), None)
        if owner is not None and match is not None:
            announced = owner.tool_events[match]
            # The call as the model made it (its arguments and id) when its model span recorded them: an
            # instrumentation may wrap the arguments it puts on the tool span in its own envelope.
            owner.tool_events[match] = event.model_copy(update={
                "args": announced.args if announced.args or call.args is None else event.args,
                "id": announced.id or event.id})
            return []
        done = self.take(final=False)
        self.pending.append(Step(index=0, kind=StepKind.TOOL_CALL, tool_events=[event],
                                 meta={"span": call.span_name}))
        return done

    def take(self, *, final: bool) -> list[Step]:
        """Every pending step, in order; at the end of the run (`final`) a last step with no call is the answer."""
        out, self.pending = self.pending, []
        if final and out and out[-1].kind is StepKind.TEXT:
            out[-1].kind = StepKind.FINAL
        return out


def finished_step(pending: Step, index: int, task: str | None = None) -> Step:
    """A complete pending step in the corpora's shape (words + calls, latency = model + tools)."""
    return build_step(index, content=pending.text, events=pending.tool_events, model_latency_s=pending.latency_s,
                      output_tokens=pending.output_tokens, task=task, meta=pending.meta,
                      final=pending.kind is StepKind.FINAL)
