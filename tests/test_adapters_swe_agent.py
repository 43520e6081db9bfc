"""SWE-agent: .traj reading (v0 and v1), offline audit with the real gate, the live hook, the swe-rex prober."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.swe_agent import (
    GuardBlockedAction,
    SweAgentGuardHook,
    SweRexProber,
    TrajError,
    audit_trajectory,
    episode_from_traj,
    guess_sandbox_root,
    read_traj,
    sample_path,
)
from guardrail import Guard
from guardrail.core.cli import main
from guardrail.core.events import ActionKind, Finding, StepKind
from guardrail.core.layer import Layer

TRAJ = sample_path("v0_missing_test_file.traj").parent
V0 = TRAJ / "v0_missing_test_file.traj"
V1 = TRAJ / "v1_cd_then_missing.traj"


@pytest.fixture
def repo(tmp_path):
    """The local copy of the repository the recorded agent worked on (at /repo in its sandbox)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "tests" / "test_calc.py").write_text("from src.calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    return tmp_path


def test_v0_state_is_a_json_string_taken_before_the_action():
    trajectory = read_traj(V0)

    assert trajectory.layout == "v0"
    assert len(trajectory.steps) == 7
    assert trajectory.steps[2].state_before == {"open_file": "/repo/src/calc.py", "working_dir": "/repo"}
    assert trajectory.steps[1].state_after == trajectory.steps[2].state_before
    assert trajectory.problem.startswith("The function add()")


def test_v1_state_is_a_dict_taken_after_the_action():
    trajectory = read_traj(V1)

    assert trajectory.layout == "v1"
    assert trajectory.steps[0].state_before is None  # nothing recorded before the first action
    assert trajectory.steps[0].state_after["working_dir"] == "/repo/src"
    assert trajectory.steps[1].cwd == "/repo/src"  # the state after `cd src`
    assert trajectory.problem.startswith("tests/test_calc.py fails")


def test_episode_from_a_trajectory_ends_with_the_submit_step():
    episode = episode_from_traj(read_traj(V0))

    assert episode.framework == "swe-agent"
    assert [s.kind for s in episode.steps][-1] is StepKind.FINAL
    assert episode.steps[3].tool_events[0].args == {"command": "python -m pytest tests/test_calcs.py"}
    assert episode.steps[3].tool_events[0].result.startswith("ERROR: file or directory not found")


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ('{"history": []}', "no 'trajectory' or 'messages' list"),
    ('{"trajectory": [{"observation": "x"}]}', "no 'action' string"),
    ('{"trajectory": [{"action": "ls", "state": "{broken"}]}', "state is not valid JSON"),
])
def test_a_broken_traj_file_gets_a_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.traj"
    path.write_text(text)

    with pytest.raises(TrajError, match=message):
        read_traj(path)


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["trajectory", "action", "state", "observation", "info", "history",
                                         "role", "content", "working_dir", "messages", "extra", "actions",
                                         "command", "tool_calls", "returncode", "raw_output", "config"]),
                        inner, max_size=4),
                    max_leaves=20))
def test_any_json_reads_as_a_trajectory_or_a_traj_error(tmp_path_factory, document):
    path = tmp_path_factory.mktemp("fuzz") / "x.traj"
    path.write_text(json.dumps(document))

    try:
        trajectory = read_traj(path)
    except TrajError:
        return
    episode_from_traj(trajectory)  # whatever reads also converts
    audit_trajectory(trajectory, Guard([]), tmp_path_factory.mktemp("ws"))  # and audits


def test_sandbox_root_is_the_ancestor_that_exists_locally(repo):
    assert guess_sandbox_root(read_traj(V1), repo) == "/repo"
    assert guess_sandbox_root(read_traj(V0), repo) == "/repo"


def test_audit_blocks_the_recorded_actions_on_missing_files_with_the_real_gate(repo):
    from guardrail.gate.layer import GateLayer

    rows = audit_trajectory(read_traj(V0), Guard([GateLayer(repo)], mode="intervene"), repo)

    verdicts = {r.step: r.decision.verdict.value for r in rows}
    assert verdicts[3] == "block" and verdicts[4] == "block"
    assert verdicts[0] == verdicts[1] == verdicts[5] == verdicts[6] == "allow"
    assert "test_calc.py" in rows[3].decision.findings[0].hint  # the closest existing test file
    assert rows[4].decision.findings[0].args == [str(repo / "src" / "helpers.py")]  # /repo mapped locally


def test_audit_of_a_v1_file_follows_the_recorded_cd(repo):
    from guardrail.gate.layer import GateLayer

    rows = audit_trajectory(read_traj(V1), Guard([GateLayer(repo)], mode="intervene"), repo)

    assert rows[1].decision.verdict.value == "allow"  # cat calc.py inside src/
    assert rows[2].decision.verdict.value == "block"  # cat test_calc.py: it is in tests/, not src/


def test_audit_traj_command_prints_one_json_object_per_action_and_exits_1_on_a_block(repo, capsys):
    code = main(["audit-traj", str(V0), "--workspace", str(repo), "--json"])

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 1
    assert [line["step"] for line in lines] == list(range(7))
    assert {line["step"] for line in lines if line["verdict"] == "block"} == {3, 4}
    assert set(lines[3]) == {"trajectory", "step", "action", "verdict", "predicates", "observation_confirms"}
    assert lines[3]["predicates"][0]["predicate"] == "path_exists"
    assert lines[3]["observation_confirms"] is True  # "ERROR: file or directory not found" followed the flagged action
    assert lines[5]["observation_confirms"] is True  # "1 passed" after an allowed action


def test_audit_traj_command_refuses_a_file_that_is_not_a_trajectory(tmp_path, capsys):
    bad = tmp_path / "x.traj"
    bad.write_text("[]")

    assert main(["audit-traj", str(bad), "--workspace", str(tmp_path)]) == 2
    assert "no 'trajectory' or 'messages' list" in capsys.readouterr().err


class MissingPathGate(Layer):
    name = "gate"

    def before_action(self, ctx, action):
        words = (action.command or "").split()
        if words[:1] == ["cat"] and not (Path(action.cwd or ".") / words[1]).exists():
            return [Finding(layer=self.name, check="file_exists", message=f"{words[1]} does not exist",
                            hint="try tests/test_calc.py", blocking=True)]
        return None


def _swe_step(action, cwd, observation=""):
    return SimpleNamespace(action=action, state={"working_dir": cwd}, observation=observation, thought="t",
                           execution_time=0.01, done=action == "submit")


def _drive(hook, step):
    """What SWE-agent's DefaultAgent does around one action, in its order."""
    hook.on_step_start()
    hook.on_actions_generated(step=step)
    hook.on_action_started(step=step)
    step.observation = step.observation or "ran"
    hook.on_action_executed(step=step)
    hook.on_step_done(step=step, info={})


def test_hook_in_intervene_mode_raises_the_blocked_action_error_with_the_hint(repo):
    hook = SweAgentGuardHook(Guard([MissingPathGate()], mode="intervene"))
    hook.on_run_start()

    with pytest.raises(GuardBlockedAction, match="test_calc.py does not exist.*Hint: try tests/test_calc.py"):
        hook.on_actions_generated(step=_swe_step("cat test_calc.py", str(repo)))
    _drive(hook, _swe_step("cat src/calc.py", str(repo)))
    hook.on_run_done(trajectory=[], info={"submission": "diff"})

    assert [d.verdict.value for d in hook.decisions] == ["block"]


def test_hook_in_report_mode_appends_the_warning_to_the_observation(repo):
    recorded = []

    class Recorder(Layer):
        name = "recorder"

        def on_finish(self, ctx, episode):
            recorded.append(episode)

    hook = SweAgentGuardHook(Guard([MissingPathGate(), Recorder()], mode="report"))
    hook.on_run_start()
    step = _swe_step("cat nope.py", str(repo), observation="cat: nope.py: No such file or directory")

    _drive(hook, step)
    _drive(hook, _swe_step("submit", str(repo), observation="diff"))
    hook.on_run_done(trajectory=[], info={"submission": "diff"})

    assert step.observation.startswith("cat: nope.py: No such file")
    assert "[guardrail:gate/file_exists] nope.py does not exist" in step.observation
    assert [s.kind for s in recorded[0].steps] == [StepKind.TOOL_CALL, StepKind.FINAL]
    assert recorded[0].answer == "diff"


def test_hook_classifies_aci_commands_and_shell_lines():
    seen = []

    class Spy(Layer):
        name = "spy"

        def before_action(self, ctx, action):
            seen.append(action.kind)

    hook = SweAgentGuardHook(Guard([Spy()]))
    hook.on_actions_generated(step=_swe_step("open src/calc.py 10", "/repo"))
    hook.on_actions_generated(step=_swe_step("grep -rn add src", "/repo"))

    assert seen == [ActionKind.SWE_AGENT, ActionKind.SHELL]


def _rex_runtime():
    pytest.importorskip("swerex", reason="swe-rex is not installed: pip install 'guardrail[swe]'")
    from swerex.runtime.local import LocalRuntime

    return LocalRuntime()  # swe-rex's own runtime, in this process: commands really run, here


def test_swe_rex_prober_answers_from_inside_the_runtime(repo):
    prober = SweRexProber(_rex_runtime(), workspace=str(repo))

    assert prober.exists(str(repo / "src" / "calc.py")) is True
    assert prober.exists("src/nope.py", cwd=str(repo)) is False
    assert prober.is_file(str(repo / "src")) is False
    assert prober.read_text(str(repo / "src" / "calc.py")).startswith("def add")
    assert prober.read_text(str(repo / "missing")) is None  # unknown, not an exception
    assert any(p.endswith("site-packages") for p in prober.sys_path(shutil.which("python3") or "python3"))
    assert prober.backend.round_trips > 0 and prober.backend.failures == 0
    # Confined like the gate: nothing outside the workspace is stat'ed or read (unknown, never an answer).
    assert prober.exists("/etc/hostname") is None and prober.read_text("/etc/hostname") is None
    (repo / "escape").symlink_to("/etc")
    assert prober.exists(str(repo / "escape" / "hostname")) is None


async def test_swe_rex_prober_also_works_from_inside_an_event_loop(repo):
    prober = SweRexProber(_rex_runtime(), workspace=str(repo))

    assert prober.exists(str(repo / "tests" / "test_calc.py")) is True


def test_a_swe_rex_prober_that_gets_no_answer_says_unknown(repo):
    class Gone:
        async def execute(self, command):
            raise ConnectionError("the sandbox is gone")

    prober = SweRexProber(Gone(), workspace=str(repo), timeout_s=0.5)

    assert prober.exists(str(repo / "src" / "calc.py")) is None
    assert prober.read_text(str(repo / "src" / "calc.py")) is None
    assert prober.sys_path() is None


# ----------------------------------------------------------------------------- SWE-agent's real hook order
class SweAgentLoop:
    """SWE-agent 1.x ``DefaultAgent``'s hook order around real bash commands (sweagent/agent/agents.py).

    ``add_hook`` calls ``on_init``; ``run`` calls ``on_run_start``, then per ``step``: ``on_step_start``,
    ``forward_with_handling`` -> ``forward``: ``on_model_query``, ``on_actions_generated`` (``step.state``
    is still ``{}``), ``handle_action``: ``on_action_started``, the command runs in the persistent shell,
    ``on_action_executed``, ``step.state = tools.get_state(env)``; a ``_BlockedActionError`` from the hook
    re-queries the model with ``blocklist_error_template`` rendered by Jinja2 (``exception_message`` = the
    error's message), counting against ``max_requeries``; then ``on_step_done``; finally ``on_run_done``.
    """

    def __init__(self, hook, actions, repo, *, template, state_command=True, max_requeries=3):
        self.hook, self.actions, self.repo = hook, list(actions), repo
        self.template, self.state_command, self.max_requeries = template, state_command, max_requeries
        self.cwd = str(repo)
        self.requeries: list[str] = []
        self.observations: list[str] = []
        self._problem_statement = SimpleNamespace(get_problem_statement=lambda: "add() subtracts; fix src/calc.py")
        hook.on_init(agent=self)

    def _communicate(self, command):
        done = subprocess.run(["bash", "-c", 'cd "$0" && eval "$1"; printf "\\n__PWD__%s" "$(pwd)"', self.cwd, command],
                              capture_output=True, text=True, timeout=30, check=False)
        output, _, pwd = (done.stdout + done.stderr).rpartition("\n__PWD__")
        self.cwd = pwd.strip() or self.cwd
        return output

    def run(self):
        from jinja2 import Template

        self.hook.on_run_start()
        step = None
        while self.actions and not (step and step.done):
            self.hook.on_step_start()
            for _ in range(self.max_requeries):
                step = SimpleNamespace(action=self.actions.pop(0), thought="t", observation="", state={},
                                       execution_time=None, done=False)
                try:
                    self.hook.on_model_query(messages=[], agent="main")
                    self.hook.on_actions_generated(step=step)
                except GuardBlockedAction as error:
                    self.requeries.append(Template(self.template).render(action=step.action,
                                                                         exception_message=error.args[0]))
                    continue
                self.hook.on_action_started(step=step)
                step.done = step.action == "submit"
                step.observation = "diff" if step.done else self._communicate(step.action)
                step.execution_time = 0.01
                self.hook.on_action_executed(step=step)
                self.observations.append(step.observation)
                step.state = {"working_dir": self.cwd, "open_file": "n/a"} if self.state_command else {}
                break
            self.hook.on_step_done(step=step, info={})
        self.hook.on_run_done(trajectory=[], info={"submission": "diff"})


def test_hook_in_swe_agents_order_judges_each_action_in_the_previous_steps_working_dir(repo):
    from adapters.swe_agent import BLOCKLIST_ERROR_TEMPLATE
    from guardrail.gate.layer import GateLayer

    hook = SweAgentGuardHook(Guard([GateLayer(repo)], mode="intervene"))
    # The gate cannot follow this cd by itself; only the state SWE-agent reports after it says where the shell is.
    loop = SweAgentLoop(hook, ["cd \"$(echo src)\"", "cat calc.py", "cat test_calc.py", "cat ../tests/test_calc.py", "submit"],
                        repo, template=BLOCKLIST_ERROR_TEMPLATE)

    loop.run()

    assert loop.observations[1].startswith("def add")  # cat calc.py in src/, allowed from the state after `cd src`
    assert len(loop.requeries) == 1  # only cat test_calc.py (it is in tests/) was blocked
    assert loop.requeries[0].startswith("guardrail blocked this action before it ran")
    assert f"{repo}/src/test_calc.py does not exist" in loop.requeries[0]
    assert f"Hint: closest existing paths: {repo}/tests/test_calc.py" in loop.requeries[0]  # the model reads the hint
    assert "from src.calc import add" in loop.observations[2]  # the corrected action ran


def test_hook_follows_cd_itself_when_the_harness_reports_no_state(repo):
    from adapters.swe_agent import BLOCKLIST_ERROR_TEMPLATE
    from guardrail.gate.layer import GateLayer

    hook = SweAgentGuardHook(Guard([GateLayer(repo)], mode="intervene"))
    loop = SweAgentLoop(hook, ["cd src", "cat calc.py", "cat nope.py", "ls", "submit"], repo,
                        template=BLOCKLIST_ERROR_TEMPLATE, state_command=False)

    loop.run()

    assert loop.observations[1].startswith("def add")
    assert len(loop.requeries) == 1  # cat nope.py, judged in src/ where `cd src` left the shell
    assert f"file_exists('{repo}/src/nope.py') is false" in loop.requeries[0]


def test_swe_agents_default_template_would_drop_the_warning_and_the_shipped_one_keeps_it():
    import yaml
    from jinja2 import Template

    from adapters.swe_agent import BLOCKLIST_ERROR_TEMPLATE, swe_agent_config_path

    shipped = yaml.safe_load(swe_agent_config_path().read_text())["agent"]["tools"]["filter"]["blocklist_error_template"]
    values = {"action": "cat x", "exception_message": "[guardrail:gate/file_exists] x does not exist Hint: try y"}

    assert shipped == BLOCKLIST_ERROR_TEMPLATE
    assert "Hint: try y" in Template(shipped).render(**values)
    assert "Hint" not in Template("Operation '{{action}}' is not supported by this environment.").render(**values)


def test_a_recorded_hook_run_is_in_the_store_under_the_id_the_hook_gives(repo, tmp_path):
    from guardrail.core.runstore import open_store

    store = f"sqlite:///{tmp_path}/runs.db"
    hook = SweAgentGuardHook(Guard.default(extra_layers=[MissingPathGate()], disable=["gate"], mode="report", record=store))
    hook.on_run_start()
    _drive(hook, _swe_step("cat nope.py", str(repo), observation="cat: nope.py: No such file or directory"))
    _drive(hook, _swe_step("submit", str(repo), observation="diff"))
    hook.on_run_done(trajectory=[], info={"submission": "diff"})
    hook.guard.close()

    (summary,) = open_store(store, create=False).summaries()
    assert summary.episode_id == hook.episode_id and summary.framework == "swe-agent"
    assert summary.status == "complete" and [f.check for f in summary.findings] == ["file_exists"]
