"""The SQL run stores: SQLite (``sqlite:///runs.db``, embedded) and PostgreSQL (``postgresql://...``, many workers).

Both keep four tables: ``guardrail_store`` (the format and version), ``guardrail_episodes`` (one row
per episode: header, outcome, label, status), ``guardrail_steps`` (one row per step) and
``guardrail_decisions`` (the non-allow decisions as they happened, so an episode that never finished
still shows what fired). Each batch from the recorder is one transaction: a killed process loses at
most the batch being written; an episode whose outcome never came reads as incomplete. Several
processes may record into one store (SQLite in WAL mode on one machine, PostgreSQL anywhere).
"""

from __future__ import annotations

import abc
import json
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import ValidationError

from guardrail.core.corpus import MAX_DEPTH, MAX_LINE_BYTES, CorpusIssue
from guardrail.core.events import Episode, Step
from guardrail.core.fileio import json_nesting_exceeds
from guardrail.core.runstore.base import (
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

__all__ = ["PostgresStore", "SqliteStore", "sqlite_path"]

# A batch this long is written grouped by kind (see `_write_grouped`): fewer statements, more CPU for each, which
# pays on the batches a writer that fell behind drains (hundreds of operations), not on one episode's (measured:
# an 8-step episode costs 105 us written in order, 170 us grouped).
_GROUP_FROM = 64
_ROWS_PER_STATEMENT = 200  # rows of one multi-row INSERT (600 parameters: under SQLite's oldest limit of 999)
_EVICT_EVERY = 64  # batches between checks of the store's size (a SUM over the episodes table)
_MAX_DECISIONS = 10_000  # decisions read back per episode


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL (SQLAlchemy's convention)."""
    rest = url[len("sqlite://"):]
    if not rest.startswith("/"):
        raise StoreError(f"{url!r}: a SQLite store URL is sqlite:///relative/path.db or sqlite:////absolute/path.db")
    path = unquote(rest[1:])
    if not path:
        raise StoreError(f"{url!r}: no database file named")
    return path


def _loads(text: Any, where: str, sink: list[CorpusIssue]) -> Any:
    """A JSON column, refused (one issue) when it is not text, too long or nested too deep."""
    if not isinstance(text, str):
        sink.append(CorpusIssue(where, None, f"expected JSON text, got {type(text).__name__}: skipped"))
        return None
    data = text.encode("utf-8", "replace")
    if len(data) > MAX_LINE_BYTES:
        sink.append(CorpusIssue(where, None, f"longer than {MAX_LINE_BYTES} bytes: skipped"))
        return None
    if json_nesting_exceeds(data, MAX_DEPTH):
        sink.append(CorpusIssue(where, None, f"JSON nested deeper than {MAX_DEPTH} levels: skipped"))
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        sink.append(CorpusIssue(where, None, f"not valid JSON ({type(exc).__name__}): skipped"))
        return None


def _validated(model: Any, value: Any, where: str, sink: list[CorpusIssue]) -> Any:
    if value is None:
        return None
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        detail = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3])
        sink.append(CorpusIssue(where, None, f"{detail}: skipped"))
        return None


class _SqlStore(RunStore):
    """What the two SQL backends share; each names its placeholder, its id column and how it connects."""

    placeholder = "?"
    id_column = "id INTEGER PRIMARY KEY AUTOINCREMENT"
    bytes_type = "INTEGER"

    def __init__(self, url: str, *, create: bool, max_bytes: int) -> None:
        self.url = url
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._batches = 0
        self._conn = self._connect(create)
        try:
            if create:
                self._create()
            self._check_format()
        except Exception:
            self._conn.close()
            raise

    # ------------------------------------------------------------------ dialect
    @abc.abstractmethod
    def _connect(self, create: bool) -> Any:
        """An open DB-API connection to `self.url` (the database created when `create`)."""

    def _sql(self, text: str) -> str:
        return text.replace("?", self.placeholder)

    def _execute(self, cursor: Any, text: str, params: Sequence[Any] = ()) -> Any:
        cursor.execute(self._sql(text), tuple(params))
        return cursor

    # ------------------------------------------------------------------ schema
    def _create(self) -> None:
        statements = [
            "CREATE TABLE IF NOT EXISTS guardrail_store (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS guardrail_episodes ({self.id_column}, episode_id TEXT NOT NULL UNIQUE, "
            "started_at TEXT, finished_at TEXT, status TEXT NOT NULL, label TEXT, verdict TEXT, framework TEXT, "
            f"n_steps INTEGER NOT NULL DEFAULT 0, bytes {self.bytes_type} NOT NULL DEFAULT 0, header TEXT NOT NULL, "
            "outcome TEXT)",
            "CREATE TABLE IF NOT EXISTS guardrail_steps (episode_id TEXT NOT NULL, idx INTEGER NOT NULL, "
            "body TEXT NOT NULL, PRIMARY KEY (episode_id, idx))",
            f"CREATE TABLE IF NOT EXISTS guardrail_decisions ({self.id_column}, episode_id TEXT NOT NULL, "
            "body TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS guardrail_decisions_episode ON guardrail_decisions (episode_id)",
        ]
        with self._lock:
            cursor = self._conn.cursor()
            try:
                self._serialize_creation(cursor)
                for statement in statements:
                    self._execute(cursor, statement)
                self._execute(cursor, self._insert_ignore("guardrail_store", ("key", "value"), "key"),
                              ("format", STORE_FORMAT))
                self._execute(cursor, self._insert_ignore("guardrail_store", ("key", "value"), "key"),
                              ("version", str(STORE_VERSION)))
                self._conn.commit()
            except Exception:
                self._conn.rollback()
                raise
            finally:
                cursor.close()

    def _serialize_creation(self, cursor: Any) -> None:
        """Hold off other processes creating the same store at once (SQLite's own lock already does)."""
        return None

    def _insert_ignore(self, table: str, columns: Sequence[str], key: str) -> str:
        marks = ", ".join("?" for _ in columns)
        return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) ON CONFLICT ({key}) DO NOTHING"

    def _check_format(self) -> None:
        try:
            rows = dict(self._query("SELECT key, value FROM guardrail_store"))
        except Exception as exc:  # noqa: BLE001 - no table: not a store (each driver has its own error class)
            raise StoreError(f"{self.url}: no run store here ({type(exc).__name__}: {exc})"[:500]) from exc
        if rows.get("format") != STORE_FORMAT:
            raise StoreError(f"{self.url}: not a guardrail run store")
        if rows.get("version") != str(STORE_VERSION):
            raise StoreError(f"{self.url}: run store version {rows.get('version')!r}; this guardrail reads version "
                             f"{STORE_VERSION}: upgrade guardrail")

    def _query(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            cursor = self._conn.cursor()
            try:
                rows = list(self._execute(cursor, text, params).fetchall())
                self._conn.commit()  # end the read transaction (PostgreSQL would keep it open)
                return rows
            finally:
                cursor.close()

    # ------------------------------------------------------------------ writing
    def write(self, batch: Sequence[StoreOp]) -> None:
        with self._lock:
            cursor = self._conn.cursor()
            try:
                if len(batch) >= _GROUP_FROM and self._groupable(batch):
                    self._write_grouped(cursor, batch)
                else:
                    self._write_in_order(cursor, batch)
                self._conn.commit()
            except Exception:
                self._conn.rollback()
                raise
            finally:
                cursor.close()
            self._batches += 1
            if self._batches % _EVICT_EVERY == 0:
                self._evict()

    # Every statement the driver runs releases the GIL and must win it back, which in a process whose agent
    # threads never wait costs up to the interpreter's switch interval (5 ms): measured, a batch of 60 episodes
    # written a statement per episode took 280 ms of wall time for 30 ms of CPU, and the queue overflowed. So a
    # batch is written in a fixed number of statements, whatever it holds: one per kind of row (multi-row
    # INSERTs, and UPSERTs that update the episodes' rows), plus one to learn which episodes exist.
    @staticmethod
    def _groupable(batch: Sequence[StoreOp]) -> bool:
        """True when grouping by kind keeps the batch's meaning: no label, each episode begun at most once and
        never after its end (the recorder's batches, always; anything else is written in order)."""
        begun: set[str] = set()
        finished: set[str] = set()
        for op in batch:
            if isinstance(op, Label):
                return False
            if isinstance(op, Begin):
                if op.header.episode_id in begun or op.header.episode_id in finished:
                    return False
                begun.add(op.header.episode_id)
            elif isinstance(op, Finish):
                finished.add(op.episode_id)
        return True

    def _write_grouped(self, cursor: Any, batch: Sequence[StoreOp]) -> None:
        begins = [op for op in batch if isinstance(op, Begin)]
        steps = [op for op in batch if isinstance(op, StepLine)]
        decisions = [op for op in batch if isinstance(op, DecisionOp)]
        finishes = list({op.episode_id: op for op in batch if isinstance(op, Finish)}.values())
        begun = {op.header.episode_id for op in begins}
        named = sorted(begun | {op.episode_id for op in steps} | {op.episode_id for op in finishes})
        existing = self._existing(cursor, named)
        replaced = sorted(begun & existing)  # an episode run again under its id: the new run replaces it
        for start in range(0, len(replaced), _ROWS_PER_STATEMENT):
            chunk = replaced[start:start + _ROWS_PER_STATEMENT]
            marks = ", ".join(["?"] * len(chunk))
            for table in ("guardrail_steps", "guardrail_decisions", "guardrail_episodes"):
                self._execute(cursor, f"DELETE FROM {table} WHERE episode_id IN ({marks})", chunk)
        if begins:
            self._insert_rows(cursor, "INSERT INTO guardrail_episodes (episode_id, started_at, status, framework, "
                                      "header) VALUES {rows}",
                              [(op.header.episode_id, op.header.started_at, "running", op.header.framework,
                               op.header.model_dump_json()) for op in begins])
        known = existing | begun
        self._write_rows(cursor, steps, decisions, known)
        finishes = [op for op in finishes if op.episode_id in known]
        if finishes:
            self._insert_rows(cursor, "INSERT INTO guardrail_episodes (episode_id, header, finished_at, status, "
                                      "verdict, outcome) VALUES {rows} ON CONFLICT (episode_id) DO UPDATE SET "
                                      "finished_at = excluded.finished_at, status = excluded.status, "
                                      "verdict = excluded.verdict, outcome = excluded.outcome",
                              [(op.episode_id, "{}", op.outcome.finished_at, op.outcome.status, op.outcome.verdict,
                                op.outcome.model_dump_json()) for op in finishes])

    def _existing(self, cursor: Any, episode_ids: list[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(episode_ids), _ROWS_PER_STATEMENT):
            chunk = episode_ids[start:start + _ROWS_PER_STATEMENT]
            rows = self._execute(cursor, "SELECT episode_id FROM guardrail_episodes WHERE episode_id IN "
                                         f"({', '.join(['?'] * len(chunk))})", chunk).fetchall()
            found.update(row[0] for row in rows)
        return found

    def _write_in_order(self, cursor: Any, batch: Sequence[StoreOp]) -> None:
        steps: list[StepLine] = []
        decisions: list[DecisionOp] = []
        for op in batch:
            if isinstance(op, StepLine):
                steps.append(op)  # written together: one statement for many rows
                continue
            if isinstance(op, DecisionOp):
                decisions.append(op)
                continue
            self._write_rows(cursor, steps, decisions)
            self._write_one(cursor, op)
        self._write_rows(cursor, steps, decisions)

    def _write_rows(self, cursor: Any, steps: list[StepLine], decisions: list[DecisionOp],
                    known: set[str] | None = None) -> None:
        """Steps and decisions, many rows to a statement, and the step counts of their episodes (of those in
        `known`, when given: the episodes that exist)."""
        if steps:
            # One row per step: a step sent twice keeps its last body (PostgreSQL refuses a statement that
            # would update the same row twice).
            latest = list({(op.episode_id, op.index): op for op in steps}.values())
            self._insert_rows(cursor, "INSERT INTO guardrail_steps (episode_id, idx, body) VALUES {rows} "
                                      "ON CONFLICT (episode_id, idx) DO UPDATE SET body = excluded.body",
                              [(op.episode_id, op.index, op.body) for op in latest])
            counts: dict[str, list[int]] = {}
            for op in latest:
                count = counts.setdefault(op.episode_id, [0, 0])
                count[0] += 1
                count[1] += len(op.body)
            if known is None:
                cursor.executemany(self._sql("UPDATE guardrail_episodes SET n_steps = n_steps + ?, "
                                             "bytes = bytes + ? WHERE episode_id = ? AND status = 'running'"),
                                   [(n, size, episode_id) for episode_id, (n, size) in counts.items()])
            elif any(episode_id in known for episode_id in counts):
                self._insert_rows(cursor, "INSERT INTO guardrail_episodes (episode_id, status, header, n_steps, "
                                          "bytes) VALUES {rows} ON CONFLICT (episode_id) DO UPDATE SET "
                                          "n_steps = guardrail_episodes.n_steps + excluded.n_steps, "
                                          "bytes = guardrail_episodes.bytes + excluded.bytes "
                                          "WHERE guardrail_episodes.status = 'running'",
                                  [(episode_id, "running", "{}", n, size) for episode_id, (n, size) in counts.items()
                                   if episode_id in known])
            steps.clear()
        if decisions:
            self._insert_rows(cursor, "INSERT INTO guardrail_decisions (episode_id, body) VALUES {rows}",
                              [(op.episode_id, json.dumps(op.body, default=str)) for op in decisions])
            decisions.clear()

    def _insert_rows(self, cursor: Any, template: str, rows: list[tuple[Any, ...]]) -> None:
        width = len(rows[0])
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            chunk = rows[start:start + _ROWS_PER_STATEMENT]
            marks = ", ".join(["(" + ", ".join(["?"] * width) + ")"] * len(chunk))
            self._execute(cursor, template.format(rows=marks), [value for row in chunk for value in row])

    def _write_one(self, cursor: Any, op: StoreOp) -> None:
        if isinstance(op, Begin):
            header = op.header
            row = (header.episode_id, header.started_at, header.framework, header.model_dump_json())
            insert = ("INSERT INTO guardrail_episodes (episode_id, started_at, status, framework, header) "
                      "VALUES (?, ?, 'running', ?, ?)")
            if self._execute(cursor, insert + " ON CONFLICT (episode_id) DO NOTHING", row).rowcount != 1:
                # The id was recorded before (an episode run again under its id): the new run replaces it.
                for table in ("guardrail_steps", "guardrail_decisions", "guardrail_episodes"):
                    self._execute(cursor, f"DELETE FROM {table} WHERE episode_id = ?", (header.episode_id,))
                self._execute(cursor, insert, row)
        elif isinstance(op, Finish):
            outcome = op.outcome
            self._execute(cursor, "UPDATE guardrail_episodes SET finished_at = ?, status = ?, verdict = ?, outcome = ? "
                                  "WHERE episode_id = ?",
                          (outcome.finished_at, outcome.status, outcome.verdict, outcome.model_dump_json(),
                           op.episode_id))
        elif isinstance(op, Label):
            self._execute(cursor, "UPDATE guardrail_episodes SET label = ? WHERE episode_id = ?",
                          (op.label, op.episode_id))

    def _evict(self) -> None:
        """Delete the oldest finished episodes (unlabelled first) while the store is over its size cap."""
        cursor = self._conn.cursor()
        try:
            total = self._execute(cursor, "SELECT COALESCE(SUM(bytes), 0) FROM guardrail_episodes").fetchone()[0]
            if int(total) <= self.max_bytes:
                return
            target = int(self.max_bytes * 0.9)
            rows = self._execute(cursor, "SELECT episode_id, bytes FROM guardrail_episodes WHERE status != 'running' "
                                         "ORDER BY (label IS NOT NULL), id").fetchall()
            for episode_id, size in rows:
                if total <= target:
                    break
                for table in ("guardrail_steps", "guardrail_decisions", "guardrail_episodes"):
                    self._execute(cursor, f"DELETE FROM {table} WHERE episode_id = ?", (episode_id,))
                total -= int(size)
            self._conn.commit()
        finally:
            cursor.close()

    def set_labels(self, labels: Mapping[str, str]) -> list[str]:
        known = {row[0] for row in self._query("SELECT episode_id FROM guardrail_episodes")}
        missing = [episode_id for episode_id in labels if episode_id not in known]
        stamp = now()
        self.write([Label(episode_id, label, stamp) for episode_id, label in labels.items() if episode_id in known])
        return missing

    # ------------------------------------------------------------------ reading
    def _rows(self, ids: Collection[str] | None) -> list[tuple[Any, ...]]:
        base = "SELECT episode_id, label, header, outcome, n_steps FROM guardrail_episodes"
        if ids is None:
            return self._query(base + " ORDER BY id")
        wanted = list(ids)
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            rows += self._query(base + f" WHERE episode_id IN ({', '.join('?' for _ in chunk)}) ORDER BY id", chunk)
        return rows

    def _decisions(self, episode_id: str, sink: list[CorpusIssue]) -> list[dict[str, Any]]:
        out = []
        rows = self._query("SELECT body FROM guardrail_decisions WHERE episode_id = ? ORDER BY id LIMIT ?",
                           (episode_id, _MAX_DECISIONS))
        for (body,) in rows:
            value = _loads(body, f"decision of {episode_id[:80]!r}", sink)
            if isinstance(value, dict):
                out.append(value)
        return out

    def _record(self, row: tuple[Any, ...], sink: list[CorpusIssue], *, decisions: bool = False
                ) -> tuple[RunSummary, RunHeader, RunOutcome | None, list[dict[str, Any]]] | None:
        episode_id, label, header_text, outcome_text, n_steps = row
        where = f"episode {str(episode_id)[:80]!r}"
        header = _validated(RunHeader, _loads(header_text, where + " header", sink), where + " header", sink)
        if header is None:
            return None
        outcome = None
        if outcome_text is not None:
            outcome = _validated(RunOutcome, _loads(outcome_text, where + " outcome", sink), where + " outcome", sink)
        # An unfinished run's findings are its decisions'; a summary of a finished one needs none of them.
        made = self._decisions(episode_id, sink) if outcome is None or decisions else []
        if label is not None and (not isinstance(label, str) or not label or len(label) > 200):
            sink.append(CorpusIssue(where, None, "its label is not a short string: read as unlabelled"))
            label = None
        summary = summary_of(header, outcome, label, made, n_steps=int(n_steps or 0))
        return summary, header, outcome, made

    def summaries(self, problems: list[CorpusIssue] | None = None) -> list[RunSummary]:
        sink = problems if problems is not None else []
        out = []
        for row in self._rows(None):
            record = self._record(row, sink)
            if record is not None:
                out.append(record[0])
        return out

    def episodes(self, ids: Collection[str] | None = None, *,
                 problems: list[CorpusIssue] | None = None) -> Iterator[Episode]:
        sink = problems if problems is not None else []
        for row in self._rows(ids):
            record = self._record(row, sink, decisions=True)
            if record is None:
                continue
            summary, header, outcome, decisions = record
            if outcome is not None:  # a finished run's decisions are read for its episode, not its summary
                decisions = self._decisions(summary.episode_id, sink)
            steps: list[Step] = []
            for index, body in self._query("SELECT idx, body FROM guardrail_steps WHERE episode_id = ? ORDER BY idx",
                                           (summary.episode_id,)):
                value = _loads(body, f"step {index} of {summary.episode_id[:80]!r}", sink)
                if value is None:
                    continue
                try:
                    steps.append(Step.model_validate(value))
                except ValidationError as exc:
                    sink.append(CorpusIssue(f"step {index} of {summary.episode_id[:80]!r}", None,
                                            f"not a valid step: {exc.errors()[0]['msg']}"))
            yield episode_of(summary, header, outcome, steps, decisions)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class SqliteStore(_SqlStore):
    """The embedded store: one SQLite file, WAL journaling (readers never block the recorder)."""

    def _connect(self, create: bool) -> Any:
        import os
        import sqlite3

        path = sqlite_path(self.url)
        if not create and path != ":memory:" and not os.path.isfile(path):
            raise StoreError(f"{self.url}: no such database file")
        if create and path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False, timeout=30.0)
        if create:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # durable across a killed process (not a power cut)
        return conn


class PostgresStore(_SqlStore):
    """The shared store for many workers (psycopg 3; ``pip install 'guardrail[scale]'``)."""

    placeholder = "%s"
    id_column = "id BIGSERIAL PRIMARY KEY"
    bytes_type = "BIGINT"

    def _serialize_creation(self, cursor: Any) -> None:
        # Concurrent CREATE TABLE IF NOT EXISTS race in PostgreSQL's catalog: one creator at a time, per database.
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('guardrail run store schema'))")

    def _connect(self, create: bool) -> Any:
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError("a PostgreSQL run store needs psycopg: pip install 'guardrail[scale]'") from exc
        parts = urlsplit(self.url)
        try:
            return psycopg.connect(self.url, connect_timeout=10)
        except psycopg.Error as exc:
            where = f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"
            raise StoreError(f"cannot connect to the PostgreSQL store at {where}: {type(exc).__name__}") from exc
