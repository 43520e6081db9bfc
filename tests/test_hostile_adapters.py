"""A model's malformed tool call never crashes a guarded agent: every adapter turns it into a finding (issue 15, item 5)."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelFamily, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from adapters.autogen import AutoGenGuard, GuardedWorkbench
from adapters.common import MALFORMED_CALL, call_action
from adapters.langchain import GuardMiddleware
from adapters.span_processor import GuardSpanProcessor
from adapters.swe_agent import SweAgentGuardHook
from guardrail import Guard
from guardrail.core.events import ActionKind, Verdict
from guardrail.core.layer import Layer
from tests.hostile.calls import malformed_calls
from tests.layers import Recorder

BAD_SHELL = {"command": "ls", "cwd": 5}
MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": ModelFamily.UNKNOWN,
              "structured_output": False}


class Seen(Layer):
    """Records every action the gate is asked about."""

    name = "seen"

    def __init__(self) -> None:
        self.actions: list = []

    def before_action(self, ctx, action):
        self.actions.append(action)


class ScriptedChatModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def _bash_tool(ran: list[str]):
    @tool
    def bash(command: str, cwd: str | None = None) -> str:
        """Run a shell command."""
        ran.append(command)
        return subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=10).stdout

    return bash


def _langchain_turns() -> list[AIMessage]:
    return [AIMessage(content="", tool_calls=[{"name": "bash", "args": dict(BAD_SHELL), "id": "c1"}]),
            AIMessage(content="done")]


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
def test_create_agent_finishes_on_a_call_with_a_numeric_cwd(guarded):
    ran: list[str] = []
    seen, recorder = Seen(), Recorder()
    middleware = [GuardMiddleware(Guard([seen, recorder], mode="intervene"))] if guarded else []
    agent = create_agent(ScriptedChatModel(messages=iter(_langchain_turns())), [_bash_tool(ran)], middleware=middleware)

    out = agent.invoke({"messages": [{"role": "user", "content": "list the files"}]})

    assert out["messages"][-1].content == "done"
    if guarded:
        assert [f["check"] for f in out["guardrail_findings"]] == [MALFORMED_CALL]
        # the gate still saw the command it could check, in the agent's working directory
        assert [(a.kind, a.command) for a in seen.actions] == [(ActionKind.SHELL, "ls")]


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
async def test_assistant_agent_finishes_on_a_call_with_a_numeric_cwd(guarded):
    ran: list[str] = []

    def bash(command: str, cwd: str | None = None) -> str:
        """Run a shell command."""
        ran.append(command)
        return "ok"

    client = ReplayChatCompletionClient(
        [CreateResult(finish_reason="function_calls", cached=False, usage=RequestUsage(prompt_tokens=1, completion_tokens=1),
                      content=[FunctionCall(id="c1", name="bash", arguments=json.dumps(BAD_SHELL))]), "done"],
        model_info=MODEL_INFO)
    tools = [FunctionTool(bash, description="Run a shell command.")]
    seen = Seen()
    guarded_by = AutoGenGuard(Guard([seen], mode="intervene"), task="list the files")
    if guarded:
        agent = AssistantAgent("worker", model_client=client, workbench=GuardedWorkbench(tools, guarded_by))
    else:
        agent = AssistantAgent("worker", model_client=client, tools=tools)

    result = await agent.run(task="list the files")

    assert result.messages[-1].content  # the run ended with the tool's outcome, not an exception
    if guarded:
        assert [f.check for d in guarded_by.decisions for f in d.findings] == [MALFORMED_CALL]
        assert [(a.kind, a.command) for a in seen.actions] == [(ActionKind.SHELL, "ls")]


CASES = malformed_calls()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_any_malformed_call_becomes_an_action_and_a_finding(case):
    _, name, args, call_id = case
    action, problem = call_action(name, args, call_id, cwd="/work")
    assert action.tool is None or isinstance(action.tool, str)
    assert isinstance(action.args, dict)
    if problem is not None:
        assert problem.check == MALFORMED_CALL and "\n" not in problem.message and len(problem.message) < 600


def test_a_well_formed_call_has_no_finding():
    action, problem = call_action("bash", {"command": "ls", "cwd": "/tmp"}, "c1")
    assert problem is None and action.kind is ActionKind.SHELL and action.cwd == "/tmp"


def test_fail_closed_blocks_a_malformed_call_it_could_not_check():
    from adapters.common import with_problem

    _, problem = call_action("bash", BAD_SHELL, "c1")
    guard = Guard([], fail_closed=True)
    ctx = guard.start_episode()
    decision = with_problem(ctx.before_action(call_action("bash", BAD_SHELL, "c1")[0]), problem, guard, ctx)
    assert decision.verdict is Verdict.BLOCK and ctx.findings[-1].check == MALFORMED_CALL


class FindingsAtFinish(Layer):
    """Keeps the episode and every finding the guard recorded for it."""

    name = "at_finish"

    def __init__(self) -> None:
        self.episodes: list = []
        self.findings: list = []

    def on_finish(self, ctx, episode):
        self.episodes.append(episode)
        self.findings.extend(ctx.findings)


def test_span_processor_keeps_a_malformed_tool_span_as_a_step_and_a_finding():
    from opentelemetry.sdk.trace import TracerProvider

    seen, at_finish = Seen(), FindingsAtFinish()
    provider = TracerProvider()
    provider.add_span_processor(GuardSpanProcessor(Guard([seen, at_finish]), framework="otel"))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span("execute_tool bash", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "bash", "gen_ai.tool.call.id": "t1",
                "gen_ai.tool.call.arguments": json.dumps(BAD_SHELL), "gen_ai.tool.call.result": "a b"}):
            pass
    assert provider.force_flush()  # the processor hands spans to its worker thread

    (episode,) = at_finish.episodes
    assert [e.name for s in episode.steps for e in s.tool_events] == ["bash"]  # the call was not lost
    assert [a.command for a in seen.actions] == ["ls"]
    assert [f.check for f in at_finish.findings] == [MALFORMED_CALL]


def test_swe_agent_hook_takes_a_step_with_junk_fields():
    seen = Seen()
    hook = SweAgentGuardHook(Guard([seen]))
    hook.on_run_start()
    step = SimpleNamespace(action="ls", state={"working_dir": 5}, observation="a b", thought=None,
                           execution_time="slow", done=False)
    hook.on_actions_generated(step=step)
    hook.on_action_executed(step=step)
    hook.on_step_done(step=step, info={})
    weird = SimpleNamespace(action=["ls"], state="nope", observation=None, thought=3, execution_time=None, done=0)
    hook.on_actions_generated(step=weird)
    hook.on_step_done(step=weird, info={})
    assert [a.command for a in seen.actions][:1] == ["ls"]
    assert any(f.check == MALFORMED_CALL for d in hook.decisions for f in d.findings)

def test_sampler_gates_candidates_whose_arguments_are_nested_past_the_parser_limit():
    from adapters.sampling import StepSampler
    from guardrail.consistency import ProposedCall
    from tests.hostile.calls import nested_json
    from tests.test_consistency_adapters import gated_guard

    guard, layer, harness = gated_guard("intervene")
    ctx = guard.start_episode(task="status of my order")
    sampler = StepSampler(guard, layer, harness, episode=ctx, n=5)
    deep = '{"order_id": ' + nested_json(100_000) + "}"

    step = sampler.gate([ProposedCall("get_order", deep, call_id=f"c{i}") for i in range(5)])

    assert step.decision is not None  # a decision, not a RecursionError out of the agent's model call
    assert MALFORMED_CALL in [f.check for f in step.decision.findings]
