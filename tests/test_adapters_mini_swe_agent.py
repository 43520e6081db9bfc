"""mini-swe-agent: its real DefaultAgent and DeterministicModel, guarded, on LocalEnvironment and on swerex-remote."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # mini-swe-agent prints a banner and reads a global .env on import
pytest.importorskip("minisweagent", reason="mini-swe-agent is not installed: pip install 'guardrail[swe]'")

from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.test_models import (  # noqa: E402
    DeterministicModel,
    DeterministicToolcallModel,
    make_output,
    make_toolcall_output,
)

from adapters.mini_swe_agent import (  # noqa: E402
    BLOCKED_RETURNCODE,
    GuardedEnvironment,
    SwerexRuntimeEnvironment,
    guard_agent,
)
from adapters.steps import steps_from_mini_swe_agent  # noqa: E402
from guardrail import Guard  # noqa: E402
from guardrail.core.events import Finding, Severity, StepKind, Verdict  # noqa: E402
from guardrail.core.layer import Layer  # noqa: E402
from guardrail.gate.layer import GateLayer  # noqa: E402
from tests.swerex_remote import swerex_remote  # noqa: E402

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat src/calc.py"


@pytest.fixture(autouse=True)
def _mini_config_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path_factory.mktemp("mswea")))


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "tests" / "test_calc.py").write_text("from src.calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    return tmp_path


class Recorder(Layer):
    """Keeps every step and the finished episode the guard hands to the monitor/verifier hooks."""

    name = "recorder"

    def __init__(self):
        self.steps, self.episodes = [], []

    def on_step(self, ctx, step):
        self.steps.append(step)

    def on_finish(self, ctx, episode):
        self.episodes.append(episode)


def _script(*turns: tuple[str, str]) -> DeterministicModel:
    return DeterministicModel(outputs=[make_output(thought, [{"command": command}]) for thought, command in turns])


def _agent(model, env, **config) -> DefaultAgent:
    return DefaultAgent(model, env, system_template="You fix bugs.", instance_template="Task: {{task}}",
                        step_limit=20, cost_limit=0, **config)


# The hallucinated command would leave a tripwire file if it ran.
SLIP = "cat src/calcs.py; touch ran.txt"
TURNS = (("Look at the code.", SLIP), ("The file is calc.py.", "cat src/calc.py"),
         ("Fix it.", "sed -i 's/a - b/a + b/' src/calc.py"), ("Done.", SUBMIT))


def test_intervene_blocks_before_the_command_runs_and_the_model_reads_the_warning(repo):
    recorder = Recorder()
    guard = Guard([GateLayer(repo), recorder], mode="intervene")
    agent = guard_agent(_agent(_script(*TURNS), LocalEnvironment(cwd=str(repo))), guard)

    result = agent.run("add() subtracts")

    assert result["exit_status"] == "Submitted"
    assert "return a + b" in result["submission"]  # the loop went on after the block and the fix ran
    assert not (repo / "ran.txt").exists()  # the blocked command never ran
    observation = agent.messages[3]  # system, task, assistant, observation of the slip
    assert observation["role"] == "user"
    assert f"<returncode>{BLOCKED_RETURNCODE}</returncode>" in observation["content"]
    assert f"file {repo}/src/calcs.py does not exist" in observation["content"]
    assert f"Hint: closest existing paths: {repo}/src/calc.py" in observation["content"]
    assert [command for command, _ in agent.env.blocked] == [SLIP]
    assert agent.env.crashes == []


def test_report_mode_runs_every_command_and_only_records(repo):
    guard = Guard([GateLayer(repo)], mode="report")
    agent = guard_agent(_agent(_script(*TURNS), LocalEnvironment(cwd=str(repo))), guard)

    agent.run("add() subtracts")

    assert (repo / "ran.txt").exists()
    assert "No such file or directory" in agent.messages[3]["content"]
    assert "guardrail" not in agent.messages[3]["content"]
    assert [d.verdict for d in agent.env.decisions if d.hook == "before_action"] == [Verdict.WARN]
    assert agent.env.blocked == []


def test_the_monitor_gets_the_same_steps_live_as_from_the_saved_trajectory(repo, tmp_path):
    recorder = Recorder()
    traj = tmp_path / "run.traj.json"
    agent = guard_agent(_agent(_script(*TURNS), LocalEnvironment(cwd=str(repo)), output_path=traj),
                        Guard([GateLayer(repo), recorder], mode="intervene"))

    agent.run("add() subtracts")
    saved = steps_from_mini_swe_agent(json.loads(traj.read_text())["messages"], task="Task: add() subtracts")

    assert [s.kind for s in recorder.steps] == [StepKind.TOOL_CALL] * 3 + [StepKind.FINAL]
    assert recorder.steps[0].tool_events[0].args == {"command": SLIP}
    assert recorder.steps[0].tool_events[0].is_error  # the block came back as a failed command
    assert recorder.steps[1].tool_events[0].result == "def add(a, b):\n    return a - b\n"
    assert [(s.kind, s.text) for s in saved] == [(s.kind, s.text) for s in recorder.steps]
    episode = recorder.episodes[0]
    assert episode.framework == "mini-swe-agent" and episode.task == "add() subtracts"
    assert "return a + b" in episode.answer


def test_tool_calling_messages_become_steps_matched_by_call_id(repo):
    def call(call_id, command):
        return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}

    outputs = [make_toolcall_output("Two at once.", [call("c1", "cat src/nope.py"), call("c2", "ls src")],
                                    [{"command": "cat src/nope.py", "tool_call_id": "c1"},
                                     {"command": "ls src", "tool_call_id": "c2"}]),
               make_toolcall_output(None, [call("c3", SUBMIT)], [{"command": SUBMIT, "tool_call_id": "c3"}])]
    recorder = Recorder()
    agent = guard_agent(_agent(DeterministicToolcallModel(outputs=outputs), LocalEnvironment(cwd=str(repo))),
                        Guard([GateLayer(repo), recorder], mode="intervene"))

    agent.run("look around")

    first = recorder.steps[0]
    assert [(e.id, e.is_error) for e in first.tool_events] == [("c1", True), ("c2", False)]
    assert "guardrail blocked this command" in first.tool_events[0].result
    assert first.tool_events[1].result == "calc.py\n"
    assert recorder.steps[-1].kind is StepKind.FINAL


def test_a_guard_that_raises_never_stops_the_agent(repo):
    class Broken(Guard):
        def before_action(self, episode, action):
            raise RuntimeError("guard bug")

    agent = guard_agent(_agent(_script(("Look.", "ls src"), ("Done.", SUBMIT)), LocalEnvironment(cwd=str(repo))),
                        Broken([GateLayer(repo)], mode="intervene"))

    result = agent.run("look")

    assert result["exit_status"] == "Submitted"
    assert "calc.py" in agent.messages[3]["content"]  # the command ran
    assert agent.env.crashes and "guard bug" in agent.env.crashes[0]


def test_each_command_is_checked_from_the_environment_cwd_since_cd_never_carries(repo):
    guard = Guard([GateLayer(repo)], mode="intervene")
    env = GuardedEnvironment(LocalEnvironment(cwd=str(repo)), guard)

    assert env.execute({"command": "cd src && cat calc.py"})["returncode"] == 0
    blocked = env.execute({"command": "cat calc.py"})  # run from the repo root again: no calc.py there

    assert blocked["returncode"] == BLOCKED_RETURNCODE
    assert f"{repo}/calc.py does not exist" in blocked["output"]


@pytest.mark.slow
def test_guarded_run_through_a_swerex_remote_runtime_on_loopback(repo):
    with swerex_remote(repo) as runtime:
        env = SwerexRuntimeEnvironment(runtime, cwd=str(repo))
        agent = guard_agent(_agent(_script(*TURNS), env), Guard([GateLayer(repo)], mode="intervene"))

        result = agent.run("add() subtracts")

    assert result["exit_status"] == "Submitted"
    assert "return a + b" in result["submission"]  # the fix ran inside the remote runtime
    assert not (repo / "ran.txt").exists()
    assert f"Hint: closest existing paths: {repo}/src/calc.py" in agent.messages[3]["content"]
    assert agent.messages[5]["content"].count("return a - b") == 1  # the allowed cat ran remotely
    assert agent.env.crashes == []
    # the gate probed the sandbox through the same runtime, not this machine
    assert type(agent.env.backend).__name__ == "SwerexBackend" and agent.env.backend.runtime is runtime
    assert agent.env.backend.round_trips > 0 and agent.env.backend.failures == 0


def test_sandbox_false_keeps_the_gate_on_this_machine(repo):
    with swerex_remote(repo) as runtime:
        env = GuardedEnvironment(SwerexRuntimeEnvironment(runtime, cwd=str(repo)), Guard([GateLayer(repo)]),
                                 sandbox=False)
        assert env.backend is None and type(env.guard.layers[0].gate.backend).__name__ == "LocalBackend"
    with pytest.raises(ValueError, match="no SWE-ReX runtime"):
        GuardedEnvironment(LocalEnvironment(cwd=str(repo)), Guard([GateLayer(repo)]), sandbox=True)


def test_the_end_of_run_decision_warns_when_the_monitor_alarmed(repo):
    class AlarmOnFirstStep(Layer):
        name = "monitor"

        def on_step(self, ctx, step):
            return [Finding(layer=self.name, check="step_monitor", message="off the healthy range",
                            severity=Severity.ALARM, step=step.index)] if step.index == 0 else None

    agent = guard_agent(_agent(_script(*TURNS[1:]), LocalEnvironment(cwd=str(repo))), Guard([AlarmOnFirstStep()]))
    agent.run("add() subtracts")
    finish = [d for d in agent.env.decisions if d.hook == "on_finish"]
    assert [d.verdict for d in finish] == [Verdict.WARN] and finish[0].findings[0].check == "step_monitor"
