"""Agents that get their tools from the real reference MCP servers, guarded through the documented API.

AutoGen: an ``AssistantAgent`` on ``AutoGenGuard.workbench(McpWorkbench(...))``. LangChain: ``create_agent`` on
the tools ``langchain-mcp-adapters`` loads, with ``guard.langchain_middleware()``. Each with a scripted model
written here: a call to a missing file, a wrong revision and a bad argument come back to the model as errors
with the guard's hint and never reach the server; valid calls do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="pip install 'guardrail[mcp]'")
pytest.importorskip("autogen_ext.tools.mcp", reason="pip install 'guardrail[mcp]'")
pytest.importorskip("langchain_mcp_adapters", reason="pip install 'guardrail[mcp]'")

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_agentchat.messages import ToolCallExecutionEvent  # noqa: E402
from autogen_core import FunctionCall  # noqa: E402
from autogen_core.models import CreateResult, ModelFamily, RequestUsage  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402
from autogen_ext.tools.mcp import McpWorkbench, StdioServerParams  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_mcp_adapters.client import MultiServerMCPClient  # noqa: E402
from langchain_mcp_adapters.tools import load_mcp_tools  # noqa: E402

from adapters.autogen import AutoGenGuard  # noqa: E402
from guardrail import Guard  # noqa: E402
from guardrail.core.events import StepKind  # noqa: E402
from tests.mcp_servers import GIT_ENV, build_workspace, filesystem_server, git_server  # noqa: E402

pytestmark = pytest.mark.timeout(180)

MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": ModelFamily.UNKNOWN,
              "structured_output": False}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return build_workspace(tmp_path / "ws")


def calls(*pairs: tuple[str, str, dict[str, Any]]) -> CreateResult:
    return CreateResult(finish_reason="function_calls", cached=False,
                        usage=RequestUsage(prompt_tokens=5, completion_tokens=7),
                        content=[FunctionCall(id=i, name=n, arguments=json.dumps(a)) for i, n, a in pairs])


def stdio(command: list[str]) -> StdioServerParams:
    return StdioServerParams(command=command[0], args=command[1:], env={**os.environ, **GIT_ENV},
                             read_timeout_seconds=30)


async def test_autogen_agent_on_the_filesystem_server_workbench(workspace):
    guarded = AutoGenGuard(Guard.default(workspace=workspace, mode="intervene"), task="summarise the notes")
    client = ReplayChatCompletionClient([calls(
        ("c1", "read_text_file", {"path": str(workspace / "note.txt")}),
        ("c2", "read_text_file", {"path": str(workspace / "notes.txt"), "head": "two"}),
        ("c3", "read_text_file", {"path": str(workspace / "notes.txt")})), "The notes list alpha, beta, gamma."],
        model_info=MODEL_INFO)
    async with McpWorkbench(stdio([*filesystem_server(), str(workspace)])) as server:
        agent = AssistantAgent("reader", model_client=guarded.model_client(client), reflect_on_tool_use=True,
                               workbench=guarded.workbench(server))
        result = await agent.run(task="summarise the notes")
    episode = guarded.context.episode
    decision = await guarded.afinish(result)

    missing, bad, ok = next(m for m in result.messages if isinstance(m, ToolCallExecutionEvent)).content
    assert missing.is_error and "does not exist" in missing.content and "notes.txt" in missing.content
    assert bad.is_error and "read_text_file(path: string" in bad.content  # the server's declared schema
    assert not ok.is_error and "beta line" in ok.content
    assert decision.verdict.value == "allow"
    assert [[f.check for f in d.findings] for d in guarded.decisions] == [["hallucinated_tool_call"],
                                                                         ["malformed_call"]]
    assert "read_text_file" in episode.tools  # declared from the server's list_tools()
    assert [s.kind for s in episode.steps] == [StepKind.TOOL_CALL, StepKind.FINAL]
    assert [e.is_error for e in episode.steps[0].tool_events] == [True, True, False]


async def test_autogen_agent_on_the_git_server_workbench_blocks_a_wrong_revision(workspace):
    repo = workspace / "repo"
    seen: list[Any] = []
    guard = Guard.default(workspace=workspace, mode="intervene")
    guarded = AutoGenGuard(guard, task="what changed on feature?")
    client = ReplayChatCompletionClient([calls(
        ("c1", "git_diff", {"repo_path": str(repo), "target": "featrue"}),
        ("c2", "git_log", {"repo_path": str(repo), "max_count": 2})), "Two commits."], model_info=MODEL_INFO)
    async with McpWorkbench(stdio([*git_server(), "--repository", str(repo)])) as server:
        bench = guarded.workbench(server)
        agent = AssistantAgent("git", model_client=guarded.model_client(client), reflect_on_tool_use=True,
                               workbench=bench)
        result = await agent.run(task="what changed on feature?")
        seen.append(guarded.context.episode.steps)
    await guarded.afinish(result)

    wrong, log = next(m for m in result.messages if isinstance(m, ToolCallExecutionEvent)).content
    assert wrong.is_error and "did you mean feature?" in wrong.content
    assert not log.is_error and "second" in log.content
    steps = seen[0]
    assert steps[0].kind is StepKind.TOOL_CALL
    events = {e.name: e for e in steps[0].tool_events}
    assert events["git_diff"].result is None and "featrue" in (events["git_diff"].guard_message or "")
    assert "second" in (events["git_log"].result or "")  # the step holds the server's own answer


class ScriptedChatModel(GenericFakeChatModel):
    """A chat model that answers with the scripted messages in order (tools bound or not)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def scripted(*turns: AIMessage) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter(turns))


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


async def run_agent(mcp: MultiServerMCPClient, server: str, model: ScriptedChatModel, guard: Guard,
                    task: str) -> dict[str, ToolMessage]:
    """`create_agent` on the server's MCP tools with the guard's middleware; the tool replies by call id."""
    async with mcp.session(server) as session:
        agent = create_agent(model, await load_mcp_tools(session), middleware=guard.langchain_middleware())
        state = await agent.ainvoke({"messages": [{"role": "user", "content": task}]})
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


async def test_langchain_agent_on_mcp_tools_from_the_filesystem_server(workspace):
    guard = Guard.default(workspace=workspace, mode="intervene")
    mcp = MultiServerMCPClient({"fs": {"command": "node", "args": [*filesystem_server()[1:], str(workspace)],
                                       "transport": "stdio"}})
    model = scripted(call("read_text_file", "c1", path=str(workspace / "note.txt")),
                     call("list_directory", "c2", path=7),
                     call("edit_file", "c3", path=str(workspace / "notes.txt"),
                          edits=[{"oldText": "beta lime", "newText": "BETA"}]),
                     call("read_text_file", "c4", path=str(workspace / "notes.txt")),
                     AIMessage(content="alpha, beta, gamma"))
    replies = await run_agent(mcp, "fs", model, guard, "read the notes")
    assert replies["c1"].status == "error" and "does not exist" in replies["c1"].content
    assert "notes.txt" in replies["c1"].content  # the hint
    assert replies["c2"].status == "error" and "list_directory(path: string)" in replies["c2"].content
    assert replies["c3"].status == "error" and "closest line in the file: 'beta line'" in replies["c3"].content
    assert (workspace / "notes.txt").read_text() == "alpha\n    beta line\ngamma\n"  # the edit never ran
    assert replies["c4"].status != "error" and "beta line" in str(replies["c4"].content)


async def test_langchain_agent_on_mcp_tools_from_the_git_server(workspace):
    repo = workspace / "repo"
    guard = Guard.default(workspace=workspace, mode="intervene")
    mcp = MultiServerMCPClient({"git": {"command": git_server()[0], "args": ["--repository", str(repo)],
                                        "transport": "stdio", "env": {**os.environ, **GIT_ENV}}})
    model = scripted(call("git_show", "c1", repo_path=str(repo), revision="v2"),
                     call("git_checkout", "c2", repo_path=str(repo), branch_name="feature"),
                     AIMessage(content="on feature"))
    replies = await run_agent(mcp, "git", model, guard, "check out the release")
    assert replies["c1"].status == "error" and "v2" in replies["c1"].content and "v1" in replies["c1"].content
    assert replies["c2"].status != "error"
    assert (repo / ".git" / "HEAD").read_text().strip() == "ref: refs/heads/feature"
