"""The run store interface: ordered write operations from the recorder, reads for every command, and where a URL opens.

A store is one of three backends behind the same small interface (as LangGraph's checkpoint savers
are): a directory (``runs/``: a corpus directory every command reads, plus an append-only journal),
SQLite (``sqlite:///runs.db``, embedded) and PostgreSQL (``postgresql://...``, many workers). The
recorder's writer thread hands each backend batches of operations in the order they happened;
readers get `RunSummary`s and `Episode`s.
"""

from __future__ import annotations

import abc
import os
import socket
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from guardrail.core.corpus import CorpusIssue
from guardrail.core.events import Episode, Step
from guardrail.core.runstore.records import UNLABELLED, FindingRecord, RunHeader, RunOutcome, RunSummary

__all__ = [
    "Begin",
    "DecisionOp",
    "Finish",
    "Label",
    "RunStore",
    "StepLine",
    "StoreError",
    "StoreOp",
    "is_store_url",
    "now",
    "open_store",
    "summary_of",
]

# Defaults for what one store may grow to (a store keeps content far longer than a span does).
DEFAULT_MAX_BYTES = 1 << 30  # past this, the oldest finished episodes are evicted (unlabelled ones first)
DEFAULT_MAX_STEPS = 5_000  # steps of one episode past this are counted, not stored
MAX_STEP_BYTES = 1 << 20  # one serialized step larger than this is stored cut (see recorder)
URL_SCHEMES = ("sqlite://", "postgresql://", "postgres://")


class StoreError(Exception):
    """A store that cannot be opened or read at all (unknown URL, newer format, missing driver)."""


@dataclass(frozen=True)
class Begin:
    header: RunHeader


@dataclass(frozen=True)
class StepLine:
    episode_id: str
    index: int
    body: str  # the step as one JSON text (redacted, capped)


@dataclass(frozen=True)
class DecisionOp:
    episode_id: str
    body: dict[str, Any]  # {hook, step, verdict, tool, findings: [FindingRecord...]}


@dataclass(frozen=True)
class Finish:
    episode_id: str
    outcome: RunOutcome


@dataclass(frozen=True)
class Label:
    episode_id: str
    label: str
    at: str


StoreOp = Begin | StepLine | DecisionOp | Finish | Label


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def summary_of(header: RunHeader | None, outcome: RunOutcome | None, label: str | None,
               decisions: Sequence[Mapping[str, Any]] = (), n_steps: int = 0,
               episode_id: str | None = None) -> RunSummary:
    """One episode's summary from what the store holds of it (an unfinished one lists its decisions' findings)."""
    header_id = header.episode_id if header is not None else episode_id
    findings = list(outcome.findings) if outcome is not None else [
        FindingRecord.model_validate(f) for d in decisions for f in d.get("findings") or []]
    status = outcome.status if outcome is not None else ("running" if _writer_alive(header) else "incomplete")
    versions = header.versions if header is not None else {}
    return RunSummary(
        episode_id=header_id or "",
        label=label or UNLABELLED,
        status=status,
        verdict=outcome.verdict if outcome is not None else None,
        framework=header.framework if header is not None else None,
        task=(outcome.task if outcome is not None and outcome.task else None) or (header.task if header else None),
        n_steps=outcome.n_steps if outcome is not None else n_steps,
        findings=findings,
        model_sha256=versions.get("model_sha256"),
        spec_sha256=versions.get("spec_sha256"),
        started_at=header.started_at if header is not None else None,
        finished_at=outcome.finished_at if outcome is not None else None,
        repair_of=_meta_text(header, "repair_of"),
        imported_from=_meta_text(header, "imported_from"),
    )


_HOST = socket.gethostname()


def _writer_alive(header: RunHeader | None) -> bool:
    """Whether the process recording an unfinished episode may still be running: False only when it ran on this
    machine and is gone (a killed recorder's episode is incomplete); a writer elsewhere counts as alive."""
    writer = header.writer if header is not None else {}
    pid = writer.get("pid")
    if writer.get("host") != _HOST or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read(512).rsplit(b")", 1)[-1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _meta_text(header: RunHeader | None, key: str) -> str | None:
    value = header.meta.get(key) if header is not None else None
    return value if isinstance(value, str) else None


def episode_of(summary: RunSummary, header: RunHeader | None, outcome: RunOutcome | None, steps: list[Step],
               decisions: Sequence[Mapping[str, Any]] = ()) -> Episode:
    """A recorded episode as the layers and commands read it (the run record in ``meta["run"]``)."""
    tools = (outcome.tools if outcome is not None and outcome.tools else None) or (header.tools if header else [])
    run = summary.model_dump(mode="json")
    run["versions"] = dict(header.versions) if header is not None else {}
    run["mode"] = header.mode if header is not None else None
    run["layers"] = list(header.layers) if header is not None else []
    run["decisions"] = [dict(d) for d in decisions]
    if outcome is not None and outcome.steps_dropped:
        run["steps_dropped"] = outcome.steps_dropped
    if outcome is not None and outcome.shadow:
        run["shadow"] = dict(outcome.shadow)
    meta = dict(header.meta) if header is not None else {}
    meta["run"] = run
    return Episode(episode_id=summary.episode_id, steps=steps, task=summary.task, label=summary.label,
                   framework=summary.framework, model=header.model if header is not None else None,
                   tools=list(tools), meta=meta)


class RunStore(abc.ABC):
    """The interface every backend implements (see the module docstring).

    Writes come from one recorder's writer thread per process (`write`, in order); labels may
    come from anywhere (`set_labels`). Reads never change the store.
    """

    url: str = ""

    # ------------------------------------------------------------ writing
    @abc.abstractmethod
    def write(self, batch: Sequence[StoreOp]) -> None:
        """Apply `batch` in order, as one transaction where the backend has them."""

    @abc.abstractmethod
    def set_labels(self, labels: Mapping[str, str]) -> list[str]:
        """Label episodes by id; returns the ids not found in the store (labelled nothing)."""

    # ------------------------------------------------------------ reading
    @abc.abstractmethod
    def summaries(self, problems: list[CorpusIssue] | None = None) -> list[RunSummary]:
        """Every recorded episode's summary, oldest first."""

    @abc.abstractmethod
    def episodes(self, ids: Collection[str] | None = None, *,
                 problems: list[CorpusIssue] | None = None) -> Iterator[Episode]:
        """Recorded episodes with their steps, oldest first (just `ids` when given)."""

    def close(self) -> None:
        return None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_store_url(location: Any) -> bool:
    """True for a database URL a run store opens (``sqlite:///...``, ``postgresql://...``)."""
    return isinstance(location, str) and location.startswith(URL_SCHEMES)


def is_store_dir(location: str | os.PathLike[str]) -> bool:
    """True for a directory a run store recorded into (it has the store's journal)."""
    from guardrail.core.runstore.directory import JOURNAL

    try:
        return os.path.isfile(os.path.join(os.fspath(location), JOURNAL))
    except (TypeError, ValueError):
        return False


def absolute_location(location: str | os.PathLike[str]) -> str:
    """`location` (a corpus or store directory, or a store URL) so it means the same from any working directory:
    what batch work ships to workers. A relative SQLite URL becomes absolute; other URLs stay as given."""
    text = os.fspath(location)
    if text.startswith("sqlite://"):
        from guardrail.core.runstore.sql import sqlite_path

        path = sqlite_path(text)
        return text if path == ":memory:" else "sqlite:///" + os.path.abspath(path)
    if is_store_url(text):
        return text
    return os.path.abspath(text)


def open_store(location: str | os.PathLike[str] | RunStore, *, create: bool = True,
               max_bytes: int = DEFAULT_MAX_BYTES) -> RunStore:
    """The store at `location`: a directory path, ``sqlite:///PATH`` or ``postgresql://...`` (a store passes through).

    ``create=False`` refuses to make a new one (what the read-only commands use).
    """
    if isinstance(location, RunStore):
        return location
    if is_store_url(location):
        text = str(location)
        if text.startswith("sqlite://"):
            from guardrail.core.runstore.sql import SqliteStore

            return SqliteStore(text, create=create, max_bytes=max_bytes)
        from guardrail.core.runstore.sql import PostgresStore

        return PostgresStore(text, create=create, max_bytes=max_bytes)
    if isinstance(location, str) and "://" in location:
        raise StoreError(f"{location!r}: unknown store URL; use a directory, sqlite:///PATH or postgresql://...")
    from guardrail.core.runstore.directory import DirectoryStore

    return DirectoryStore(location, create=create, max_bytes=max_bytes)


def label_counts(summaries: Sequence[RunSummary]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for summary in summaries:
        counts[summary.label] = counts.get(summary.label, 0) + 1
    return dict(sorted(counts.items()))
