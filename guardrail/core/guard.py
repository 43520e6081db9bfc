"""The Guard pipeline: runs each layer's hook in order, turns layer errors into findings, decides, traces."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from guardrail.core import spans as tm
from guardrail.core.events import (
    Action,
    Decision,
    Episode,
    Finding,
    Result,
    Severity,
    Step,
    StepKind,
    Verdict,
)
from guardrail.core.layer import EpisodeContext, Layer
from guardrail.core.metrics import GuardMetrics

if TYPE_CHECKING:
    from guardrail.core.runstore.recorder import RunRecorder

__all__ = ["ON_ALARM", "Guard", "GuardError", "Mode", "OnAlarm"]

_log = logging.getLogger("guardrail")

Mode = Literal["report", "intervene"]
OnAlarm = Literal["warn", "stop", "repair"]
ON_ALARM: tuple[OnAlarm, ...] = ("warn", "stop", "repair")
# Verdicts ranked by how much they ask of the adapter, for "at least" (the end-of-run alarm policy).
_RANK = {Verdict.ALLOW: 0, Verdict.WARN: 1, Verdict.ALARM: 2, Verdict.REPAIR: 3, Verdict.BLOCK: 4}
Hook = Literal["before_action", "after_result", "on_step", "on_finish"]


class GuardError(Exception):
    """A misuse of the Guard API (unknown episode, bad mode); never raised for what an agent proposes."""


class Guard:
    """Holds the layers and runs them for every hook of every episode.

    ``mode="report"`` only records: decisions are allow / warn / alarm. ``mode="intervene"``
    also enacts the conservative rule: a blocking finding before an action blocks it, a
    blocking finding after a result or at the end of a run asks for repair. A layer that
    raises becomes an ``internal_error`` finding and the pipeline goes on (fail-open); with
    ``fail_closed=True`` such an error blocks instead.

    Tool arguments and results, finding messages and exception messages are put on spans
    only when ``capture_content=True``, and then redacted and capped; without it a span says
    which checks fired and the exception type, never what the agent sent or got back.

    The async hooks (``abefore_action``...) never run a layer's blocking work on the event
    loop: a layer that overrides an async twin is awaited there (it promised not to block),
    and every run of consecutive sync-only layers goes to a worker thread in one hop, so gate
    probes leave the loop free. A layer marked ``offload = False`` (only short CPU work: the
    step monitor, the verifiers) runs on the loop, where it costs less than the hop, and so does
    a call its layer's `Layer.runs_inline` says is short CPU work (the gate: a call of the
    agent's own tool, checked against its schema alone). ``offload=False`` runs every sync
    layer inline.

    ``on_alarm`` is what a step-monitor alarm (a finding of severity ``alarm``) does to the run,
    read by every adapter: ``"warn"`` (default) lets it go on and makes the end-of-run verdict at
    least ``warn``; ``"stop"`` ends the run at the alarm (the end-of-run verdict is at least
    ``alarm``); ``"repair"`` in intervene mode also ends it there and makes the end-of-run verdict
    ``repair``, so the adapter's repair (rollback to before the alarm's onset) runs; in report mode
    it is ``alarm``. The end-of-run decision lists the alarms it was raised for.
    """

    def __init__(
        self,
        layers: Sequence[Layer] = (),
        *,
        mode: Mode = "report",
        fail_closed: bool = False,
        capture_content: bool = False,
        tracer: trace.Tracer | None = None,
        offload: bool = True,
        recorder: RunRecorder | None = None,
        tools: Mapping[str, dict[str, Any]] | None = None,
        meter: Any = None,
        on_alarm: OnAlarm = "warn",
    ) -> None:
        if mode not in ("report", "intervene"):
            raise GuardError(f"mode must be 'report' or 'intervene', got {mode!r}")
        if on_alarm not in ON_ALARM:
            raise GuardError(f"on_alarm must be one of {list(ON_ALARM)}, got {on_alarm!r}")
        names = [layer.name for layer in layers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise GuardError(f"two layers share the name {duplicates}: give each layer a distinct name")
        self.layers: list[Layer] = list(layers)
        self.mode: Mode = mode
        self.on_alarm: OnAlarm = on_alarm
        self.fail_closed = fail_closed
        self.capture_content = capture_content
        self.offload = offload
        self.recorder = recorder
        # The argument schemas of tools every episode may call (name -> JSON schema; an episode's own win).
        self.tools: dict[str, dict[str, Any]] = dict(tools or {})
        # A tracer from the global API follows whatever provider is set later (it is a proxy until then).
        self._tracer = tracer or tm.get_tracer()
        # Metrics through the global API unless a meter is given (a no-op until a MeterProvider is installed).
        self.metrics = GuardMetrics.for_meter(meter)
        if recorder is not None:
            self.metrics.watch_dropped(recorder)
        self._contexts: dict[str, EpisodeContext] = {}
        self._contexts_lock = threading.Lock()
        # Which layers implement which hook, computed once (the hot path skips the rest).
        self._by_hook: dict[str, list[Layer]] = {
            hook: [layer for layer in self.layers if layer.implements(hook)]
            for hook in ("before_action", "after_result", "on_step", "on_finish")
        }
        # The async path: each hook's layers cut into runs of (how they run, layers), in pipeline order.
        self._async_runs: dict[str, list[tuple[str, list[Layer]]]] = {
            hook: _async_runs(layers, hook) for hook, layers in self._by_hook.items()
        }
        # Span names and each (layer, hook)'s constant attributes, built once (the hot path copies them).
        self._span_names = {id(layer): f"guardrail.{layer.name}" for layer in self.layers}
        self._span_constants = {
            (id(layer), hook): {tm.GUARDRAIL_LAYER: layer.name, tm.GUARDRAIL_HOOK: hook, tm.GUARDRAIL_MODE: mode}
            for layer in self.layers for hook in ("before_action", "after_result", "on_step", "on_finish")
        }

    @property
    def stops_on_alarm(self) -> bool:
        """Whether an alarm ends the run where it fires (``on_alarm="stop"``, or ``"repair"`` in intervene mode)."""
        return self.on_alarm == "stop" or (self.on_alarm == "repair" and self.mode == "intervene")

    @property
    def repairs_alarms(self) -> bool:
        """Whether an alarm asks for repair (``on_alarm="repair"`` in intervene mode)."""
        return self.on_alarm == "repair" and self.mode == "intervene"

    # ----------------------------------------------------------------- episodes
    def start_episode(
        self,
        episode_id: str | None = None,
        *,
        task: str | None = None,
        framework: str | None = None,
        model: str | None = None,
        tools: Iterable[str] = (),
        meta: dict[str, Any] | None = None,
        tool_schemas: Mapping[str, dict[str, Any]] | None = None,
        record: bool = True,
    ) -> EpisodeContext:
        """Open an episode and return its context (pass it, or its id, to every hook).

        `tool_schemas` (tool name -> JSON schema of its arguments) are the tools this run declares; calls
        that break them are findings before the tool runs. Adapters declare the framework's tools themselves.
        ``record=False`` keeps the episode out of the run store (a repair fork's gate-only episode: the
        repair attempt itself is recorded).
        """
        episode = Episode(
            episode_id=episode_id or uuid.uuid4().hex,
            task=task,
            framework=framework,
            model=model,
            tools=list(tools),
            meta=dict(meta or {}),
        )
        ctx = EpisodeContext(self, episode)
        if tool_schemas:
            ctx.declare_tools(dict(tool_schemas))
        with self._contexts_lock:
            if episode.episode_id in self._contexts:
                raise GuardError(f"episode {episode.episode_id!r} is already running in this Guard")
            self._contexts[episode.episode_id] = ctx
        ctx.recorded = record and self.recorder is not None
        if ctx.recorded:
            self._record(lambda: self.recorder.begin(ctx, mode=self.mode, layers=self.layer_names,  # type: ignore[union-attr]
                                                     versions=self.versions()))
        return ctx

    # ----------------------------------------------------------------- the run store
    @property
    def layer_names(self) -> list[str]:
        return [layer.name for layer in self.layers]

    def versions(self) -> dict[str, str]:
        """Every layer's fitted artifacts by name and sha256 (what a recorded episode says judged it)."""
        out: dict[str, str] = {}
        for layer in self.layers:
            try:
                out.update(layer.versions())
            except Exception:  # noqa: BLE001 - a version is telemetry; never a reason to fail
                _log.exception("guardrail: layer %r could not say its versions", layer.name)
        return out

    def label(self, episode_id: str, label: str) -> None:
        """Label a recorded episode ("healthy", "failed" or any label of yours); `fit` and `fit-spec` read the
        healthy ones. Raises GuardError without a run store, KeyError for an episode it never recorded."""
        if self.recorder is None:
            raise GuardError("this Guard records no runs: build it with record= (a directory, sqlite:///..., "
                             "postgresql://...)")
        if not isinstance(label, str) or not label.strip() or len(label) > 200:
            raise GuardError(f"a label is a non-empty string of at most 200 characters, got {label!r}")
        self.recorder.label(episode_id, label.strip())

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every recorded event is in the run store (True without one)."""
        return True if self.recorder is None else self.recorder.flush(timeout_s)

    def close(self) -> None:
        """Close the run store (what is queued is written; episodes still running are marked incomplete)."""
        if self.recorder is not None:
            self.recorder.close()

    @staticmethod
    def _record(call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:  # noqa: BLE001 - recording never raises into the agent
            _log.exception("guardrail: recording failed; the run goes on")

    def context(self, episode: EpisodeContext | str) -> EpisodeContext:
        """The context of a running episode, by context or id."""
        if isinstance(episode, EpisodeContext):
            return episode
        with self._contexts_lock:
            ctx = self._contexts.get(episode)
        if ctx is None:
            raise GuardError(f"no running episode {episode!r}: call guard.start_episode() first")
        return ctx

    @property
    def running_episodes(self) -> list[str]:
        with self._contexts_lock:
            return list(self._contexts)

    # ----------------------------------------------------------------- hooks (sync)
    def before_action(self, episode: EpisodeContext | str, action: Action) -> Decision:
        """Run the pre-execution layers (gate, self-consistency) on a proposed action."""
        ctx = self.context(episode)
        with ctx.lock:
            ctx.actions.append(action)
        return self._run_sync("before_action", ctx, (action,), action=action)

    def after_result(self, episode: EpisodeContext | str, action: Action, result: Result) -> Decision:
        """Run the per-result layers (tool contract, grounding ledger) on what a tool returned."""
        ctx = self.context(episode)
        with ctx.lock:
            ctx.results.append((action, result))
        return self._run_sync("after_result", ctx, (action, result), action=action, result=result)

    def on_step(self, episode: EpisodeContext | str, step: Step) -> Decision:
        """Record a step (always, even when a layer fails) and run the streaming monitors."""
        ctx = self.context(episode)
        with ctx.lock:
            ctx.episode.steps.append(step)
        decision = self._run_sync("on_step", ctx, (step,))
        if ctx.recorded:
            self._record(lambda: self.recorder.step(ctx, step, decision))  # type: ignore[union-attr]
        return decision

    def on_finish(self, episode: EpisodeContext | str, *, answer: str | None = None) -> Decision:
        """Close the episode and run the end-of-run verifiers; the context leaves the Guard."""
        ctx = self.context(episode)
        self._close(ctx, answer)
        return self._finished(ctx, self._run_sync("on_finish", ctx, (ctx.episode,)))

    # ----------------------------------------------------------------- hooks (async)
    async def abefore_action(self, episode: EpisodeContext | str, action: Action) -> Decision:
        ctx = self.context(episode)
        with ctx.lock:
            ctx.actions.append(action)
        return await self._run_async("before_action", ctx, (action,), action=action)

    async def aafter_result(self, episode: EpisodeContext | str, action: Action, result: Result) -> Decision:
        ctx = self.context(episode)
        with ctx.lock:
            ctx.results.append((action, result))
        return await self._run_async("after_result", ctx, (action, result), action=action, result=result)

    async def aon_step(self, episode: EpisodeContext | str, step: Step) -> Decision:
        ctx = self.context(episode)
        with ctx.lock:
            ctx.episode.steps.append(step)
        decision = await self._run_async("on_step", ctx, (step,))
        if ctx.recorded:
            self._record(lambda: self.recorder.step(ctx, step, decision))  # type: ignore[union-attr]
        return decision

    async def aon_finish(self, episode: EpisodeContext | str, *, answer: str | None = None) -> Decision:
        ctx = self.context(episode)
        self._close(ctx, answer)
        decision = await self._run_async("on_finish", ctx, (ctx.episode,))
        if ctx.recorded and self.recorder is not None and self.recorder.finish_timeout_s > 0:
            # The end of a recorded run waits until it is in the store: in a thread, never on the loop.
            return await asyncio.to_thread(self._finished, ctx, decision)
        return self._finished(ctx, decision)

    # ----------------------------------------------------------------- internals
    def _close(self, ctx: EpisodeContext, answer: str | None) -> None:
        with ctx.lock:
            if ctx.finished:
                raise GuardError(f"episode {ctx.episode_id!r} is already finished")
            ctx.finished = True
            if answer is not None and (not ctx.episode.steps or not ctx.episode.steps[-1].is_final):
                final = Step(index=len(ctx.episode.steps), kind=StepKind.FINAL, text=answer)
                ctx.episode.steps.append(final)
                if ctx.recorded:
                    self._record(lambda: self.recorder.step(ctx, final))  # type: ignore[union-attr]
        with self._contexts_lock:
            self._contexts.pop(ctx.episode_id, None)

    def _finished(self, ctx: EpisodeContext, decision: Decision) -> Decision:
        try:
            with ctx.lock:
                alarmed = any(f.severity is Severity.ALARM for f in ctx.findings)
            self.metrics.episode_done(decision.verdict.value, alarmed)
        except Exception:  # noqa: BLE001 - metrics are telemetry, never a reason to fail
            _log.exception("guardrail: recording episode metrics failed")
        if ctx.recorded:
            self._record(lambda: self.recorder.finish(ctx, decision))  # type: ignore[union-attr]
        return decision

    def _content(self, action: Action | None, result: Result | None) -> tuple[str | None, str | None]:
        """The redacted arguments and result for this hook's spans (None, None without capture_content),
        computed once per hook call rather than once per layer."""
        if not self.capture_content:
            return None, None
        try:
            arguments = None
            if action is not None:
                arguments = tm.redact(action.args if action.args else (action.command or action.code or ""))
            return arguments, None if result is None else tm.redact(result.output)
        except Exception:  # telemetry is never a reason to fail the agent; no content rather than raw content
            _log.exception("guardrail: redacting span content failed; the spans carry none")
            return None, None

    def _start_span(self, hook: Hook, layer: Layer, ctx: EpisodeContext, action: Action | None,
                    content: tuple[str | None, str | None]) -> Span:
        try:
            return self._open_span(hook, layer, ctx, action, content)
        except Exception:  # telemetry is never a reason to fail the agent
            _log.exception("guardrail: starting a span failed; running the layer without one")
            return trace.INVALID_SPAN

    def _open_span(self, hook: Hook, layer: Layer, ctx: EpisodeContext, action: Action | None,
                   content: tuple[str | None, str | None]) -> Span:
        # Every attribute goes in at the start, in one dict: one bounded-attributes build instead of a locked
        # set_attribute call each (spans are most of the Guard's own per-step cost), and samplers and
        # processors' on_start see them.
        attributes: dict[str, Any] = self._span_constants[(id(layer), hook)].copy()
        attributes[tm.GEN_AI_CONVERSATION_ID] = ctx.episode_id
        attributes[tm.GUARDRAIL_STEP] = ctx.step_index
        if action is not None:
            attributes[tm.GEN_AI_OPERATION_NAME] = "execute_tool"
            attributes[tm.GEN_AI_TOOL_NAME] = action.tool or action.kind.value
            if action.call_id:
                attributes[tm.GEN_AI_TOOL_CALL_ID] = action.call_id
            if content[0] is not None:
                attributes[tm.GEN_AI_TOOL_CALL_ARGUMENTS] = content[0]
        else:
            attributes[tm.GEN_AI_OPERATION_NAME] = "invoke_agent"
        if content[1] is not None:
            attributes[tm.GEN_AI_TOOL_CALL_RESULT] = content[1]
        return self._tracer.start_span(self._span_names[id(layer)], attributes=attributes)

    def _internal_error(self, layer: Layer, hook: Hook, exc: BaseException, ctx: EpisodeContext) -> Finding:
        return Finding(
            layer=layer.name,
            check="internal_error",
            message=f"layer {layer.name!r} failed in {hook}: {type(exc).__name__}: {exc}"[:2000],
            evidence={"exception": type(exc).__name__},
            blocking=self.fail_closed,
            severity=Severity.ERROR,
            step=ctx.step_index,
        )

    @staticmethod
    def _normalize(findings: Iterable[Finding] | None, layer: Layer) -> list[Finding]:
        if findings is None:
            return []
        out = list(findings)
        for finding in out:
            if not isinstance(finding, Finding):
                raise TypeError(f"layer {layer.name!r} returned {type(finding).__name__}, expected Finding")
        return out

    def _finish_span(self, span: Span, hook: Hook, findings: list[Finding], score: float | None,
                     exc: BaseException | None) -> None:
        try:
            self._annotate_span(span, hook, findings, score, exc)
        except Exception:  # a broken span processor or exporter must never break the agent
            _log.exception("guardrail: ending a span failed; the decision stands")

    def _annotate_span(self, span: Span, hook: Hook, findings: list[Finding], score: float | None,
                       exc: BaseException | None) -> None:
        if span.is_recording():
            attributes: dict[str, Any] = {tm.GUARDRAIL_DECISION: self._decide(hook, findings).value,
                                          tm.GUARDRAIL_FINDING_COUNT: len(findings)}
            if findings:
                attributes[tm.GUARDRAIL_FINDINGS] = json.dumps([self._finding_attribute(f) for f in findings])
            if score is not None:
                attributes[tm.GUARDRAIL_SCORE] = float(score)
            span.set_attributes(attributes)  # one lock round, not one per attribute
            if exc is not None:
                tm.record_error(span, exc, capture_content=self.capture_content)
        span.end()

    def _finding_attribute(self, finding: Finding) -> dict[str, Any]:
        """A finding as it goes on a span: what fired always; its message (which may quote arguments,
        results or file lines) only with capture_content, and then redacted."""
        out: dict[str, Any] = {"check": finding.check, "predicate": finding.predicate,
                               "blocking": finding.blocking, "severity": finding.severity.value}
        if self.capture_content:
            out["message"] = tm.redact(finding.message, cap=500)
        return out

    def _run_sync(self, hook: Hook, ctx: EpisodeContext, args: tuple[Any, ...], *,
                  action: Action | None = None, result: Result | None = None) -> Decision:
        collected: list[Finding] = []
        scores: list[float] = []
        content = self._content(action, result) if self._by_hook[hook] else (None, None)
        self._run_layers(self._by_hook[hook], hook, ctx, args, action, content, collected, scores)
        return self._conclude(hook, ctx, collected, scores, action)

    def _run_layers(self, layers: Sequence[Layer], hook: Hook, ctx: EpisodeContext, args: tuple[Any, ...],
                    action: Action | None, content: tuple[str | None, str | None], collected: list[Finding],
                    scores: list[float]) -> None:
        """Run the sync hook of `layers` in order (in the caller's thread), adding to `collected` and `scores`."""
        for layer in layers:
            span = self._start_span(hook, layer, ctx, action, content)
            error: BaseException | None = None
            started = time.perf_counter()
            # The layer's span is current while it runs (its own spans nest under it); attach/detach is what
            # trace.use_span does, without its generator-based context manager on the hot path.
            token = _attach(span)
            try:
                findings = self._normalize(getattr(layer, hook)(ctx, *args), layer)
            except Exception as exc:  # fail-open: a broken layer never breaks the agent
                error = exc
                findings = [self._internal_error(layer, hook, exc, ctx)]
            finally:
                _detach(token)
            self._settle(hook, layer, ctx, span, findings, error, collected, scores, started)

    def _run_layers_locked(self, layers: Sequence[Layer], hook: Hook, ctx: EpisodeContext, args: tuple[Any, ...],
                           action: Action | None, content: tuple[str | None, str | None],
                           collected: list[Finding], scores: list[float]) -> None:
        # On the loop, concurrent hooks of one episode (AutoGen runs a step's calls concurrently) never
        # interleaved inside a sync layer; in worker threads the episode's lock keeps it that way.
        with ctx.lock:
            self._run_layers(layers, hook, ctx, args, action, content, collected, scores)

    async def _run_async(self, hook: Hook, ctx: EpisodeContext, args: tuple[Any, ...], *,
                         action: Action | None = None, result: Result | None = None) -> Decision:
        collected: list[Finding] = []
        scores: list[float] = []
        content = self._content(action, result) if self._by_hook[hook] else (None, None)
        for how, layers in self._async_runs[hook]:
            if how == "thread" and self.offload and not _all_inline(layers, hook, ctx, args):
                # One hop for the whole run of sync layers, carrying the context (the current span); a run
                # whose every layer says this call is short CPU work stays on the loop (below).
                await _in_thread(self._run_layers_locked, layers, hook, ctx, args, action, content, collected,
                                 scores)
                continue
            if how != "native":
                # On the loop: never interleaved with another hook's layers run here (no await inside), and
                # no wait on the episode's lock, which a worker thread may hold.
                self._run_layers(layers, hook, ctx, args, action, content, collected, scores)
                continue
            for layer in layers:
                span = self._start_span(hook, layer, ctx, action, content)
                error: BaseException | None = None
                started = time.perf_counter()
                token = _attach(span)
                try:
                    findings = self._normalize(await getattr(layer, "a" + hook)(ctx, *args), layer)
                except Exception as exc:  # fail-open, as in the sync path
                    error = exc
                    findings = [self._internal_error(layer, hook, exc, ctx)]
                finally:
                    _detach(token)
                self._settle(hook, layer, ctx, span, findings, error, collected, scores, started)
        return self._conclude(hook, ctx, collected, scores, action)

    def _settle(self, hook: Hook, layer: Layer, ctx: EpisodeContext, span: Span, findings: list[Finding],
                error: BaseException | None, collected: list[Finding], scores: list[float],
                started: float | None = None) -> None:
        """After one layer's hook: take its score, close its span, count it, add its findings."""
        if started is not None:
            try:
                self.metrics.layer_done(layer.name, hook, time.perf_counter() - started, findings)
            except Exception:  # noqa: BLE001 - metrics are telemetry, never a reason to fail
                _log.exception("guardrail: recording layer metrics failed")
        score = ctx.pop_score(layer)
        if score is not None:
            scores.append(score)
        self._finish_span(span, hook, findings, score, error)
        collected.extend(findings)

    def _conclude(self, hook: Hook, ctx: EpisodeContext, findings: list[Finding],
                  scores: list[float], action: Action | None = None) -> Decision:
        earlier: list[Finding] = []
        if findings or hook == "on_finish":
            with ctx.lock:
                earlier = [f for f in ctx.findings if f.severity is Severity.ALARM] if hook == "on_finish" else []
                ctx.findings.extend(findings)
        verdict = self._decide(hook, findings)
        if earlier:
            # The run alarmed: its end-of-run verdict says so, per the alarm policy, and names the alarms.
            policy = self._alarm_verdict()
            if _RANK[policy] > _RANK[verdict]:
                verdict = policy
            findings = findings + earlier
        # Validated construction, not model_construct: pydantic-core's validation of five fields is faster than
        # model_construct's Python loop over them.
        decision = Decision(
            verdict=verdict,
            hook=hook,
            findings=findings,
            score=max(scores) if scores else None,
            episode_id=ctx.episode_id,
        )
        try:
            self.metrics.decided(hook, decision.verdict.value)
        except Exception:  # noqa: BLE001 - metrics are telemetry, never a reason to fail
            _log.exception("guardrail: recording decision metrics failed")
        if findings and ctx.recorded and hook != "on_finish":  # the end is in the finish record
            self._record(lambda: self.recorder.decision(ctx, hook, decision, action))  # type: ignore[union-attr]
        return decision

    def _alarm_verdict(self) -> Verdict:
        if self.on_alarm == "warn":
            return Verdict.WARN
        return Verdict.REPAIR if self.repairs_alarms else Verdict.ALARM

    def _decide(self, hook: Hook, findings: list[Finding]) -> Verdict:
        if not findings:
            return Verdict.ALLOW
        if self.fail_closed and any(f.severity is Severity.ERROR for f in findings):
            return Verdict.BLOCK
        if self.mode == "intervene" and any(f.blocking for f in findings):
            if hook in ("before_action", "after_result"):
                return Verdict.BLOCK
            return Verdict.REPAIR
        if any(f.severity is Severity.ALARM for f in findings):
            return Verdict.ALARM
        if all(f.severity is Severity.INFO for f in findings):
            return Verdict.ALLOW
        return Verdict.WARN


def _attach(span: Span) -> object | None:
    try:
        return otel_context.attach(trace.set_span_in_context(span))
    except Exception:  # telemetry is never a reason to fail the agent: run the layer outside the span
        _log.exception("guardrail: making a span current failed")
        return None


def _detach(token: object | None) -> None:
    if token is not None:
        otel_context.detach(token)  # type: ignore[arg-type]  # the token attach returned


def _all_inline(layers: Sequence[Layer], hook: str, ctx: EpisodeContext, args: tuple[Any, ...]) -> bool:
    """Whether every layer of a run says this call of `hook` is short CPU work (`Layer.runs_inline`); a layer
    whose answer raises is offloaded (its hook then fails, or not, in the worker, as before)."""
    try:
        return all(layer.runs_inline(hook, ctx, *args) for layer in layers)
    except Exception:  # noqa: BLE001 - a broken answer only costs the hop
        _log.exception("guardrail: asking a layer whether it runs inline failed")
        return False


def _async_runs(layers: Sequence[Layer], hook: str) -> list[tuple[str, list[Layer]]]:
    """`layers` cut into maximal runs of one way of running: ``native`` (the async twin, awaited on the loop),
    ``thread`` (sync hooks, in a worker thread) or ``inline`` (sync hooks of a layer with ``offload = False``)."""
    runs: list[tuple[str, list[Layer]]] = []
    for layer in layers:
        how = "native" if layer.has_async_hook(hook) else "thread" if layer.offload else "inline"
        if runs and runs[-1][0] == how:
            runs[-1][1].append(layer)
        else:
            runs.append((how, [layer]))
    return runs


# The worker threads of the async path: one pool for the process, kept across event loops (each asyncio.run
# would otherwise start and join its own default executor's threads), made anew in a forked child (a pool's
# threads do not survive a fork).
_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    pid = os.getpid()
    pool = _POOL
    if pool is None or pool[0] != pid:
        with _POOL_LOCK:
            if _POOL is None or _POOL[0] != pid:
                _POOL = (pid, ThreadPoolExecutor(max_workers=min(32, (os.cpu_count() or 1) + 4),
                                                 thread_name_prefix="guardrail-layers"))
            pool = _POOL
    return pool[1]


async def _in_thread(func: Callable[..., Any], *args: Any) -> Any:
    """`asyncio.to_thread` on the Guard's own pool: `func(*args)` in a worker, in a copy of this context."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_pool(), functools.partial(context.run, func, *args))
