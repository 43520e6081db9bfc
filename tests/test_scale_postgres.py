"""Shared checkpoints: a LangGraph thread written by one worker is forked and re-run by another, on a real PostgreSQL."""

from __future__ import annotations

import operator
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

REPO = Path(__file__).resolve().parents[1]
POSTGRES_SCRIPT = REPO / "scripts" / "postgres.sh"


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A real PostgreSQL server on 127.0.0.1 for this session (scripts/postgres.sh), or a skip saying why not.

    `GUARDRAIL_POSTGRES_DSN` points the tests at a server you already run instead.
    """
    pytest.importorskip("langgraph.checkpoint.postgres", reason="langgraph-checkpoint-postgres is not installed "
                        "(pip install 'guardrail[scale]')")
    given = os.environ.get("GUARDRAIL_POSTGRES_DSN")
    if given:
        yield given
        return
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to run scripts/postgres.sh")
    started = subprocess.run(["bash", str(POSTGRES_SCRIPT), "start"], capture_output=True, text=True, timeout=90)
    if started.returncode != 0:
        pytest.skip("cannot start a throwaway PostgreSQL server on loopback (install it with "
                    f"`sudo scripts/postgres.sh install`): {started.stderr.strip()[-400:]}")
    dsn, data_dir = started.stdout.strip().splitlines()[-2:]
    try:
        yield dsn
    finally:
        subprocess.run(["bash", str(POSTGRES_SCRIPT), "stop", data_dir], capture_output=True, timeout=60)


# ----------------------------------------------------------------------------- a small real LangGraph graph
class TripState(TypedDict, total=False):
    question: str
    hint: str
    lookups: Annotated[list[str], operator.add]
    answer: str


# The "tool" the graph calls: a real lookup table the lookup node reads; a hint changes which row it reads.
FARES = {"LHR-JFK": 420, "LHR-JFK-wrong-date": 980}


def plan(state: TripState) -> dict[str, Any]:
    return {"lookups": ["plan"]}


def lookup(state: TripState) -> dict[str, Any]:
    route = "LHR-JFK" if state.get("hint") == "use the requested date" else "LHR-JFK-wrong-date"
    return {"lookups": [f"fare {route}={FARES[route]}"]}


def answer(state: TripState) -> dict[str, Any]:
    fare = int(state["lookups"][-1].split("=")[-1])
    return {"answer": f"the fare is {fare}"}


def build_graph(checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(TripState)
    builder.add_node("plan", plan)
    builder.add_node("lookup", lookup)
    builder.add_node("answer", answer)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "lookup")
    builder.add_edge("lookup", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer)


@contextmanager
def worker(dsn: str) -> Iterator[Any]:
    """One worker: its own connection, its own PostgresSaver, its own compiled graph; nothing shared in memory."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    with Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
        saver.setup()
        yield build_graph(saver)


def test_a_thread_started_by_one_worker_is_forked_and_rerun_by_another(postgres_dsn):
    thread = {"configurable": {"thread_id": f"trip-{uuid.uuid4().hex}"}}
    with worker(postgres_dsn) as worker_a:
        original = worker_a.invoke({"question": "fare LHR to JFK?"}, thread)
        original_head = worker_a.get_state(thread).config
    assert original["answer"] == "the fare is 980"

    with worker(postgres_dsn) as worker_b:
        history = list(worker_b.get_state_history(thread))
        after_plan = next(s for s in history if s.next == ("lookup",))
        # Roll back to the checkpoint before the bad lookup, add the hint as the node that wrote it, re-run.
        fork = worker_b.update_state(after_plan.config, {"hint": "use the requested date"}, as_node="plan")
        rerun = worker_b.invoke(None, fork)
        fork_parent = worker_b.get_state(fork).parent_config
    assert rerun["answer"] == "the fare is 420"
    assert rerun["lookups"] == ["plan", "fare LHR-JFK=420"]
    assert fork_parent["configurable"]["checkpoint_id"] == after_plan.config["configurable"]["checkpoint_id"]

    with worker(postgres_dsn) as auditor:
        kept = auditor.get_state(original_head)
        head = auditor.get_state(thread)
    # The original branch is intact and still readable; the thread's head is now the re-run.
    assert kept.values["answer"] == "the fare is 980"
    assert kept.values["lookups"] == ["plan", "fare LHR-JFK-wrong-date=980"]
    assert head.values["answer"] == "the fare is 420"


def test_many_threads_written_by_one_worker_are_all_visible_to_another(postgres_dsn):
    threads = [{"configurable": {"thread_id": f"fleet-{uuid.uuid4().hex}"}} for _ in range(5)]
    with worker(postgres_dsn) as writer:
        for thread in threads:
            writer.invoke({"question": "fare?"}, thread)
    with worker(postgres_dsn) as reader:
        states = [reader.get_state(thread) for thread in threads]
        depths = [len(list(reader.get_state_history(thread))) for thread in threads]
    assert all(s.values["answer"] == "the fare is 980" for s in states)
    assert len(set(depths)) == 1 and depths[0] >= 4  # input + plan + lookup + answer checkpoints, per thread


def test_an_unknown_thread_has_no_state_for_another_worker(postgres_dsn):
    with worker(postgres_dsn) as reader:
        state = reader.get_state({"configurable": {"thread_id": f"never-{uuid.uuid4().hex}"}})
    assert state.values == {} and state.next == ()
