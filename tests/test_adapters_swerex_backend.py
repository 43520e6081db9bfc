"""The gate inside a SWE-ReX sandbox: a real ``swerex-remote`` on loopback, over temporary workspaces.

The sandbox sees the same files as this process, so the SWE-ReX backend must give exactly the local
backend's verdicts (and messages and hints) on the gate benchmark's cases for a project, and on the
hostile workspace's actions, with no tripwire fired and nothing written. mini-swe-agent's guarded
environment and the SWE-agent hook pick the sandbox backend by themselves from the runtime that runs
the agent's commands. The full benchmark set is `guardrail bench sandbox`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("swerex", reason="swe-rex is not installed: pip install 'guardrail[swe]'")

from adapters.swe_agent import BLOCKLIST_ERROR_TEMPLATE, SweAgentGuardHook  # noqa: E402
from adapters.swerex_backend import SwerexBackend, gate_in_sandbox, runtime_of  # noqa: E402
from guardrail import Guard  # noqa: E402
from guardrail.gate import Gate  # noqa: E402
from guardrail.gate.layer import GateLayer  # noqa: E402
from tests.hostile.generators import HostileWorkspace, Sizes, build_workspace, hostile_actions  # noqa: E402
from tests.swerex_remote import swerex_remote  # noqa: E402
from tests.test_adapters_swe_agent import SweAgentLoop  # noqa: E402
from traces.bench.gate import build_cases  # noqa: E402
from traces.bench.sandbox import report_signature  # noqa: E402

pytestmark = pytest.mark.slow
BUDGET_S = 10.0  # generous: these tests pin behaviour, not speed (that is `guardrail bench sandbox`)
FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"
PATH_ENV = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])
SMALL = Sizes(big_module_bytes=60_000, chain_module_bytes=20_000, near_match_bytes=60_000, echo_pipes=300,
              dir_entries=3_000, nesting=500, dir_depth=20, random_actions=0)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    root = tmp_path_factory.mktemp("sandbox")
    with swerex_remote(root) as runtime:
        yield runtime, root


def _pair(workspace: Path, runtime: Any, **options: Any) -> tuple[Gate, Gate, SwerexBackend]:
    same = {"budget_s": BUDGET_S, "python": sys.executable, "path_env": PATH_ENV, **options}
    backend = SwerexBackend(runtime)
    return Gate(workspace, **same), Gate(workspace, backend=backend, **same), backend


def test_the_benchmarks_cases_get_the_local_verdicts_through_swerex(sandbox: tuple[Any, Path]) -> None:
    runtime, root = sandbox
    project = Path(shutil.copytree(FIXTURE, root / "proj"))
    cases = build_cases(project, "proj", seed=0, python_version=sys.version_info[:2])
    assert {c.family for c in cases} == {"namespace", "filesystem", "command", "harness"} and len(cases) >= 100
    local, remote, backend = _pair(project, runtime)
    from traces.bench.gate import _state

    for case in cases:
        state_a, state_b = _state(case, project), _state(case, project)
        assert report_signature(remote.check(case.action, state_b)) == report_signature(
            local.check(case.action, state_a)), case.action
    assert backend.failures == 0 and backend.round_trips > 0


def test_hostile_workspace_through_swerex_runs_nothing_and_says_what_the_local_gate_says(
        sandbox: tuple[Any, Path]) -> None:
    runtime, root = sandbox
    hw: HostileWorkspace = build_workspace(root / "hostile", SMALL)
    before = hw.snapshot()
    local, remote, backend = _pair(hw.ws, runtime)
    for case in hostile_actions(hw):
        assert report_signature(remote.check(case["action"])) == report_signature(local.check(case["action"]))
    for python in hw.evil_venvs.values():  # the workspace's interpreters are refused in the sandbox too
        action = {"kind": "python", "code": "import trap"}
        there = Gate(hw.ws, budget_s=BUDGET_S, python=str(python), path_env=PATH_ENV, backend=backend).check(action)
        here = Gate(hw.ws, budget_s=BUDGET_S, python=str(python), path_env=PATH_ENV).check(action)
        assert [f.message for f in there.findings(layer="gate")] == [f.message for f in here.findings(layer="gate")]
        assert any("never run" in f.message for f in there.findings(layer="gate"))
    assert sorted(p.name for p in hw.markers.iterdir()) == []
    assert hw.snapshot() == before
    assert backend.failures == 0


def test_runtime_of_finds_the_runtime_behind_an_environment_or_agent(sandbox: tuple[Any, Path]) -> None:
    runtime, _ = sandbox
    assert runtime_of(SimpleNamespace(runtime=runtime)) is runtime  # SwerexRuntimeEnvironment
    assert runtime_of(SimpleNamespace(deployment=SimpleNamespace(runtime=runtime))) is runtime  # mini's SwerexDocker
    assert runtime_of(SimpleNamespace(_env=SimpleNamespace(deployment=SimpleNamespace(runtime=runtime)))) is runtime

    class NotStarted:
        @property
        def runtime(self) -> Any:
            raise RuntimeError("deployment not started")

    assert runtime_of(SimpleNamespace(deployment=NotStarted())) is None
    assert runtime_of(SimpleNamespace(env=object())) is None
    assert gate_in_sandbox(Guard([]), runtime) is None  # no gate: nothing to point at the sandbox


class SandboxedSweAgentLoop(SweAgentLoop):
    """SWE-agent's hook order with its commands run in the SWE-ReX sandbox, as ``SWEEnv`` runs them."""

    def __init__(self, hook: SweAgentGuardHook, actions: list[str], repo: Path, runtime: Any) -> None:
        self._env = SimpleNamespace(deployment=SimpleNamespace(runtime=runtime))  # SWE-agent: agent._env
        self.runtime = runtime
        super().__init__(hook, actions, repo, template=BLOCKLIST_ERROR_TEMPLATE)

    def _communicate(self, command: str) -> str:
        from swerex.runtime.abstract import Command

        script = 'cd "$0" && eval "$1"; printf "\\n__PWD__%s" "$(pwd)"'
        done = asyncio.run(self.runtime.execute(Command(command=["bash", "-c", script, self.cwd, command],
                                                        timeout=30, merge_output_streams=True)))
        output, _, pwd = done.stdout.rpartition("\n__PWD__")
        self.cwd = pwd.strip() or self.cwd
        return output


def test_the_swe_agent_hook_gates_inside_the_agents_sandbox(sandbox: tuple[Any, Path]) -> None:
    runtime, root = sandbox
    repo = root / "swe_repo"
    (repo / "src").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests" / "test_calc.py").write_text("from src.calc import add\n")
    hook = SweAgentGuardHook(Guard([GateLayer(repo)], mode="intervene"), python=sys.executable)
    loop = SandboxedSweAgentLoop(hook, ["cd src", "cat calc.py", "cat test_calc.py", "cat ../tests/test_calc.py",
                                        "submit"], repo, runtime)

    loop.run()

    assert isinstance(hook.backend, SwerexBackend) and hook.backend.round_trips > 0 and hook.backend.failures == 0
    gate = hook.guard.layers[0].gate  # type: ignore[attr-defined]
    assert gate.backend is hook.backend and gate.index() is not None
    assert len(loop.requeries) == 1 and f"{repo}/src/test_calc.py does not exist" in loop.requeries[0]
    assert f"Hint: closest existing paths: {repo}/tests/test_calc.py" in loop.requeries[0]
    assert "from src.calc import add" in loop.observations[2]


def test_a_local_copy_keeps_the_local_backend(sandbox: tuple[Any, Path]) -> None:
    runtime, root = sandbox
    with pytest.raises(ValueError, match="one or the other"):
        SweAgentGuardHook(Guard([GateLayer(root)]), sandbox=True, sandbox_root="/repo")
    hook = SweAgentGuardHook(Guard([GateLayer(root)]), sandbox_root="/repo")  # audits a local copy: no sandbox
    hook.on_init(agent=SimpleNamespace(_env=SimpleNamespace(deployment=SimpleNamespace(runtime=runtime))))
    hook.on_run_start()
    assert hook.backend is None


def test_a_warm_decision_naming_many_missing_programs_is_one_find_through_swerex(sandbox: tuple[Any, Path]) -> None:
    """Kilobytes of "No such file" lines from find come back whole through the runtime, so a warm decision that looks
    up a dozen missing programs on every PATH directory is one round-trip and starts no interpreter."""
    runtime, root = sandbox
    project = Path(shutil.copytree(FIXTURE, root / "proj-missing"))
    local, remote, backend = _pair(project, runtime)
    action = {"kind": "shell", "command": " && ".join(f"zz-no-such-tool-{n} --version" for n in range(12))}
    for _ in range(2):
        assert report_signature(remote.check(action)) == report_signature(local.check(action))
    before = (backend.round_trips, backend.fast_round_trips)
    assert report_signature(remote.check(action)) == report_signature(local.check(action))
    assert (backend.round_trips - before[0], backend.fast_round_trips - before[1]) == (1, 1)
    assert backend.failures == 0
    argv = ["/usr/bin/find" if os.path.exists("/usr/bin/find") else "/bin/find", "-P",
            *(f"{project}/zz-missing-{n:03d}" for n in range(100)), "-maxdepth", "0"]
    here = subprocess.run(argv, capture_output=True, text=True, env={"LC_ALL": "C"}, timeout=30)
    there = backend.transport(argv, timeout_s=10.0, env={"LC_ALL": "C"})
    assert there is not None and len(here.stderr) > 5000 and there[2] == here.stderr
