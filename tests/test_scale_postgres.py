"""Shared checkpoints: a LangGraph thread written by one worker is forked and re-run by another, on a real PostgreSQL."""

from __future__ import annotations

import operator
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

REPO = Path(__file__).resolve().parents[1]
POSTGRES_SCRIPT = REPO / "scripts" / "postgres.sh"


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


# ----------------------------------------------------------------------------- the repair API on shared checkpoints
PRICES = {"flight": 120, "hotel": 75}


def _booking_model_class() -> type:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class BookingModel(BaseChatModel):
        """Scripted agent: prices each item with the tool, then states a total 10 too high unless guardrail hinted."""

        calls: int = 0

        @property
        def _llm_type(self) -> str:
            return "scripted-booking"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
            self.calls += 1
            asked = [m.tool_calls[0]["args"]["item"] for m in messages if isinstance(m, AIMessage) and m.tool_calls]
            missing = [item for item in PRICES if item not in asked]
            if missing:
                reply = AIMessage(content="", tool_calls=[{"name": "price", "args": {"item": missing[0]},
                                                           "id": f"call-{self.calls}-{missing[0]}"}])
            else:
                prices = [int(m.content) for m in messages if isinstance(m, ToolMessage)]
                hinted = any(isinstance(m, HumanMessage) and m.name == "guardrail" for m in messages)
                reply = AIMessage(content=f"total = {sum(prices) + (0 if hinted else 10)}")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    return BookingModel


def _total_check() -> Any:
    import re

    from guardrail import Finding, Layer

    class TotalCheck(Layer):
        """The stated total must equal the sum of the prices the run received."""

        name = "verify"

        def on_finish(self, ctx: Any, episode: Any) -> list[Finding]:
            match = re.search(r"total = (\d+)", episode.answer or "")
            received = sum(int(e.result) for s in episode.steps for e in s.tool_events if e.result)
            if match is None or int(match.group(1)) == received:
                return []
            return [Finding(layer=self.name, check="total_consistency", blocking=True, step=len(episode.steps) - 1,
                            message=f"stated {match.group(1)}, tools say {received}")]

    return TotalCheck()


@contextmanager
def agent_worker(dsn: str) -> Iterator[dict[str, Any]]:
    """One agent worker: its own connection and PostgresSaver, its own model and tools, a real create_agent graph."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    tool_calls: list[str] = []

    @tool
    def price(item: str) -> str:
        """The price of one booking item, in euros."""
        tool_calls.append(item)
        return str(PRICES[item])

    with Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
        saver.setup()
        model = _booking_model_class()()
        yield {"graph": create_agent(model, [price], checkpointer=saver), "model": model, "tool_calls": tool_calls}


def _branch(graph: Any, head_config: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    from adapters.langgraph_repair import LangGraphCheckpoints

    return [(s.config["configurable"]["checkpoint_id"],
             [(type(m).__name__, str(m.content)) for m in s.values.get("messages", [])])
            for s in LangGraphCheckpoints(graph, head_config).original_branch()]


def test_repair_rolls_back_and_reruns_a_thread_another_worker_started(postgres_dsn):
    from langchain_core.messages import HumanMessage

    from adapters.langgraph_repair import repair_langgraph, run_langgraph
    from guardrail import Finding, Guard
    from repair import Repairer

    config = {"configurable": {"thread_id": f"booking-{uuid.uuid4().hex}"}}
    # Worker A runs the agent under the guard in report mode: the wrong total is flagged, nothing re-run.
    with agent_worker(postgres_dsn) as worker_a:
        logged = run_langgraph(Repairer(Guard([_total_check()], mode="report")),
            worker_a["graph"], {"messages": [HumanMessage("Price the flight and the hotel; give the total.")]},
            config)
        original_head = worker_a["graph"].get_state(config).config
        original_branch = _branch(worker_a["graph"], original_head)
        assert worker_a["tool_calls"] == ["flight", "hotel"] and worker_a["model"].calls == 3
    assert logged.outcome == "logged" and logged.answer == "total = 205"  # report mode delivers, and logs
    assert [f.check for f in logged.findings] == ["total_consistency"]
    handed_over = [f.model_dump_json() for f in logged.findings]  # what a queue would carry to another worker

    # Worker B never saw the run: it reads the thread from Postgres, rolls back and re-runs it.
    with agent_worker(postgres_dsn) as worker_b:
        flags = [Finding.model_validate_json(text) for text in handed_over]
        outcome = repair_langgraph(Repairer(Guard([_total_check()], mode="intervene"), rung="located"),
            worker_b["graph"], config, flags)
        b_model_calls, b_tool_calls = worker_b["model"].calls, list(worker_b["tool_calls"])
    assert outcome.outcome == "repaired" and outcome.answer == "total = 195"
    assert outcome.attempts[0].extra_model_calls == b_model_calls == 1  # only the step after the fork ran again
    assert b_tool_calls == []  # the prices came from the checkpoint, not from new tool calls

    # A third connection sees both branches: the original exactly as worker A left it, the repair as the head.
    with agent_worker(postgres_dsn) as auditor:
        assert _branch(auditor["graph"], original_head) == original_branch
        head = auditor["graph"].get_state(config)
        original_answer = auditor["graph"].get_state(original_head).values["messages"][-1].content
    assert head.values["messages"][-1].content == "total = 195"
    assert original_answer == "total = 205"
    assert head.config["configurable"]["checkpoint_id"] != original_head["configurable"]["checkpoint_id"]


def test_an_unknown_thread_has_no_state_for_another_worker(postgres_dsn):
    with worker(postgres_dsn) as reader:
        state = reader.get_state({"configurable": {"thread_id": f"never-{uuid.uuid4().hex}"}})
    assert state.values == {} and state.next == ()
