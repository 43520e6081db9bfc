"""Repair: roll a flagged run back to the framework's own checkpoint and re-run it live under a hint rung.

LangGraph (any checkpointer; SQLite by default)::

    graph = create_agent(model, tools, checkpointer=sqlite_checkpointer("runs.db"))
    repairer = Repairer(Guard([VerifierLayer(spec), monitor], mode="intervene"))
    outcome = repairer.run_langgraph(graph, {"messages": [HumanMessage(task)]}, config)
    outcome.outcome   # clean | repaired | unrepaired | halted | escalated | logged
    outcome.answer    # what to deliver (None when no run passed its checks)

AutoGen (an ``AssistantAgent(max_tool_iterations=1)``, its state saved after every step)::

    outcome = await repairer.arun_autogen(agent, task)

Contract violations and circuit-breaker trips reach ``Repairer(on_escalate=...)`` as an
`Escalation`; every attempt is a ``guardrail.repair`` span (rung, target step, extra model
calls, outcome).
"""

from repair.breaker import CircuitBreaker, LoopDetector, Trip
from repair.checkpoints import (
    AutoGenRun,
    AutoGenStepLog,
    CheckpointError,
    CheckpointRef,
    LangGraphCheckpoints,
    sqlite_checkpointer,
)
from repair.escalation import ESCALATED_CHECKS, Escalation, escalation_for
from repair.repairer import RepairAttempt, Repairer, RepairOutcome, is_flag
from repair.rungs import RUNGS, Hint, Rung, RungNotApplicable, make_hint
from repair.target import flagged_step, rollback_step

__all__ = [
    "ESCALATED_CHECKS",
    "RUNGS",
    "AutoGenRun",
    "AutoGenStepLog",
    "CheckpointError",
    "CheckpointRef",
    "CircuitBreaker",
    "Escalation",
    "Hint",
    "LangGraphCheckpoints",
    "LoopDetector",
    "RepairAttempt",
    "RepairOutcome",
    "Repairer",
    "Rung",
    "RungNotApplicable",
    "Trip",
    "escalation_for",
    "flagged_step",
    "is_flag",
    "make_hint",
    "rollback_step",
    "sqlite_checkpointer",
]
