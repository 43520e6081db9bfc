"""Repair: roll a flagged run back to the framework's own checkpoint and re-run it live under a hint rung."""

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
