"""What a run store holds per episode: the run's header, its outcome, its label, and the summary `guardrail runs` shows."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "STORE_FORMAT",
    "STORE_VERSION",
    "UNLABELLED",
    "FindingRecord",
    "RunHeader",
    "RunOutcome",
    "RunSummary",
    "Status",
]

STORE_FORMAT = "guardrail-runs"
STORE_VERSION = 1
UNLABELLED = "unlabelled"  # every recorded episode starts here; only the user says what a run was

Status = Literal["running", "complete", "incomplete"]


class _Record(BaseModel):
    # Records come back from files and databases other processes wrote: unknown keys are kept, not refused,
    # so a newer writer's extra fields survive a read-modify-write by this version.
    model_config = ConfigDict(extra="allow")


class FindingRecord(_Record):
    """One finding as the store keeps it: what fired where (the message redacted and capped)."""

    layer: str
    check: str
    severity: str
    step: int | None = None
    predicate: str | None = None
    blocking: bool = False
    message: str = ""
    hint: str | None = None


class RunHeader(_Record):
    """What is known when an episode starts: who runs it, under which guard and which fitted versions."""

    episode_id: str = Field(min_length=1)
    started_at: str
    task: str | None = None
    framework: str | None = None
    model: str | None = None
    tools: list[str] = Field(default_factory=list)
    mode: str | None = None
    layers: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)  # e.g. model_sha256, spec_sha256
    guardrail_version: str | None = None
    writer: dict[str, Any] = Field(default_factory=dict)  # {host, pid} of the recording process
    meta: dict[str, Any] = Field(default_factory=dict)


class RunOutcome(_Record):
    """How an episode ended: the end-of-run verdict and every finding of the run."""

    finished_at: str
    status: Literal["complete", "incomplete"] = "complete"
    verdict: str | None = None
    task: str | None = None  # the task as known at the end (AutoGen learns it from the team's first message)
    tools: list[str] = Field(default_factory=list)
    n_steps: int = 0
    findings: list[FindingRecord] = Field(default_factory=list)
    steps_dropped: int = 0  # steps past the store's per-episode cap, or lost to a full queue
    reason: str | None = None  # why an episode is incomplete (the recorder closed, the process ended)
    # Shadow layers' view of the run (layer name -> versions, alarm step, findings), never acted on.
    shadow: dict[str, Any] = Field(default_factory=dict)


class RunSummary(_Record):
    """One recorded episode as `guardrail runs --json` prints it."""

    episode_id: str
    label: str = UNLABELLED
    status: Status = "running"
    verdict: str | None = None
    framework: str | None = None
    task: str | None = None
    n_steps: int = 0
    findings: list[FindingRecord] = Field(default_factory=list)
    model_sha256: str | None = None
    spec_sha256: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    repair_of: str | None = None  # a repair attempt (or fork) of that episode: it replays a run from a checkpoint
    imported_from: str | None = None  # a trace imported from elsewhere (no guard judged it while it ran)

    @property
    def finished(self) -> bool:
        return self.status == "complete"

    def brief(self) -> dict[str, Any]:
        """The JSON `guardrail runs --json` prints: findings as {layer, check, severity, step}."""
        out = self.model_dump(mode="json", exclude={"findings"})
        out["findings"] = [{"layer": f.layer, "check": f.check, "severity": f.severity, "step": f.step}
                           for f in self.findings]
        return out
