"""OpenTelemetry ingestion: a `SpanProcessor` that turns GenAI spans (chat, execute_tool, invoke_agent) into guard steps.

    provider.add_span_processor(GuardSpanProcessor(guard))

Any agent instrumented with the GenAI semantic conventions (AutoGen's built-in tracing included)
is then monitored without touching its code. One trace is one episode: it starts with the first
GenAI span of the trace and finishes when the trace's local root span ends.

- a ``chat`` span (a model call) becomes a step: its text and tool calls from
  ``gen_ai.output.messages`` when the instrumentation records content;
- an ``execute_tool`` span is a tool call: it goes through ``before_action`` and
  ``after_result`` (after the fact: spans end once the tool ran, so this is report-only) and is
  attached to the pending model step, or becomes its own step when no chat span announced it;
- the end of the trace feeds what is pending and runs ``on_finish``.

The guard's own spans (``guardrail.*``) are ignored, so a Guard may share the tracer provider.

Like OpenTelemetry's ``BatchSpanProcessor``, ``on_end`` only puts the span on a bounded queue
(``max_queue_size``); one worker thread runs the Guard on it. The instrumented code never waits
for a layer: under overload the newest spans are dropped and counted (``dropped_spans``, logged
once per burst). ``force_flush`` waits until the queue is drained; ``shutdown`` drains it, stops
the worker and finishes every open episode.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from adapters.common import call_action, safe_decision, with_problem
from adapters.steps import build_step, tool_event
from guardrail.core import spans as tm
from guardrail.core.events import Decision, Result, Step, StepKind, ToolEvent, Verdict
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext

__all__ = ["GuardSpanProcessor", "operation_of"]

_log = logging.getLogger("guardrail.adapters")
_STOP = object()  # the worker's end-of-queue marker

GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_COMPLETION = "gen_ai.completion"  # older instrumentations: the completion text
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ERROR_TYPE = "error.type"
MAX_ATTRIBUTE_CHARS = 1 << 20  # content attributes longer than this are not parsed (bounded work)
OPERATIONS = ("chat", "execute_tool", "invoke_agent", "text_completion", "generate_content")


def operation_of(span: ReadableSpan) -> str | None:
    """The GenAI operation of a span (attribute first, then the conventional span-name prefix)."""
    attributes = span.attributes or {}
    value = attributes.get(tm.GEN_AI_OPERATION_NAME)
    if isinstance(value, str):
        return value
    first = span.name.split(" ", 1)[0]
    return first if first in OPERATIONS else None


def _json(value: Any) -> Any:
    if not isinstance(value, str) or len(value) > MAX_ATTRIBUTE_CHARS:
        return None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):  # junk, or nested past the parser's limit: no arguments to read
        return None


def _model_step(span: ReadableSpan) -> Step:
    """A chat span as a step: text and tool calls from gen_ai.output.messages when recorded."""
    attributes = span.attributes or {}
    texts: list[str] = []
    events: list[ToolEvent] = []
    messages = _json(attributes.get(GEN_AI_OUTPUT_MESSAGES))
    for message in messages if isinstance(messages, list) else []:
        for part in (message.get("parts") or []) if isinstance(message, dict) else []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and isinstance(part.get("content"), str):
                texts.append(part["content"])
            elif part.get("type") == "tool_call":
                args = part.get("arguments")
                events.append(tool_event(str(part.get("id") or ""), str(part.get("name") or "tool"),
                                         _json(args) if isinstance(args, str) else (args or {}), None))
    completion = attributes.get(GEN_AI_COMPLETION)
    if not texts and isinstance(completion, str):
        texts.append(completion[:MAX_ATTRIBUTE_CHARS])
    tokens = attributes.get(GEN_AI_USAGE_OUTPUT_TOKENS)
    return Step(index=0, kind=StepKind.TOOL_CALL if events else StepKind.TEXT, text="\n".join(texts),
                tool_events=events, output_tokens=int(tokens) if isinstance(tokens, int) else None,
                latency_s=_seconds(span), meta={"span": span.name})


def _ids(span: ReadableSpan) -> tuple[int, int]:
    context = span.get_span_context()
    return (context.trace_id, context.span_id) if context is not None else (0, 0)


def _seconds(span: ReadableSpan) -> float | None:
    if span.start_time is None or span.end_time is None:
        return None
    return (span.end_time - span.start_time) / 1e9


@dataclass
class _Trace:
    ctx: EpisodeContext
    root_span_id: int | None = None
    pending: list[Step] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)


class GuardSpanProcessor(SpanProcessor):
    """Feeds a Guard from finished GenAI spans on a worker thread; one trace is one episode. Never raises into the tracer."""

    def __init__(self, guard: Guard, *, framework: str | None = None, max_queue_size: int = 2048) -> None:
        if max_queue_size < 1:
            raise ValueError(f"max_queue_size must be at least 1, got {max_queue_size}")
        self.guard = guard
        self.framework = framework
        self.finished: list[tuple[str, Decision]] = []  # (episode id, on_finish decision), in order
        self.dropped_spans = 0  # spans refused because the queue was full (the agent never waits)
        self._traces: dict[int, _Trace] = {}
        self._roots: dict[int, int] = {}  # trace id -> the span id of its local root
        self._lock = threading.RLock()
        self._queue: queue.Queue[Any] = queue.Queue(max_queue_size)
        self._warned = False
        self._closed = False
        self._worker = threading.Thread(target=self._work, name="guardrail-span-processor", daemon=True)
        self._worker.start()

    # ----------------------------------------------------------------- SpanProcessor
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        parent = span.parent
        if parent is None or parent.is_remote:
            trace_id, span_id = _ids(span)
            with self._lock:
                self._roots.setdefault(trace_id, span_id)

    def on_end(self, span: ReadableSpan) -> None:
        if self._closed or span.name.startswith("guardrail.") or (
                span.instrumentation_scope is not None and span.instrumentation_scope.name == tm.TRACER_NAME):
            return
        try:
            self._queue.put_nowait(span)
        except queue.Full:
            self.dropped_spans += 1
            if not self._warned:  # once per burst: a log line per dropped span would add to the overload
                self._warned = True
                _log.warning("guardrail span processor: queue full (%d spans), dropping spans; "
                             "raise max_queue_size or give the guard more CPU", self._queue.maxsize)
        except Exception:  # noqa: BLE001 - a span processor must never break the instrumented agent
            pass

    def _work(self) -> None:
        while True:
            span = self._queue.get()
            try:
                if span is _STOP:
                    return
                self._consume(span)
            except Exception:  # noqa: BLE001 - one bad span never stops the worker
                _log.debug("guardrail span processor: a span could not be consumed", exc_info=True)
            finally:
                self._queue.task_done()
                if self._warned and self._queue.qsize() == 0:
                    self._warned = False

    def shutdown(self) -> None:
        if self._closed:
            return
        self.force_flush()
        self._closed = True
        self._queue.put(_STOP)
        self._worker.join(timeout=30)
        with self._lock:
            trace_ids = list(self._traces)
        for trace_id in trace_ids:
            self._finish(trace_id)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every queued span went through the Guard (False when `timeout_millis` ran out first)."""
        deadline = time.monotonic() + timeout_millis / 1000
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline or not self._worker.is_alive():
                return False
            time.sleep(0.001)
        return True

    # ----------------------------------------------------------------- episodes
    def _trace(self, span: ReadableSpan) -> _Trace:
        trace_id = _ids(span)[0]
        with self._lock:
            state = self._traces.get(trace_id)
            if state is None:
                ctx = self.guard.start_episode(f"trace-{trace_id:032x}", framework=self.framework)
                state = _Trace(ctx, self._roots.get(trace_id))
                self._traces[trace_id] = state
            return state

    def _feed(self, state: _Trace, pending: Step) -> None:
        # Until now `pending.text` held the model's words and `latency_s` the model call's own duration.
        step = build_step(state.ctx.step_index, content=pending.text, events=pending.tool_events,
                          model_latency_s=pending.latency_s, output_tokens=pending.output_tokens,
                          task=state.ctx.task, meta=pending.meta, final=pending.kind is StepKind.FINAL)
        decision = safe_decision("on_step", lambda: self.guard.on_step(state.ctx, step))
        if decision.verdict is not Verdict.ALLOW:
            state.decisions.append(decision)

    def _flush(self, state: _Trace, *, final: bool) -> None:
        while state.pending:
            step = state.pending.pop(0)
            if final and not state.pending and step.kind is StepKind.TEXT:
                step.kind = StepKind.FINAL
            self._feed(state, step)

    def _finish(self, trace_id: int) -> None:
        with self._lock:
            state = self._traces.pop(trace_id, None)
            self._roots.pop(trace_id, None)
        if state is None:
            return  # a trace with no GenAI span: nothing was started
        self._flush(state, final=True)
        decision = safe_decision("on_finish", lambda: self.guard.on_finish(state.ctx))
        self.finished.append((state.ctx.episode_id, decision))

    # ----------------------------------------------------------------- spans
    def _consume(self, span: ReadableSpan) -> None:
        trace_id, span_id = _ids(span)
        operation = operation_of(span)
        with self._lock:
            is_root = self._roots.get(trace_id) == span_id
        if operation in ("chat", "text_completion", "generate_content"):
            state = self._trace(span)
            with state.ctx.lock:
                self._flush(state, final=False)  # a new model call: earlier steps are complete
                state.pending.append(_model_step(span))
        elif operation == "execute_tool":
            self._tool(self._trace(span), span)
        if is_root:  # the trace's local root ended: the run is over
            self._finish(trace_id)

    def _tool(self, state: _Trace, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        name = str(attributes.get(tm.GEN_AI_TOOL_NAME) or span.name.removeprefix("execute_tool ").strip() or "tool")
        call_id = attributes.get(tm.GEN_AI_TOOL_CALL_ID)
        call_id = str(call_id) if call_id is not None else None
        raw_args = attributes.get(tm.GEN_AI_TOOL_CALL_ARGUMENTS)
        args = _json(raw_args) if isinstance(raw_args, str) else None
        output = attributes.get(tm.GEN_AI_TOOL_CALL_RESULT)
        failed = span.status.status_code is StatusCode.ERROR or ERROR_TYPE in attributes
        text = output if isinstance(output, str) else (span.status.description or "" if failed else "")
        action, problem = call_action(name, args if isinstance(args, dict) else {}, call_id)
        result = Result(output=text[:MAX_ATTRIBUTE_CHARS], is_error=failed, call_id=action.call_id,
                        latency_s=_seconds(span))
        ctx = state.ctx
        before = with_problem(safe_decision("before_action", lambda: self.guard.before_action(ctx, action)),
                              problem, self.guard, ctx)
        for decision in (before,
                         safe_decision("after_result", lambda: self.guard.after_result(ctx, action, result))):
            if decision.verdict is not Verdict.ALLOW:
                state.decisions.append(decision)
        event = tool_event(call_id, name, args if args is not None else {}, result.output, is_error=failed,
                           latency_s=result.latency_s)
        with ctx.lock:
            owner = next((s for s in reversed(state.pending) if s.kind is StepKind.TOOL_CALL), None)
            match = None
            if owner is not None:
                match = next((i for i, e in enumerate(owner.tool_events)
                              if (call_id and e.id == call_id) or (not call_id and e.name == name and e.result is None)),
                             None)
            if owner is not None and match is not None:
                announced = owner.tool_events[match]
                owner.tool_events[match] = event.model_copy(update={"args": announced.args if args is None
                                                                     else event.args})
            else:  # no model span announced this call: it is a step of its own
                self._flush(state, final=False)
                state.pending.append(Step(index=0, kind=StepKind.TOOL_CALL, tool_events=[event],
                                          meta={"span": span.name}))

    def decisions(self, episode_id: str) -> list[Decision]:
        """Non-allow decisions of a running episode (finished ones are in `finished`)."""
        with self._lock:
            for state in self._traces.values():
                if state.ctx.episode_id == episode_id:
                    return list(state.decisions)
        return []
