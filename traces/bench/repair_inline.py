"""`guardrail bench repair --inline`: repair inside the run, per framework and checkpointer, on flagged testbed runs.

LangGraph: the testbed's ``create_agent`` graph with ``GuardMiddleware(guard, repair=True)``, on each
saver (``InMemorySaver``, ``SqliteSaver``, ``AsyncSqliteSaver`` through ``ainvoke``, ``PostgresSaver`` on
a throwaway loopback server when one can start). AutoGen: a ``RoundRobinGroupChat`` (``max_turns=1``)
of the testbed agent, run with `adapters.autogen_repair.arun_autogen_team`. The guard, in intervene
mode, holds each task's verifier spec and the study oracle (the answer graded against the task's
ground truth, which no hint ever sees), so every wrong answer is flagged at the end of the run.

One row per configuration: ``n`` flagged runs; ``recovered`` those wrong before and right in the
result the run returned; ``broken`` those right before (a check's false alarm) and wrong after;
``original_intact`` how many originals are unchanged where the framework keeps them (LangGraph:
checkpoint by checkpoint, the original branch holds what the same run without repair holds;
AutoGen: the team's saved states of the original run, compared before and after); and the mean
``extra_model_calls`` per flagged run. The scripted policy slips with a seeded draw and turns careful
when a hint names its slip: recovery figures are mechanism checks of the plumbing, not a measure of
what a hint does for a real model (no p-values).

With a real model (``spec``: `traces.models.EndpointSpec`, ``--model local:smollm2``) the agents are
the testbed's small-model agents on the small tasks (one lookup tool, the first reply must call it,
at most ``spec.max_steps`` model calls per run: LangChain's ``ModelCallLimitMiddleware`` ends a run
that keeps calling, so the end-of-run check still runs), each configuration runs once per rung, and
the k-th model call of an episode carries seed ``episode seed * 64 + k`` (forks included): a fork
samples anew instead of replaying the original call, and the same episode under two rungs starts
from the same seeds, so rungs pair on episodes. A rung's ``p_vs_resample`` is the exact McNemar
test on the episodes flagged under both (delivered answer right or not). LangGraph's
``original_intact`` is then checked against the original run's own messages, taken by a middleware
as the run ended (a replay of a sampled run is no reference): every checkpoint of the original
branch must hold a prefix of them, its head all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardrail.core.events import Finding
from guardrail.core.layer import Layer
from repair.rungs import Rung

if TYPE_CHECKING:
    from traces.models import EndpointSpec

__all__ = ["CONFIGURATIONS", "REAL_CONFIGURATIONS", "OracleCheck", "run_inline"]

CONFIGURATIONS = (("langgraph", "memory"), ("langgraph", "sqlite"), ("langgraph", "async_sqlite"),
                  ("langgraph", "postgres"), ("autogen_team", "team_state"))
REAL_CONFIGURATIONS = (("langgraph", "sqlite"), ("autogen_team", "team_state"))  # a real model: one saver suffices
SLIPS = ("arithmetic_rate", "skip_rate", "hallucinate_rate")
POSTGRES_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "postgres.sh"


class OracleCheck(Layer):
    """The study oracle as an end-of-run check: the answer graded against the task's ground truth."""

    name = "oracle"

    def __init__(self, task: Any) -> None:
        self.task = task

    def on_finish(self, ctx: Any, episode: Any) -> list[Finding]:
        from traces.labeller import grade_episode

        grade = grade_episode(episode, self.task)
        if grade.label == "healthy":
            return []
        # Names only that the answer failed, never the expected value.
        return [Finding(layer=self.name, check="answer_graded_wrong", message="the final answer was graded wrong",
                        blocking=True, step=max(0, len(episode.steps) - 1))]


def _right(answer: str | None, task: Any) -> bool:
    from traces.labeller import stated_total

    stated = stated_total(answer or "")
    return stated is not None and abs(stated - task.expected_total) < 0.5


def _episode(index: int, seed: int, slip_rate: float, spec: EndpointSpec | None = None) -> tuple[Any, Any]:
    from traces.policy import Policy
    from traces.tasks import SMALL_TASK_KINDS, make_task
    from traces.tools import BookingDB

    episode_seed = seed * 100_003 + index
    if spec is not None:  # a real model: the small tasks; the policy only carries the episode's seed
        return make_task(episode_seed, db=BookingDB(), kinds=SMALL_TASK_KINDS), Policy(seed=episode_seed)
    slip = SLIPS[index % 4] if index % 4 < 3 else None  # three of four episodes may slip, one is left alone
    rates: dict[str, Any] = {slip: slip_rate} if slip else {}
    policy = Policy(seed=episode_seed, **rates)
    return make_task(episode_seed, db=BookingDB()), policy


def _guard(task: Any) -> Any:
    from guardrail import Guard
    from traces.bench.repair import task_spec

    return Guard.default(spec=task_spec(task), extra_layers=[OracleCheck(task)], mode="intervene")


def _call_seed(policy: Any) -> int:
    return int(policy.seed) * 64  # the first of the episode's per-call seeds (at most 64 calls an episode)


def _real_middleware(spec: EndpointSpec, policy: Any, snapshot: dict[str, Any]) -> list[Any]:
    """The small-model agent's middleware, and one that keeps the original run's messages as it ends."""
    from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware

    from traces.agents import real_model_middleware

    class KeepOriginal(AgentMiddleware[Any, Any, Any]):
        # After GuardMiddleware in the list, so its after_agent runs first: before any fork. Forks end here
        # too (they run the same graph); only the first run is kept.
        def after_agent(self, state: Any, runtime: Any) -> None:
            snapshot.setdefault("messages", _contents(state.get("messages", [])))

        async def aafter_agent(self, state: Any, runtime: Any) -> None:
            self.after_agent(state, runtime)

    return [real_model_middleware(spec.first_turn_tool_choice, seed_per_call=_call_seed(policy)),
            ModelCallLimitMiddleware(run_limit=spec.max_steps, exit_behavior="end"), KeepOriginal()]


def _contents(messages: list[Any]) -> list[tuple[str, str]]:
    return [(type(m).__name__, json.dumps(m.content, default=str)) for m in messages]


def _reference(task: Any, policy: Any) -> list[list[tuple[str, str]]]:
    """The same guarded run without repair (the same graph shape): each checkpoint's messages along its branch."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from adapters.langchain import GuardMiddleware
    from adapters.langgraph_repair import LangGraphCheckpoints
    from traces.agents import build_langgraph_agent
    from traces.tools import booking_tools

    graph = build_langgraph_agent(task, policy, toolbox=booking_tools(), checkpointer=InMemorySaver(),
                                  middleware=[GuardMiddleware(_guard(task))])
    config = {"configurable": {"thread_id": "reference"}, "recursion_limit": 4 * policy.max_steps + 10}
    graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)
    return [_contents(s.values.get("messages", [])) for s in LangGraphCheckpoints(graph, config).original_branch()]


async def _langgraph_run(task: Any, policy: Any, saver: Any, thread: str, use_async: bool, *,
                         rung: Rung = "adaptive", spec: EndpointSpec | None = None) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from adapters.langchain import GuardMiddleware
    from adapters.langgraph_repair import LangGraphCheckpoints
    from repair import Repairer
    from traces.agents import build_langgraph_agent
    from traces.tools import booking_tools

    guard = _guard(task)
    middleware = GuardMiddleware(guard, repair=Repairer(guard, rung=rung))
    snapshot: dict[str, Any] = {}
    if spec is None:
        graph = middleware.bind(build_langgraph_agent(task, policy, toolbox=booking_tools(), checkpointer=saver,
                                                      middleware=[middleware]))
    else:
        graph = middleware.bind(build_langgraph_agent(
            task, policy, toolbox=booking_tools(), checkpointer=saver, tools=task.tools, model=spec.build("langgraph"),
            middleware=[middleware, *_real_middleware(spec, policy, snapshot)]))
    config = {"configurable": {"thread_id": thread}, "recursion_limit": 8 * policy.max_steps + 20}
    inputs = {"messages": [HumanMessage(task.prompt)]}
    state = await graph.ainvoke(inputs, config) if use_async else await asyncio.to_thread(graph.invoke, inputs, config)
    record = state.get("guardrail_repair")
    if record is None or record.get("original_checkpoint") is None:
        return {"flagged": record is not None, "record": record, "answer": state["messages"][-1].content,
                "original": snapshot.get("messages")}
    pinned = {"configurable": {"thread_id": thread, "checkpoint_id": record["original_checkpoint"]}}
    if use_async:
        branch = await (await LangGraphCheckpoints.aopen(graph, pinned)).aoriginal_branch()
    else:
        branch = await asyncio.to_thread(lambda: LangGraphCheckpoints(graph, pinned).original_branch())
    return {"flagged": True, "record": record, "answer": state["messages"][-1].content,
            "branch": [_contents(s.values.get("messages", [])) for s in branch], "original": snapshot.get("messages")}


@contextmanager
def _saver(kind: str, workdir: Path, dsn: str | None) -> Iterator[Any]:
    if kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif kind == "sqlite":
        from adapters.langgraph_repair import sqlite_checkpointer

        yield sqlite_checkpointer(workdir / "inline.db")
    elif kind == "postgres":
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver

        assert dsn is not None
        with psycopg.Connection.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
            saver = PostgresSaver(conn)  # type: ignore[arg-type]
            saver.setup()
            yield saver
    else:
        raise ValueError(kind)


@contextmanager
def _postgres(wanted: bool = True) -> Iterator[str | None]:
    """A DSN: GUARDRAIL_POSTGRES_DSN, else a throwaway server from scripts/postgres.sh; None when neither works."""
    if not wanted:
        yield None
        return
    given = os.environ.get("GUARDRAIL_POSTGRES_DSN")
    if given:
        yield given
        return
    if shutil.which("bash") is None:
        yield None
        return
    started = subprocess.run(["bash", str(POSTGRES_SCRIPT), "start"], capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        yield None
        return
    dsn, data_dir = started.stdout.strip().splitlines()[-2:]
    try:
        yield dsn
    finally:
        subprocess.run(["bash", str(POSTGRES_SCRIPT), "stop", data_dir], capture_output=True, timeout=60)


async def _langgraph_row(kind: str, episodes: int, seed: int, slip_rate: float, workdir: Path,
                         dsn: str | None, rung: Rung = "adaptive", spec: EndpointSpec | None = None) -> dict[str, Any]:
    results = []
    for index in range(episodes):
        task, policy = _episode(index, seed, slip_rate, spec)
        thread = f"inline-{kind}-{rung}-{seed}-{index}"
        if kind == "async_sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async with AsyncSqliteSaver.from_conn_string(str(workdir / "inline-async.db")) as saver:
                result = await _langgraph_run(task, policy, saver, thread, use_async=True, rung=rung, spec=spec)
        else:
            with _saver(kind, workdir, dsn) as saver:
                result = await _langgraph_run(task, policy, saver, thread, use_async=False, rung=rung, spec=spec)
        result["task"], result["index"] = task, index
        if result["flagged"]:
            if spec is None:
                result["reference"] = _reference(task, policy)
            results.append(result)
        elif spec is not None:
            results.append({**result, "clean": True})
    return _row("langgraph", kind, rung, results, real=spec is not None)


def _intact_against(branch: list[Any], original: list[Any] | None) -> bool:
    """Every checkpoint of the original branch holds a prefix of the original run's messages, its head all of them."""
    if not branch or original is None:
        return False
    return all(messages == original[:len(messages)] for messages in branch) and branch[-1] == original


def _row(framework: str, checkpointer: str, rung: str, results: list[dict[str, Any]], *,
         real: bool = False) -> dict[str, Any]:
    recovered = broken = intact = calls = flagged_right = 0
    outcomes: dict[str, int] = {}
    delivered: dict[int, tuple[bool, str]] = {}  # episode -> (delivered answer right, the original answer)
    flagged = [r for r in results if not r.get("clean")]
    for result in flagged:
        record = result["record"] or {}
        outcomes[record.get("outcome", "error")] = outcomes.get(record.get("outcome", "error"), 0) + 1
        task = result["task"]
        before = _right(record.get("original_answer"), task)
        after = _right(result.get("answer"), task)
        recovered += (not before) and after
        broken += before and not after
        flagged_right += before
        calls += int(record.get("extra_model_calls") or 0)
        delivered[result["index"]] = (after, str(record.get("original_answer")))
        branch = result.get("branch")
        if branch is not None:
            intact += (branch == result["reference"][:len(branch)]) if "reference" in result \
                else _intact_against(branch, result.get("original"))
        else:
            intact += bool(result.get("intact"))
    n = len(flagged)
    row = {"framework": framework, "checkpointer": checkpointer, "rung": rung, "n": n, "recovered": recovered,
           "broken": broken, "original_intact": intact, "extra_model_calls": round(calls / n, 3) if n else 0.0,
           "outcomes": outcomes}
    if real:  # every episode run is reported: the clean ones too
        row.update(episodes=len(results), flagged_right_before=flagged_right,
                   right_after=sum(right for right, _ in delivered.values())
                   + sum(_right(r.get("answer"), r["task"]) for r in results if r.get("clean")))
    row["_delivered"] = delivered
    return row


async def _autogen_row(episodes: int, seed: int, slip_rate: float, rung: Rung = "adaptive",
                       spec: EndpointSpec | None = None) -> dict[str, Any]:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.teams import RoundRobinGroupChat

    from adapters.autogen_repair import arun_autogen_team
    from repair import Repairer
    from traces.agents import SYSTEM_PROMPT
    from traces.models import ScriptedChatCompletionClient
    from traces.tools import booking_tools

    results = []
    for index in range(episodes):
        task, policy = _episode(index, seed, slip_rate, spec)
        client: Any = ScriptedChatCompletionClient(policy)
        if spec is not None:
            client = spec.build("autogen")
            client.seed_per_call = _call_seed(policy)
        agent = AssistantAgent("booking_agent", client, tools=booking_tools().autogen_tools(task.tools),
                               system_message=SYSTEM_PROMPT, max_tool_iterations=1, reflect_on_tool_use=False)
        team = RoundRobinGroupChat([agent], max_turns=1)
        seen: dict[str, Any] = {}

        def keep(run: Any, seen: dict[str, Any] = seen) -> None:
            seen["run"], seen["states"] = run, json.dumps(run.states, sort_keys=True, default=str)

        guard = _guard(task)
        try:
            outcome = await arun_autogen_team(Repairer(guard, rung=rung), team, task.prompt, tools=task.tools,
                                              max_steps=spec.max_steps if spec else 2 * policy.max_steps,
                                              on_original=keep)
        finally:
            if spec is not None:
                await client.close()
        if outcome.outcome == "clean":
            if spec is not None:
                results.append({"clean": True, "task": task, "index": index, "answer": outcome.answer})
            continue
        original = seen["run"]
        record = {"outcome": outcome.outcome, "original_answer": outcome.original_answer,
                  "extra_model_calls": outcome.extra_model_calls}
        results.append({"record": record, "task": task, "index": index,
                        "answer": outcome.answer or outcome.original_answer,
                        "intact": json.dumps(original.states, sort_keys=True, default=str) == seen["states"]})
    return _row("autogen_team", "team_state", rung, results, real=spec is not None)


def _paired(rows: list[dict[str, Any]]) -> None:
    """Each rung's McNemar test against resample in the same configuration, on the episodes flagged under both."""
    from traces.bench.repair import mcnemar_exact

    controls = {(r["framework"], r["checkpointer"]): r["_delivered"] for r in rows if r.get("rung") == "resample"}
    for row in rows:
        control = controls.get((row["framework"], row["checkpointer"]))
        if control is None or row.get("rung") == "resample":
            continue
        both = sorted(set(control) & set(row["_delivered"]))
        row["pairs"] = len(both)
        row["pairs_same_original"] = sum(control[i][1] == row["_delivered"][i][1] for i in both)
        row["p_vs_resample"] = mcnemar_exact([row["_delivered"][i][0] for i in both], [control[i][0] for i in both])


def run_inline(*, episodes: int = 12, seed: int = 0, slip_rate: float = 0.6,
               configurations: tuple[tuple[str, str], ...] = CONFIGURATIONS,
               rungs: tuple[Rung, ...] = ("adaptive",), spec: EndpointSpec | None = None) -> list[dict[str, Any]]:
    """One row per (framework, checkpointer, rung); a Postgres row only when a server could be had.

    ``spec`` runs a real model (see the module docstring): then each row also counts every episode
    run, and a rung other than resample gets its McNemar p-value against resample (when both ran).
    """
    rows = []
    wants_postgres = ("langgraph", "postgres") in configurations
    with tempfile.TemporaryDirectory(prefix="guardrail-repair-inline-") as root, _postgres(wants_postgres) as dsn:
        for framework, checkpointer in configurations:
            for rung in rungs:
                if framework == "autogen_team":
                    rows.append(asyncio.run(_autogen_row(episodes, seed, slip_rate, rung, spec)))
                elif checkpointer == "postgres" and dsn is None:
                    rows.append({"framework": framework, "checkpointer": checkpointer, "rung": rung, "n": 0,
                                 "recovered": 0, "broken": 0, "original_intact": 0, "extra_model_calls": 0.0,
                                 "skipped": "no PostgreSQL server could be started (scripts/postgres.sh install)"})
                else:
                    workdir = Path(root) / f"{checkpointer}-{rung}"
                    workdir.mkdir(exist_ok=True)
                    rows.append(asyncio.run(_langgraph_row(checkpointer, episodes, seed, slip_rate, workdir, dsn,
                                                           rung, spec)))
    if spec is not None:
        _paired(rows)
    for row in rows:
        row.pop("_delivered", None)
    return rows


def add_inline_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inline", action="store_true",
                        help="repair inside the run (GuardMiddleware(repair=True) on each saver, an AutoGen team)")
    parser.add_argument("--configuration", action="append", default=None,
                        choices=[f"{f}/{c}" for f, c in CONFIGURATIONS],
                        help="with --inline: framework/checkpointer to run (default: every one; with --model "
                             "local:NAME: langgraph/sqlite and autogen_team/team_state)")
