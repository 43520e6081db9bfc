"""Issue 30's differential suite: commands as agents write them, each run for real in a throwaway copy of a workspace.

Every valid action exits 0 there and the gate (intervene mode) must not block it; its broken twin, one false
precondition each, fails there and the gate must block it. The corpus is `tests/idioms.py`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from guardrail.gate import Gate
from tests.idioms import Idiom, build_workspace, idioms, run_env

# Generous: this pins verdicts, not speed, on a shared loaded machine (speed is `guardrail bench gate`).
BUDGET_S = 10.0
# Three of the corpus's five rows in `make test` (over 300 idioms, a minute or two); all five with this set to 5.
ROWS = int(os.environ.get("GUARDRAIL_IDIOM_ROWS", "3"))


def _run(action: dict[str, str], workspace: Path) -> tuple[int, str]:
    """Run an action in a throwaway copy of `workspace`: (exit code, the end of its output)."""
    with tempfile.TemporaryDirectory(prefix="gate-idiom-") as tmp:
        copy = Path(shutil.copytree(workspace, Path(tmp) / "ws", symlinks=True))
        argv = [sys.executable, "-c", action["code"]] if action["kind"] == "python" else \
            ["bash", "-c", action["command"]]
        try:
            proc = subprocess.run(argv, cwd=copy, env=run_env(sys.executable, tmp), capture_output=True, text=True,
                                  timeout=120, stdin=subprocess.DEVNULL, errors="replace")
        except subprocess.TimeoutExpired:
            return -1, "timed out"
    return proc.returncode, (proc.stdout + proc.stderr)[-300:]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_workspace(tmp_path_factory.mktemp("idioms") / "proj")


@pytest.fixture(scope="module")
def corpus() -> list[Idiom]:
    tools = frozenset(t for t in ("make", "git", "jq") if shutil.which(t))
    return idioms(tools, rows=ROWS)


def test_the_corpus_is_large_enough(corpus: list[Idiom]) -> None:
    assert len(corpus) >= 300, f"only {len(corpus)} idioms"


def test_valid_idioms_run_and_pass_and_their_twins_fail_and_are_blocked(workspace: Path, corpus: list[Idiom]) -> None:
    gate = Gate(workspace, python=sys.executable, budget_s=BUDGET_S)
    gate.index()
    actions = [idiom.valid for idiom in corpus] + [idiom.broken for idiom in corpus]
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(lambda action: _run(action, workspace), actions))
    valid_runs, broken_runs = outcomes[:len(corpus)], outcomes[len(corpus):]
    problems: list[str] = []
    for idiom, (code, output), (broken_code, broken_output) in zip(corpus, valid_runs, broken_runs, strict=True):
        valid_text = idiom.valid.get("command") or idiom.valid.get("code")
        broken_text = idiom.broken.get("command") or idiom.broken.get("code")
        if code != 0:
            problems.append(f"corpus: valid action exits {code}: {valid_text!r}: {output!r}")
        elif (report := gate.check(idiom.valid)).blocking:
            problems.append(f"false block: {valid_text!r}: {[v.message for v in report.violations]}")
        if broken_code == 0:
            problems.append(f"corpus: broken twin exits 0: {broken_text!r}")
        elif not gate.check(idiom.broken).blocking:
            problems.append(f"missed: broken twin not blocked: {broken_text!r}: {broken_output[-120:]!r}")
    assert not problems, f"{len(problems)} of {2 * len(corpus)}:\n" + "\n".join(problems)
