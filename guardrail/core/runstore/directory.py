"""The directory run store: one JSONL file of steps per episode plus an append-only journal, readable as a corpus.

Layout of ``runs/``::

    runs.jsonl        the journal: a format line, then one line per begin / decision / finish / label / evict
    <episode>.jsonl   the episode's steps, one per line, appended as they happen
    manifest.json     a corpus manifest of the store, rewritten when the recorder closes (for tools that
                      only read corpora; guardrail's own readers use the journal, which is never stale)

Every line is written with one ``write`` call on a file opened for appending, so a killed process
loses at most the line being written; an episode whose finish line never came reads as incomplete.
Files are opened without following symlinks and must be regular files: a link planted in the
directory is refused, never written through. One process writes a directory store; several
processes share a SQLite or PostgreSQL store.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from guardrail.core.corpus import (
    MAX_DEPTH,
    MAX_LINE_BYTES,
    CorpusIssue,
    EpisodeEntry,
    Manifest,
    read_json_lines,
)
from guardrail.core.events import Episode, Step
from guardrail.core.fileio import atomic_write_text, json_nesting_exceeds
from guardrail.core.runstore.base import (
    DEFAULT_MAX_BYTES,
    Begin,
    DecisionOp,
    Finish,
    Label,
    RunStore,
    StepLine,
    StoreError,
    StoreOp,
    episode_of,
    now,
    summary_of,
)
from guardrail.core.runstore.records import STORE_FORMAT, STORE_VERSION, RunHeader, RunOutcome, RunSummary

__all__ = ["JOURNAL", "DirectoryStore"]

JOURNAL = "runs.jsonl"
MANIFEST = "manifest.json"
MAX_JOURNAL_BYTES = 1 << 30  # a journal larger than this is refused unread (rotation keeps ours far below)
_OPEN_FILES = 128  # episode files kept open for appending (least recently used closed first)
# O_NONBLOCK: a FIFO planted under an episode's name fails at once instead of waiting for a reader.
_WRITE_FLAGS = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
                | getattr(os, "O_CLOEXEC", 0))


def episode_file(episode_id: str) -> str:
    """The step file of an episode: its id when that is a safe file name, else a safe name plus a digest."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", episode_id)[:120]
    if name != episode_id or name.startswith(".") or name in (JOURNAL, MANIFEST) or not name:
        name = f"{name.lstrip('.') or 'ep'}-{hashlib.sha256(episode_id.encode('utf-8', 'replace')).hexdigest()[:12]}"
    return name + ".jsonl"


@dataclass
class _Entry:
    """What the journal says about one episode."""

    header: RunHeader | None = None
    outcome: RunOutcome | None = None
    label: str | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    file: str | None = None
    bytes: int = 0
    steps: int = 0
    evicted: bool = False
    seq: int = 0


def _open_append(path: Path, *, truncate: bool = False) -> int:
    """A descriptor for appending to `path`, refused unless it is (or becomes) a regular file we did not follow."""
    fd = os.open(path, _WRITE_FLAGS | (os.O_TRUNC if truncate else 0), 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreError(f"{path}: not a regular file; refusing to write to it")
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class DirectoryStore(RunStore):
    """A run store in a directory (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(path)
        self.url = str(self.root)
        self.max_bytes = max_bytes
        journal = self.root / JOURNAL
        if not journal.exists() and not journal.is_symlink():
            if not create:
                if (self.root / MANIFEST).exists():
                    raise StoreError(f"{self.root}: a corpus, not a run store (no {JOURNAL}); read it as a corpus")
                raise StoreError(f"{self.root}: no run store here (no {JOURNAL})")
            self.root.mkdir(parents=True, exist_ok=True)
            fd = _open_append(journal)
            try:
                if os.fstat(fd).st_size == 0:
                    _write_all(fd, (json.dumps({"format": STORE_FORMAT, "version": STORE_VERSION}) + "\n").encode())
            finally:
                os.close(fd)
        self._lock = threading.Lock()
        self._journal_fd: int | None = None
        self._files: OrderedDict[str, int] = OrderedDict()  # episode id -> open descriptor
        self._entries: dict[str, _Entry] | None = None  # loaded on first write (the writer's own view)
        self._check_format()

    # ------------------------------------------------------------------ reading the journal
    def _check_format(self) -> None:
        try:
            with open(self.root / JOURNAL, "rb") as handle:
                first = handle.readline(4096)
        except OSError as exc:
            raise StoreError(f"{self.root / JOURNAL}: cannot read: {exc.strerror or exc}") from exc
        try:
            head = json.loads(first)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"{self.root / JOURNAL}: the first line is not the store's format line") from exc
        if not isinstance(head, dict) or head.get("format") != STORE_FORMAT:
            raise StoreError(f"{self.root / JOURNAL}: not a guardrail run store journal")
        if head.get("version") != STORE_VERSION:
            raise StoreError(f"{self.root / JOURNAL}: run store version {head.get('version')!r}; this guardrail "
                             f"reads version {STORE_VERSION}: upgrade guardrail")

    def _read_journal(self, problems: list[CorpusIssue] | None) -> dict[str, _Entry]:
        sink = problems if problems is not None else []
        path = self.root / JOURNAL
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        entries: dict[str, _Entry] = {}
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise StoreError(f"{path}: not a regular file")
            if info.st_size > MAX_JOURNAL_BYTES:
                raise StoreError(f"{path}: journal larger than {MAX_JOURNAL_BYTES} bytes ({info.st_size})")
            for lineno, line in enumerate(handle, start=1):
                if lineno == 1 or not line.strip():
                    continue
                if len(line) > MAX_LINE_BYTES:
                    sink.append(CorpusIssue(JOURNAL, lineno, f"line longer than {MAX_LINE_BYTES} bytes: skipped"))
                    continue
                if not line.endswith(b"\n"):
                    sink.append(CorpusIssue(JOURNAL, lineno, "the last line was cut off (the writer stopped "
                                                             "mid-line): skipped", severity="warning"))
                    continue
                problem = self._apply(entries, line, lineno)
                if problem is not None:
                    sink.append(CorpusIssue(JOURNAL, lineno, problem))
        return entries

    @staticmethod
    def _apply(entries: dict[str, _Entry], line: bytes, seq: int) -> str | None:
        """Apply one journal line; the problem with it in one line, or None."""
        if json_nesting_exceeds(line, MAX_DEPTH):
            return f"JSON nested deeper than {MAX_DEPTH} levels: skipped"
        try:
            op = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            return f"not valid JSON ({type(exc).__name__}): skipped"
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            return "not a journal operation (an object with an 'op'): skipped"
        kind = op["op"]
        try:
            if kind == "begin":
                header = RunHeader.model_validate(op.get("header"))
                file = episode_file(header.episode_id)
                entries[header.episode_id] = _Entry(header=header, file=file, seq=seq)
                return None
            episode_id = op.get("episode_id")
            if not isinstance(episode_id, str) or not episode_id:
                return f"{kind}: episode_id must be a non-empty string: skipped"
            entry = entries.get(episode_id)
            if kind == "label":
                label = op.get("label")
                if not isinstance(label, str) or not label or len(label) > 200:
                    return "label: the label must be a non-empty string of at most 200 characters: skipped"
                if entry is None:
                    return f"label for {episode_id[:80]!r}, which the journal never began: skipped"
                entry.label = label
            elif kind == "finish":
                if entry is None:
                    return f"finish of {episode_id[:80]!r}, which the journal never began: skipped"
                entry.outcome = RunOutcome.model_validate(op.get("outcome"))
                entry.bytes = int(op.get("bytes") or 0)
            elif kind == "decision":
                body = op.get("body")
                if entry is None or not isinstance(body, dict):
                    return "decision: no such episode, or its body is not an object: skipped"
                if len(entry.decisions) < 10_000:
                    entry.decisions.append(body)
            elif kind == "evict":
                if entry is not None:
                    entry.evicted = True
            else:
                return f"unknown journal operation {kind[:40]!r}: skipped"
        except ValidationError as exc:
            detail = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3])
            return f"{kind}: {detail}: skipped"
        except (TypeError, ValueError) as exc:
            return f"{kind}: {exc}: skipped"
        return None

    # ------------------------------------------------------------------ RunStore: reading
    def summaries(self, problems: list[CorpusIssue] | None = None) -> list[RunSummary]:
        entries = self._read_journal(problems)
        return [self._summary(e) for e in sorted(entries.values(), key=lambda e: e.seq) if not e.evicted]

    @staticmethod
    def _summary(entry: _Entry) -> RunSummary:
        return summary_of(entry.header, entry.outcome, entry.label, entry.decisions)

    def episodes(self, ids: Collection[str] | None = None, *,
                 problems: list[CorpusIssue] | None = None) -> Iterator[Episode]:
        sink = problems if problems is not None else []
        entries = self._read_journal(sink)
        wanted = set(ids) if ids is not None else None
        for entry in sorted(entries.values(), key=lambda e: e.seq):
            if entry.evicted or entry.header is None or (wanted is not None and entry.header.episode_id not in wanted):
                continue
            yield self._episode(entry, sink)

    def _episode(self, entry: _Entry, sink: list[CorpusIssue]) -> Episode:
        assert entry.header is not None and entry.file is not None
        steps: list[Step] = []
        path = self.root / entry.file
        if path.exists() or path.is_symlink():
            lines = read_json_lines(self.root, entry.file, sink)
            for lineno, obj in lines or []:
                try:
                    steps.append(Step.model_validate(obj))
                except ValidationError as exc:
                    sink.append(CorpusIssue(entry.file, lineno, f"not a valid step: {exc.errors()[0]['msg']}"))
        summary = self._summary(entry)
        summary.n_steps = len(steps) if entry.outcome is None else summary.n_steps
        return episode_of(summary, entry.header, entry.outcome, steps, entry.decisions)

    # ------------------------------------------------------------------ RunStore: writing
    def _state(self) -> dict[str, _Entry]:
        if self._entries is None:
            self._entries = self._read_journal(None)
            for entry in self._entries.values():
                if entry.file and not entry.evicted and entry.outcome is None:
                    try:
                        entry.bytes = os.lstat(self.root / entry.file).st_size
                    except OSError:
                        entry.bytes = 0
        return self._entries

    def _journal(self) -> int:
        if self._journal_fd is None:
            self._journal_fd = _open_append(self.root / JOURNAL)
        return self._journal_fd

    def _episode_fd(self, episode_id: str, *, new: bool = False) -> int:
        fd = self._files.get(episode_id)
        if fd is not None and not new:
            self._files.move_to_end(episode_id)
            return fd
        if fd is not None:
            os.close(self._files.pop(episode_id))
        fd = _open_append(self.root / episode_file(episode_id), truncate=new)
        self._files[episode_id] = fd
        while len(self._files) > _OPEN_FILES:
            os.close(self._files.popitem(last=False)[1])
        return fd

    def write(self, batch: Sequence[StoreOp]) -> None:
        with self._lock:
            entries = self._state()
            journal: list[str] = []
            steps: dict[str, list[str]] = {}
            refused: dict[str, str] = {}  # episode -> why its file could not be written (the rest still is)

            def flush_steps() -> None:
                for episode_id, lines in steps.items():
                    data = "".join(lines).encode("utf-8")
                    try:
                        _write_all(self._episode_fd(episode_id), data)
                    except (OSError, StoreError) as exc:
                        refused.setdefault(episode_id, str(exc))
                        continue
                    entries[episode_id].bytes += len(data)
                steps.clear()

            for op in batch:
                if isinstance(op, StepLine):
                    entry = entries.get(op.episode_id)
                    if entry is None or entry.outcome is not None:
                        continue  # never begun here, or already finished: nothing to attach the step to
                    steps.setdefault(op.episode_id, []).append(op.body + "\n")
                    entry.steps += 1
                    continue
                if isinstance(op, Begin):
                    flush_steps()
                    episode_id = op.header.episode_id
                    try:
                        self._episode_fd(episode_id, new=True)  # a re-used id starts over: the last run wins
                    except (OSError, StoreError) as exc:
                        refused[episode_id] = str(exc)
                        entries.pop(episode_id, None)
                        continue
                    entries[episode_id] = _Entry(header=op.header, file=episode_file(episode_id),
                                                 seq=max((e.seq for e in entries.values()), default=0) + 1)
                    journal.append(json.dumps({"op": "begin", "header": op.header.model_dump(mode="json")}))
                elif isinstance(op, DecisionOp):
                    if op.episode_id in entries:
                        journal.append(json.dumps({"op": "decision", "episode_id": op.episode_id, "body": op.body},
                                                  default=str))
                elif isinstance(op, Finish):
                    flush_steps()
                    entry = entries.get(op.episode_id)
                    if entry is None:
                        continue
                    entry.outcome = op.outcome
                    fd = self._files.pop(op.episode_id, None)
                    if fd is not None:
                        os.close(fd)
                    journal.append(json.dumps({"op": "finish", "episode_id": op.episode_id, "bytes": entry.bytes,
                                               "outcome": op.outcome.model_dump(mode="json")}))
                elif isinstance(op, Label):
                    if op.episode_id in entries:
                        entries[op.episode_id].label = op.label
                        journal.append(json.dumps({"op": "label", "episode_id": op.episode_id, "label": op.label,
                                                   "at": op.at}))
            flush_steps()
            journal.extend(self._evictions(entries))
            if journal:
                _write_all(self._journal(), ("\n".join(journal) + "\n").encode("utf-8"))
            if refused:
                first = next(iter(refused.items()))
                raise StoreError(f"{len(refused)} episode file(s) could not be written, the rest were "
                                 f"(first: {first[0][:80]!r}: {first[1][:200]})")

    def _evictions(self, entries: dict[str, _Entry]) -> list[str]:
        """Journal lines evicting the oldest finished episodes (unlabelled first) while the store is over its cap."""
        live = [e for e in entries.values() if not e.evicted]
        total = sum(e.bytes for e in live)
        if total <= self.max_bytes:
            return []
        target = int(self.max_bytes * 0.9)
        finished = sorted((e for e in live if e.outcome is not None), key=lambda e: (e.label is not None, e.seq))
        lines = []
        for entry in finished:
            if total <= target:
                break
            assert entry.header is not None and entry.file is not None
            try:
                os.unlink(self.root / entry.file)
            except FileNotFoundError:
                pass
            total -= entry.bytes
            entry.evicted = True
            lines.append(json.dumps({"op": "evict", "episode_id": entry.header.episode_id, "at": now()}))
        return lines

    def set_labels(self, labels: Mapping[str, str]) -> list[str]:
        known = {s.episode_id for s in self.summaries()}
        missing = [episode_id for episode_id in labels if episode_id not in known]
        stamp = now()
        self.write([Label(episode_id, label, stamp) for episode_id, label in labels.items() if episode_id in known])
        return missing

    # ------------------------------------------------------------------ closing
    def write_manifest(self) -> None:
        """Rewrite ``manifest.json`` as a corpus manifest of the finished episodes (for corpus-only readers)."""
        entries = []
        for summary in self.summaries():
            file = episode_file(summary.episode_id)
            path = self.root / file
            if summary.status != "complete" or not path.is_file() or path.is_symlink():
                continue
            data = path.read_bytes()
            entries.append(EpisodeEntry(episode_id=summary.episode_id, file=file, label=summary.label,
                                        T=data.count(b"\n"), framework=summary.framework, task=summary.task,
                                        sha256=hashlib.sha256(data).hexdigest(),
                                        meta={"run": summary.model_dump(mode="json", exclude={"findings"})}))
        manifest = Manifest(name=self.root.name, created_at=now(), generator={"tool": "guardrail run store"},
                            episodes=entries)
        atomic_write_text(self.root / MANIFEST, manifest.model_dump_json(indent=1) + "\n")

    def close(self) -> None:
        with self._lock:
            for fd in self._files.values():
                os.close(fd)
            self._files.clear()
            if self._journal_fd is not None:
                os.close(self._journal_fd)
                self._journal_fd = None
            wrote = self._entries is not None
        if wrote:
            try:
                self.write_manifest()
            except (OSError, StoreError, ValueError):
                pass  # the journal is the record; the manifest is a convenience for other readers
