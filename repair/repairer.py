"""The online repair API: run an agent under the Guard and, on a live alarm or failed check, roll back and re-run it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from opentelemetry import trace
from opentelemetry.trace import Span

from guardrail.core import spans as tm
from guardrail.core.events import Action, Finding, Result, Severity, Step
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext
from repair.breaker import BreakerRun, CircuitBreaker, Trip
from repair.driver import AsyncForkDriver, ForkDriver
from repair.escalation import ESCALATED_CHECKS, Escalation, EscalationHandler, escalation_for, log_escalation
from repair.rungs import Hint, Rung, RungNotApplicable, make_hint
from repair.target import flagged_step, rollback_step

__all__ = [
    "REPAIR_SPAN",
    "RepairAttempt",
    "RepairOutcome",
    "RepairSession",
    "Repairer",
    "StepWatch",
    "describe_attempts",
    "final_answer",
    "is_flag",
]

logger = logging.getLogger("guardrail.repair")

REPAIR_SPAN = "guardrail.repair"
# Span attributes of a repair attempt (our own names, next to the guard's other guardrail.* attributes).
REPAIR_RUNG = "guardrail.repair.rung"
REPAIR_ATTEMPT = "guardrail.repair.attempt"
REPAIR_TARGET_STEP = "guardrail.repair.target_step"
REPAIR_FLAGGED_STEP = "guardrail.repair.flagged_step"
REPAIR_EXTRA_MODEL_CALLS = "guardrail.repair.extra_model_calls"
REPAIR_OUTCOME = "guardrail.repair.outcome"
REPAIR_CHECKPOINT_ID = "guardrail.repair.checkpoint_id"

AttemptOutcome = Literal["passed", "still_flagged", "halted", "not_applicable", "error", "logged"]
RunOutcome = Literal["clean", "warned", "repaired", "unrepaired", "halted", "escalated", "logged"]
_REASON_CHARS = 400  # per finding and per hint in an outcome's reason: they quote what the agent saw


def is_flag(finding: Finding, on_alarm: str = "repair") -> bool:
    """A finding that asks for repair: blocking (a failed check or a blocked call), or a monitor alarm when the
    guard's alarm policy (`guardrail.core.guard.Guard.on_alarm`) is ``"repair"``."""
    return finding.blocking or (finding.severity is Severity.ALARM and on_alarm == "repair")


def _short(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def describe_attempts(attempts: Sequence[RepairAttempt]) -> str:
    """Each attempt in one line: where it forked, what it still failed (check, step, message) and the hint sent."""
    lines = []
    for a in attempts:
        head = f"attempt {a.attempt + 1} ({a.rung}, re-run from step {a.target_step}): "
        if a.outcome == "passed":
            body = "passed every check"
        elif a.outcome == "error":
            body = f"the fork failed: {_short(a.error)}"
        elif a.outcome == "not_applicable":
            body = f"rung not applicable: {_short(a.error)}"
        else:
            failed = "; ".join(f"{f.layer}/{f.check}" + (f" at step {f.step}" if f.step is not None else "")
                               + f": {_short(f.message).rstrip('.')}" for f in a.findings[:3])
            if a.outcome == "halted":
                body = "halted by the circuit breaker" + (f" (still failing {failed})" if failed else "")
            else:
                body = f"still failed {failed}" if failed else "ended without a final answer"
        hint = f"; hint sent: {_short(a.hint)!r}" if a.hint else "; no hint sent (resample)"
        lines.append(head + body + hint)
    return "\n".join(lines)


@dataclass
class RepairAttempt:
    """One rollback and re-run."""

    attempt: int
    rung: str
    hint: str | None
    target_step: int
    flagged_step: int | None
    outcome: AttemptOutcome
    extra_model_calls: int = 0
    checkpoint_id: str | None = None  # LangGraph: the checkpoint the fork starts from
    fork_config: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)  # what the checks said about the fork
    answer: str | None = None
    error: str | None = None


@dataclass
class RepairOutcome:
    """What the application gets back: the answer to deliver (None when no run passed its checks) and why."""

    outcome: RunOutcome
    answer: str | None
    original_answer: str | None
    steps: list[Step]  # the delivered branch (the original when no fork passed)
    findings: list[Finding]  # the flags on the original run
    attempts: list[RepairAttempt] = field(default_factory=list)
    escalation: Escalation | None = None
    trip: Trip | None = None
    config: dict[str, Any] | None = None  # LangGraph: config of the delivered branch's head checkpoint
    delivered: Any = None  # what the framework driver delivered (an AutoGen run with its saved states, ...)
    reason: str | None = None  # why it was not repaired (halted, unrepaired, escalated): per attempt, the check
    # that still failed, where, and the hint that was sent

    @property
    def target_step(self) -> int | None:
        """The step the forks re-ran from (every attempt forks at the same checkpoint); None without a fork."""
        return self.attempts[0].target_step if self.attempts else None

    @property
    def extra_model_calls(self) -> int:
        return sum(a.extra_model_calls for a in self.attempts)


class StepWatch:
    """Feeds completed steps of one run (or fork) to a Guard episode and to the breaker, as they happen."""

    def __init__(self, guard: Guard, ctx: EpisodeContext, breaker_run: BreakerRun | None, *, count_from: int,
                 stop_on_flag: bool) -> None:
        self.guard = guard
        self.ctx = ctx
        self.breaker_run = breaker_run
        self.count_from = count_from  # steps before this index are a reused prefix: the breaker does not count them
        self.stop_on_flag = stop_on_flag
        self.on_alarm = str(getattr(guard, "on_alarm", "repair"))  # a plain pipeline Guard without the policy
        self.fed = 0
        self.trip: Trip | None = None
        self.flagged = False
        self.alarms: list[Finding] = []  # the monitor's alarms on this run, whatever the policy

    def feed(self, steps: Sequence[Step]) -> bool:
        """Feed the steps not yet fed whose tool results have all arrived; True when the run must stop now."""
        while self.fed < len(steps):
            step = steps[self.fed]
            if any(event.result is None for event in step.tool_events):
                break  # its tools have not returned yet
            self._feed_one(step)
            self.fed += 1
            if self.breaker_run is not None and step.index >= self.count_from:
                self.trip = self.breaker_run.observe(step)
                if self.trip is not None:
                    return True
            if self.flagged and self.stop_on_flag:
                return True
            if self.alarms and self.stop_on_flag and self.on_alarm == "stop":
                first = self.alarms[0]
                self.trip = Trip("alarm", f"the step monitor alarmed at step {first.step} and the alarm policy is "
                                          f"'stop': {first.message}", first.step)
                return True
        return False

    def _feed_one(self, step: Step) -> None:
        findings: list[Finding] = []
        for event in step.tool_events:
            args = event.args if isinstance(event.args, dict) else {"raw": event.args}
            action = Action.tool_call(event.name, args, call_id=event.id or None)
            findings += self.guard.before_action(self.ctx, action).findings
            result = Result(output=event.result or "", is_error=event.is_error, call_id=event.id or None,
                            truncated=event.result_truncated)
            findings += self.guard.after_result(self.ctx, action, result).findings
        findings += self.guard.on_step(self.ctx, step).findings
        self.alarms += [f for f in findings if f.severity is Severity.ALARM]
        if any(is_flag(f, self.on_alarm) for f in findings):
            self.flagged = True

    def finish(self, answer: str | None) -> list[Finding]:
        """Close the Guard episode (end-of-run checks) and return every flag it raised (an alarm is one only when
        the alarm policy repairs alarms; `alarms` holds them all)."""
        self.guard.on_finish(self.ctx, answer=answer)
        return [f for f in self.ctx.findings if is_flag(f, self.on_alarm)]


def final_answer(steps: Sequence[Step]) -> str | None:
    return steps[-1].text if steps and steps[-1].is_final else None


def judge_attempt(attempt: RepairAttempt, watch: StepWatch, fork_steps: list[Step], target: int) -> None:
    attempt.extra_model_calls = max(0, len(fork_steps) - target)
    answer = None if watch.trip else final_answer(fork_steps)
    attempt.findings = watch.finish(answer)
    attempt.answer = answer
    if watch.trip is not None:
        attempt.outcome = "halted"
    elif answer is not None and not attempt.findings:
        attempt.outcome = "passed"
    else:
        attempt.outcome = "still_flagged"


class RepairSession:
    """The repair ladder for one flagged run, shared by every framework driver."""

    def __init__(self, repairer: Repairer, episode_id: str, findings: list[Finding], original_steps: list[Step],
                 breaker_run: BreakerRun | None, tools: Collection[str]) -> None:
        self.repairer = repairer
        self.episode_id = episode_id
        self.findings = findings
        self.current = findings
        self.original_steps = original_steps
        self.breaker_run = breaker_run
        self.tools = tools
        self.attempts: list[RepairAttempt] = []
        self.flagged = flagged_step(findings)
        # Every attempt forks from the same checkpoint, so attempts are paired on one prefix.
        self.target = rollback_step(original_steps, self.flagged, fact_tools=repairer.fact_tools,
                                    compute_tools=(repairer.calculator,))
        self.trip: Trip | None = None
        self.not_applicable = False
        self.escalation: Escalation | None = None  # a fork hit something that must not be retried

    def next_hint(self) -> Hint | None:
        """The next attempt's hint, or None when the ladder is over (breaker tripped or rung not applicable)."""
        if self.breaker_run is not None:
            self.trip = self.breaker_run.start_attempt()
            if self.trip is not None:
                return None
        if len(self.attempts) >= self.repairer.max_attempts:
            return None
        try:
            return make_hint(self.repairer.rung, self.current, attempt=len(self.attempts), tools=self.tools,
                             calculator=self.repairer.calculator)
        except RungNotApplicable as exc:
            self._record(RepairAttempt(attempt=len(self.attempts), rung=self.repairer.rung, hint=None,
                                       target_step=self.target, flagged_step=self.flagged,
                                       outcome="not_applicable", error=str(exc)))
            self.not_applicable = True
            return None

    def start_span(self, hint: Hint) -> Span:
        span = self.repairer.tracer.start_span(REPAIR_SPAN)
        span.set_attribute(tm.GEN_AI_CONVERSATION_ID, self.episode_id)
        span.set_attribute(REPAIR_RUNG, hint.rung)
        span.set_attribute(REPAIR_ATTEMPT, len(self.attempts))
        span.set_attribute(REPAIR_TARGET_STEP, self.target)
        if self.flagged is not None:
            span.set_attribute(REPAIR_FLAGGED_STEP, self.flagged)
        return span

    def end_span(self, span: Span, attempt: RepairAttempt, exc: BaseException | None = None) -> None:
        span.set_attribute(REPAIR_EXTRA_MODEL_CALLS, attempt.extra_model_calls)
        span.set_attribute(REPAIR_OUTCOME, attempt.outcome)
        if attempt.checkpoint_id:
            span.set_attribute(REPAIR_CHECKPOINT_ID, attempt.checkpoint_id)
        if exc is not None:  # a fork's exception can quote tool output: its text only with capture on
            tm.record_error(span, exc, capture_content=self.repairer.guard.capture_content)
        span.end()
        self._record(attempt)

    def _record(self, attempt: RepairAttempt) -> None:
        self.attempts.append(attempt)
        if attempt.outcome == "still_flagged" and attempt.findings:
            self.current = attempt.findings
            self.escalation = escalation_for(self.episode_id, attempt.findings, self.repairer.escalated_checks)
            if self.escalation is not None:
                self.escalation.attempts = len(self.attempts)

    @property
    def over(self) -> bool:
        """True once an attempt passed, the breaker halted it, or it must be escalated."""
        last = self.attempts[-1] if self.attempts else None
        return last is not None and (last.outcome in ("passed", "halted") or self.escalation is not None)

    def conclude(self, original_answer: str | None) -> RepairOutcome:
        passed = next((a for a in self.attempts if a.outcome == "passed"), None)
        halted = next((a for a in self.attempts if a.outcome == "halted"), None)
        trip = self.trip
        escalation = None
        if passed is not None:
            outcome: RunOutcome = "repaired"
        elif self.escalation is not None:
            outcome = "escalated"
            escalation = self.escalation
        elif trip is not None or halted is not None:
            outcome = "halted"
            reason = trip.reason if trip is not None else "repair_exhausted"
            told = trip.message if trip else "repair ended by the circuit breaker"
            escalation = Escalation(episode_id=self.episode_id, reason=reason,  # type: ignore[arg-type]
                                    message=f"{told}\n{describe_attempts(self.attempts)}".strip()[:4000],
                                    step=trip.step if trip and trip.step is not None else self.flagged,
                                    findings=self.current,
                                    attempts=len(self.attempts))
        else:
            outcome = "unrepaired"
        why = None
        if outcome == "halted" and escalation is not None:
            why = escalation.message
        elif outcome == "escalated" and escalation is not None:
            why = f"{escalation.message}\n{describe_attempts(self.attempts)}".strip()
        elif outcome == "unrepaired":
            why = describe_attempts(self.attempts) or "no repair attempt could be made"
        result = RepairOutcome(outcome=outcome, answer=passed.answer if passed else None,
                               original_answer=original_answer, steps=self.original_steps,
                               findings=self.findings, attempts=self.attempts, escalation=escalation, trip=trip,
                               reason=why)
        if escalation is not None:
            self.repairer.escalate(escalation)
        return result


class Repairer:
    """Runs an agent under a Guard and repairs a flagged run from the framework's own checkpoints.

    In ``intervene`` mode a live alarm stops the run at once, and a failed end-of-run check
    holds the answer back; either way the run is rolled back to the last fact-gathering step
    before the flagged step and re-run under `rung` (``adaptive`` by default) until a fork
    passes every check, the circuit breaker trips, or `max_attempts` is spent. Contract
    violations are escalated to `on_escalate` and never retried. In ``report`` mode nothing is
    re-run and the breaker ends nothing: the would-be repair is logged as a ``guardrail.repair``
    span with outcome ``logged``.

    The framework is reached through a fork driver (`repair.driver.ForkDriver`): the LangGraph
    driver forks a thread through the graph's own checkpointer, the AutoGen drivers restore saved
    state with ``load_state`` (both in `adapters`). `run_langgraph` / `arun_autogen` there run an
    agent under this Repairer from the start.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        rung: Rung = "adaptive",
        breaker: CircuitBreaker | None = CircuitBreaker(),  # noqa: B008 - configuration only, no state
        max_attempts: int = 2,
        on_escalate: EscalationHandler = log_escalation,
        fact_tools: Collection[str] | None = None,
        calculator: str = "calculator",
        escalated_checks: Collection[str] = ESCALATED_CHECKS,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.guard = guard
        self.rung: Rung = rung
        self.breaker = breaker  # None: no breaker (attempts still end at max_attempts)
        self.max_attempts = max_attempts
        self.on_escalate = on_escalate
        self.fact_tools = fact_tools
        self.calculator = calculator
        self.escalated_checks = escalated_checks
        self.tracer = tracer or tm.get_tracer()

    @property
    def intervening(self) -> bool:
        return self.guard.mode == "intervene"

    def escalate(self, event: Escalation) -> None:
        """Hand `event` to the application; a handler that raises is logged, never allowed to break the run."""
        try:
            self.on_escalate(event)
        except Exception:  # noqa: BLE001 - the application's handler failing must not crash the agent
            logger.exception("the on_escalate handler raised for %s", event.episode_id)

    def new_breaker_run(self) -> BreakerRun | None:
        # Ending a run is an intervention: report mode lets a loop run its course (its findings are still logged).
        return self.breaker.new_run() if self.breaker is not None and self.intervening else None

    def new_context(self, episode_id: str, task: str | None, framework: str, tools: Collection[str],
                    meta: dict[str, Any] | None = None) -> EpisodeContext:
        return self.guard.start_episode(episode_id, task=task, framework=framework, tools=tools, meta=meta)

    def before_repair(self, episode_id: str, flags: list[Finding], steps: list[Step], trip: Trip | None,
                       answer: str | None, alarms: Sequence[Finding] = ()) -> RepairOutcome | None:
        """The outcome when no fork should run (clean, warned, escalated, halted, or report mode); None to repair.

        `alarms` are the monitor's alarms on the run: with ``on_alarm="warn"`` they are not flags, and a run
        with nothing else to repair is ``warned`` (its answer delivered, the alarms in `findings`).
        """
        if trip is not None:
            halt = Escalation(episode_id=episode_id, reason=trip.reason,  # type: ignore[arg-type]
                              message=trip.message, step=trip.step, findings=flags or list(alarms))
            self.escalate(halt)
            return RepairOutcome("halted", None, answer, steps, flags or list(alarms), escalation=halt, trip=trip,
                                 reason=trip.message)
        if not flags:
            if alarms:
                return RepairOutcome("warned", answer, answer, steps, list(alarms),
                                     reason="the step monitor alarmed; the alarm policy is 'warn'")
            return RepairOutcome("clean", answer, answer, steps, flags)
        escalation = escalation_for(episode_id, flags, self.escalated_checks)
        if escalation is not None:
            self.escalate(escalation)
            return RepairOutcome("escalated", None, answer, steps, flags, escalation=escalation)
        if not self.intervening:
            self._log_only(episode_id, flags, steps)
            return RepairOutcome("logged", answer, answer, steps, flags)
        return None

    def _log_only(self, episode_id: str, flags: list[Finding], steps: list[Step]) -> None:
        flagged = flagged_step(flags)
        target = rollback_step(steps, flagged, fact_tools=self.fact_tools, compute_tools=(self.calculator,))
        with self.tracer.start_as_current_span(REPAIR_SPAN) as span:
            span.set_attribute(tm.GEN_AI_CONVERSATION_ID, episode_id)
            span.set_attribute(REPAIR_RUNG, self.rung)
            span.set_attribute(REPAIR_TARGET_STEP, target)
            if flagged is not None:
                span.set_attribute(REPAIR_FLAGGED_STEP, flagged)
            span.set_attribute(REPAIR_EXTRA_MODEL_CALLS, 0)
            span.set_attribute(REPAIR_OUTCOME, "logged")

    def watch(self, ctx: EpisodeContext, breaker_run: BreakerRun | None, *, count_from: int = 0) -> StepWatch:
        """A watch feeding a run's steps to `ctx` (stopping it on a flag in intervene mode)."""
        return StepWatch(self.guard, ctx, breaker_run, count_from=count_from, stop_on_flag=self.intervening)

    def open_session(self, episode_id: str, findings: Sequence[Finding], original_steps: list[Step],
                     breaker_run: BreakerRun | None, tools: Collection[str], rung: Rung | None) -> RepairSession:
        """The repair ladder for one flagged run (a fresh breaker run when the caller brought none)."""
        if breaker_run is None and self.breaker is not None:
            breaker_run = self.breaker.new_run()
        repairer = self if rung is None else self._with_rung(rung)
        on_alarm = str(getattr(self.guard, "on_alarm", "repair"))
        return RepairSession(repairer, episode_id, [f for f in findings if is_flag(f, on_alarm)] or list(findings),
                             original_steps, breaker_run, tools)

    def _with_rung(self, rung: Rung) -> Repairer:
        return Repairer(self.guard, rung=rung, breaker=self.breaker, max_attempts=self.max_attempts,
                        on_escalate=self.on_escalate, fact_tools=self.fact_tools, calculator=self.calculator,
                        escalated_checks=self.escalated_checks, tracer=self.tracer)

    def _attempt_context(self, driver: ForkDriver | AsyncForkDriver, session: RepairSession,
                         attempt: RepairAttempt, task: str | None, tools: Collection[str]) -> StepWatch:
        # A repair attempt is recorded as its own episode, marked as one (it replays a run from its fork point).
        ctx = self.new_context(f"{session.episode_id}:repair-{attempt.attempt}:{uuid.uuid4().hex[:6]}",
                               task, driver.framework, tools,
                               meta={"repair_of": session.episode_id, "attempt": attempt.attempt})
        return self.watch(ctx, session.breaker_run, count_from=session.target)

    # ------------------------------------------------------------------------- the ladder, any framework
    def repair(self, driver: ForkDriver, findings: Sequence[Finding], *, tools: Collection[str] = (),
               task: str | None = None, breaker_run: BreakerRun | None = None,
               original_answer: str | None = None, rung: Rung | None = None) -> RepairOutcome:
        """Repair a flagged run through `driver`: fork before the target step and re-run, rung by rung.

        The original run stays as the framework stored it; each fork is a new branch.
        """
        original_steps = driver.original_steps()
        session = self.open_session(driver.episode_id, findings, original_steps, breaker_run, tools, rung)
        while (hint := session.next_hint()) is not None:
            span = session.start_span(hint)
            attempt = RepairAttempt(attempt=len(session.attempts), rung=hint.rung, hint=hint.text,
                                    target_step=session.target, flagged_step=session.flagged, outcome="error")
            error: BaseException | None = None
            try:
                with trace.use_span(span, end_on_exit=False):
                    watch = self._attempt_context(driver, session, attempt, task, tools)
                    fork_steps = driver.fork(session.target, hint, watch, attempt)
                    judge_attempt(attempt, watch, fork_steps, session.target)
                    session.trip = session.trip or watch.trip
            except Exception as exc:  # a fork that raises is a failed attempt; the original run is intact
                error = exc
                attempt.error = f"{type(exc).__name__}: {exc}"[:2000]
            session.end_span(span, attempt, error)
            if session.over:
                break
        result = session.conclude(original_answer if original_answer is not None else final_answer(original_steps))
        driver.deliver(result, next((a for a in result.attempts if a.outcome == "passed"), None))
        return result

    async def arepair(self, driver: AsyncForkDriver, findings: Sequence[Finding], *, tools: Collection[str] = (),
                      task: str | None = None, breaker_run: BreakerRun | None = None,
                      original_answer: str | None = None, rung: Rung | None = None) -> RepairOutcome:
        """Async twin of `repair` for drivers whose forks run on the event loop."""
        original_steps = await driver.original_steps()
        session = self.open_session(driver.episode_id, findings, original_steps, breaker_run, tools, rung)
        while (hint := session.next_hint()) is not None:
            span = session.start_span(hint)
            attempt = RepairAttempt(attempt=len(session.attempts), rung=hint.rung, hint=hint.text,
                                    target_step=session.target, flagged_step=session.flagged, outcome="error")
            error: BaseException | None = None
            try:
                with trace.use_span(span, end_on_exit=False):
                    watch = self._attempt_context(driver, session, attempt, task, tools)
                    fork_steps = await driver.fork(session.target, hint, watch, attempt)
                    # The end-of-run checks are the guard's sync layers: off the event loop.
                    await asyncio.to_thread(judge_attempt, attempt, watch, fork_steps, session.target)
                    session.trip = session.trip or watch.trip
            except Exception as exc:  # as in `repair`
                error = exc
                attempt.error = f"{type(exc).__name__}: {exc}"[:2000]
            session.end_span(span, attempt, error)
            if session.over:
                break
        result = session.conclude(original_answer if original_answer is not None else final_answer(original_steps))
        await driver.deliver(result, next((a for a in result.attempts if a.outcome == "passed"), None))
        return result
