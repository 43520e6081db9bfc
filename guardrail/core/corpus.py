"""Trace corpora on disk: the project's own format (manifest.json + one JSONL per episode) and the sentinel importer.

A corpus is a directory. ``manifest.json`` lists its episodes with their label, onset, model,
provenance and the sha256 of their JSONL file; each ``<episode_id>.jsonl`` holds one step per
line. The public sentinel corpora (``../shared/corpora/sentinel/*``) use a list-shaped manifest
and their own step fields; `read_corpus` recognizes both. A corrupt line or a checksum mismatch
never stops a load and is never dropped silently: the good steps load and each problem is
listed in ``Corpus.issues`` with its file and line (``strict=True`` raises instead).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from guardrail.core.events import HEALTHY, Episode, Step, StepKind, ToolEvent
from guardrail.core.fileio import (
    UnsafeFile,
    atomic_write_text,
    json_nesting_exceeds,
    read_regular,
    sha256_bytes,
)

__all__ = [
    "CORPUS_FORMAT",
    "CORPUS_VERSION",
    "Corpus",
    "CorpusError",
    "CorpusIssue",
    "EpisodeEntry",
    "Manifest",
    "RejectedEntry",
    "SENTINEL_SCHEMA",
    "iter_corpus",
    "manifest_entries",
    "format_tool_text",
    "parse_tool_text",
    "read_corpus",
    "read_episodes",
    "read_json_lines",
    "step_from_sentinel",
    "write_corpus",
]

CORPUS_FORMAT = "guardrail-corpus"
CORPUS_VERSION = 1
MANIFEST = "manifest.json"
# Limits on what a corpus may make the reader do (a corpus can come from anywhere). The shared
# corpora's largest file is 260 KB and their longest line 12 KB: these leave two orders of margin.
MAX_FILE_BYTES = 64 * 1024 * 1024  # a manifest or an episode file larger than this is refused unread
MAX_LINE_BYTES = 4 * 1024 * 1024  # a longer line is reported and skipped
MAX_DEPTH = 64  # JSON nested deeper than this (arrays and objects) is reported, never parsed


class CorpusError(Exception):
    """A corpus that cannot be read at all (no manifest, unknown format or version), or any problem under strict=True."""


class EpisodeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episode_id: str = Field(min_length=1)
    file: str
    label: str = HEALTHY
    tau: int | None = None
    T: int = Field(ge=0)
    model: str | None = None
    framework: str | None = None
    task: str | None = None
    tools: list[str] = Field(default_factory=list)
    seed: int | None = None
    sha256: str
    provenance: dict[str, Any] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)


class RejectedEntry(BaseModel):
    """An episode the collector or injector could not produce, kept with its reason."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str
    reason: str
    requested_label: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["guardrail-corpus"] = "guardrail-corpus"
    version: int = CORPUS_VERSION
    name: str
    created_at: str
    generator: dict[str, Any] = Field(default_factory=dict)
    episodes: list[EpisodeEntry] = Field(default_factory=list)
    rejected: list[RejectedEntry] = Field(default_factory=list)


@dataclass(frozen=True)
class CorpusIssue:
    """One problem found while reading: which file, which line (1-based, when a line), what.

    A ``warning`` (e.g. a newer sentinel schema than this importer knows) loses nothing and does not
    fail a ``strict`` read; an ``error`` means something was left out.
    """

    file: str
    line: int | None
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{where}: {prefix}{self.message}"


@dataclass
class Corpus:
    path: Path | str  # a directory, or the URL of a run store (sqlite:///..., postgresql://...)
    name: str
    kind: Literal["guardrail", "sentinel", "runs"]
    episodes: list[Episode] = field(default_factory=list)
    issues: list[CorpusIssue] = field(default_factory=list)
    rejected: list[RejectedEntry] = field(default_factory=list)

    @property
    def n_steps(self) -> int:
        return sum(len(e.steps) for e in self.episodes)

    def healthy(self) -> list[Episode]:
        return [e for e in self.episodes if e.is_healthy]

    def labels(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for episode in self.episodes:
            counts[episode.label] = counts.get(episode.label, 0) + 1
        return dict(sorted(counts.items()))


# --------------------------------------------------------------------------- confined, bounded reading
class _Refused(Exception):
    """A file the reader will not read; the message says why, in one line."""


def _confined(root: Path, file: Any) -> Path:
    """`file` (a manifest's relative path) inside the corpus directory, symlinks resolved; refused otherwise."""
    if not isinstance(file, str) or not file or "\x00" in file:
        raise _Refused(f"the file name must be a non-empty string, got {type(file).__name__}")
    if os.path.isabs(file):
        raise _Refused(f"{file!r} is an absolute path: outside the corpus directory")
    base = root.resolve()
    target = (base / file).resolve()
    if not target.is_relative_to(base):
        raise _Refused(f"{file!r} is outside the corpus directory")
    return target


def _parse(data: bytes) -> Any:
    """One JSON text, refused (not parsed) when nested deeper than MAX_DEPTH."""
    if json_nesting_exceeds(data, MAX_DEPTH):
        raise _Refused(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(data)
    except RecursionError as exc:  # belt and braces: the depth scan should have caught it
        raise _Refused(f"JSON nested deeper than {MAX_DEPTH} levels") from exc


def _read_regular(path: Path, what: str) -> bytes:
    try:
        return read_regular(path, MAX_FILE_BYTES, what)
    except UnsafeFile as exc:
        raise _Refused(str(exc)) from exc


# --------------------------------------------------------------------------- reading
def _load_manifest(path: Path) -> Any:
    manifest_path = path / MANIFEST
    if not path.is_dir():
        raise CorpusError(f"{path}: not a directory; a corpus is a directory with a {MANIFEST}")
    if not manifest_path.exists() and not manifest_path.is_symlink():
        raise CorpusError(f"{path}: no {MANIFEST} here; is this a corpus directory?")
    try:
        return _parse(_read_regular(_confined(path, MANIFEST), MANIFEST))
    except _Refused as exc:
        raise CorpusError(f"{manifest_path}: {exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{manifest_path}: not valid JSON ({exc})") from exc


def _run_store(path: str | os.PathLike[str]) -> Any:
    """The run store at `path` when it is one (a store URL, or a directory a recorder wrote), else None."""
    from guardrail.core.runstore import StoreError, is_store_dir, is_store_url, open_store

    if not (is_store_url(path) or is_store_dir(path)):
        return None
    try:
        return open_store(path, create=False)
    except StoreError as exc:
        raise CorpusError(str(exc)) from exc


def _read_store(store: Any, *, strict: bool) -> Corpus:
    issues: list[CorpusIssue] = []
    with store:
        episodes = list(store.episodes(problems=issues))
    name = Path(store.url).name if "://" not in store.url else store.url.rsplit("/", 1)[-1] or store.url
    corpus = Corpus(path=store.url if "://" in store.url else Path(store.url), name=name, kind="runs",
                    episodes=episodes, issues=issues)
    errors = [i for i in issues if i.severity == "error"]
    if strict and errors:
        listed = "\n".join(str(i) for i in errors[:20])
        raise CorpusError(f"{store.url}: {len(errors)} problem(s):\n{listed}")
    return corpus


def read_corpus(path: str | os.PathLike[str], *, strict: bool = False, verify: bool = True) -> Corpus:
    """Read a whole corpus (either format, or a run store). See the module docstring for how problems are reported."""
    store = _run_store(path)
    if store is not None:
        return _read_store(store, strict=strict)
    root = Path(path)
    raw = _load_manifest(root)
    if isinstance(raw, list):
        corpus = Corpus(path=root, name=root.name, kind="sentinel")
    elif isinstance(raw, dict) and raw.get("format") == CORPUS_FORMAT:
        version = raw.get("version")
        if version != CORPUS_VERSION:
            raise CorpusError(
                f"{root / MANIFEST}: corpus format version {version!r}; this guardrail reads version "
                f"{CORPUS_VERSION}. Re-collect the corpus or upgrade guardrail."
            )
        corpus = Corpus(path=root, name=str(raw.get("name") or root.name), kind="guardrail")
    else:
        raise CorpusError(
            f"{root / MANIFEST}: neither a guardrail manifest (format {CORPUS_FORMAT!r}) nor a sentinel "
            "manifest (a JSON list of episodes)"
        )
    corpus.episodes = list(iter_corpus(root, issues=corpus.issues, verify=verify, _manifest=raw,
                                       rejected=corpus.rejected))
    errors = [i for i in corpus.issues if i.severity == "error"]
    if strict and errors:
        listed = "\n".join(str(i) for i in errors[:20])
        raise CorpusError(f"{root}: {len(errors)} problem(s):\n{listed}")
    return corpus


def iter_corpus(
    path: str | os.PathLike[str],
    *,
    issues: list[CorpusIssue] | None = None,
    verify: bool = True,
    rejected: list[RejectedEntry] | None = None,
    only: Collection[str] | None = None,
    _manifest: Any = None,
) -> Iterator[Episode]:
    """Yield a corpus's episodes one at a time (constant memory over a large corpus).

    With `only`, just those episode ids are read (the other files are never opened). A run store (its URL or
    directory) reads the same way.
    """
    store = _run_store(path) if _manifest is None else None
    if store is not None:
        with store:
            yield from store.episodes(ids=only, problems=issues)
        return
    root = Path(path)
    raw = _manifest if _manifest is not None else _load_manifest(root)
    sink = issues if issues is not None else []
    if isinstance(raw, list):
        newer_schema_reported = False
        for position, entry in enumerate(raw):
            if only is not None and not (isinstance(entry, dict) and isinstance(entry.get("episode_id"), str)
                                         and entry["episode_id"] in only):
                continue
            episode = _read_sentinel_episode(root, entry, position, sink, verify)
            if episode is None:
                continue
            if not newer_schema_reported:
                newer_schema_reported = _report_newer_schema(episode, entry, sink)
            yield episode
        return
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        raise CorpusError(f"{root / MANIFEST}: invalid manifest: {_short(exc)}") from exc
    if rejected is not None:
        rejected.extend(manifest.rejected)
    for entry in manifest.episodes:
        if only is not None and entry.episode_id not in only:
            continue
        episode = _read_own_episode(root, entry, sink, verify)
        if episode is not None:
            yield episode


def manifest_entries(path: str | os.PathLike[str]) -> int:
    """How many episodes a corpus's manifest lists (either format, or a run store), whether or not they can be read."""
    store = _run_store(path)
    if store is not None:
        with store:
            return len(store.summaries())
    raw = _load_manifest(Path(path))
    if isinstance(raw, dict):
        raw = raw.get("episodes")
    return len(raw) if isinstance(raw, list) else 0


def read_episodes(path: str | os.PathLike[str], ids: Iterable[str], *,
                  issues: list[CorpusIssue] | None = None, verify: bool = True) -> list[Episode]:
    """The listed episodes of a corpus, in the order given (unknown ids are left out): one shard's worth
    of reading, so batch work over many shards reads each episode file once."""
    wanted = list(ids)
    found = {e.episode_id: e for e in iter_corpus(path, issues=issues, verify=verify, only=set(wanted))}
    return [found[i] for i in wanted if i in found]


def _short(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def read_json_lines(root: Path, file: Any, sink: list[CorpusIssue], expected_sha: str | None = None,
                   verify: bool = True) -> list[tuple[int, Any]] | None:
    """The JSON lines of `file` (confined to `root`, bounded in size, line length and nesting) with their line
    numbers; each bad line is one issue in `sink`; None when the file itself is refused."""
    name = file if isinstance(file, str) else repr(file)[:200]
    try:
        data = _read_regular(_confined(root, file), "episode file")
    except _Refused as exc:
        sink.append(CorpusIssue(name, None, str(exc)))
        return None
    if verify and expected_sha and sha256_bytes(data) != expected_sha:
        sink.append(CorpusIssue(name, None, "sha256 does not match the manifest: the file changed after it was written"))
    parsed: list[tuple[int, Any]] = []
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            sink.append(CorpusIssue(name, lineno, f"line longer than {MAX_LINE_BYTES} bytes ({len(line)}): skipped"))
            continue
        try:
            parsed.append((lineno, _parse(line)))
        except _Refused as exc:
            sink.append(CorpusIssue(name, lineno, f"{exc}: skipped"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            sink.append(CorpusIssue(name, lineno, f"not valid JSON: {exc}"))
    return parsed


def _read_own_episode(root: Path, entry: EpisodeEntry, sink: list[CorpusIssue], verify: bool) -> Episode | None:
    lines = read_json_lines(root, entry.file, sink, entry.sha256, verify)
    if lines is None:
        return None
    steps: list[Step] = []
    for lineno, obj in lines:
        try:
            steps.append(Step.model_validate(obj))
        except ValidationError as exc:
            sink.append(CorpusIssue(entry.file, lineno, f"not a valid step: {_short(exc)}"))
    if len(steps) != entry.T:
        sink.append(CorpusIssue(entry.file, None, f"manifest says T={entry.T}, read {len(steps)} step(s)"))
    return Episode(
        episode_id=entry.episode_id,
        steps=steps,
        task=entry.task,
        label=entry.label,
        tau=entry.tau,
        framework=entry.framework,
        model=entry.model,
        tools=entry.tools,
        # entry.meta holds a seed/provenance only when the writer could not type it (kept as imported).
        meta={"seed": entry.seed, "provenance": entry.provenance, **entry.meta},
    )


# --------------------------------------------------------------------------- sentinel import
_SENTINEL_STANDARD = {"episode_id", "file", "failure_class", "tau", "T", "model", "framework"}
SENTINEL_SCHEMA = 5  # the newest sentinel step schema this importer was written against
_SENTINEL_STEP_FIELDS = frozenset({"text", "token_logprobs", "logprobs_available", "action", "latency_s",
                                   "output_tokens", "error", "task", "tool_events", "schema"})
_TOOL_EVENT_FIELDS = frozenset(ToolEvent.model_fields) - {"extra"}
# The fields some layer reads (monitor telemetry, verifiers, repair): held to their types.
_STEP_USED = frozenset({"index", "kind", "text", "tool_events", "token_logprobs", "latency_s", "output_tokens",
                        "error", "task", "meta"})
_TOOL_EVENT_USED = frozenset({"name", "args", "result", "is_error"})
_TOOL_OPEN = re.compile(r"\[([A-Za-z_][A-Za-z0-9_]*)\(")
_DECODER = json.JSONDecoder()


def format_tool_text(events: Iterable[ToolEvent]) -> str:
    """A tool step's calls as the corpora write them, ``[name({json args}) -> result]`` (inverse of `parse_tool_text`).

    Live adapters and the testbed give their steps this text so the monitor sees the shape it was fitted on.
    """
    return " ".join(f"[{e.name}({json.dumps(e.args, sort_keys=True, default=str)}) -> {_read_by_agent(e)}]"
                    for e in events)


def _read_by_agent(event: ToolEvent) -> str | None:
    """What the agent read for a call: the tool's result, the guard's message after it, or the message alone."""
    if event.guard_message is None:
        return event.result
    return event.guard_message if event.result is None else f"{event.result}\n\n{event.guard_message}"


def parse_tool_text(text: str) -> list[ToolEvent]:
    """Recover tool events from a sentinel tool step's text, ``[name({json args}) -> result]``.

    Older sentinel corpora (organic, real_research) record only this text. Arguments that are
    not JSON are kept as the raw string, so nothing the agent did is lost.
    """
    events: list[ToolEvent] = []
    for match in _TOOL_OPEN.finditer(text):
        start = match.end()
        args: Any
        try:
            args, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            end = -1
        if end < 0 or not text.startswith(") -> ", end):
            # Not JSON arguments (or JSON followed by more text): keep the raw argument string.
            close = text.find(") -> ", start)
            if close < 0:
                continue
            args, end = text[start:close], close
        result_start = end + len(") -> ")
        close_bracket = text.rfind("]")
        result = text[result_start:close_bracket] if close_bracket >= result_start else text[result_start:]
        events.append(ToolEvent(name=match.group(1), args=args, result=result, result_chars=len(result),
                                is_error=result.startswith(("ERROR", "Error"))))
        break  # one call per step in these corpora; the result text may itself contain brackets
    return events


def _typed(model: type[BaseModel], known: dict[str, Any], extra: dict[str, Any], used: frozenset[str]) -> Any:
    """Validate `known` fields into `model`; a field we do not use that fails its type moves to `extra` verbatim.

    Only the fields a layer reads are held to their types: a later schema that changes an unused
    field's type must not cost the step (an invalid used field still raises, one message per step).
    """
    try:
        return model.model_validate({**known, "extra": extra})
    except ValidationError as exc:
        unused = {str(err["loc"][0]) for err in exc.errors() if err["loc"] and str(err["loc"][0]) not in used}
        if not unused or not unused <= set(known):
            raise
        kept = {k: v for k, v in known.items() if k not in unused}
        return model.model_validate({**kept, "extra": {**extra, **{k: known[k] for k in unused}}})


def _tool_event_from_sentinel(raw: Any) -> ToolEvent:
    if not isinstance(raw, dict):
        raise ValueError(f"a tool event is a JSON object, got {type(raw).__name__}")
    known = {k: v for k, v in raw.items() if k in _TOOL_EVENT_FIELDS}
    extra = {k: v for k, v in raw.items() if k not in _TOOL_EVENT_FIELDS}
    event: ToolEvent = _typed(ToolEvent, known, extra, _TOOL_EVENT_USED)
    return event


def step_from_sentinel(obj: dict[str, Any], index: int) -> Step:
    """One sentinel step line as a `Step` (tool events parsed from the text when the line has none).

    Forward compatible: fields this importer does not know (a later sentinel schema) are kept in
    ``Step.extra`` / ``ToolEvent.extra`` and never reject the step; only the fields a layer uses
    (text, action, tool events, logprobs, latency, tokens, error, task) are checked strictly.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"a step line is a JSON object, got {type(obj).__name__}")
    action = obj.get("action")
    kind = StepKind.TOOL_CALL if action == "tool_call" else StepKind.FINAL if action in ("synthesis", "final") \
        else StepKind.TEXT
    text = obj.get("text") or ""
    meta: dict[str, Any] = {}
    extra = {k: v for k, v in obj.items() if k not in _SENTINEL_STEP_FIELDS}
    raw_events = obj.get("tool_events")
    if raw_events is None and kind is StepKind.TOOL_CALL:
        events = parse_tool_text(text) if isinstance(text, str) else []
        meta["tool_events_from_text"] = True
    elif isinstance(raw_events, list):
        events = []
        for position, raw_event in enumerate(raw_events):
            try:
                events.append(_tool_event_from_sentinel(raw_event))
            except ValidationError as exc:
                raise ValueError(f"tool_events.{position}.{_short(exc)}") from exc
    elif raw_events is None:
        events = []
    else:
        raise ValueError(f"tool_events is a list, got {type(raw_events).__name__}")
    if "schema" in obj:
        meta["schema"] = obj["schema"]
    raw_logprobs = obj.get("token_logprobs") or []
    if not isinstance(raw_logprobs, list):
        raise ValueError(f"token_logprobs is a list of numbers, got {type(raw_logprobs).__name__}")
    logprobs = [float(x) for x in raw_logprobs]
    error = obj.get("error", False)
    if not isinstance(error, bool | int | None):
        extra["error"] = error  # a later schema's error detail: kept; a non-empty one still marks the step
    known = {
        "index": index,
        "kind": kind,
        "text": text,
        "tool_events": events,
        "token_logprobs": logprobs,
        "logprobs_available": obj.get("logprobs_available", bool(logprobs)),
        "latency_s": obj.get("latency_s"),
        "output_tokens": obj.get("output_tokens"),
        "error": bool(error),
        "task": obj.get("task"),
        "meta": meta,
    }
    step: Step = _typed(Step, known, extra, _STEP_USED)
    return step


class _SentinelEntry(BaseModel):
    """The manifest fields the importer uses, checked strictly; every other key is kept in Episode.meta."""

    model_config = ConfigDict(extra="allow")

    episode_id: str = Field(min_length=1)
    file: str = Field(min_length=1)
    failure_class: str | None = None
    tau: int | None = Field(default=None, ge=0)
    T: int | None = Field(default=None, ge=0)
    model: str | None = None
    framework: str | None = None


# The sentinel manifest fields the importer uses, with the types it needs (the rest are kept as they are).
_SENTINEL_TYPES: dict[str, tuple[type, ...]] = {
    "episode_id": (str,), "file": (str,), "failure_class": (str, type(None)), "tau": (int, type(None)),
    "T": (int, type(None)), "model": (str, type(None)), "framework": (str, type(None)),
    "provenance": (dict, type(None)), "trace_sha256": (str, type(None)),
}


def _sentinel_entry_problem(entry: Any, position: int) -> str | None:
    """Why a sentinel manifest entry cannot be imported (one line), or None."""
    if not isinstance(entry, dict) or "episode_id" not in entry or "file" not in entry:
        return f"entry {position} has no episode_id/file"
    where = f"entry {position} ({str(entry['episode_id'])[:80]!r})"  # the id, so the user can find the entry
    for key, types in _SENTINEL_TYPES.items():
        value = entry.get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            return f"{where}: {key} must be {wanted}, got {type(value).__name__}"
    if not entry["episode_id"]:
        return f"entry {position}: episode_id is empty"
    return None


def _read_sentinel_episode(root: Path, entry: Any, position: int, sink: list[CorpusIssue],
                           verify: bool) -> Episode | None:
    problem = _sentinel_entry_problem(entry, position)
    if problem is not None:
        sink.append(CorpusIssue(MANIFEST, None, problem))
        return None
    try:
        fields = _SentinelEntry.model_validate(entry)
    except ValidationError as exc:
        sink.append(CorpusIssue(MANIFEST, None, f"entry {position} ({str(entry.get('episode_id'))[:80]!r}): "
                                                f"{_short(exc)}"))
        return None
    sha = entry.get("trace_sha256")
    lines = read_json_lines(root, fields.file, sink, sha if isinstance(sha, str) else None, verify)
    if lines is None:
        return None
    steps: list[Step] = []
    for lineno, obj in lines:
        try:
            steps.append(step_from_sentinel(obj, len(steps)))
        except (ValidationError, TypeError, ValueError, AttributeError) as exc:
            detail = _short(exc) if isinstance(exc, ValidationError) else str(exc)
            sink.append(CorpusIssue(fields.file, lineno, f"not a valid sentinel step: {detail}"))
    if fields.T is not None and len(steps) != fields.T:
        sink.append(CorpusIssue(fields.file, None, f"manifest says T={fields.T}, read {len(steps)} step(s)"))
    provenance = entry.get("provenance")
    provenance = provenance if isinstance(provenance, dict) else {}
    tools = provenance.get("tools")
    backend = provenance.get("backend")
    task = next((s.task for s in steps if s.task), None)
    return Episode(
        episode_id=fields.episode_id,
        steps=steps,
        task=task,
        label=fields.failure_class or HEALTHY,
        tau=fields.tau,
        framework=fields.framework or (backend if isinstance(backend, str) else None),
        model=fields.model,
        tools=[str(t) for t in tools] if isinstance(tools, list) else [],
        meta={k: v for k, v in entry.items() if k not in _SENTINEL_STANDARD},
    )


def _report_newer_schema(episode: Episode, entry: dict[str, Any], sink: list[CorpusIssue]) -> bool:
    """One warning per corpus when its steps carry a schema newer than this importer knows (read anyway)."""
    for step in episode.steps:
        schema = step.meta.get("schema")
        known = isinstance(schema, int) and not isinstance(schema, bool) and schema <= SENTINEL_SCHEMA
        if schema is not None and not known:
            sink.append(CorpusIssue(
                str(entry.get("file")), None, severity="warning",
                message=f"sentinel step schema {schema!r} is newer than {SENTINEL_SCHEMA}, the newest this "
                        "importer knows; read anyway: the fields it uses are checked, unknown fields are kept "
                        "in Step.extra / ToolEvent.extra (reported once per corpus)"))
            return True
    return False


# --------------------------------------------------------------------------- writing
def _step_line(step: Step) -> str:
    try:
        return step.model_dump_json(exclude_defaults=True)
    except ValueError:
        # Lone surrogates cannot be encoded as UTF-8; ASCII-escaped JSON keeps them losslessly.
        return json.dumps(step.model_dump(mode="python", exclude_defaults=True), ensure_ascii=True, default=str)


def episode_jsonl(episode: Episode) -> str:
    """An episode's steps as JSONL text (defaults left out to keep corpora small)."""
    return "".join(_step_line(step) + "\n" for step in episode.steps)


def _safe_file_name(episode_id: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", episode_id)
    if not name or name.startswith("."):
        name = "ep" + name
    return name + ".jsonl"


def write_corpus(
    path: str | os.PathLike[str],
    episodes: Iterable[Episode],
    *,
    name: str | None = None,
    rejected: Iterable[RejectedEntry] = (),
    generator: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
) -> Manifest:
    """Write a corpus: every episode file atomically, then the manifest (atomically, last)."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    entries: list[EpisodeEntry] = []
    seen: set[str] = set()
    for episode in episodes:
        if episode.episode_id in seen:
            raise CorpusError(f"episode id {episode.episode_id!r} appears twice")
        seen.add(episode.episode_id)
        file = _safe_file_name(episode.episode_id)
        text = episode_jsonl(episode)
        atomic_write_text(root / file, text)
        meta = dict(episode.meta)
        seed = meta.pop("seed", None)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            meta["seed"], seed = seed, None  # an imported corpus's own idea of a seed: kept as it was
        own_provenance = meta.pop("provenance", None)
        if own_provenance is not None and not isinstance(own_provenance, dict):
            meta["provenance"], own_provenance = own_provenance, None
        episode_provenance = {**(provenance or {}), **(own_provenance or {})}
        entries.append(
            EpisodeEntry(
                episode_id=episode.episode_id,
                file=file,
                label=episode.label,
                tau=episode.tau,
                T=len(episode.steps),
                model=episode.model,
                framework=episode.framework,
                task=episode.task,
                tools=episode.tools,
                seed=seed,
                sha256=sha256_bytes(text.encode("utf-8")),
                provenance=episode_provenance,
                meta=meta,
            )
        )
    manifest = Manifest(
        name=name or root.name,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        generator=generator or {},
        episodes=entries,
        rejected=list(rejected),
    )
    atomic_write_text(root / MANIFEST, manifest.model_dump_json(indent=1) + "\n")
    return manifest


def read_corpora(paths: Iterable[str | os.PathLike[str]], **kwargs: Any) -> list[Corpus]:
    """Read several corpora (convenience for the CLI)."""
    return [read_corpus(p, **kwargs) for p in paths]
