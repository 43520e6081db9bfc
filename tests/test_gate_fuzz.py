"""Fuzzing the gate's parsers and entry points: no input makes an exception escape the Guard or the batch."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from guardrail import Action, Guard
from guardrail.gate import Gate, GateLayer
from guardrail.gate.cli import _run_batch
from guardrail.gate.extract_aci import ACI_SIGNATURES
from tests.fuzzing import FUZZ, json_values, nasty_text

pytestmark = pytest.mark.fuzz

FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    root = Path(shutil.copytree(FIXTURE, tmp_path_factory.mktemp("fuzz") / "proj"))
    return Gate(root, budget_s=2.0)


shell_words = st.sampled_from([
    "cd", "ls", "cat", "python", "python3", "-c", "-m", "pytest", "pip", "install", "&&", "||", ";", "|", ">", ">>",
    "<", "2>&1", "<<EOF", "<<'EOF'", "EOF", "\n", "$(", ")", "`", "'", '"', "\\", "{", "}", "(", "if", "then",
    "fi", "for", "do", "done", "x.py", "pkg", "tests/core_tests.py::TestEngine::test_run", "FOO=1", "PYTHONPATH=.",
    "bash", "-", "import pkg", "from pkg import Engine", "~", "*", "$HOME", "mkdir", "-p", "touch", "cp", "mv",
    "echo", "timeout", "env", "grep", "sed", "find", "rm", "-rf", "open", "goto", "edit", "1:2",
]) | nasty_text
shell_lines = st.lists(shell_words, max_size=25).map(" ".join)
python_snippets = st.lists(st.sampled_from([
    "import pkg", "from pkg import *", "from pkg import Engine", "import os.path as p", "p.join",
    "open('x')", "open('y', 'w')", "Path('z').read_text()", "try:", "    import q", "except ImportError:",
    "    pass", "if TYPE_CHECKING:", "def f(", "):", "class A:", "pd.read_csv('a.csv')", "__import__('m')",
    "importlib.import_module('pkg.sub')", "x = (", "lambda: 0", "match x:", "    case 1: pass",
]) | nasty_text, max_size=20).map("\n".join)


@FUZZ
@given(command=shell_lines)
def test_any_shell_line_gets_a_report(gate: Gate, command: str) -> None:
    report = gate.check({"kind": "shell", "command": command})
    assert report.error is None


@FUZZ
@given(name=st.sampled_from(sorted(ACI_SIGNATURES)) | nasty_text, args=st.lists(nasty_text | st.integers().map(
    str), max_size=4))
@example(name="create", args=["~\x00"])  # found by make fuzz: `~` + NUL made os.path.expanduser raise
def test_any_aci_command_gets_a_report(gate: Gate, name: str, args: list[str]) -> None:
    report = gate.check({"kind": "swe_agent", "command": " ".join([name, *args])})
    assert report.error is None


@FUZZ
@given(code=python_snippets)
def test_any_python_code_gets_a_report(gate: Gate, code: str) -> None:
    assert gate.check({"kind": "python", "code": code}).error is None


@FUZZ
@given(tool=st.sampled_from(["str_replace_editor", "execute_bash", "FileReadAction", "python", "other"]) | nasty_text,
       args=st.dictionaries(st.sampled_from(["command", "path", "view_range", "old_str", "new_str", "insert_line",
                                             "file_text", "code", "content"]) | nasty_text, json_values, max_size=6))
def test_any_tool_arguments_never_escape_the_guard(gate: Gate, tool: str, args: dict[str, object]) -> None:
    guard = Guard([GateLayer(gate.workspace, budget_s=2.0)], mode="intervene")
    decision = guard.start_episode().before_action(Action.tool_call(tool or "t", args))
    assert all(f.check != "internal_error" for f in decision.findings)


@FUZZ
@given(lines=st.lists(nasty_text | json_values.map(json.dumps), max_size=6))
def test_batch_answers_every_line_in_order(lines: list[str]) -> None:
    cleaned = [line.replace("\n", " ").replace("\r", " ") for line in lines]
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        _run_batch(io.BytesIO(("\n".join(cleaned) + "\n").encode("utf-8", "surrogatepass")), 1.0)
    out = captured.getvalue().split("\n")[:-1]
    assert len(out) == ("\n".join(cleaned) + "\n").count("\n")  # one answer per input line, a blank one too
    assert all("id" in json.loads(line) for line in out)


# Inputs that broke a parser while this layer was built, kept as regressions.
REGRESSIONS = [
    ("shell", "cat > a.py <<'EOF'\nx = 1\n"),  # heredoc with no end (bashlex, the parser before, rejected quoted delimiters)
    ("shell", "python - <<<'import x'"),  # here-string, not a heredoc
    ("shell", "echo 'unbalanced"),
    ("shell", "$(cat missing) && `ls`"),
    ("shell", "pytest tests/core_tests.py::test_param[1]"),  # [param] is not a glob
    ("shell", "timeout -s KILL 10 python nothere.py"),
    ("shell", "2>&1 >"),
    ("python", "from . import x\nfrom .. import *"),
    ("swe_agent", 'open "unterminated'),
    ("swe_agent", "edit 5:3"),
]


@pytest.mark.parametrize(("kind", "text"), REGRESSIONS)
def test_regression_inputs(gate: Gate, kind: str, text: str) -> None:
    field = "code" if kind == "python" else "command"
    assert gate.check({"kind": kind, field: text}).error is None


# Found by the long campaign (GUARDRAIL_FUZZ_EXAMPLES=500): an unhashable editor command raised TypeError.
TOOL_REGRESSIONS = [
    ("str_replace_editor", {"command": []}),
    ("str_replace_editor", {"command": {"a": 1}, "path": ["x"]}),
    ("str_replace_editor", {"command": "view", "path": "/x", "view_range": [True, None]}),
]


@pytest.mark.parametrize(("tool", "args"), TOOL_REGRESSIONS)
def test_tool_regression_inputs(gate: Gate, tool: str, args: dict[str, object]) -> None:
    report = gate.check({"kind": "tool", "tool": tool, "args": args})
    assert report.error is None and "tool_args_valid" in [r.predicate.name for r in report.violations]


_GRAMMAR_FUZZ = """
import random, sys
from guardrail.gate.shell_syntax import parse
rnd = random.Random(int(sys.argv[1]))
atoms = ["{", "}", "$(", ")", "`", "'", '"', "\\\\", "<<EOF\\n", "EOF\\n", "\\n", " ", "${", "[[", "]]", "|", "&&", ";;",
         "case x in", "esac", "if", "then", "fi", "a", "1", "..", ",", "*", "#", "=", "$((", "))", "<(", "\\r", "\\x00"]
for _ in range(int(sys.argv[2])):
    parts = [rnd.choice(atoms) if rnd.random() < 0.7 else chr(rnd.choice([rnd.randrange(128), rnd.randrange(0x80, 0x800),
             rnd.randrange(0x10000, 0x110000)])) for _ in range(rnd.randint(1, 40))]
    parse("".join(parts).encode("utf-8", "surrogatepass"))
print("survived")
"""


def test_the_grammar_survives_any_bytes_in_a_child_process() -> None:
    # tree-sitter-bash is C: a crash there would kill the agent's process, not raise. Each child parses random
    # lines (shell atoms and code points from every plane) through `parse`; a segfault fails this test only.
    import os
    import subprocess
    import sys

    count = max(500, int(os.environ.get("GUARDRAIL_FUZZ_EXAMPLES", "300")))
    root = Path(__file__).resolve().parents[1]
    children = [subprocess.Popen([sys.executable, "-c", _GRAMMAR_FUZZ, str(seed), str(count)], cwd=root,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in range(8)]
    for seed, child in enumerate(children):
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0 and out.strip() == "survived", (seed, child.returncode, err[-400:])
