"""The gate never imports, executes or writes anything of the workspace or the target interpreter's packages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from guardrail.gate import Gate
from guardrail.gate.index import target_python

# Generous: these tests pin behaviour, not speed, on a shared loaded machine (speed is `guardrail bench gate`).
BUDGET_S = 10.0


def tripwire(marker: Path) -> str:
    """Python source that leaves `marker` behind if it is ever executed."""
    return f"open({str(marker)!r}, 'w').write('executed')\n"


@pytest.fixture
def workspace(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    markers = tmp_path / "markers"
    ws.mkdir()
    markers.mkdir()
    (ws / "trap").mkdir()
    (ws / "trap" / "__init__.py").write_text(tripwire(markers / "init") + "Thing = 1\n")
    (ws / "trap" / "dyn.py").write_text(tripwire(markers / "getattr") +
                                        "def __getattr__(name):\n    open('x', 'w')\n    return 1\n")
    (ws / "conftest.py").write_text(tripwire(markers / "conftest"))
    (ws / "tests").mkdir()
    (ws / "tests" / "conftest.py").write_text(tripwire(markers / "tests_conftest"))
    (ws / "tests" / "test_a.py").write_text(tripwire(markers / "test_module") + "def test_a():\n    pass\n")
    (ws / "evil.pth").write_text(f"import os; open({str(markers / 'pth')!r}, 'w')\n")
    (ws / "sitecustomize.py").write_text(tripwire(markers / "sitecustomize"))
    (ws / "usercustomize.py").write_text(tripwire(markers / "usercustomize"))
    (ws / "reproduce.py").write_text(tripwire(markers / "script") + "from trap import Thing, Other\n")
    return ws, markers


ACTIONS = [
    {"kind": "python", "code": "import trap\nfrom trap import Thing, Missing\nfrom trap.dyn import whatever"},
    {"kind": "shell", "command": "python reproduce.py"},
    {"kind": "shell", "command": "cd tests && python -m pytest test_a.py::test_a test_a.py::test_b -q"},
    {"kind": "shell", "command": "pytest tests/test_a.py::test_a && python -c 'import trap.dyn; trap.dyn.x'"},
    {"kind": "shell", "command": "python - <<'EOF'\nimport trap\nEOF"},
    {"kind": "shell", "command": "python -m trap"},
    {"kind": "swe_agent", "command": "open reproduce.py 2"},
]


def test_probing_tripwire_workspace_executes_and_writes_nothing(workspace: tuple[Path, Path]) -> None:
    ws, markers = workspace
    before = sorted(p.relative_to(ws) for p in ws.rglob("*"))
    gate = Gate(ws, budget_s=BUDGET_S, cwd=ws)
    reports = [gate.check(action) for action in ACTIONS]
    assert list(markers.iterdir()) == []
    assert sorted(p.relative_to(ws) for p in ws.rglob("*")) == before  # no __pycache__, no files
    assert "trap" not in sys.modules and "trap.dyn" not in sys.modules
    # The gate still did its job on what it did not execute.
    assert any(v.predicate.args == ("trap", "Missing") for v in reports[0].violations)
    assert any(v.predicate.args[-1] == "test_b" for v in reports[2].violations)


def test_target_interpreter_site_code_never_runs(tmp_path: Path) -> None:
    """A .pth import line and a sitecustomize in the target's site-packages do not run when asked for sys.path."""
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    site_packages = next(env_dir.glob("lib/python*/site-packages"))
    marker = tmp_path / "site-marker"
    (site_packages / "zz_trap.pth").write_text(f"import os; open({str(marker)!r}, 'w')\n")
    (site_packages / "sitecustomize.py").write_text(tripwire(marker))
    (site_packages / "installed_pkg").mkdir()
    (site_packages / "installed_pkg" / "__init__.py").write_text(tripwire(marker) + "API = 1\n")
    extra = tmp_path / "extra_path_dir"
    extra.mkdir()
    (extra / "from_pth.py").write_text("VALUE = 1\n")
    (site_packages / "paths.pth").write_text(str(extra) + "\n")
    target = target_python(str(python))
    assert str(site_packages) in target.sys_path and str(extra) in target.sys_path
    assert any("zz_trap.pth" in hook for hook in target.import_hooks)
    ws = tmp_path / "ws"
    ws.mkdir()
    report = Gate(ws, budget_s=BUDGET_S, python=str(python)).check(
        {"kind": "python", "code": "from installed_pkg import API, NOPE\nimport from_pth"})
    assert [v.predicate.args for v in report.violations] == [("installed_pkg", "NOPE")]
    assert not marker.exists()


def test_interpreter_is_asked_from_outside_the_workspace(workspace: tuple[Path, Path]) -> None:
    ws, markers = workspace
    target = target_python()
    assert str(ws) not in target.sys_path and "" not in target.sys_path
    assert list(markers.iterdir()) == []


# ------------------------------------------------------------------ issue 15, item 1: the target interpreter
def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return next(path.glob("lib/python*/site-packages"))


def test_venv_whose_home_is_in_the_workspace_is_never_run(tmp_path: Path) -> None:
    from tests.hostile.generators import _evil_home

    ws, markers = tmp_path / "ws", tmp_path / "markers"
    ws.mkdir()
    markers.mkdir()
    python = _evil_home(ws, markers)
    subprocess.run([str(python), "-B", "-c", "pass"], capture_output=True, timeout=60)
    assert (markers / "evil_home_encodings").exists()  # armed: running it by hand fires the tripwire
    (markers / "evil_home_encodings").unlink()
    gate = Gate(ws, budget_s=BUDGET_S, python=str(python))
    report = gate.check({"kind": "python", "code": "import nosuchmodule_x"})
    assert list(markers.iterdir()) == [] and list(ws.rglob("*.pyc")) == []
    assert not report.hallucinated
    (notice,) = [f for f in report.findings(layer="gate") if f.check == "target_interpreter_unavailable"]
    assert "inside the workspace" in notice.message and "never run" in notice.message


def test_script_named_python_in_the_workspace_is_never_run(tmp_path: Path) -> None:
    from tests.hostile.generators import _script_python

    ws, markers = tmp_path / "ws", tmp_path / "markers"
    ws.mkdir()
    markers.mkdir()
    script = _script_python(ws, markers)
    for python in (script, ws / "venv_script_base" / "bin" / "python", Path(".venv/bin/python")):
        report = Gate(ws, budget_s=BUDGET_S, python=str(python)).check({"kind": "python", "code": "import nosuch_x"})
        assert not report.hallucinated
        assert "target_interpreter_unavailable" in [f.check for f in report.findings(layer="gate")]
    assert list(markers.iterdir()) == []


def test_workspace_venv_is_read_statically_and_a_relative_python_follows_the_agent_cwd(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    outside.mkdir()
    site_packages = _venv(ws / ".venv")
    (site_packages / "goodpkg").mkdir()
    (site_packages / "goodpkg" / "__init__.py").write_text("API = 1\n")
    (ws / "sub").mkdir()
    gate = Gate(ws, budget_s=BUDGET_S, cwd=ws / "sub", python="../.venv/bin/python")
    assert gate.python == str(ws / ".venv" / "bin" / "python")
    report = gate.check({"kind": "python", "code": "import goodpkg\nfrom goodpkg import API, NOPE\nimport json"})
    assert [v.predicate.args for v in report.violations] == [("goodpkg", "NOPE")]
    target = gate.index()
    assert target is not None and target.target.venv == str(ws / ".venv")
    assert not target.target.base_executable.startswith(str(ws))
    assert str(site_packages) in target.target.sys_path
    # A .pth line in the agent's venv that points outside the workspace is kept, but never searched.
    (outside / "hidden_outside_mod.py").write_text("X = 1\n")
    (site_packages / "zz_out.pth").write_text(str(outside) + "\n")
    fresh = Gate(ws, budget_s=BUDGET_S, python=str(ws / ".venv" / "bin" / "python"))
    report = fresh.check({"kind": "python", "code": "import hidden_outside_mud"})
    assert not report.hallucinated
    assert "hidden_outside_mod" not in json.dumps([r.evidence for r in report.results], default=str)


def test_the_trusted_base_is_asked_with_isolation_flags_from_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   ) -> None:
    from guardrail.gate import interpreter
    from guardrail.gate.backend import Roots

    calls: list[tuple[list[str], str]] = []
    real_run = subprocess.run

    def recording_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append((list(argv), str(kwargs.get("cwd"))))
        return real_run(argv, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(interpreter.subprocess, "run", recording_run)
    interpreter._TARGETS.clear()
    target = target_python(untrusted=Roots.of([tmp_path]))
    (argv, cwd), = calls
    assert argv[1:5] == ["-I", "-S", "-B", "-c"] and cwd == "/"
    assert argv[0] == target.base_executable and "pyvenv.cfg" not in argv[0]
