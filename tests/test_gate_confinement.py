"""Probes and hints stay inside the workspace roots and the target's import paths (issue 15, item 2).

Outside them a predicate is unknown: no listing, no line, no count of anything there is reported,
whether the path is named directly, reached through `..`, or through a symlink in the workspace.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from guardrail.gate import Gate, Outcome
from guardrail.gate.report import GateReport

FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"
BUDGET_S = 10.0  # generous: these tests pin behaviour, not speed
SECRET = "hunter2-3f9c1e"
SIBLING = "prod_key_backup_77a1"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    ws = Path(shutil.copytree(FIXTURE, tmp_path / "ws"))
    outside = tmp_path / "outside"
    (outside / "keys").mkdir(parents=True)
    (outside / ".env").write_text(f"DB_PASSWORD={SECRET}\n")
    (outside / "keys" / "prod_key.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (outside / "keys" / f"{SIBLING}.pem").write_text("x\n")
    (outside / "pylib").mkdir()
    (outside / "pylib" / "secretmod_a1.py").write_text("TOKEN_NAME_b2 = 1\n")
    (outside / "script.py").write_text("from secretmod_a1 import TOKEN_NAME_b2\n")
    os.symlink(outside / "keys", ws / "keys_link")
    os.symlink(outside / ".env", ws / "env_link")
    return ws, outside


def everything_said(report: GateReport) -> str:
    """All a report can tell anyone: the JSON result, the findings, and every probe's message, hint and evidence."""
    return json.dumps({"json": report.to_json(), "findings": [f.model_dump(mode="json") for f in report.findings(
        layer="gate")], "results": [(r.message, r.hint, r.evidence) for r in report.results]}, default=str)


def editor(command: str, path: str, **args: object) -> dict[str, object]:
    return {"kind": "tool", "tool": "str_replace_editor", "args": {"command": command, "path": path, **args}}


@pytest.mark.parametrize("target", ["outside/.env", "ws/env_link"])
def test_str_replace_outside_never_quotes_the_file(layout: tuple[Path, Path], target: str) -> None:
    ws, outside = layout
    path = str(ws.parent / target)
    report = Gate(ws, budget_s=BUDGET_S).check(editor("str_replace", path, old_str="DB_PASSWORD=?", new_str=""))
    assert not report.hallucinated
    assert {r.outcome for r in report.results} == {Outcome.UNKNOWN}
    assert SECRET not in everything_said(report)


def test_system_files_are_unknown_not_read(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    gate = Gate(ws, budget_s=BUDGET_S)
    for action in (editor("str_replace", "/etc/shadow", old_str="root:?", new_str=""),
                   editor("view", "/etc/passwd", view_range=[1, 99999]),
                   {"kind": "shell", "command": "cat /etc/nonexistent_gate_file && cd /root/nowhere"}):
        report = gate.check(action)
        paths = [r for r in report.results if r.predicate.name != "executable_available"]
        assert not report.hallucinated and paths and all(r.evidence.get("outside") for r in paths)


@pytest.mark.parametrize("command", ["cat {outside}/keys/prod_ky.pem", "cat keys_link/prod_ky.pem",
                                     "ls keys_link/nothing && cat ../outside/keys/x.pem",
                                     "PYTHONPATH={outside}/pylib python -c 'import secretmod_a2'",
                                     "python {outside}/script.py", "cd {outside} && cat missing.txt"])
def test_paths_outside_give_no_listing(layout: tuple[Path, Path], command: str) -> None:
    ws, outside = layout
    report = Gate(ws, budget_s=BUDGET_S).check({"kind": "shell", "command": command.format(outside=outside)})
    said = everything_said(report)
    assert not report.hallucinated
    assert SIBLING not in said and "secretmod_a1" not in said and "TOKEN_NAME_b2" not in said


def test_inside_the_workspace_hints_still_name_files_and_lines(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    gate = Gate(ws, budget_s=BUDGET_S)
    (finding,) = gate.check({"kind": "shell", "command": "cat pkg/cor.py"}).findings(layer="gate")
    assert finding.hint is not None and "core.py" in finding.hint
    (ws / "notes.txt").write_text("alpha = compute(1)\nbeta = compute(2)\n")
    report = gate.check(editor("str_replace", str(ws / "notes.txt"), old_str="beta = compute(3)", new_str=""))
    (finding,) = report.findings(layer="gate")
    assert finding.hint == "closest line in the file: 'beta = compute(2)'"


def test_the_targets_import_paths_are_readable(layout: tuple[Path, Path]) -> None:
    ws, _ = layout
    report = Gate(ws, budget_s=BUDGET_S).check({"kind": "python", "code": "from json import loads, lodas"})
    (violation,) = report.violations
    assert violation.predicate.args == ("json", "lodas") and "loads" in (violation.hint or "")


def test_extra_roots_make_a_scratch_directory_probeable(layout: tuple[Path, Path]) -> None:
    ws, outside = layout
    gate = Gate(ws, budget_s=BUDGET_S, roots=[outside])
    report = gate.check({"kind": "shell", "command": f"cat {outside}/keys/prod_ky.pem"})
    (finding,) = report.findings(layer="gate")
    assert finding.blocking and "prod_key.pem" in (finding.hint or "")


def test_a_batching_backend_gets_an_actions_paths_in_one_call(layout: tuple[Path, Path]) -> None:
    """What a remote backend (issue 19) relies on: the gate asks for every path an action names at once."""
    from guardrail.gate.backend import LocalBackend, ProbeBackend, Roots
    from guardrail.gate.fsview import PathState

    class Recording(LocalBackend):
        batches = True

        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def stat_many(self, paths: object, within: Roots | None) -> list[PathState]:
            self.calls.append(list(paths))  # type: ignore[call-overload]
            return super().stat_many(paths, within)  # type: ignore[arg-type]

    ws, _ = layout
    backend = Recording()
    assert isinstance(backend, ProbeBackend)
    gate = Gate(ws, budget_s=BUDGET_S, backend=backend)
    gate.index()
    backend.calls.clear()
    report = gate.check({"kind": "shell", "command": "cat setup.cfg nope.txt && ls docs missing_dir"})
    wanted = [str(ws / name) for name in ("setup.cfg", "nope.txt", "docs", "missing_dir")]
    assert set(wanted) <= set(backend.calls[0])
    assert not any(path in call for call in backend.calls[1:] for path in wanted)  # the rest came from the memo
    assert {v.predicate.args[0] for v in report.violations} == {str(ws / "nope.txt"), str(ws / "missing_dir")}
