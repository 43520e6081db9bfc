"""Every ```python block of README.md and docs/integrations.md runs as-is; docs/your-agent.md runs top to bottom as
one script, its shell blocks included; every block in docs/ at least parses."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN_AS_IS = [REPO / "README.md", REPO / "docs" / "integrations.md"]
_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)

# Each block runs in a fresh namespace of one fresh interpreter, in an empty directory outside the
# repository (as a user would run it), so a block cannot lean on an earlier one, on files of the
# checkout, or on the test process's tracing setup.
_RUNNER = textwrap.dedent("""
    import json, sys, traceback
    results = []
    for line, code in json.load(sys.stdin):
        try:
            exec(compile(code, f"block at line {line}", "exec"), {"__name__": "__main__"})
            results.append([line, None])
        except BaseException:
            results.append([line, traceback.format_exc(limit=6)])
    print("RESULTS " + json.dumps(results))
""")


# A walkthrough page runs as a user follows it: its blocks in order, Python in one namespace, shell blocks with the
# project's commands on PATH, all in one empty directory.
RUN_AS_PAGE = [REPO / "docs" / "your-agent.md"]
_ANY_BLOCK = re.compile(r"^```(python|bash)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
_PAGE_RUNNER = textwrap.dedent("""
    import json, os, subprocess, sys, traceback
    namespace = {"__name__": "__main__"}
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    for line, kind, code in json.load(sys.stdin):
        if kind == "python":
            try:
                exec(compile(code, f"block at line {line}", "exec"), namespace)
            except BaseException:
                print("FAILED " + json.dumps([line, traceback.format_exc(limit=6)]))
                break
        else:
            done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], env=env, capture_output=True,
                                  text=True)
            if done.returncode != 0:
                print("FAILED " + json.dumps([line, done.stdout[-2000:] + done.stderr[-2000:]]))
                break
    else:
        print("DONE")
""")


def python_blocks(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


@pytest.mark.parametrize("path", RUN_AS_IS, ids=lambda p: p.name)
def test_every_python_block_runs_as_is(path, tmp_path):
    blocks = python_blocks(path)
    if not blocks:
        assert path.name != "README.md", "the README must show its integrations as runnable Python blocks"
        return
    proc = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(blocks), cwd=tmp_path, text=True,
                          capture_output=True, timeout=240)
    marker = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert marker, f"the snippet runner died:\n{proc.stderr[-3000:]}"
    failures = [f"{path.name}, block at line {line}:\n{error}" for line, error in json.loads(marker[0][8:]) if error]
    assert not failures, "\n\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("path", RUN_AS_PAGE, ids=lambda p: p.name)
def test_a_walkthrough_page_runs_top_to_bottom(path, tmp_path):
    text = path.read_text(encoding="utf-8")
    blocks = [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in _ANY_BLOCK.finditer(text)]
    assert any(kind == "bash" for _, kind, _ in blocks) and any(kind == "python" for _, kind, _ in blocks)
    proc = subprocess.run([sys.executable, "-c", _PAGE_RUNNER], input=json.dumps(blocks), cwd=tmp_path, text=True,
                          capture_output=True, timeout=400)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED ")]
    assert not failed, "{}, block at line {}:\n{}".format(path.name, *json.loads(failed[0][7:]))
    assert "DONE" in proc.stdout, f"the page runner died:\n{proc.stderr[-3000:]}"


def test_integration_snippets_are_each_under_ten_lines():
    blocks = python_blocks(REPO / "README.md")
    assert len(blocks) >= 5  # the Guard itself, LangChain, AutoGen, SWE-agent, OpenTelemetry
    for line, code in blocks:
        lines = [text for text in code.splitlines() if text.strip()]
        assert len(lines) < 10, f"README.md block at line {line} has {len(lines)} lines"


@pytest.mark.parametrize("path", sorted((REPO / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_python_block_in_docs_parses(path):
    for line, code in python_blocks(path):
        try:
            ast.parse(code)
        except SyntaxError as exc:
            pytest.fail(f"{path.name}, block at line {line}: {exc}")
