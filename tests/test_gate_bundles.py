"""SWE-agent tool bundles: shipped 1.x signatures, a bundle's own config.yaml, and str_replace_editor lines."""

from __future__ import annotations

import shlex

import pytest

from guardrail.gate import Gate, GateState
from guardrail.gate.bundles import BundleError, bundle_tools, known_commands, load_bundle
from guardrail.gate.extract_aci import editor_args
from guardrail.gate.layer import EditorState

BUDGET_S = 5.0


@pytest.fixture
def proj(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.py").write_text("a = 1\nb = 2\nc = 3\n")
    return tmp_path


def flagged(gate: Gate, command: str, open_file: str | None = None) -> list[tuple[str, str]]:
    report = gate.check({"kind": "swe_agent", "command": command}, GateState(editor=EditorState(open_file)))
    assert report.error is None
    return [(r.predicate.name, r.outcome.value) for r in report.results if r.outcome.value != "true"]


def test_shipped_bundles_cover_swe_agent_1x_defaults():
    commands = known_commands()

    assert {"open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "set_cursors", "find_file",
            "search_dir", "search_file", "str_replace_editor", "submit", "filemap", "exit_forfeit"} <= set(commands)
    assert {f.bundle for f in commands["edit"]} == {"windowed_edit_linting", "windowed_edit_replace", "cursors"}


def test_str_replace_editor_lines_read_back_into_the_tool_call():
    call = {"command": "create", "path": "/r/a.py", "file_text": "it's\n  two lines\n"}
    line = f"str_replace_editor create /r/a.py --file_text {shlex.quote(call['file_text'])}"

    assert editor_args(line) == call
    assert editor_args("str_replace_editor view /r/a.py  --view_range 3 -1") == {
        "command": "view", "path": "/r/a.py", "view_range": [3, -1]}
    assert editor_args("str_replace_editor insert /r/a.py --insert_line 2 --new_str ''") == {
        "command": "insert", "path": "/r/a.py", "insert_line": 2, "new_str": ""}
    assert editor_args("str_replace_editor view /r/a.py --bogus 1") is None


def test_str_replace_editor_is_an_editor_call_never_a_missing_executable(proj):
    gate = Gate(proj, budget_s=BUDGET_S)
    x = proj / "src" / "x.py"

    assert flagged(gate, f"str_replace_editor view {x}") == []
    assert flagged(gate, f"str_replace_editor str_replace {x} --old_str 'b = 2' --new_str 'b = 3'") == []
    assert flagged(gate, f"str_replace_editor str_replace {x} --old_str 'z = 9' --new_str 'b'") == [
        ("editor_text_present", "false")]
    assert flagged(gate, f"str_replace_editor insert {x} --insert_line 9 --new_str 'd'") == [
        ("editor_line_in_range", "false")]
    assert flagged(gate, f"str_replace_editor view {proj}/src/y.py") == [("path_exists", "false")]


def test_edit_forms_and_cursor_commands(proj):
    gate = Gate(proj, budget_s=BUDGET_S)
    x = str(proj / "src" / "x.py")

    assert flagged(gate, "edit 'b = 2' 'b = 3'", x) == []  # search/replace
    assert flagged(gate, "edit 'b = 2' 'b = 3'") == [("editor_file_open", "false")]
    assert flagged(gate, "edit\nnew text\nend_of_edit", x) == []  # between the cursors
    assert flagged(gate, "set_cursors 1 3", x) == []
    assert flagged(gate, "set_cursors 1 30", x) == [("editor_line_in_range", "false")]
    assert flagged(gate, "set_cursors one 3", x) == [("tool_args_valid", "false")]
    assert flagged(gate, "insert 'd = 4' 9", x) == [("editor_line_in_range", "false")]


def test_a_command_of_no_known_bundle_is_unknown_not_a_missing_executable(proj):
    assert flagged(Gate(proj, budget_s=BUDGET_S), "view_diff --staged") == [("executable_available", "unknown")]


def test_aci_create_records_the_file_for_later_actions(proj):
    gate = Gate(proj, budget_s=BUDGET_S)
    state = GateState()

    gate.check_and_advance({"kind": "swe_agent", "command": "create reproduce.py"}, state)
    report = gate.check({"kind": "shell", "command": "python reproduce.py"}, state)

    assert not report.blocking


CONFIG = """\
tools:
  view_diff:
    signature: "view_diff <ref> [<path>]"
    docstring: shows a diff
    arguments:
      - name: ref
        type: string
        required: true
      - name: path
        type: string
        required: false
  edit:
    signature: "edit <text>"
    arguments:
      - {name: text, type: string, required: true}
  goto_line:
    arguments:
      - {name: line, type: integer, required: true}
  broken:
    arguments:
      - type: string
state_command: _state
"""


def test_a_bundles_config_yaml_declares_its_commands(proj, tmp_path):
    bundle = tmp_path / "my_tools"
    bundle.mkdir()
    (bundle / "config.yaml").write_text(CONFIG)

    commands, problems = load_bundle(bundle)
    gate = Gate(proj, budget_s=BUDGET_S, tools=bundle_tools(bundle))
    x = str(proj / "src" / "x.py")

    assert [c.name for c in commands] == ["view_diff", "edit", "goto_line"]
    assert commands[2].signature == "goto_line <line>"  # built from the arguments, as SWE-agent does
    assert problems == [f"{bundle / 'config.yaml'}: tools.broken.arguments[0]: needs a 'name' string; command skipped"]
    assert flagged(gate, "view_diff HEAD") == []  # known now: no executable to look for
    assert flagged(gate, "view_diff") == [("tool_args_valid", "false")]
    assert flagged(gate, "goto_line ten", x) == [("tool_args_valid", "false")]
    # the loaded one-argument edit replaces the shipped forms: "3-5" is its text, not a bad line range
    assert flagged(gate, "edit 3-5", x) == []
    assert flagged(Gate(proj, budget_s=BUDGET_S), "edit 3-5", x) == [("tool_args_valid", "false")]


@pytest.mark.parametrize("text, message", [
    ("tools: [1, 2]", "no 'tools' mapping"),
    ("tools: {a: [", "not valid YAML"),
])
def test_a_broken_bundle_config_gets_a_clear_error(tmp_path, text, message):
    (tmp_path / "config.yaml").write_text(text)

    with pytest.raises(BundleError, match=message):
        load_bundle(tmp_path)
