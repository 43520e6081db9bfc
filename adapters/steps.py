"""The one path from framework messages to guard `Step`s, used by the adapters, the repair drivers and the testbed.

The step monitor is fitted on corpora whose steps have one shape: a tool step's text is the model's
words followed by ``[name({args}) -> result]`` for each call, its error flag says whether any call
failed, its latency is model time plus tool time, and the first step carries the run's task. A
live step, a step read back from a checkpoint for a repaired fork, and a step the testbed writes
must all come out of the same rules, or the monitor scores a distribution it never learned. Every
converter here ends in `build_step` and every tool call in `tool_event`.

Framework messages are read by their documented fields (LangChain's ``type`` = ``"ai"``/``"tool"``,
AutoGen's ``type`` = ``"AssistantMessage"``, mini-swe-agent's ``role`` and ``extra``...), so this module
imports no framework: each adapter brings its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from guardrail.core.corpus import format_tool_text
from guardrail.core.events import Result, Step, StepKind, ToolEvent, parse_call_arguments

__all__ = [
    "LATENCY_KEY",
    "RESULT_CAP",
    "build_step",
    "content_text",
    "guard_reply",
    "split_guard_message",
    "langchain_logprobs",
    "step_from_autogen_result",
    "step_from_langchain",
    "steps_from_autogen_context",
    "steps_from_autogen_events",
    "steps_from_langchain",
    "step_from_mini_swe_agent",
    "step_from_swe_agent",
    "steps_from_mini_swe_agent",
    "mini_swe_agent_actions",
    "tool_event",
]

# A tool result put on a Step is capped: a checkpoint can hold a 10 MB page and the checks only need its head.
RESULT_CAP = 20_000
# Where the LangChain adapter stamps measured seconds on the messages it sees (model call on the AIMessage,
# tool call on the ToolMessage), so a step read back from a checkpoint keeps the latency the live step had.
LATENCY_KEY = "guardrail_latency_s"


def content_text(content: Any) -> str:
    """A message's content as text (LangChain content blocks joined, anything else by ``str``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) if isinstance(b, dict) else str(b)
                       for b in content if b)
    return "" if content is None else str(content)


def tool_event(call_id: str | None, name: str, args: Any, output: str | None, *, is_error: bool = False,
               latency_s: float | None = None, guard_message: str | None = None) -> ToolEvent:
    """One tool call and what came back (None: it has not returned, or never ran; that is not an error).

    `guard_message` is what the guard showed the agent with the result, or instead of it when the call was
    blocked before it ran (`output` None): the agent read an error either way.
    """
    return ToolEvent(
        id=call_id or "",
        name=name,
        args=parse_call_arguments(args) if isinstance(args, str) else (args if args is not None else {}),
        result=None if output is None else output[:RESULT_CAP],
        result_chars=None if output is None else len(output),
        result_truncated=output is not None and len(output) > RESULT_CAP,
        is_error=bool((output is not None or guard_message is not None) and is_error),
        latency_s=None if latency_s is None else round(float(latency_s), 6),
        guard_message=None if guard_message is None else guard_message[:RESULT_CAP],
    )


GUARD_PREFIX = "[guardrail:"  # how `Decision.message()` starts every line it writes
_GUARD_AFTER = "\n\n" + GUARD_PREFIX


def split_guard_message(text: str) -> tuple[str | None, str | None]:
    """A tool reply the agent read, as (the tool's own output, the guard's message): ``(text, None)`` for a plain
    reply, ``(None, message)`` for a call the guard blocked before it ran, ``(output, message)`` when the guard
    appended its message to a result it refused. Reads the text the adapters write (`Decision.message()` lines)."""
    if text.startswith(GUARD_PREFIX):
        return None, text
    cut = text.rfind(_GUARD_AFTER)
    if cut >= 0:
        return text[:cut], text[cut + 2:]
    return text, None


def guard_reply(artifact: Any) -> tuple[bool, str | None, str | None]:
    """(is a guard reply, the tool's output, the guard's message) from a LangChain ToolMessage's artifact."""
    record = artifact.get("guardrail") if isinstance(artifact, Mapping) else None
    if not isinstance(record, Mapping) or not isinstance(record.get("message"), str):
        return False, None, None
    output = record.get("output")
    return True, output if isinstance(output, str) else None, record["message"]


def build_step(index: int, *, content: str, events: Sequence[ToolEvent] = (), logprobs: Sequence[float] = (),
               model_latency_s: float | None = None, output_tokens: int | None = None, task: str | None = None,
               meta: Mapping[str, Any] | None = None, final: bool = True) -> Step:
    """A step in the corpora's shape: text = words + calls, error = any call failed, latency = model + tools.

    A step without tool calls is the run's answer (``final``) unless the caller knows more came after it.
    """
    events = list(events)
    text = " ".join(part for part in (content.strip(), format_tool_text(events)) if part)
    latency = None
    if model_latency_s is not None:
        latency = round(model_latency_s + sum(e.latency_s or 0.0 for e in events), 6)
    return Step(
        index=index,
        kind=StepKind.TOOL_CALL if events else (StepKind.FINAL if final else StepKind.TEXT),
        text=text,
        tool_events=events,
        token_logprobs=[float(v) for v in logprobs],
        logprobs_available=bool(logprobs),
        latency_s=latency,
        output_tokens=output_tokens,
        error=any(e.is_error for e in events),
        task=task if index == 0 and task else None,
        meta=dict(meta or {}),
    )


# ----------------------------------------------------------------------------- LangChain / LangGraph
def _kind(message: Any) -> str | None:
    kind = getattr(message, "type", None)
    return kind if isinstance(kind, str) else None


def langchain_logprobs(message: Any) -> list[float]:
    """Token log-probabilities from a message's ``response_metadata["logprobs"]``.

    OpenAI's shape (``{"content": [{"token", "logprob", ...}]}``, what ``ChatOpenAI(logprobs=True)``
    puts there), Ollama's (a list of ``Logprob`` objects, what ``ChatOllama(logprobs=True)`` puts
    there) and a bare list of numbers all read the same; anything else gives none.
    """
    meta = getattr(message, "response_metadata", None) or {}
    raw = meta.get("logprobs") if isinstance(meta, Mapping) else None
    items = raw.get("content") if isinstance(raw, Mapping) else raw
    if not isinstance(items, list | tuple):
        return []
    out: list[float] = []
    for item in items:
        value = item.get("logprob") if isinstance(item, Mapping) else getattr(item, "logprob", item)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(float(value))
    return out


def _stamped(message: Any) -> float | None:
    meta = getattr(message, "response_metadata", None)
    value = meta.get(LATENCY_KEY) if isinstance(meta, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def step_from_langchain(index: int, message: Any, tool_messages: Sequence[Any] = (), *, task: str | None = None,
                        model_latency_s: float | None = None, final: bool = True) -> Step:
    """One LangChain ``AIMessage`` and the ``ToolMessage``s answering its calls, as a `Step`.

    Latencies not given are read from what the adapter stamped on the messages (`LATENCY_KEY`).
    """
    by_id = {getattr(m, "tool_call_id", None): m for m in tool_messages}
    events = []
    for call in getattr(message, "tool_calls", None) or []:
        reply = by_id.get(call.get("id") or "")
        output = None if reply is None else content_text(reply.content)
        guarded, real, guard_message = guard_reply(getattr(reply, "artifact", None))
        if guarded:
            output = real
        events.append(tool_event(call.get("id"), call.get("name") or "", call.get("args"), output,
                                 is_error=reply is not None and getattr(reply, "status", None) == "error",
                                 latency_s=None if reply is None else _stamped(reply), guard_message=guard_message))
    usage = getattr(message, "usage_metadata", None) or {}
    return build_step(
        index,
        content=content_text(getattr(message, "content", "")),
        events=events,
        logprobs=langchain_logprobs(message),
        model_latency_s=model_latency_s if model_latency_s is not None else _stamped(message),
        output_tokens=usage.get("output_tokens") if isinstance(usage, Mapping) else None,
        task=task,
        final=final,
    )


def steps_from_langchain(messages: Sequence[Any], *, task: str | None = None) -> list[Step]:
    """A run's LangChain messages (a graph state's ``messages``) as steps: one per ``AIMessage``."""
    replies = [m for m in messages if _kind(m) == "tool"]
    turns = [m for m in messages if _kind(m) == "ai"]
    return [step_from_langchain(i, m, replies, task=task, final=i == len(turns) - 1) for i, m in enumerate(turns)]


# ----------------------------------------------------------------------------- AutoGen
def _autogen_events(calls: Sequence[Any], results: Mapping[str, Any],
                    tool_latency_s: Mapping[str, float] | None) -> list[ToolEvent]:
    events = []
    for call in calls:
        answer = results.get(call.id)
        output: str | None = None
        guard_message: str | None = None
        if isinstance(answer, Result):  # the guard's own record of the call (live)
            output = None if answer.blocked else answer.output
            guard_message = answer.guard_message
        elif answer is not None:  # an AutoGen FunctionExecutionResult (saved state, a run's messages)
            output, guard_message = split_guard_message(content_text(getattr(answer, "content", "")))
        events.append(tool_event(call.id, call.name, call.arguments, output,
                                 is_error=bool(answer is not None and getattr(answer, "is_error", False)),
                                 latency_s=(tool_latency_s or {}).get(call.id), guard_message=guard_message))
    return events


def _autogen_logprobs(result: Any) -> list[float]:
    out: list[float] = []
    for item in getattr(result, "logprobs", None) or []:
        value = getattr(item, "logprob", None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(float(value))
    return out


def step_from_autogen_result(index: int, result: Any, executed: Mapping[str, Any] = {}, *,  # noqa: B006 - read only
                             task: str | None = None, model_latency_s: float | None = None,
                             tool_latency_s: Mapping[str, float] | None = None,
                             meta: Mapping[str, Any] | None = None, final: bool = True) -> Step:
    """One AutoGen model reply (a ``CreateResult`` or an ``AssistantMessage``) and its executed calls, as a `Step`.

    `executed` maps call ids to ``FunctionExecutionResult``s (or guard `Result`s); `tool_latency_s` maps
    call ids to seconds.
    """
    content = getattr(result, "content", "")
    calls = content if isinstance(content, list) else []
    words = content if isinstance(content, str) else (getattr(result, "thought", None) or "")
    usage = getattr(result, "usage", None)
    return build_step(
        index,
        content=words,
        events=_autogen_events(calls, executed, tool_latency_s),
        logprobs=_autogen_logprobs(result),
        model_latency_s=model_latency_s,
        output_tokens=getattr(usage, "completion_tokens", None),
        task=task,
        meta=meta,
        final=final,
    )


def steps_from_autogen_context(messages: Sequence[Any], *, task: str | None = None,
                               model_latency_s: Sequence[float | None] = (),
                               tool_latency_s: Mapping[str, float] | None = None) -> list[Step]:
    """An AutoGen model context (``AssistantMessage`` / ``FunctionExecutionResultMessage``...) as steps."""
    executed = {item.call_id: item for m in messages if _kind(m) == "FunctionExecutionResultMessage"
                for item in m.content}
    turns = [m for m in messages if _kind(m) == "AssistantMessage"]
    return [step_from_autogen_result(i, m, executed, task=task, tool_latency_s=tool_latency_s,
                                     model_latency_s=model_latency_s[i] if i < len(model_latency_s) else None,
                                     final=i == len(turns) - 1)
            for i, m in enumerate(turns)]


def steps_from_autogen_events(messages: Sequence[Any], *, task: str | None = None,
                              model_latency_s: Sequence[float | None] = (),
                              tool_latency_s: Mapping[str, float] | None = None) -> list[Step]:
    """An AgentChat run's messages (``TaskResult.messages``: thoughts, tool-call requests and executions, text)."""
    executed = {item.call_id: item for m in messages if _kind(m) == "ToolCallExecutionEvent" for item in m.content}
    turns: list[tuple[str, list[Any], Any]] = []  # (words, calls, the message that carried them)
    thought = ""
    for message in messages:
        kind = _kind(message)
        if kind == "ThoughtEvent":
            thought = content_text(message.content)
        elif kind == "ToolCallRequestEvent":
            turns.append((thought, list(message.content), message))
            thought = ""
        elif kind == "TextMessage" and getattr(message, "source", "user") != "user":
            turns.append((content_text(message.content), [], message))
            thought = ""
    return [build_step(
        index,
        content=words,
        events=_autogen_events(calls, executed, tool_latency_s),
        model_latency_s=model_latency_s[index] if index < len(model_latency_s) else None,
        output_tokens=getattr(getattr(message, "models_usage", None), "completion_tokens", None),
        task=task,
        final=index == len(turns) - 1,
    ) for index, (words, calls, message) in enumerate(turns)]


# ----------------------------------------------------------------------------- SWE-agent
def step_from_swe_agent(index: int, *, action: str, thought: str, observation: str, done: bool = False,
                        execution_time: float | None = None, task: str | None = None,
                        cwd: str | None = None) -> Step:
    """One SWE-agent step (live from its hook or read from a ``.traj``): the action is one tool call.

    The command's first word names the tool (``bash`` for an empty one); ``submit`` or a step SWE-agent
    marks done is the run's answer, its observation the final text.
    """
    first = action.strip().split(maxsplit=1)[0] if action.strip() else ""
    is_final = done or first == "submit"
    events = [] if is_final else [tool_event(f"step-{index}", first or "bash", {"command": action}, observation,
                                             latency_s=execution_time)]
    return build_step(index, content=observation if is_final else thought, events=events, task=task,
                      meta={"cwd": cwd} if cwd else None)


# ----------------------------------------------------------------------------- mini-swe-agent
# mini-swe-agent 1.x put the command in the assistant text as a fenced block; 2.x also keeps the parsed
# actions in ``extra["actions"]`` (text-based ``mswea_bash_command`` blocks or OpenAI tool calls).
_MINI_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)


def mini_swe_agent_actions(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The commands of one mini-swe-agent assistant message: ``extra["actions"]``, its tool calls, or its fenced block."""
    extra = message.get("extra")
    actions = extra.get("actions") if isinstance(extra, Mapping) else None
    if isinstance(actions, list):
        return [dict(a) for a in actions if isinstance(a, Mapping) and isinstance(a.get("command"), str)]
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out = []
        for call in calls:
            function = call.get("function") if isinstance(call, Mapping) else None
            args = parse_call_arguments(function.get("arguments")) if isinstance(function, Mapping) else None
            if isinstance(args, Mapping) and isinstance(args.get("command"), str):
                out.append({"command": args["command"], "tool_call_id": call.get("id")})
        return out
    blocks = _MINI_BLOCK.findall(content_text(message.get("content")))
    return [{"command": blocks[0].strip()}] if len(blocks) == 1 else []


def _is_mini_observation(message: Mapping[str, Any]) -> bool:
    if message.get("role") == "tool":
        return True
    extra = message.get("extra")
    return message.get("role") == "user" and isinstance(extra, Mapping) and (
        "raw_output" in extra or "returncode" in extra)


def _mini_observation(message: Mapping[str, Any]) -> tuple[str, bool]:
    """The command's own output (``raw_output`` when kept, else the rendered message) and whether it failed."""
    extra = message.get("extra") if isinstance(message.get("extra"), Mapping) else {}
    assert isinstance(extra, Mapping)
    raw = extra.get("raw_output")
    output = raw if isinstance(raw, str) else content_text(message.get("content"))
    code = extra.get("returncode")
    if code is None:  # a 1.x trajectory keeps only the rendered text
        found = re.search(r"<returncode>(-?\d+)</returncode>", content_text(message.get("content")))
        code = int(found.group(1)) if found else None
    failed = (isinstance(code, int) and not isinstance(code, bool) and code != 0) or bool(extra.get("exception_info"))
    return output, failed


def step_from_mini_swe_agent(index: int, message: Mapping[str, Any], observations: Sequence[Mapping[str, Any]] = (),
                             *, task: str | None = None, final: bool = False) -> Step:
    """One mini-swe-agent assistant message and the observation messages answering its commands, as a `Step`.

    Each command is one ``bash`` call; an observation is matched by ``tool_call_id`` when it has one,
    else by order. A command with no observation never ran (output None).
    """
    actions = mini_swe_agent_actions(message)
    by_id = {o.get("tool_call_id"): o for o in observations if o.get("tool_call_id")}
    in_order = [o for o in observations if not o.get("tool_call_id")]
    events = []
    for position, action in enumerate(actions):
        call_id = action.get("tool_call_id")
        reply = by_id.get(call_id) if call_id else (in_order[position] if position < len(in_order) else None)
        output, failed = _mini_observation(reply) if reply is not None else (None, False)
        started, ended = _timestamp(message), _timestamp(reply) if reply is not None else None
        latency = ended - started if started is not None and ended is not None and ended >= started else None
        events.append(tool_event(call_id or f"step-{index}-{position}", "bash", {"command": action["command"]}, output,
                                 is_error=failed, latency_s=latency))
    extra = message.get("extra") if isinstance(message.get("extra"), Mapping) else {}
    assert isinstance(extra, Mapping)
    return build_step(index, content=content_text(message.get("content")), events=[] if final else events, task=task,
                      meta={"cost": extra["cost"]} if isinstance(extra.get("cost"), int | float) else None,
                      final=final)


def _timestamp(message: Mapping[str, Any] | None) -> float | None:
    extra = message.get("extra") if message is not None else None
    value = extra.get("timestamp") if isinstance(extra, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def steps_from_mini_swe_agent(messages: Sequence[Any], *, task: str | None = None) -> list[Step]:
    """A mini-swe-agent run's ``messages`` (live or from its trajectory file) as steps, one per assistant message.

    The ``exit`` message ends the run: the turn it answers (the submit command, which raised before
    any observation) becomes the final step, its text the submission.
    """
    turns: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]] = []
    exit_message: Mapping[str, Any] | None = None
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role == "assistant":
            turns.append((message, []))
        elif role == "exit":
            exit_message = message
        elif turns and _is_mini_observation(message):
            turns[-1][1].append(message)
    steps = [step_from_mini_swe_agent(i, m, obs, task=task) for i, (m, obs) in enumerate(turns)]
    if exit_message is not None:
        answer = content_text(exit_message.get("content"))
        if turns and not turns[-1][1]:
            steps[-1] = build_step(len(steps) - 1, content=answer, task=task, final=True)
        else:
            steps.append(build_step(len(steps), content=answer, task=task, final=True))
    return steps
