"""Imported episodes into a run store: checked one by one (a bad one is one problem, the rest go in), written in batches."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from guardrail.core.corpus import MAX_DEPTH, CorpusIssue
from guardrail.core.events import Episode
from guardrail.core.runstore import RunStore, episode_ops, open_store, write_episodes
from guardrail.core.runstore.base import DEFAULT_MAX_STEPS

__all__ = ["MAX_EPISODE_ID_CHARS", "MAX_STEPS", "ImportReport", "Imported", "import_into", "nesting_exceeds", "problem",
           "safe_url"]

MAX_STEPS = DEFAULT_MAX_STEPS  # an imported episode with more steps is refused (a recorded one stores no more)
MAX_EPISODE_ID_CHARS = 512
_BATCH = 64  # episodes per store write

Imported = Episode | CorpusIssue  # what every reader yields: an episode, or one problem with one item


def problem(where: str, message: str, line: int | None = None) -> CorpusIssue:
    """One problem with one item (a thread, a line, a span, a file): what was left out and why."""
    return CorpusIssue(where, line, message)


def safe_url(url: str) -> str:
    """`url` without its password, to print (a PostgreSQL URL often carries one)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" if parts.username else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def nesting_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when lists/dicts/tuples in `value` nest deeper than `limit` (iterative: a hostile depth costs no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _episode_problem(episode: Episode) -> str | None:
    if len(episode.episode_id) > MAX_EPISODE_ID_CHARS:
        return f"an episode id of {len(episode.episode_id)} characters (at most {MAX_EPISODE_ID_CHARS})"
    if len(episode.steps) > MAX_STEPS:
        return f"{len(episode.steps)} steps, more than the {MAX_STEPS} an episode may store"
    for step in episode.steps:
        for event in step.tool_events:
            if nesting_exceeds(event.args):
                return f"step {step.index}: the arguments of {event.name[:80]!r} nest deeper than {MAX_DEPTH} levels"
    return None


@dataclass
class ImportReport:
    """What an import did: how many episodes went into the store (their ids) and every item left out."""

    store: str
    imported: int = 0
    episode_ids: list[str] = field(default_factory=list)
    problems: list[CorpusIssue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _write(store: RunStore, batch: list[Episode], meta: dict[str, Any], report: ImportReport) -> None:
    try:
        write_episodes(store, batch, meta=meta, batch=len(batch) + 1)
        written = batch
    except Exception:  # noqa: BLE001 - find the episode that cannot be serialized; store errors raise below
        written = []
        for episode in batch:
            try:
                episode_ops(episode, meta=meta)
            except Exception as exc:  # noqa: BLE001 - one unserializable episode costs that episode only
                report.problems.append(problem(episode.episode_id[:120], f"cannot be stored "
                                               f"({type(exc).__name__}: {str(exc)[:200]}): skipped"))
                continue
            write_episodes(store, [episode], meta=meta)
            written.append(episode)
    report.imported += len(written)
    report.episode_ids += [e.episode_id for e in written]


def import_into(store: RunStore | str | os.PathLike[str], items: Iterable[Imported], *, imported_from: str,
                meta: dict[str, Any] | None = None) -> ImportReport:
    """Write every episode `items` yields into `store` (a directory, ``sqlite:///...``, ``postgresql://...``),
    unlabelled and redacted like recorded runs; each problem (from the reader, or an episode refused here) is
    listed, never raised. The store itself failing (cannot open, cannot write) raises."""
    target = open_store(store)  # type: ignore[arg-type]  # a path-like opens as a directory store
    report = ImportReport(store=safe_url(target.url))
    stamp = {"imported_from": imported_from, **(meta or {})}
    batch: list[Episode] = []
    seen: set[str] = set()
    try:
        for item in _checked(items, seen, report):
            batch.append(item)
            if len(batch) >= _BATCH:
                _write(target, batch, stamp, report)
                batch = []
        if batch:
            _write(target, batch, stamp, report)
    finally:
        if target is not store:
            target.close()
    return report


def _checked(items: Iterable[Imported], seen: set[str], report: ImportReport) -> Iterator[Episode]:
    for item in items:
        if isinstance(item, CorpusIssue):
            report.problems.append(item)
            continue
        why = _episode_problem(item)
        if why is not None:
            report.problems.append(problem(item.episode_id[:120], f"{why}: skipped"))
            continue
        if item.episode_id in seen:
            report.problems.append(problem(item.episode_id[:120], "a second episode with this id in one import: "
                                                                  "skipped (the first one was kept)"))
            continue
        seen.add(item.episode_id)
        yield item
