"""Checkpoints kept by the agent framework itself: fork a LangGraph thread, restore an AutoGen agent's saved state."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrail.events import Step, StepKind, ToolEvent, parse_call_arguments

__all__ = [
    "AutoGenRun",
    "AutoGenStepLog",
    "CheckpointError",
    "CheckpointRef",
    "LangGraphCheckpoints",
    "sqlite_checkpointer",
    "steps_from_autogen_context",
    "steps_from_messages",
]

AUTOGEN_RUN_FORMAT = "guardrail-autogen-run"
AUTOGEN_RUN_VERSION = 1
# Tool results put on a Step are capped: a checkpoint can hold a 10 MB page and the checks only need its head.
RESULT_CAP = 20_000


class CheckpointError(Exception):
    """A rollback that cannot be done as asked (no checkpointer, no such step); the message says what to do."""


def sqlite_checkpointer(path: str | Path = ":memory:") -> Any:
    """The default LangGraph checkpointer: `SqliteSaver` on a file (or memory); any other saver works the same.

    Compile the graph with it (``create_agent(..., checkpointer=saver)`` or ``builder.compile(checkpointer=saver)``).
    Many workers sharing checkpoints should pass LangGraph's Postgres saver instead.
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    # check_same_thread=False: LangGraph runs sync nodes in a thread pool; SqliteSaver serializes access itself.
    conn = sqlite3.connect(str(path), check_same_thread=False)
    return SqliteSaver(conn)


# ----------------------------------------------------------------------------- message -> Step conversion
def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return "".join(parts)
    return str(content)


def steps_from_messages(messages: Sequence[Any]) -> list[Step]:
    """LangChain messages -> Steps: one Step per AI message, its tool calls joined with their ToolMessages."""
    from langchain_core.messages import AIMessage, ToolMessage

    results: dict[str, Any] = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    steps: list[Step] = []
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        events = []
        for call in message.tool_calls:
            answer = results.get(call.get("id") or "")
            output = None if answer is None else _text(answer.content)
            events.append(ToolEvent(
                id=call.get("id") or "",
                name=call["name"],
                args=call.get("args", {}),
                result=None if output is None else output[:RESULT_CAP],
                result_chars=None if output is None else len(output),
                result_truncated=output is not None and len(output) > RESULT_CAP,
                is_error=answer is not None and getattr(answer, "status", "success") == "error",
            ))
        steps.append(Step(
            index=len(steps),
            kind=StepKind.TOOL_CALL if events else StepKind.FINAL,
            text=_text(message.content),
            tool_events=events,
        ))
    return steps


def steps_from_autogen_context(messages: Sequence[Any]) -> list[Step]:
    """AutoGen model-context messages -> Steps: one Step per AssistantMessage, with its function results."""
    from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage

    results: dict[str, Any] = {}
    for message in messages:
        if isinstance(message, FunctionExecutionResultMessage):
            for item in message.content:
                results[item.call_id] = item
    steps: list[Step] = []
    for message in messages:
        if not isinstance(message, AssistantMessage):
            continue
        events = []
        if isinstance(message.content, list):
            for call in message.content:
                args = parse_call_arguments(call.arguments)  # kept as the model emitted it unless an object
                answer = results.get(call.id)
                output = None if answer is None else str(answer.content)
                events.append(ToolEvent(
                    id=call.id,
                    name=call.name,
                    args=args,
                    result=None if output is None else output[:RESULT_CAP],
                    result_chars=None if output is None else len(output),
                    result_truncated=output is not None and len(output) > RESULT_CAP,
                    is_error=bool(answer is not None and answer.is_error),
                ))
        steps.append(Step(
            index=len(steps),
            kind=StepKind.TOOL_CALL if events else StepKind.FINAL,
            text=message.content if isinstance(message.content, str) else (message.thought or ""),
            tool_events=events,
        ))
    return steps


# ----------------------------------------------------------------------------- LangGraph
@dataclass(frozen=True)
class CheckpointRef:
    """One checkpoint of a thread, located by how many model steps it already holds."""

    step: int  # model steps completed before this checkpoint: the next model call will be step `step`
    config: dict[str, Any]  # the checkpoint's own config (thread_id, checkpoint_ns, checkpoint_id)
    checkpoint_id: str
    as_node: str | None  # the node whose writes produced it (update_state must write as that node)
    message_count: int


class LangGraphCheckpoints:
    """A LangGraph thread's own checkpoints, pinned to the branch that was flagged, and forks from them.

    The head checkpoint is fixed when this object is made, so later forks (which move the
    thread's head) never change which branch counts as the original. A fork is
    ``update_state`` on the chosen checkpoint's config, which writes a new checkpoint whose
    parent is that checkpoint: the original checkpoints stay in the saver, unchanged and
    auditable.
    """

    def __init__(self, graph: Any, config: dict[str, Any], *, messages_key: str = "messages") -> None:
        if getattr(graph, "checkpointer", None) in (None, False):
            raise CheckpointError(
                "the graph has no checkpointer: compile it with one, e.g. "
                "builder.compile(checkpointer=repair.sqlite_checkpointer('runs.db'))"
            )
        self.graph = graph
        self.messages_key = messages_key
        head = graph.get_state(config)
        if not head.config.get("configurable", {}).get("checkpoint_id"):
            raise CheckpointError(f"thread {config.get('configurable', {}).get('thread_id')!r} has no checkpoints yet")
        self.thread_config: dict[str, Any] = {"configurable": {"thread_id": head.config["configurable"]["thread_id"]}}
        self.head_config: dict[str, Any] = head.config

    # --- reading
    def original_branch(self) -> list[Any]:
        """The pinned branch's StateSnapshots, oldest first (walks parent links from the pinned head)."""
        by_id = {s.config["configurable"]["checkpoint_id"]: s for s in self.graph.get_state_history(self.thread_config)}
        branch = []
        cursor: str | None = self.head_config["configurable"]["checkpoint_id"]
        while cursor is not None and cursor in by_id:
            snapshot = by_id[cursor]
            branch.append(snapshot)
            parent = snapshot.parent_config
            cursor = parent["configurable"]["checkpoint_id"] if parent else None
        branch.reverse()
        return branch

    def messages(self, config: dict[str, Any] | None = None) -> list[Any]:
        state = self.graph.get_state(config or self.head_config)
        return list(state.values.get(self.messages_key, []))

    def steps(self, config: dict[str, Any] | None = None) -> list[Step]:
        """The Steps recorded at a checkpoint (default: the pinned head), derived from the thread's messages."""
        return steps_from_messages(self.messages(config))

    def before_step(self, step: int) -> CheckpointRef:
        """The latest checkpoint on the original branch holding exactly `step` model steps, with no tool call pending.

        Forking there re-runs model step `step` and everything after it; steps before it are kept.
        """
        from langchain_core.messages import AIMessage

        if step < 0:
            raise CheckpointError(f"step must be >= 0 (0 is the task start), got {step}")
        branch = self.original_branch()
        chosen = None
        for position, snapshot in enumerate(branch):
            messages = snapshot.values.get(self.messages_key, []) if isinstance(snapshot.values, dict) else []
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
            held = max((sum(isinstance(m, AIMessage) for m in s.values.get(self.messages_key, []))
                        for s in branch if isinstance(s.values, dict)), default=0)
            raise CheckpointError(f"no checkpoint before step {step} on this thread (it holds {held} model steps)")
        return chosen

    # --- forking
    def fork(self, ref: CheckpointRef, messages: Sequence[Any] = ()) -> dict[str, Any]:
        """Write a child checkpoint of `ref` carrying `messages` (none for a plain resample); returns its config."""
        update = {self.messages_key: list(messages)}
        return self.graph.update_state(ref.config, update, as_node=ref.as_node)

    def resume(self, forked_config: dict[str, Any], **stream_options: Any) -> Iterator[dict[str, Any]]:
        """Run the fork onward, yielding the full state after each superstep (stop iterating to stop the run)."""
        yield from self.graph.stream(None, forked_config, stream_mode="values", **stream_options)


# ----------------------------------------------------------------------------- AutoGen
@dataclass
class AutoGenRun:
    """What one stepwise AutoGen run produced: the state after each step and the final answer."""

    task: str
    initial_state: dict[str, Any]
    states: list[dict[str, Any]] = field(default_factory=list)  # states[i]: the agent's state after step i
    answer: str | None = None
    model_steps: int = 0
    stopped: str | None = None  # why the run ended early ("max_steps", "breaker"), None when it answered

    def steps(self) -> list[Step]:
        state = self.states[-1] if self.states else self.initial_state
        return steps_from_autogen_context(_context_messages(state))

    def save(self, path: str | Path) -> None:
        """Write the run (task, every saved state, answer) as versioned JSON, atomically."""
        from guardrail.fileio import atomic_write_text

        payload = {"format": AUTOGEN_RUN_FORMAT, "version": AUTOGEN_RUN_VERSION, **dataclasses.asdict(self)}
        atomic_write_text(path, json.dumps(payload, sort_keys=True))

    @classmethod
    def load(cls, path: str | Path) -> AutoGenRun:
        """Read a run written by `save`; a file of another format or version is refused with a clear error."""
        try:
            payload = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"cannot read AutoGen run {path}: {exc}") from exc
        if not isinstance(payload, dict) or payload.get("format") != AUTOGEN_RUN_FORMAT:
            raise CheckpointError(f"{path} is not a {AUTOGEN_RUN_FORMAT} file")
        if payload.get("version") != AUTOGEN_RUN_VERSION:
            raise CheckpointError(f"{path} has version {payload.get('version')!r}; this guardrail reads "
                                  f"version {AUTOGEN_RUN_VERSION}")
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = {"task", "initial_state"} - payload.keys()
        if missing:
            raise CheckpointError(f"{path} lacks {sorted(missing)}")
        return cls(**{k: v for k, v in payload.items() if k in fields})

    def state_before(self, step: int) -> dict[str, Any]:
        """The saved agent state just before model step `step` (step 0: before the task)."""
        if step < 0 or step > len(self.states):
            raise CheckpointError(f"no saved state before step {step} (the run saved {len(self.states)} steps)")
        return self.initial_state if step == 0 else self.states[step - 1]


def _context_messages(state: dict[str, Any]) -> list[Any]:
    """The LLM context inside an AssistantAgent's saved state, as autogen_core message objects."""
    from autogen_core.models import LLMMessage
    from pydantic import TypeAdapter

    raw = state.get("llm_context", {}).get("messages", [])
    return list(TypeAdapter(list[LLMMessage]).validate_python(raw))


class AutoGenStepLog:
    """Drive an AutoGen ``AssistantAgent`` one model call at a time, saving its own state after every step.

    The agent must make one model call per ``run`` (``max_tool_iterations=1``, no reflection),
    so each saved state sits on a step boundary. Restoring is the agent's own ``load_state``.
    """

    def __init__(self, agent: Any, *, max_steps: int = 30) -> None:
        if getattr(agent, "_max_tool_iterations", 1) != 1 or getattr(agent, "_reflect_on_tool_use", False):
            raise CheckpointError("step checkpoints need AssistantAgent(max_tool_iterations=1, reflect_on_tool_use=False)")
        self.agent = agent
        self.max_steps = max_steps

    async def run(self, task: str, *, on_step: Any = None) -> AutoGenRun:
        """Run `task` from the agent's current state; `on_step(run, step)` may return True to stop early."""
        record = AutoGenRun(task=task, initial_state=await self.agent.save_state())
        await self._drive(record, [task], on_step=on_step)
        return record

    async def fork(self, run: AutoGenRun, step: int, hint: str | None, *, on_step: Any = None) -> AutoGenRun:
        """Restore the state before `step` with ``load_state`` and run onward, the hint (if any) sent as a user message.

        `run` is not modified: the fork is a new AutoGenRun sharing its prefix.
        """
        await self.agent.load_state(run.state_before(step))
        forked = AutoGenRun(task=run.task, initial_state=run.initial_state, states=list(run.states[:step]),
                            model_steps=step)
        first: list[str] = [run.task] if step == 0 else []  # before step 0 the task itself was not yet sent
        if hint:
            first.append(hint)
        await self._drive(forked, first, on_step=on_step)
        return forked

    async def _drive(self, record: AutoGenRun, first: list[str], *, on_step: Any) -> None:
        from autogen_agentchat.messages import TextMessage

        pending: list[Any] | None = [TextMessage(content=text, source="user") for text in first] or None
        while record.model_steps < self.max_steps:
            result = await self.agent.run(task=pending)
            pending = None
            record.model_steps += 1
            record.states.append(await self.agent.save_state())
            last = result.messages[-1] if result.messages else None
            is_answer = isinstance(last, TextMessage) and last.source == self.agent.name
            if is_answer and last is not None:
                record.answer = last.content
            if on_step is not None and on_step(record, record.steps()[-1]):
                record.stopped = record.stopped or "breaker"
                return
            if is_answer:
                return
        record.stopped = "max_steps"
