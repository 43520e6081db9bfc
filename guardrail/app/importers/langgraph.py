"""LangGraph checkpoints as episodes: each thread's latest checkpoint, read by the real saver, its messages through the one step path.

The checkpointer database is outside input (another process wrote it, perhaps an attacker), so it
is opened read-only (SQLite ``mode=ro``, a read-only PostgreSQL session; the saver's ``setup()``
is never called) and deserialized with LangGraph's strict serializer: only the types LangGraph
lists as safe (LangChain messages, datetimes...) are rebuilt, so a planted row that names
``os.system`` is data, never a call. Thread ids come from one metadata query; each thread's latest
checkpoint is read on its own with ``saver.get_tuple`` (``saver.list(None)`` would deserialize
every checkpoint of every thread, and one bad row would end it for all). A thread that cannot be
read, holds no messages, or holds something other than LangChain messages is one problem; the
other threads go on.

A thread is one episode per user turn, as `GuardMiddleware` records live (one episode per
``invoke``): a turn starts at a human message, its task is that message, its steps are what
`adapters.steps.steps_from_langchain` makes of the turn's messages. The first turn's episode id
is the thread id, later turns ``THREAD#2``, ``THREAD#3``..., so importing the same database again
replaces what the last import wrote.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from adapters.steps import content_text, steps_from_langchain
from guardrail.app.importers.store import MAX_EPISODE_ID_CHARS, Imported, nesting_exceeds, problem, safe_url
from guardrail.core.corpus import MAX_DEPTH
from guardrail.core.events import Episode
from guardrail.core.runstore.sql import sqlite_path

__all__ = ["MAX_MESSAGES", "CheckpointerError", "langgraph_episodes"]

MAX_MESSAGES = 10_000  # a thread with more messages is refused (its steps would pass any store's cap)
FRAMEWORK = "langgraph"  # what GuardMiddleware records
_THREADS_SQL = ("SELECT thread_id FROM checkpoints WHERE checkpoint_ns = '' GROUP BY thread_id "
                "ORDER BY MIN(checkpoint_id)")


class CheckpointerError(Exception):
    """A checkpointer that cannot be read at all (no such database, no LangGraph tables, a missing driver)."""


def _strict_serde() -> Any:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    # None: rebuild only LangGraph's own safe types (SAFE_MSGPACK_TYPES), whatever LANGGRAPH_STRICT_MSGPACK says.
    return JsonPlusSerializer(allowed_msgpack_modules=None, allowed_json_modules=None)


def _missing(extra: str, what: str, exc: ImportError) -> CheckpointerError:
    return CheckpointerError(f"reading {what} needs {exc.name or 'its driver'}: pip install 'guardrail[{extra}]'")


@contextmanager
def _sqlite_saver(url: str) -> Iterator[tuple[Any, Any]]:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:
        raise _missing("langgraph", "a SQLite checkpointer", exc) from exc
    try:
        path = Path(sqlite_path(url))
    except Exception as exc:  # noqa: BLE001 - the store's URL rules, its message
        raise CheckpointerError(str(exc)) from exc
    if not path.is_file():
        raise CheckpointerError(f"{url}: no such SQLite database")
    try:
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise CheckpointerError(f"{url}: cannot open ({exc})") from exc
    try:
        yield SqliteSaver(conn, serde=_strict_serde()), conn
    finally:
        conn.close()


@contextmanager
def _postgres_saver(url: str) -> Iterator[tuple[Any, Any]]:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise _missing("scale", "a PostgreSQL checkpointer", exc) from exc
    try:
        # What PostgresSaver.from_conn_string opens, in a session that cannot write.
        conn = Connection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                                  options="-c default_transaction_read_only=on")
    except Exception as exc:  # noqa: BLE001 - psycopg's errors name the server, never the password we strip
        raise CheckpointerError(f"{safe_url(url)}: cannot connect ({type(exc).__name__})") from exc
    try:
        yield PostgresSaver(conn, serde=_strict_serde()), conn  # type: ignore[arg-type]
    finally:
        conn.close()


def _thread_ids(conn: Any, url: str) -> list[Any]:
    try:
        rows = conn.execute(_THREADS_SQL).fetchall()
    except Exception as exc:  # noqa: BLE001 - sqlite3 and psycopg raise their own kinds
        raise CheckpointerError(f"{safe_url(url)}: no LangGraph checkpoints here "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from exc
    return [row["thread_id"] if isinstance(row, Mapping) else row[0] for row in rows]


def _turns(messages: Sequence[Any]) -> list[tuple[str | None, list[Any]]]:
    """(task, messages) per user turn: a turn starts at a human message (messages before the first one join it)."""
    turns: list[tuple[str | None, list[Any]]] = []
    for message in messages:
        if message.type == "human":
            turns.append((content_text(message.content), []))
        elif message.type in ("ai", "tool"):
            if not turns:
                turns.append((None, []))
            turns[-1][1].append(message)
    return [(task, turn) for task, turn in turns if any(m.type == "ai" for m in turn)]


def _message_problem(messages: Any) -> str | None:
    from langchain_core.messages import BaseMessage

    if not isinstance(messages, list):
        return f"its 'messages' is a {type(messages).__name__}, not a list of messages"
    if len(messages) > MAX_MESSAGES:
        return f"{len(messages)} messages, more than the {MAX_MESSAGES} an imported thread may have"
    for index, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            return (f"messages[{index}] is a {type(message).__name__}, not a LangChain message (or a type the "
                    "safe deserializer does not rebuild)")
        if nesting_exceeds(message.content):
            return f"messages[{index}]: its content nests deeper than {MAX_DEPTH} levels"
        for call in getattr(message, "tool_calls", None) or []:
            if nesting_exceeds(call.get("args")):
                return f"messages[{index}]: the arguments of {str(call.get('name'))[:80]!r} nest deeper than {MAX_DEPTH} levels"
    return None


def _thread(saver: Any, thread_id: Any) -> list[Imported]:
    where = f"thread {str(thread_id)[:120]!r}"
    if not isinstance(thread_id, str) or not thread_id or len(thread_id) > MAX_EPISODE_ID_CHARS - 8:
        return [problem(where, f"the thread id is not a string of 1 to {MAX_EPISODE_ID_CHARS - 8} characters: skipped")]
    try:
        saved = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    except Exception as exc:  # noqa: BLE001 - a garbage row raises whatever the deserializer raises
        return [problem(where, f"its latest checkpoint cannot be read ({type(exc).__name__}: {str(exc)[:200]}): "
                               "skipped")]
    checkpoint = getattr(saved, "checkpoint", None)
    values = checkpoint.get("channel_values") if isinstance(checkpoint, Mapping) else None
    if not isinstance(values, Mapping):
        what = type(checkpoint).__name__ if not isinstance(checkpoint, Mapping) else "a mapping without channel values"
        return [problem(where, f"its latest checkpoint cannot be read as a LangGraph checkpoint ({what}): skipped")]
    if values.get("messages") is None:
        return [problem(where, "its latest checkpoint holds no messages (not a message-passing graph?): skipped")]
    why = _message_problem(values["messages"])
    if why is not None:
        return [problem(where, f"{why}: skipped")]
    turns = _turns(values["messages"])
    if not turns:
        return [problem(where, "no model turn in its messages: skipped")]
    checkpoint_id = saved.config.get("configurable", {}).get("checkpoint_id")
    # The live guard records the tools the agent declared; a checkpoint keeps only the calls: every tool the thread
    # called stands for them (fit-spec groups runs by their tools).
    tools = list(dict.fromkeys(str(c.get("name")) for m in values["messages"] for c in getattr(m, "tool_calls", None) or []))
    out: list[Imported] = []
    for number, (task, messages) in enumerate(turns, start=1):
        try:
            steps = steps_from_langchain(messages, task=task)
        except Exception as exc:  # noqa: BLE001 - a message the step path cannot read: this thread only
            return [problem(where, f"turn {number}: cannot be read as steps ({type(exc).__name__}: "
                                   f"{str(exc)[:200]}): skipped")]
        out.append(Episode(episode_id=thread_id if number == 1 else f"{thread_id}#{number}", steps=steps, task=task,
                           framework=FRAMEWORK, tools=tools, meta={"thread_id": thread_id, "turn": number,
                                                      "checkpoint_id": checkpoint_id}))
    return out


def langgraph_episodes(url: str) -> Iterator[Imported]:
    """Every thread of the checkpointer at `url` (``sqlite:///PATH``, ``postgresql://...``) as episodes, oldest
    thread first, with one problem per thread that cannot be imported. Raises `CheckpointerError` at once (before
    anything is read) when the checkpointer cannot be read at all."""
    if url.startswith("sqlite://"):
        opener = _sqlite_saver
    elif url.startswith(("postgresql://", "postgres://")):
        opener = _postgres_saver
    else:
        raise CheckpointerError(f"{safe_url(url)}: a checkpointer is sqlite:///PATH or postgresql://...")
    stack = ExitStack()
    try:
        saver, conn = stack.enter_context(opener(url))
        thread_ids = _thread_ids(conn, url)
    except BaseException:
        stack.close()
        raise
    return _threads(stack, saver, thread_ids)


def _threads(stack: ExitStack, saver: Any, thread_ids: list[Any]) -> Iterator[Imported]:
    with stack:
        for thread_id in thread_ids:
            yield from _thread(saver, thread_id)
