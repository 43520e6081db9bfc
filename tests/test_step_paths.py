"""One path from framework messages to steps: every way a run reaches the guard yields the bytes the corpus stored.

Each test takes one real run (a `create_agent` graph, an AutoGen `AssistantAgent`, a SWE-agent
trajectory), writes its episode with the corpus writer as the testbed does, then replays the same
run through every other path the guard has (the live adapter, the repair driver reading the
framework's own checkpoint or saved state) and asserts each step serializes to exactly the line the
corpus holds. Measured seconds are stamped on (or recorded with) the framework's own messages, so a
path that re-reads them gets the same figures, not new ones.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from adapters.autogen import AutoGenGuard
from adapters.autogen_repair import AutoGenRun
from adapters.langchain import GuardMiddleware
from adapters.langgraph_repair import LangGraphCheckpoints, repair_langgraph
from adapters.swe_agent import SweAgentGuardHook, episode_from_traj, read_traj, sample_path
from guardrail import Episode, Finding, Guard, Result, Step
from guardrail.core.corpus import _step_line, read_corpus, write_corpus
from repair import Repairer
from tests.layers import Recorder
from traces.agents import (
    SYSTEM_PROMPT,
    build_autogen_agent,
    build_langgraph_agent,
    episode_from_autogen,
    episode_from_langchain,
)
from traces.policy import Policy
from traces.tasks import make_task
from traces.tools import BookingDB, booking_tools

DB = BookingDB()
TRAJ = sample_path("v0_missing_test_file.traj").parent


def stored_lines(tmp_path: Path, episode: Episode) -> list[str]:
    """The lines the corpus writer stored for `episode` (read back from disk)."""
    manifest = write_corpus(tmp_path / "corpus", [episode], name="paths")
    [entry] = manifest.episodes
    assert read_corpus(tmp_path / "corpus").episodes[0].steps == episode.steps  # and it reads back whole
    return (tmp_path / "corpus" / entry.file).read_text(encoding="utf-8").splitlines()


def lines(steps: list[Step]) -> list[str]:
    return [_step_line(step) for step in steps]


def test_langgraph_live_testbed_and_checkpoint_paths_store_the_same_steps(tmp_path: Path) -> None:
    task, policy, box = make_task(3, db=DB), Policy(seed=3), booking_tools(DB)
    recorder = Recorder()
    graph = build_langgraph_agent(task, policy, toolbox=box, checkpointer=InMemorySaver(),
                                  middleware=[GuardMiddleware(Guard([recorder]))])
    config: Any = {"configurable": {"thread_id": "paths-1"}, "recursion_limit": 100}
    state = graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)

    stored = stored_lines(tmp_path, episode_from_langchain(state["messages"], task, policy, log=box.log))

    assert len(stored) >= 3
    assert lines(recorder.steps) == stored  # what the live middleware fed the monitor
    assert lines(LangGraphCheckpoints(graph, config, task=task.prompt).steps()) == stored  # what repair reads back
    assert all(step.latency_s is not None for step in recorder.steps)  # measured once, carried by the messages


def test_a_repaired_langgraph_fork_is_fed_the_steps_its_checkpoints_hold(tmp_path: Path) -> None:
    task, policy, box = make_task(3, db=DB), Policy(seed=3), booking_tools(DB)
    graph = build_langgraph_agent(task, policy, toolbox=box, checkpointer=InMemorySaver(),
                                  middleware=[GuardMiddleware(Guard([]))])
    config: Any = {"configurable": {"thread_id": "paths-fork"}, "recursion_limit": 100}
    graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)
    flag = Finding(layer="verify", check="total_consistency", message="wrong", blocking=True, step=2)
    recorder = Recorder()

    outcome = repair_langgraph(Repairer(Guard([recorder], mode="intervene"), rung="generic", max_attempts=1),
                               graph, config, [flag], task=task.prompt)

    [attempt] = outcome.attempts
    assert attempt.fork_config is not None
    fork_steps = LangGraphCheckpoints(graph, attempt.fork_config, task=task.prompt).steps()
    assert lines(recorder.steps) == lines(fork_steps)  # the watch saw exactly what the fork's checkpoints hold
    assert len(fork_steps) > attempt.target_step


async def test_autogen_live_testbed_and_saved_state_paths_store_the_same_steps(tmp_path: Path) -> None:
    task, policy, box = make_task(4, db=DB), Policy(seed=4), booking_tools(DB)
    agent, client = build_autogen_agent(task, policy, toolbox=box)
    result = await agent.run(task=task.prompt)
    episode = episode_from_autogen(result.messages, client, task, policy, log=box.log)
    stored = stored_lines(tmp_path, episode)
    tool_seconds = {e.id: e.latency_s for step in episode.steps for e in step.tool_events}

    # The live adapter, replayed with the run's own model outputs, results and measured seconds.
    recorder = Recorder()
    guarded = AutoGenGuard(Guard([recorder]), task=task.prompt)
    executed = {r.call_id: r for m in result.messages if type(m).__name__ == "ToolCallExecutionEvent"
                for r in m.content}
    for created, seconds in zip(client.results, client.latencies, strict=True):
        await guarded.on_model_output(created, latency_s=seconds)
        for call in created.content if isinstance(created.content, list) else []:
            done = executed[call.id]
            await guarded.on_tool_result(call.id, call.name, Result(output=done.content, is_error=done.is_error,
                                                                    latency_s=tool_seconds[call.id]))
    await guarded.afinish()
    assert lines(recorder.steps) == stored

    # The repair driver's record: the agent's own saved state plus what the step log records beside it.
    saved = AutoGenRun(task=task.prompt, initial_state={}, states=[await agent.save_state()],
                       model_outputs=[r.model_dump(mode="json") for r in client.results],
                       latencies=list(client.latencies),
                       tool_latencies={k: v for k, v in tool_seconds.items() if v is not None})
    assert lines(saved.steps()) == stored


async def test_the_autogen_step_log_records_what_its_saved_state_loses() -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.tools import StaticWorkbench

    from adapters.autogen_repair import AutoGenStepLog
    from traces.models import ScriptedChatCompletionClient

    task, policy, box = make_task(4, db=DB), Policy(seed=4), booking_tools(DB)
    agent = AssistantAgent("booking_agent", model_client=ScriptedChatCompletionClient(policy),
                           workbench=StaticWorkbench(box.autogen_tools(task.tools)), system_message=SYSTEM_PROMPT,
                           max_tool_iterations=1, reflect_on_tool_use=False)

    run = await AutoGenStepLog(agent).run(task.prompt)

    steps = run.steps()
    assert len(run.model_outputs) == len(steps) == run.model_steps
    assert all(step.token_logprobs and step.output_tokens and step.latency_s is not None for step in steps)
    assert all(e.latency_s is not None for step in steps for e in step.tool_events)
    assert steps[0].task == task.prompt and steps[-1].is_final


def test_swe_agent_live_hook_and_trajectory_reader_store_the_same_steps(tmp_path: Path) -> None:
    trajectory = read_traj(TRAJ / "v0_missing_test_file.traj")
    stored = stored_lines(tmp_path, episode_from_traj(trajectory))
    recorder = Recorder()
    hook = SweAgentGuardHook(Guard([recorder]))
    problem = SimpleNamespace(get_problem_statement=lambda: trajectory.problem)
    hook.on_init(agent=SimpleNamespace(_problem_statement=problem))  # SWE-agent's DefaultAgent, as the hook reads it

    hook.on_run_start()
    for recorded in trajectory.steps:
        step = _LiveStep(recorded.action, recorded.cwd, recorded.thought, recorded.execution_time)
        hook.on_step_start()
        hook.on_actions_generated(step=step)
        hook.on_action_started(step=step)
        step.observation = recorded.observation  # what SWE-agent fills in when the action ran
        hook.on_action_executed(step=step)
        hook.on_step_done(step=step, info={})

    assert len(stored) == len(trajectory.steps) >= 2
    assert lines(recorder.steps) == stored


class _LiveStep:
    """The fields of SWE-agent's StepOutput the hook reads, as SWE-agent fills them around one action."""

    def __init__(self, action: str, cwd: str | None, thought: str, execution_time: float | None) -> None:
        self.action = action
        self.state = {"working_dir": cwd} if cwd else {}
        self.thought = thought
        self.execution_time = execution_time
        self.observation = ""
        self.done = False
