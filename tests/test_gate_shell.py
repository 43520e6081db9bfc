"""Shell actions: cd, &&/||/;/pipes, redirections, heredocs, python -c/-m/script, env, effects within a command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from guardrail.gate import Gate
from guardrail.gate.extract_shell import split_commands

FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"
# Generous: these tests pin behaviour, not speed, on a shared loaded machine (speed is `guardrail bench gate`).
BUDGET_S = 10.0


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "proj"))


@pytest.fixture
def gate(proj: Path) -> Gate:
    return Gate(proj, budget_s=BUDGET_S)


def violated(gate: Gate, command: str) -> list[tuple[str, tuple[object, ...]]]:
    report = gate.check({"kind": "shell", "command": command})
    return [(r.predicate.name, r.predicate.args) for r in report.violations]


def test_missing_script_is_file_exists_false(gate: Gate, proj: Path) -> None:
    assert violated(gate, "python reproduce_issue.py") == [("file_exists", (str(proj / "reproduce_issue.py"),))]


def test_existing_script_is_analysed_and_its_imports_hold(gate: Gate) -> None:
    assert violated(gate, "python reproduce.py") == []


def test_script_with_missing_symbol_warns_without_blocking(gate: Gate) -> None:
    report = gate.check({"kind": "shell", "command": "python broken_script.py"})
    assert [v.predicate.args for v in report.violations] == [("pkg", "DoesNotExist")]
    assert not report.blocking


def test_cd_changes_the_cwd_for_what_follows(gate: Gate, proj: Path) -> None:
    assert violated(gate, "cd docs && cat index.md") == []
    assert violated(gate, "cd docs && cat reproduce.py") == [("file_exists", (str(proj / "docs" / "reproduce.py"),))]


def test_cd_into_missing_dir_is_dir_exists_false(gate: Gate, proj: Path) -> None:
    assert ("dir_exists", (str(proj / "src"),)) in violated(gate, "cd src && ls")


def test_subshell_cd_does_not_leak(gate: Gate) -> None:
    assert violated(gate, "(cd docs && ls index.md); cat reproduce.py") == []


def test_or_chain_left_side_is_a_test_not_an_assumption(gate: Gate) -> None:
    assert violated(gate, "ls build || mkdir build") == []


def test_pipes_and_semicolons_are_each_checked(gate: Gate, proj: Path) -> None:
    found = violated(gate, "cat data/input.csv | grep a ; head -n 5 notes.txt")
    assert found == [("file_exists", (str(proj / "notes.txt"),))]


def test_output_redirection_needs_a_parent_dir_and_creates_the_file(gate: Gate, proj: Path) -> None:
    assert violated(gate, "echo 'print(1)' > new.py && python new.py") == []
    assert violated(gate, "echo x > out/log.txt") == [("parent_dir_exists", (str(proj / "out" / "log.txt"),))]


def test_input_redirection_needs_the_file(gate: Gate, proj: Path) -> None:
    assert violated(gate, "python - < missing_input.py") == [("file_exists", (str(proj / "missing_input.py"),))]


def test_mkdir_p_then_cd_then_write(gate: Gate) -> None:
    assert violated(gate, "mkdir -p build/out && cd build/out && touch a.txt && cat a.txt") == []


def test_mkdir_without_p_needs_the_parent(gate: Gate, proj: Path) -> None:
    assert violated(gate, "mkdir a/b") == [("parent_dir_exists", (str(proj / "a" / "b"),))]


def test_python_heredoc_code_is_analysed(gate: Gate) -> None:
    command = "python - <<'EOF'\nfrom pkg import Engine\nfrom pkg.core import Nope\nEOF"
    assert violated(gate, command) == [("symbol_defined", ("pkg.core", "Nope"))]


def test_file_written_by_heredoc_is_analysed_when_run(gate: Gate) -> None:
    command = "cat > check.py <<EOF\nfrom pkg import helper_three\nEOF\npython check.py"
    assert violated(gate, command) == [("symbol_defined", ("pkg", "helper_three"))]


def test_python_c_code_is_analysed_with_cwd_on_path(gate: Gate) -> None:
    assert violated(gate, "python -c 'from pkg import Engine'") == []
    assert violated(gate, "cd docs && python -c 'import pkg'") == [("importable", ("pkg",))]


def test_pythonpath_assignment_extends_the_search_path(gate: Gate) -> None:
    assert violated(gate, "cd docs && PYTHONPATH=.. python -c 'import pkg'") == []


def test_pip_install_before_import_is_not_a_hallucination(gate: Gate) -> None:
    assert violated(gate, "pip install some-new-lib && python -c 'import some_new_lib'") == []
    assert violated(gate, "python -c 'import some_new_lib'") == [("importable", ("some_new_lib",))]


def test_missing_executable(gate: Gate) -> None:
    assert violated(gate, "definitely-not-a-tool --help") == [("executable_available", ("definitely-not-a-tool",))]


def test_relative_executable_is_checked_as_a_file(gate: Gate, proj: Path) -> None:
    assert violated(gate, "./scripts/run.sh") == []
    assert ("file_exists", (str(proj / "scripts" / "go.sh"),)) in violated(gate, "./scripts/go.sh")


def test_env_and_timeout_wrappers_check_the_wrapped_command(gate: Gate, proj: Path) -> None:
    assert violated(gate, "timeout 30 python nothere.py") == [("file_exists", (str(proj / "nothere.py"),))]
    assert violated(gate, "env FOO=1 python nothere.py") == [("file_exists", (str(proj / "nothere.py"),))]


@pytest.mark.parametrize("target", [
    "tests/core_tests.py", "tests/core_tests.py::test_engine_runs", "tests/core_tests.py::TestEngine",
    "tests/core_tests.py::TestEngine::test_run", "tests/core_tests.py::test_param[1]",
    "tests/core_tests.py::test_param",
])
def test_existing_pytest_targets_hold(gate: Gate, target: str) -> None:
    assert violated(gate, f"python -m pytest {target} -q") == []


@pytest.mark.parametrize("target", [
    "tests/core_tests.py::test_missing", "tests/core_tests.py::TestEngine::test_nope",
    "tests/other_tests.py::test_engine_runs", "tests/core_tests.py::test_parm[1]",
])
def test_missing_pytest_targets_are_false(gate: Gate, target: str) -> None:
    found = violated(gate, f"pytest {target}")
    assert [name for name, _ in found] == ["pytest_target_exists"]


def test_inherited_test_method_is_unknown_not_false(gate: Gate) -> None:
    assert violated(gate, "pytest tests/core_tests.py::TestDerived::test_run") == []


def test_missing_test_file_hint_names_the_closest_file(gate: Gate) -> None:
    report = gate.check({"kind": "shell", "command": "pytest tests/core_test.py::test_engine_runs"})
    (finding,) = report.findings(layer="gate")
    assert finding.hint is not None and "core_tests.py" in finding.hint


def test_command_substitution_runs_before_its_command(gate: Gate, proj: Path) -> None:
    assert violated(gate, "echo $(cat missing.txt) && cat data/input.csv") == [
        ("file_exists", (str(proj / "missing.txt"),))]


def test_unknown_writer_hedges_later_missing_paths(gate: Gate) -> None:
    assert violated(gate, "python reproduce.py && cat build/output.txt") == []
    assert violated(gate, "cat build/output.txt") != []


def test_split_commands_keeps_operators_and_heredoc() -> None:
    commands = split_commands("cd a && python - <<'EOF'\nprint(1)\nEOF\necho done | tee log")
    assert [c.words[0] for c in commands] == ["cd", "python", "echo", "tee"]
    assert commands[0].next_op == "&&" and commands[2].next_op == "|"
    assert commands[1].heredoc == "print(1)\n"


def test_unittest_style_class_missing_method_is_false_but_unknown_base_is_unknown(gate: Gate, proj: Path) -> None:
    (proj / "tests" / "ut_tests.py").write_text(
        "import unittest\nfrom somewhere import Mixin\n\n\nclass Base(unittest.TestCase):\n    def test_a(self):\n"
        "        pass\n\n\nclass Child(Base):\n    def test_b(self):\n        pass\n\n\n"
        "class Mixed(Mixin):\n    def test_c(self):\n        pass\n")
    assert violated(gate, "pytest tests/ut_tests.py::Child::test_a") == []
    assert [n for n, _ in violated(gate, "pytest tests/ut_tests.py::Child::test_z")] == ["pytest_target_exists"]
    assert violated(gate, "pytest tests/ut_tests.py::Mixed::test_z") == []


# Issue 15, item 10: valid shell the gate used to block (a case pattern or a function name taken for a command).
@pytest.mark.parametrize("command", [
    'case "$1" in start) echo hi;; stop) echo bye;; esac',
    "case $x in\n  start|stop) echo run ;;\n  *) echo other ;;\nesac",
    "greet() { echo hi; }; greet",
    "greet () {\n  ls\n}\ngreet world",
    "function greet { echo hi; }; greet",
    "function greet() { case $1 in a) echo a;; esac; }; greet a",
    "f() ( cd /tmp ); f",
])
def test_case_patterns_and_shell_functions_are_not_commands(gate: Gate, command: str) -> None:
    assert violated(gate, command) == []


def test_commands_beside_case_and_functions_are_still_checked(gate: Gate) -> None:
    assert violated(gate, "nosuchcmd_a; case $1 in a) echo a;; esac") == [("executable_available", ("nosuchcmd_a",))]
    assert violated(gate, "nosuchcmd_b && greet() { echo hi; }") == [("executable_available", ("nosuchcmd_b",))]
    commands = split_commands("greet() { rm -rf x; }; greet")
    # Calling the function runs its body: its commands are judged where it is called.
    assert [c.defines for c in commands] == ["greet", None, None] and commands[1].words == ["greet"]
    assert commands[2].words == ["rm", "-rf", "x"]


def test_code_points_the_grammar_crashes_on_are_read_safely(proj: Path) -> None:
    # tree-sitter-bash 0.25.1 kills the process (SIGSEGV) on "{" followed by a code point from U+A0000 up (found
    # by `make fuzz`); whether it does depends on the process's memory layout (measured: 5-7 processes of 10 on
    # these lines), so six child processes, and a crash fails this test only.
    import subprocess
    import sys

    script = (f"from guardrail.gate import Gate\ngate = Gate({str(proj)!r})\n"
              "for cp in range(0xA0000, 0x110000, 0x4000):\n"
              "    gate.check({'kind': 'shell', 'command': 'echo x{' + chr(cp)})\n"
              "print('survived')\n")
    children = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=Path(__file__).resolve().parents[1]) for _ in range(6)]
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0 and out.strip() == "survived", (child.returncode, err[-500:])


def test_non_ascii_words_keep_their_own_text(gate: Gate, proj: Path) -> None:
    assert violated(gate, "python 'skript_ä.py' && cat données.csv") == [
        ("file_exists", (str(proj / "skript_ä.py"),))]
    assert [c.words for c in split_commands("echo héllo\u00a0wörld | grep ö")] == [
        ["echo", "héllo\u00a0wörld"], ["grep", "ö"]]
