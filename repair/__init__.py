"""Repair: roll a flagged run back to the framework's own checkpoint and re-run it live under a hint rung.

This package is framework-neutral: where to roll back to (`target`), the hint of each rung
(`rungs`), the circuit breaker (`breaker`), escalation (`escalation`) and the ladder that ties
them together (`Repairer`). The framework drivers live beside their adapters::

    from adapters.langgraph_repair import run_langgraph, sqlite_checkpointer   # any LangGraph saver
    outcome = run_langgraph(Repairer(guard, rung="adaptive"), graph, {"messages": [...]}, config)

    from adapters.autogen_repair import arun_autogen                           # AutoGen save_state/load_state
    outcome = await arun_autogen(Repairer(guard), agent, task)

    outcome.outcome   # clean | warned | repaired | unrepaired | halted | escalated | logged
    outcome.answer    # what to deliver (None when no run passed its checks)

Contract violations and circuit-breaker trips reach ``Repairer(on_escalate=...)`` as an
`Escalation`; every attempt is a ``guardrail.repair`` span (rung, target step, extra model
calls, outcome).
"""

from repair.breaker import CircuitBreaker, LoopDetector, Trip
from repair.driver import AsyncForkDriver, CheckpointError, ForkDriver
from repair.escalation import ESCALATED_CHECKS, Escalation, escalation_for
from repair.repairer import RepairAttempt, Repairer, RepairOutcome, RepairSession, StepWatch, is_flag
from repair.rungs import RUNGS, Hint, Rung, RungNotApplicable, make_hint
from repair.target import flagged_step, rollback_step

__all__ = [
    "ESCALATED_CHECKS",
    "RUNGS",
    "AsyncForkDriver",
    "CheckpointError",
    "CircuitBreaker",
    "Escalation",
    "ForkDriver",
    "Hint",
    "LoopDetector",
    "RepairAttempt",
    "RepairOutcome",
    "RepairSession",
    "Repairer",
    "Rung",
    "RungNotApplicable",
    "StepWatch",
    "Trip",
    "escalation_for",
    "flagged_step",
    "is_flag",
    "make_hint",
    "rollback_step",
]
