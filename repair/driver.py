"""The fork-driver protocol: how the framework-neutral repair ladder reaches a framework's own checkpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from guardrail.core.events import Step
from repair.rungs import Hint

if TYPE_CHECKING:
    from repair.repairer import RepairAttempt, RepairOutcome, StepWatch

__all__ = ["AsyncForkDriver", "CheckpointError", "ForkDriver"]


class CheckpointError(Exception):
    """A rollback that cannot be done as asked (no checkpointer, no such step); the message says what to do."""


class ForkDriver(Protocol):
    """One flagged run in one framework: its steps, and forks of it that re-run live.

    ``fork`` restores the state just before model step `target`, sends `hint` (none for resample),
    runs onward feeding each completed step to `watch` (stopping when ``watch.feed`` says so), records
    where it forked on `attempt` (``checkpoint_id``, ``fork_config``) and returns the fork's steps,
    the reused prefix included. The original run must stay as the framework stored it.
    """

    framework: str
    episode_id: str

    def original_steps(self) -> list[Step]: ...

    def fork(self, target: int, hint: Hint, watch: StepWatch, attempt: RepairAttempt) -> list[Step]: ...

    def deliver(self, outcome: RepairOutcome, passed: RepairAttempt | None) -> None:
        """Put what to deliver on `outcome` (the passed fork's steps and handle, or the original's)."""


class AsyncForkDriver(Protocol):
    """`ForkDriver` for frameworks that run on an event loop (AutoGen, async LangGraph)."""

    framework: str
    episode_id: str

    async def original_steps(self) -> list[Step]: ...

    async def fork(self, target: int, hint: Hint, watch: StepWatch, attempt: RepairAttempt) -> list[Step]: ...

    async def deliver(self, outcome: RepairOutcome, passed: RepairAttempt | None) -> None: ...
