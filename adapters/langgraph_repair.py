"""Repair for LangGraph: fork a thread at the graph's own checkpoint and re-run it live under the repair ladder.

    graph = create_agent(model, tools, checkpointer=sqlite_checkpointer("runs.db"))
    outcome = run_langgraph(Repairer(guard), graph, {"messages": [HumanMessage(task)]}, config)
    outcome.outcome   # clean | warned | repaired | unrepaired | halted | escalated | logged

Any LangGraph saver works (SQLite by default, Postgres for many workers). A fork is ``update_state``
on the chosen checkpoint's config: the original checkpoints stay in the saver, unchanged.
"""

from __future__ import annotations

from adapters.extras import require

require("langgraph", __name__)

import sqlite3
import uuid
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.steps import steps_from_langchain
from guardrail.core.events import Finding, Step
from repair.breaker import BreakerRun
from repair.driver import CheckpointError
from repair.repairer import RepairAttempt, Repairer, RepairOutcome, StepWatch, final_answer
from repair.rungs import Hint, Rung

__all__ = [
    "AsyncLangGraphFork",
    "CheckpointRef",
    "LangGraphCheckpoints",
    "LangGraphFork",
    "hint_messages",
    "repair_langgraph",
    "run_langgraph",
    "sqlite_checkpointer",
]


def sqlite_checkpointer(path: str | Path = ":memory:") -> Any:
    """The default LangGraph checkpointer: `SqliteSaver` on a file (or memory); any other saver works the same.

    Compile the graph with it (``create_agent(..., checkpointer=saver)`` or ``builder.compile(checkpointer=saver)``).
    Many workers sharing checkpoints should pass LangGraph's Postgres saver instead.
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    # check_same_thread=False: LangGraph runs sync nodes in a thread pool; SqliteSaver serializes access itself.
    conn = sqlite3.connect(str(path), check_same_thread=False)
    return SqliteSaver(conn)


# ----------------------------------------------------------------------------- LangGraph
@dataclass(frozen=True)
class CheckpointRef:
    """One checkpoint of a thread, located by how many model steps it already holds."""

    step: int  # model steps completed before this checkpoint: the next model call will be step `step`
    config: dict[str, Any]  # the checkpoint's own config (thread_id, checkpoint_ns, checkpoint_id)
    checkpoint_id: str
    as_node: str | None  # the node whose writes produced it (update_state must write as that node)
    message_count: int


def _pinned_head(graph: Any, head: Any, config: dict[str, Any]) -> dict[str, Any]:
    if getattr(graph, "checkpointer", None) in (None, False):
        raise CheckpointError(
            "the graph has no checkpointer: compile it with one, e.g. "
            "builder.compile(checkpointer=sqlite_checkpointer('runs.db'))"
        )
    if not head.config.get("configurable", {}).get("checkpoint_id"):
        raise CheckpointError(f"thread {config.get('configurable', {}).get('thread_id')!r} has no checkpoints yet")
    return dict(head.config)


def _branch(history: Sequence[Any], head_config: dict[str, Any]) -> list[Any]:
    """The snapshots on the branch ending at `head_config`, oldest first (parent links from the head)."""
    by_id = {s.config["configurable"]["checkpoint_id"]: s for s in history}
    branch = []
    cursor: str | None = head_config["configurable"]["checkpoint_id"]
    while cursor is not None and cursor in by_id:
        snapshot = by_id[cursor]
        branch.append(snapshot)
        parent = snapshot.parent_config
        cursor = parent["configurable"]["checkpoint_id"] if parent else None
    branch.reverse()
    return branch


def _before_step(branch: Sequence[Any], step: int, messages_key: str) -> CheckpointRef:
    """The latest checkpoint of `branch` holding exactly `step` model steps, with no tool call pending."""
    from langchain_core.messages import AIMessage

    if step < 0:
        raise CheckpointError(f"step must be >= 0 (0 is the task start), got {step}")
    chosen = None
    for position, snapshot in enumerate(branch):
        messages = snapshot.values.get(messages_key, []) if isinstance(snapshot.values, dict) else []
        if not messages or not snapshot.next:
            continue  # the input checkpoint (no task yet) or the end of the run
        model_steps = sum(isinstance(m, AIMessage) for m in messages)
        last = messages[-1]
        pending = isinstance(last, AIMessage) and bool(last.tool_calls)
        if model_steps == step and not pending:
            parent_next = branch[position - 1].next if position > 0 else ()
            chosen = CheckpointRef(
                step=step,
                config=snapshot.config,
                checkpoint_id=snapshot.config["configurable"]["checkpoint_id"],
                as_node=parent_next[0] if parent_next else None,
                message_count=len(messages),
            )
    if chosen is None:
        held = max((sum(isinstance(m, AIMessage) for m in s.values.get(messages_key, []))
                    for s in branch if isinstance(s.values, dict)), default=0)
        raise CheckpointError(f"no checkpoint before step {step} on this thread (it holds {held} model steps)")
    return chosen


class LangGraphCheckpoints:
    """A LangGraph thread's own checkpoints, pinned to the branch that was flagged, and forks from them.

    The head checkpoint is fixed when this object is made, so later forks (which move the
    thread's head) never change which branch counts as the original. A fork is
    ``update_state`` on the chosen checkpoint's config, which writes a new checkpoint whose
    parent is that checkpoint: the original checkpoints stay in the saver, unchanged and
    auditable. Every method has an async twin (``a...``) for async savers (``AsyncSqliteSaver``,
    ``AsyncPostgresSaver``); build with `aopen` there.
    """

    def __init__(self, graph: Any, config: dict[str, Any], *, messages_key: str = "messages",
                 task: str | None = None, head: Any = None) -> None:
        self.graph = graph
        self.messages_key = messages_key
        self.task = task
        head = head if head is not None else (graph.get_state(config) if getattr(graph, "checkpointer", None)
                                              not in (None, False) else None)
        self.head_config: dict[str, Any] = _pinned_head(graph, head, config)
        self.thread_config: dict[str, Any] = {
            "configurable": {"thread_id": self.head_config["configurable"]["thread_id"]}}

    @classmethod
    async def aopen(cls, graph: Any, config: dict[str, Any], *, messages_key: str = "messages",
                    task: str | None = None) -> LangGraphCheckpoints:
        """As the constructor, reading the head through the saver's async API."""
        if getattr(graph, "checkpointer", None) in (None, False):
            _pinned_head(graph, None, config)  # raises the no-checkpointer error
        head = await graph.aget_state(config)
        return cls(graph, config, messages_key=messages_key, task=task, head=head)

    # --- reading
    def original_branch(self) -> list[Any]:
        """The pinned branch's StateSnapshots, oldest first (walks parent links from the pinned head)."""
        return _branch(list(self.graph.get_state_history(self.thread_config)), self.head_config)

    async def aoriginal_branch(self) -> list[Any]:
        return _branch([s async for s in self.graph.aget_state_history(self.thread_config)], self.head_config)

    def messages(self, config: dict[str, Any] | None = None) -> list[Any]:
        state = self.graph.get_state(config or self.head_config)
        return list(state.values.get(self.messages_key, []))

    async def amessages(self, config: dict[str, Any] | None = None) -> list[Any]:
        state = await self.graph.aget_state(config or self.head_config)
        return list(state.values.get(self.messages_key, []))

    def steps(self, config: dict[str, Any] | None = None) -> list[Step]:
        """The Steps recorded at a checkpoint (default: the pinned head), derived from the thread's messages."""
        return steps_from_langchain(self.messages(config), task=self.task)

    def before_step(self, step: int) -> CheckpointRef:
        """The latest checkpoint on the original branch holding exactly `step` model steps, with no tool call pending.

        Forking there re-runs model step `step` and everything after it; steps before it are kept.
        """
        return _before_step(self.original_branch(), step, self.messages_key)

    async def abefore_step(self, step: int) -> CheckpointRef:
        return _before_step(await self.aoriginal_branch(), step, self.messages_key)

    # --- forking
    def fork(self, ref: CheckpointRef, messages: Sequence[Any] = ()) -> dict[str, Any]:
        """Write a child checkpoint of `ref` carrying `messages` (none for a plain resample); returns its config."""
        update = {self.messages_key: list(messages)}
        return self.graph.update_state(ref.config, update, as_node=ref.as_node)

    async def afork(self, ref: CheckpointRef, messages: Sequence[Any] = ()) -> dict[str, Any]:
        return await self.graph.aupdate_state(ref.config, {self.messages_key: list(messages)}, as_node=ref.as_node)

    def resume(self, forked_config: dict[str, Any], **stream_options: Any) -> Iterator[dict[str, Any]]:
        """Run the fork onward, yielding the full state after each superstep (stop iterating to stop the run)."""
        yield from self.graph.stream(None, forked_config, stream_mode="values", **stream_options)


def hint_messages(hint: Hint) -> list[Any]:
    """The hint in LangChain's own format: a HumanMessage (none for resample)."""
    if hint.text is None:
        return []
    from langchain_core.messages import HumanMessage

    return [HumanMessage(content=hint.text, name="guardrail", additional_kwargs={"guardrail_rung": hint.rung})]


def _stream(graph: Any, updates: Any, config: dict[str, Any], watch: StepWatch, messages_key: str,
            task: str | None) -> list[Step]:
    """Drive a LangGraph stream, feeding each completed step to `watch`; stops the graph when told to."""
    thread = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
    try:
        for values in updates:
            # The yielded state is complete for this superstep even before its checkpoint is readable.
            if not isinstance(values, dict):
                continue
            if watch.feed(steps_from_langchain(values.get(messages_key, []), task=task)):
                break  # closing the generator stops the graph; what ran is checkpointed
    finally:
        close = getattr(updates, "close", None)
        if close is not None:
            close()
    state = graph.get_state(thread)
    return steps_from_langchain(state.values.get(messages_key, []), task=task)


def _run_config(fork_config: dict[str, Any], run_config: dict[str, Any] | None) -> dict[str, Any]:
    """The fork's checkpoint config plus what the caller adds to every fork run (a marker, a recursion limit)."""
    if not run_config:
        return fork_config
    extra = dict(run_config)
    configurable = {**(extra.pop("configurable", None) or {}), **fork_config.get("configurable", {})}
    return {**extra, **fork_config, "configurable": configurable}


class LangGraphFork:
    """The `repair.driver.ForkDriver` of a flagged LangGraph thread.

    `original_messages` replaces the pinned head's messages as the original run (the guard's inline
    repair reads them from the live state: the head checkpoint may still be on its way to the saver).
    `run_config` is merged into the config of every fork run (``configurable`` keys included).
    """

    framework = "langgraph"

    def __init__(self, graph: Any, config: dict[str, Any], *, messages_key: str = "messages",
                 task: str | None = None, original_messages: Sequence[Any] | None = None,
                 run_config: dict[str, Any] | None = None, checkpoints: LangGraphCheckpoints | None = None) -> None:
        self.checkpoints = checkpoints or LangGraphCheckpoints(graph, config, messages_key=messages_key, task=task)
        self.graph = graph
        self.task = task
        self.messages_key = messages_key
        self.original_messages = None if original_messages is None else list(original_messages)
        self.run_config = run_config
        self.episode_id = str(self.checkpoints.thread_config["configurable"]["thread_id"])

    def original_steps(self) -> list[Step]:
        if self.original_messages is not None:
            return steps_from_langchain(self.original_messages, task=self.task)
        return self.checkpoints.steps()

    def fork(self, target: int, hint: Hint, watch: StepWatch, attempt: RepairAttempt) -> list[Step]:
        ref = self.checkpoints.before_step(target)
        attempt.checkpoint_id = ref.checkpoint_id
        fork_config = self.checkpoints.fork(ref, hint_messages(hint))
        attempt.fork_config = fork_config
        thread = self.checkpoints.thread_config
        try:
            watch.feed(steps_from_langchain(self.checkpoints.messages(fork_config), task=self.task))  # reused prefix
            return _stream(self.graph, self.checkpoints.resume(_run_config(fork_config, self.run_config)), thread,
                           watch, self.messages_key, self.task)
        finally:
            attempt.fork_config = self.graph.get_state(thread).config  # the fork's head, whatever its outcome

    def deliver(self, outcome: RepairOutcome, passed: RepairAttempt | None) -> None:
        outcome.config = passed.fork_config if passed else self.checkpoints.head_config
        if passed is not None and passed.fork_config is not None:
            outcome.steps = steps_from_langchain(self.checkpoints.messages(passed.fork_config), task=self.task)


class AsyncLangGraphFork:
    """The `repair.driver.AsyncForkDriver` of a flagged LangGraph thread: the same forks through the async API.

    For async savers and async graphs (``ainvoke``); the guard's layers run in a worker thread, so
    the event loop stays free while a fork is judged. Build with `open`.
    """

    framework = "langgraph"

    def __init__(self, checkpoints: LangGraphCheckpoints, *, original_messages: Sequence[Any] | None = None,
                 run_config: dict[str, Any] | None = None) -> None:
        self.checkpoints = checkpoints
        self.graph = checkpoints.graph
        self.task = checkpoints.task
        self.messages_key = checkpoints.messages_key
        self.original_messages = None if original_messages is None else list(original_messages)
        self.run_config = run_config
        self.episode_id = str(checkpoints.thread_config["configurable"]["thread_id"])

    @classmethod
    async def open(cls, graph: Any, config: dict[str, Any], *, messages_key: str = "messages",
                   task: str | None = None, original_messages: Sequence[Any] | None = None,
                   run_config: dict[str, Any] | None = None) -> AsyncLangGraphFork:
        checkpoints = await LangGraphCheckpoints.aopen(graph, config, messages_key=messages_key, task=task)
        return cls(checkpoints, original_messages=original_messages, run_config=run_config)

    async def original_steps(self) -> list[Step]:
        messages = self.original_messages
        if messages is None:
            messages = await self.checkpoints.amessages()
        return steps_from_langchain(messages, task=self.task)

    async def fork(self, target: int, hint: Hint, watch: StepWatch, attempt: RepairAttempt) -> list[Step]:
        import asyncio

        ref = await self.checkpoints.abefore_step(target)
        attempt.checkpoint_id = ref.checkpoint_id
        fork_config = await self.checkpoints.afork(ref, hint_messages(hint))
        attempt.fork_config = fork_config
        thread = self.checkpoints.thread_config
        try:
            prefix = steps_from_langchain(await self.checkpoints.amessages(fork_config), task=self.task)
            await asyncio.to_thread(watch.feed, prefix)  # the guard's layers never run on the loop
            updates = self.graph.astream(None, _run_config(fork_config, self.run_config), stream_mode="values")
            try:
                async for values in updates:
                    if isinstance(values, dict) and await asyncio.to_thread(
                            watch.feed, steps_from_langchain(values.get(self.messages_key, []), task=self.task)):
                        break  # closing the generator stops the graph; what ran is checkpointed
            finally:
                await updates.aclose()
            state = await self.graph.aget_state(thread)
            return steps_from_langchain(state.values.get(self.messages_key, []), task=self.task)
        finally:
            attempt.fork_config = (await self.graph.aget_state(thread)).config

    async def deliver(self, outcome: RepairOutcome, passed: RepairAttempt | None) -> None:
        outcome.config = passed.fork_config if passed else self.checkpoints.head_config
        if passed is not None and passed.fork_config is not None:
            outcome.steps = steps_from_langchain(await self.checkpoints.amessages(passed.fork_config), task=self.task)


def run_langgraph(repairer: Repairer, graph: Any, inputs: Any, config: dict[str, Any], *, task: str | None = None,
                  tools: Collection[str] = (), messages_key: str = "messages") -> RepairOutcome:
    """Run a checkpointed LangGraph graph on `inputs` under the Guard, repairing before the answer is returned."""
    episode_id = str(config.get("configurable", {}).get("thread_id") or uuid.uuid4().hex)
    breaker_run = repairer.new_breaker_run()
    ctx = repairer.new_context(f"{episode_id}:{uuid.uuid4().hex[:8]}", task, "langgraph", tools)
    watch = repairer.watch(ctx, breaker_run)
    steps = _stream(graph, graph.stream(inputs, config, stream_mode="values"), config, watch, messages_key, task)
    answer = None if watch.trip else final_answer(steps)
    flags = watch.finish(answer)
    early = repairer.before_repair(episode_id, flags, steps, watch.trip, answer, watch.alarms)
    if early is not None:
        early.config = graph.get_state(config).config
        return early
    return repair_langgraph(repairer, graph, config, flags, tools=tools, task=task, messages_key=messages_key,
                            breaker_run=breaker_run, original_answer=answer)


def repair_langgraph(repairer: Repairer, graph: Any, config: dict[str, Any], findings: Sequence[Finding], *,
                     tools: Collection[str] = (), task: str | None = None, messages_key: str = "messages",
                     breaker_run: BreakerRun | None = None, original_answer: str | None = None,
                     rung: Rung | None = None) -> RepairOutcome:
    """Repair an already flagged thread: fork from its checkpoint before the target step and re-run it.

    The thread's current head is the original branch; it stays in the checkpointer unchanged.
    """
    driver = LangGraphFork(graph, config, messages_key=messages_key, task=task)
    return repairer.repair(driver, findings, tools=tools, task=task, breaker_run=breaker_run,
                           original_answer=original_answer, rung=rung)
