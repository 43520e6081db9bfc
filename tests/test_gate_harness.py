"""Family IV and the action forms: SWE-agent ACI commands, editor tools, OpenHands actions, tool schemas."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from guardrail.gate import EditorState, Gate, GateState

FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"
# Generous: these tests pin behaviour, not speed, on a shared loaded machine (speed is `guardrail bench gate`).
BUDGET_S = 10.0


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "proj"))


def names(gate: Gate, action: dict, open_file: str | None = None) -> list[str]:
    report = gate.check(action, GateState(editor=EditorState(open_file)))
    return [r.predicate.name for r in report.violations]


def aci(command: str) -> dict:
    return {"kind": "swe_agent", "command": command}


def test_open_existing_file_and_line_in_range(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    assert names(gate, aci("open docs/thirty.txt 30")) == []
    assert names(gate, aci('open "docs/thirty.txt" 31')) == ["editor_line_in_range"]
    assert names(gate, aci("open docs/missing.py")) == ["file_exists"]


def test_open_with_non_numeric_line_is_bad_args(proj: Path) -> None:
    assert names(Gate(proj, budget_s=BUDGET_S), aci("open docs/thirty.txt ten")) == ["tool_args_valid"]


def test_goto_and_scroll_need_an_open_file(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    thirty = str(proj / "docs" / "thirty.txt")
    assert names(gate, aci("goto 10")) == ["editor_file_open"]
    assert names(gate, aci("scroll_down")) == ["editor_file_open"]
    assert names(gate, aci("goto 10"), open_file=thirty) == []
    assert names(gate, aci("goto 99"), open_file=thirty) == ["editor_line_in_range"]


def test_edit_range_checks_format_and_file_length(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    thirty = str(proj / "docs" / "thirty.txt")
    assert names(gate, aci("edit 3:5\nnew text\nend_of_edit"), open_file=thirty) == []
    assert names(gate, aci("edit 3-5"), open_file=thirty) == ["tool_args_valid"]
    assert names(gate, aci("edit 40:41"), open_file=thirty) == ["editor_line_in_range"]


def test_create_existing_file_warns_without_blocking(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    report = gate.check(aci("create reproduce.py"))
    assert [r.predicate.name for r in report.violations] == ["path_absent"]
    assert not report.blocking
    assert names(gate, aci("create new_file.py")) == []
    assert names(gate, aci("create nodir/new_file.py")) == ["parent_dir_exists"]


def test_search_file_with_line_numbers_is_the_papers_example(proj: Path) -> None:
    found = names(Gate(proj, budget_s=BUDGET_S), aci('search_file "ClassDef" 100 1200'))
    assert "tool_path_arg_exists" in found and "tool_args_valid" in found


def test_search_and_find_check_their_directory(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    assert names(gate, aci("search_dir Engine pkg")) == []
    assert names(gate, aci("search_dir Engine src")) == ["tool_path_arg_exists"]
    assert names(gate, aci("find_file core.py lib")) == ["tool_path_arg_exists"]
    assert names(gate, aci("search_file Engine pkg/core.py")) == []
    assert names(gate, aci("submit")) == []


def test_non_aci_line_is_a_shell_command(proj: Path) -> None:
    assert names(Gate(proj, budget_s=BUDGET_S), aci("cat nothing.txt")) == ["file_exists"]


def editor(**args: object) -> dict:
    return {"kind": "tool", "tool": "str_replace_editor", "args": args}


def test_editor_view_and_view_range(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    path = str(proj / "docs" / "thirty.txt")
    assert names(gate, editor(command="view", path=path, view_range=[1, -1])) == []
    assert names(gate, editor(command="view", path=path, view_range=[10, 40])) == ["editor_line_in_range"]
    assert names(gate, editor(command="view", path=str(proj / "django/db/models/fields/tests.py"))) == ["path_exists"]
    assert names(gate, editor(command="view", path="docs/thirty.txt")) == ["tool_args_valid"]


def test_editor_str_replace_needs_unique_old_str(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    path = str(proj / "pkg" / "core.py")
    assert names(gate, editor(command="str_replace", path=path, old_str="class Engine:", new_str="x")) == []
    report = gate.check(editor(command="str_replace", path=path, old_str="class Engin3:", new_str="x"))
    assert [r.predicate.name for r in report.violations] == ["editor_text_present"]
    assert "class Engine:" in (report.findings(layer="gate")[0].hint or "")
    assert names(gate, editor(command="str_replace", path=path, old_str="return", new_str="x")) == [
        "editor_text_present"]  # occurs more than once


def test_editor_insert_and_create(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    path = str(proj / "docs" / "thirty.txt")
    assert names(gate, editor(command="insert", path=path, insert_line=30, new_str="x")) == []
    assert names(gate, editor(command="insert", path=path, insert_line=31, new_str="x")) == ["editor_line_in_range"]
    assert names(gate, editor(command="insert", path=path, insert_line="3", new_str="x")) == ["tool_args_valid"]
    assert names(gate, editor(command="create", path=str(proj / "new.py"), file_text="")) == []
    assert names(gate, editor(command="launch", path=path)) == ["tool_args_valid"]


def test_openhands_actions_normalize(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    assert names(gate, {"action": "CmdRunAction", "args": {"command": "cat nope.txt"}}) == ["file_exists"]
    assert names(gate, {"action": "FileReadAction", "args": {"path": str(proj / "nope.txt")}}) == ["file_exists"]
    assert names(gate, {"action": "IPythonRunCellAction", "args": {"code": "import nonexistent_mod_x"}}) == [
        "importable"]
    assert names(gate, {"kind": "tool", "tool": "execute_bash", "args": {"command": "python nope.py"}}) == [
        "file_exists"]


def test_python_code_file_paths(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    code = ("import pandas as pd\nfrom pathlib import Path\n"
            "open('data/input.csv').read()\nPath('missing.txt').read_text()\npd.read_csv('gone.csv')\n"
            "open('out/new.txt', 'w')\nwith open('made.txt', 'w') as f: f.write('x')\nopen('made.txt').read()\n")
    report = gate.check({"kind": "python", "code": code})
    found = sorted((r.predicate.name, Path(r.predicate.args[0]).name) for r in report.violations
                   if r.predicate.family == "filesystem")
    assert found == [("file_exists", "gone.csv"), ("file_exists", "missing.txt"), ("parent_dir_exists", "new.txt")]


def test_tool_schema_from_json_schema_and_callable(proj: Path) -> None:
    def get_weather(city: str, units: str = "metric") -> str:
        return city

    schema = {"type": "object", "properties": {"q": {"type": "string"}, "k": {"type": "integer"}},
              "required": ["q"], "additionalProperties": False}
    gate = Gate(proj, budget_s=BUDGET_S, tools={"search": {"name": "search", "parameters": schema}, "get_weather": get_weather})
    ok = {"kind": "tool", "tool": "search", "args": {"q": "x", "k": 3}}
    assert names(gate, ok) == []
    assert names(gate, {"kind": "tool", "tool": "search", "args": {"k": "3"}}) == ["tool_args_valid"]
    assert names(gate, {"kind": "tool", "tool": "get_weather", "args": {"city": "Oslo"}}) == []
    report = gate.check({"kind": "tool", "tool": "get_weather", "args": {"town": "Oslo"}})
    assert report.violations[0].predicate.name == "tool_args_valid"
    assert "city" in report.violations[0].message


def test_newer_syntax_than_the_target_runs_is_a_runtime_version_violation(proj: Path) -> None:
    from guardrail.gate.extract_python import extract_python
    from guardrail.gate.scope import Scope

    code = "match x:\n    case 1:\n        pass\n"
    found = extract_python(code, Scope(str(proj), str(proj)), search=(), necessary=True, origin="t",
                           target_version=(3, 9, 0))
    assert [p.name for p in found] == ["runtime_version_satisfies"]
    assert found[0].verdict is not None and not found[0].verdict[0]
    assert extract_python(code, Scope(str(proj), str(proj)), search=(), necessary=True, origin="t",
                          target_version=(3, 11, 0)) == []


# Issue 30: several bundles define `edit` (and `insert`) differently; with no bundle given, a line is valid when
# any shipped form fits it, and one that fits none is blocked with the closest form as the usage.
@pytest.mark.parametrize("command", [
    "edit 3:5\nnew text\nend_of_edit",  # windowed_edit_linting
    "edit 'old text' 'new text'",  # windowed_edit_replace: search/replace
    "edit 'old text' 'new text' True",
    "insert 'import os'",
    "insert 'import os' 4",
    "edit\nreplacement\nend_of_edit",  # cursors: the text between the cursors
])
def test_every_shipped_edit_and_insert_form_is_valid(proj: Path, command: str) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    assert names(gate, aci(command), open_file=str(proj / "docs" / "thirty.txt")) == []


@pytest.mark.parametrize(("command", "closest"), [
    ("insert 'import os' x4", "insert <text> [<line>]"),
    ("edit", "edit"),
    ("edit 'a' 'b' True extra", "edit <search> <replace> [<replace-all>]"),
])
def test_a_line_fitting_no_form_is_blocked_with_the_closest_usage(proj: Path, command: str, closest: str) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    report = gate.check(aci(command), GateState(editor=EditorState(str(proj / "docs" / "thirty.txt"))))
    (violation,) = report.violations
    assert report.blocking and violation.predicate.name == "tool_args_valid"
    assert f"usage: {closest}" in violation.message


def test_a_console_script_the_target_interpreter_has_is_not_reported_missing(proj: Path, tmp_path: Path) -> None:
    """The agent's environment has pytest's script even when the PATH the guard was given does not show it."""
    empty = tmp_path / "emptybin"
    empty.mkdir()
    gate = Gate(proj, budget_s=BUDGET_S, path_env=str(empty))
    assert names(gate, {"kind": "shell", "command": "pytest --version"}) == []
    assert names(gate, {"kind": "shell", "command": "pytset --version"}) == ["executable_available"]
