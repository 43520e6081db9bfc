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

How spans become steps is `adapters.genai_spans` (shared with ``guardrail import otlp``, which reads
the same spans back from a file), so a recorded run and an imported one have the same steps.

The guard's own spans (``guardrail.*``) are ignored, so a Guard may share the tracer provider.

Like OpenTelemetry's ``BatchSpanProcessor``, ``on_end`` only puts the span on a bounded queue
(``max_queue_size``); one worker thread runs the Guard on it. The instrumented code never waits
for a layer: under overload the newest spans are dropped and counted (``dropped_spans``, logged
once per burst). ``force_flush`` waits until the queue is drained; ``shutdown`` drains it, stops
the worker and finishes every open episode.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from adapters.common import call_action, safe_decision, with_problem
from adapters.genai_spans import (
    CHAT_OPERATIONS,
    SpanSteps,
    finished_step,
    is_guard_span,
    operation_of,
    tool_call_of,
)
from guardrail.core.events import Decision, Result, Step, Verdict
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext

__all__ = ["GuardSpanProcessor", "operation_of"]

_log = logging.getLogger("guardrail.adapters")
_STOP = object()  # the worker's end-of-queue marker


def _ids(span: ReadableSpan) -> tuple[int, int]:
    context = span.get_span_context()
    return (context.trace_id, context.span_id) if context is not None else (0, 0)


@dataclass
class _Trace:
    ctx: EpisodeContext
    root_span_id: int | None = None
    steps: SpanSteps = field(default_factory=SpanSteps)
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
        if self._closed or is_guard_span(span):
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

    def _feed(self, state: _Trace, ready: list[Step]) -> None:
        for pending in ready:
            step = finished_step(pending, state.ctx.step_index, state.ctx.task)
            decision = safe_decision("on_step", lambda: self.guard.on_step(state.ctx, step))  # noqa: B023 - called now
            if decision.verdict is not Verdict.ALLOW:
                state.decisions.append(decision)

    def _finish(self, trace_id: int) -> None:
        with self._lock:
            state = self._traces.pop(trace_id, None)
            self._roots.pop(trace_id, None)
        if state is None:
            return  # a trace with no GenAI span: nothing was started
        self._feed(state, state.steps.take(final=True))
        decision = safe_decision("on_finish", lambda: self.guard.on_finish(state.ctx))
        self.finished.append((state.ctx.episode_id, decision))

    # ----------------------------------------------------------------- spans
    def _consume(self, span: ReadableSpan) -> None:
        trace_id, span_id = _ids(span)
        operation = operation_of(span)
        with self._lock:
            is_root = self._roots.get(trace_id) == span_id
        if operation in CHAT_OPERATIONS:
            state = self._trace(span)
            with state.ctx.lock:
                self._feed(state, state.steps.chat(span))  # a new model call: earlier steps are complete
        elif operation == "execute_tool":
            self._tool(self._trace(span), span)
        if is_root:  # the trace's local root ended: the run is over
            self._finish(trace_id)

    def _tool(self, state: _Trace, span: ReadableSpan) -> None:
        call = tool_call_of(span)
        action, problem = call_action(call.name, call.args if isinstance(call.args, dict) else {}, call.call_id)
        result = Result(output=call.output, is_error=call.failed, call_id=action.call_id, latency_s=call.latency_s)
        ctx = state.ctx
        before = with_problem(safe_decision("before_action", lambda: self.guard.before_action(ctx, action)),
                              problem, self.guard, ctx)
        for decision in (before,
                         safe_decision("after_result", lambda: self.guard.after_result(ctx, action, result))):
            if decision.verdict is not Verdict.ALLOW:
                state.decisions.append(decision)
        with ctx.lock:
            self._feed(state, state.steps.tool(call))

    def decisions(self, episode_id: str) -> list[Decision]:
        """Non-allow decisions of a running episode (finished ones are in `finished`)."""
        with self._lock:
            for state in self._traces.values():
                if state.ctx.episode_id == episode_id:
                    return list(state.decisions)
        return []
