"""On the async path the gate checks a call of the agent's own tool on the event loop (schema only, no hop) and
probes a shell command in a worker thread: a LangChain agent (`ainvoke`) and an AutoGen agent, each with its own
tools and scripted model."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from adapters.autogen import AutoGenGuard
from adapters.langchain import GuardMiddleware
from guardrail import Guard, Layer
from guardrail.gate.layer import GateLayer


class WhereGate(GateLayer):
    """The shipped gate, noting for each call the tool and whether it ran on a worker thread."""

    def __init__(self, workspace: Any) -> None:
        super().__init__(workspace)
        self.calls: list[tuple[str, bool]] = []

    def before_action(self, ctx, action):
        self.calls.append((action.tool or "", threading.current_thread().name.startswith("guardrail-layers")))
        return super().before_action(ctx, action)


@pytest.fixture
def gate(tmp_path):
    (tmp_path / "notes.txt").write_text("the meeting is at noon")
    layer = WhereGate(tmp_path)
    layer.gate.index(wait_s=60)  # the module index is ready: a schema-only call never waits for it
    return layer


# The agent's turns: its own tool, the same tool with an argument of the wrong type, then a shell command.
TURNS = [("book_room", {"room": "A", "hour": 9}), ("book_room", {"room": "A", "hour": "noon"}),
         ("bash", {"command": "cat notes.txt"})]
WHERE = [("book_room", False), ("book_room", False), ("bash", True)]


class ScriptedChatModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


async def test_langchain_own_tool_checks_stay_on_the_loop_and_shell_probes_leave_it(gate):
    ran: list[str] = []

    @tool
    def book_room(room: str, hour: int) -> str:
        """Book a meeting room for an hour of the day."""
        ran.append(f"book {room} {hour}")
        return "booked"

    @tool
    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return "the meeting is at noon"

    turns = [AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"c{i}"}])
             for i, (n, a) in enumerate(TURNS)]
    model = ScriptedChatModel(messages=iter([*turns, AIMessage(content="done")]))
    agent = create_agent(model, [book_room, bash], middleware=[GuardMiddleware(Guard([gate], mode="intervene"))])

    out = await agent.ainvoke({"messages": [{"role": "user", "content": "book room A at 9"}]})

    assert gate.calls == WHERE
    replies = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert replies[1].status == "error" and "tool_args_valid" in replies[1].content  # checked inline, still blocked
    assert ran == ["book A 9", "cat notes.txt"]


async def test_autogen_own_tool_checks_stay_on_the_loop_and_shell_probes_leave_it(gate):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, RequestUsage
    from autogen_core.tools import FunctionTool

    from tests.scripted_clients import scripted_client_class

    ran: list[str] = []

    def book_room(room: str, hour: int) -> str:
        """Book a meeting room for an hour of the day."""
        ran.append(f"book {room} {hour}")
        return "booked"

    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return "the meeting is at noon"

    class Client(scripted_client_class()):  # type: ignore[misc]
        turn = 0

        def reply(self, messages):
            usage = RequestUsage(prompt_tokens=1, completion_tokens=1)
            if self.turn == len(TURNS):
                return CreateResult(finish_reason="stop", content="done", usage=usage, cached=False)
            name, args = TURNS[self.turn]
            self.turn += 1
            return CreateResult(finish_reason="function_calls", usage=usage, cached=False,
                                content=[FunctionCall(id=f"c{self.turn}", name=name, arguments=json.dumps(args))])

    guarded = AutoGenGuard(Guard([gate], mode="intervene"), task="book room A at 9")
    agent = AssistantAgent("booker", model_client=guarded.model_client(Client()),
                           workbench=guarded.workbench([FunctionTool(book_room, description="Book a room."),
                                                        FunctionTool(bash, description="Run a shell command.")]),
                           max_tool_iterations=5)

    await agent.run(task="book room A at 9")

    assert gate.calls == WHERE
    assert ran == ["book A 9", "cat notes.txt"]


def test_a_layer_that_cannot_say_is_offloaded_and_still_runs():
    import asyncio

    from guardrail.core.events import Action

    class Unsure(Layer):
        name = "unsure"

        def __init__(self) -> None:
            self.threads: list[str] = []

        def runs_inline(self, hook, ctx, *args):
            if args and args[0].tool == "quick":
                return True
            raise RuntimeError("cannot tell")

        def before_action(self, ctx, action):
            self.threads.append(threading.current_thread().name)

    layer = Unsure()
    guard = Guard([layer])

    async def run() -> None:
        ctx = guard.start_episode(task="t")
        await guard.abefore_action(ctx, Action.tool_call("quick", {}, call_id="a"))
        await guard.abefore_action(ctx, Action.tool_call("slow", {}, call_id="b"))

    asyncio.run(run())
    assert layer.threads[0] == threading.main_thread().name
    assert layer.threads[1].startswith("guardrail-layers")
