"""audit-traj on every trajectory format SWE-agent and mini-swe-agent write: replayed edits, confirmations, the agent's environment."""

from __future__ import annotations

import json
import sys

import pytest

from adapters.replay import WorkspaceCopy
from adapters.swe_agent import (
    audit_trajectory,
    episode_from_traj,
    observation_confirms,
    read_traj,
    sample_path,
    write_sample_workspace,
)
from guardrail import Guard
from guardrail.app.agent_env import read_environment
from guardrail.app.audit import audit_files
from guardrail.core.cli import main
from guardrail.core.events import StepKind
from guardrail.gate.layer import GateLayer

FC = sample_path("swe_agent_function_calling.traj")
V0 = sample_path("swe_agent_v0.traj")
MINI = sample_path("mini_swe_agent.traj.json")
MINI_V1 = sample_path("mini_swe_agent_v1.traj.json")


@pytest.fixture
def repo(tmp_path):
    return write_sample_workspace(tmp_path / "repo")


def _verdicts(rows):
    return {r.step: r.decision.verdict.value for r in rows}


def test_every_format_is_read():
    layouts = {path.name: read_traj(path).layout for path in (FC, V0, MINI, MINI_V1)}

    assert layouts == {FC.name: "v1", V0.name: "v0", MINI.name: "mini", MINI_V1.name: "mini"}
    mini = read_traj(MINI)
    assert [s.action for s in mini.steps][:2] == ["cat src/calc.py", "cat <<'EOF' > reproduce.py\n"
                                                  "from src.calc import add\nprint(add(1, 2))\nEOF"]
    assert mini.steps[3].observation == "cat: calcs.py: No such file or directory\n"
    assert mini.steps[-1].observation is None  # the submit command raised before any output was kept
    assert mini.submission.startswith("diff --git")
    assert [s.action for s in read_traj(MINI_V1).steps] == [
        "cat src/calc.py", "python -m pytest tests/test_calcs.py -q", "echo MINI_SWE_AGENT_FINAL_OUTPUT"]


def test_mini_swe_agent_trajectory_becomes_the_live_step_shape():
    episode = episode_from_traj(read_traj(MINI))

    assert episode.framework == "mini-swe-agent"
    assert len(episode.steps) == 8 and episode.steps[-1].kind is StepKind.FINAL
    assert episode.steps[3].tool_events[0].is_error  # returncode 1
    assert episode.steps[0].tool_events[0].latency_s == 0.5  # observation timestamp minus the model's


def test_function_calling_trajectory_has_no_editor_as_executable_finding(repo):
    rows, problems = audit_files([str(FC)], str(repo))

    assert problems == []
    findings = [p for r in rows for p in r.predicates]
    assert not [p for p in findings if p["predicate"] == "executable_available"]
    assert {r.step for r in rows if r.decision.verdict.value == "block"} == {7, 10}  # calcs.py, test_sub
    assert all(r.observation_confirms is True for r in rows)


def test_edits_are_replayed_on_a_copy_so_later_actions_see_them_and_the_workspace_is_untouched(repo):
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    trajectory = read_traj(FC)

    with WorkspaceCopy(repo) as copy:
        replayed = audit_trajectory(trajectory, Guard([GateLayer(copy.root)], mode="intervene"), copy)
        after_audit = (copy.root / "src" / "calc.py").read_text()
    read_only = audit_trajectory(trajectory, Guard([GateLayer(repo)], mode="intervene"), repo)

    # step 5 replaces the text step 4 wrote: only the replayed copy has it
    assert _verdicts(replayed)[5] == "allow" and _verdicts(read_only)[5] == "block"
    assert "return a + b  # was a - b" in after_audit and "def sub" not in after_audit  # insert, then undo_edit
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before
    assert not (repo / "reproduce.py").exists()


def test_v0_aci_edits_and_the_open_file_are_replayed(repo):
    rows, _ = audit_files([str(V0)], str(repo))

    assert {r.step for r in rows if r.decision.verdict.value == "block"} == {6, 7}  # goto 40, search_file calcs.py
    goto = rows[6].predicates[0]
    assert goto["predicate"] == "editor_line_in_range" and goto["args"] == [str(repo / "src" / "calc.py"), 40]
    assert rows[7].predicates[0]["hint"] == f"closest existing paths: {repo}/src/calc.py"  # the user's path, not the copy


def test_mini_swe_agent_commands_start_in_the_environment_cwd_every_time(repo):
    rows, _ = audit_files([str(MINI)], str(repo))

    assert _verdicts(rows) == {0: "allow", 1: "allow", 2: "allow", 3: "block", 4: "allow", 5: "block", 6: "allow",
                               7: "allow"}
    assert rows[3].predicates[0]["args"] == [str(repo / "src" / "calcs.py")]
    assert [r.observation_confirms for r in rows] == [True, None, True, True, True, True, True, None]


@pytest.mark.parametrize("flagged, observation, expected", [
    (True, "cat: x: No such file or directory", True),
    (True, "hello", False),
    (False, "bash: foo: command not found", False),
    (False, "ModuleNotFoundError: No module named 'x'", False),
    (False, "ERROR: not found: tests/t.py::test_x", False),
    (False, "1 passed", True),
    (True, "", None),
    (False, None, None),
])
def test_observation_confirms(flagged, observation, expected):
    assert observation_confirms(flagged, observation) is expected


def _bash_traj(tmp_path, *commands):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for command in commands:
        messages += [{"role": "assistant", "content": "t", "extra": {"actions": [{"command": command}]}},
                     {"role": "user", "content": "", "extra": {"raw_output": "", "returncode": 0}}]
    path = tmp_path / "env.traj.json"
    path.write_text(json.dumps({"info": {"config": {"environment": {"cwd": "/testbed"}}}, "messages": messages}))
    return path


def test_packages_and_commands_are_judged_against_the_described_environment(repo, tmp_path):
    traj = _bash_traj(tmp_path, 'python -c "import numpy"', 'python -c "import pytest"', "pytest -q", "tox")
    environment = read_environment(sample_path("environment.json"))

    described, _ = audit_files([str(traj)], str(repo), environment=environment)
    own, _ = audit_files([str(traj)], str(repo))

    assert environment.python_version == (3, 9, 19) and "pytest" in environment.distributions
    # numpy is in the guard's venv but not in the agent's environment; tox in neither
    assert _verdicts(described) == {0: "block", 1: "allow", 2: "allow", 3: "block"}
    assert _verdicts(own)[0] == "allow"


def test_python_option_takes_the_agents_interpreter(repo, tmp_path):
    traj = _bash_traj(tmp_path, 'python -c "import numpy"')

    rows, _ = audit_files([str(traj)], str(repo), python=sys.executable)

    assert _verdicts(rows) == {0: "allow"}


def test_audit_traj_command_reads_several_files_and_reports_a_bad_one(repo, tmp_path, capsys):
    bad = tmp_path / "bad.traj"
    bad.write_text("[]")

    code = main(["audit-traj", str(MINI), str(bad), str(FC), "--workspace", str(repo), "--json",
                 "--environment", str(sample_path("environment.json"))])

    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert code == 1
    assert {r["trajectory"] for r in rows} == {str(MINI), str(FC)}
    assert "bad.traj: no 'trajectory' or 'messages' list" in captured.err


def test_a_workspace_symlink_out_of_the_copy_is_never_written(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("x = 1\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "link.py").symlink_to(outside)
    traj = tmp_path / "t.traj"
    traj.write_text(json.dumps({"trajectory": [
        {"action": f"str_replace_editor str_replace {repo}/link.py --old_str 'x = 1' --new_str 'x = 2'",
         "observation": "edited", "state": {"working_dir": str(repo)}}]}))

    audit_files([str(traj)], str(repo))

    assert outside.read_text() == "x = 1\n"


def test_coding_agents_doc_blocks_run_from_an_empty_directory(tmp_path):
    """docs/coding-agents.md's Python blocks (the README's mini-swe-agent and audit snippets) run as-is."""
    import re
    import subprocess
    from pathlib import Path

    pytest.importorskip("minisweagent", reason="mini-swe-agent is not installed: pip install 'guardrail[swe]'")
    text = (Path(__file__).resolve().parents[1] / "docs" / "coding-agents.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)  # not the ```python sweagent one
    assert len(blocks) == 2
    for code in blocks:
        assert len([line for line in code.splitlines() if line.strip()]) < 10
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**__import__("os").environ, "MSWEA_SILENT_STARTUP": "1",
                                   "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / ".mswea")})
        assert done.returncode == 0, done.stderr[-2000:]
        assert "does not exist" in done.stdout
    assert [p.name for p in tmp_path.iterdir()] == [".mswea"]  # nothing written where it ran


def test_an_environment_description_is_validated_field_by_field(tmp_path):
    from guardrail.app.agent_env import EnvironmentError_

    good = tmp_path / "env.yml"
    good.write_text("python: 3.8\ndistributions: [numpy==1.24, 'scikit-learn', 7]\n"
                    "console_scripts: [ok, '..', '../../x', 3]\n")
    bad = tmp_path / "bad.yml"
    bad.write_text("name: x\n")

    env = read_environment(good)

    assert env.python_version == (3, 8)
    assert env.distributions == {"numpy": "1.24", "scikit-learn": None}
    assert {"numpy", "sklearn"} <= env.modules()
    assert env.scripts() == {"ok", "python", "python3", "python3.8", "f2py"}  # numpy installs f2py
    with pytest.raises(EnvironmentError_, match="no 'dependencies'"):
        read_environment(bad)
