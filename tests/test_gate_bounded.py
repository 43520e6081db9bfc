"""Bounded work on hostile workspaces: FIFOs, symlink loops, /proc, unreadable dirs, odd names, huge inputs, budgets."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from guardrail.gate import Gate, Outcome, fsview
from guardrail.gate.backend import LocalBackend, Roots

FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"
BUDGET_S = 10.0  # generous: these tests pin behaviour on a shared machine; speed lives in the benchmark

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "proj"))


def test_fifo_is_stated_never_opened(proj: Path) -> None:
    os.mkfifo(proj / "pipe.py")
    gate = Gate(proj, budget_s=BUDGET_S)
    assert not gate.check({"kind": "shell", "command": "cat pipe.py && python pipe.py"}).hallucinated
    assert fsview.read_text_capped(str(proj / "pipe.py")) is None
    report = gate.check({"kind": "python", "code": "from pipe import x"})
    assert [r.outcome for r in report.results if r.predicate.name == "symbol_defined"] == [Outcome.UNKNOWN]


def test_symlink_loop_is_a_missing_file_not_a_hang(proj: Path) -> None:
    os.symlink(proj / "loop_b", proj / "loop_a")
    os.symlink(proj / "loop_a", proj / "loop_b")
    report = Gate(proj, budget_s=BUDGET_S).check({"kind": "shell", "command": "cat loop_a; cd loop_b; import_x=1"})
    assert {r.predicate.name for r in report.violations} == {"file_exists", "dir_exists"}
    assert fsview.path_state(str(proj / "loop_a")).kind == "loop"


def test_proc_and_dev_are_stated_but_not_read(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    assert not gate.check({"kind": "shell", "command": "cat /proc/self/status; python /dev/stdin"}).hallucinated
    assert fsview.read_text_capped("/proc/self/status") is None


def test_unreadable_search_dir_makes_a_missing_module_unknown(proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = str(proj / "vendor")
    os.mkdir(blocked)
    real_list_dir = LocalBackend.list_dir

    def list_dir(self: LocalBackend, path: str, within: Roots | None, limit: int) -> tuple[int, frozenset[str]] | None:
        if path == blocked:  # what the backend answers for a directory it may not read
            return None
        return real_list_dir(self, path, within, limit)

    monkeypatch.setattr(LocalBackend, "list_dir", list_dir)
    report = Gate(proj, budget_s=BUDGET_S).check(
        {"kind": "shell", "command": "PYTHONPATH=vendor python -c 'import hidden_mod'"})
    assert not report.hallucinated
    assert [r.outcome for r in report.results if r.predicate.name == "importable"] == [Outcome.UNKNOWN]


@pytest.mark.skipif(os.geteuid() == 0, reason="permission bits do not restrict root; the monkeypatched twin covers it")
def test_unreadable_dir_by_permissions(proj: Path) -> None:
    vendor = proj / "vendor"
    vendor.mkdir()
    vendor.chmod(0)
    try:
        report = Gate(proj, budget_s=BUDGET_S).check(
            {"kind": "shell", "command": "PYTHONPATH=vendor python -c 'import hidden_mod'"})
        assert not report.hallucinated
    finally:
        vendor.chmod(0o755)


def test_non_utf8_file_names_are_handled(proj: Path) -> None:
    raw = os.fsencode(str(proj)) + b"/caf\xe9_mod.py"
    with open(raw, "wb") as handle:
        handle.write(b"X = 1\n\xff\xfe not utf-8 either\n")
    name = os.fsdecode(b"caf\xe9_mod.py")
    gate = Gate(proj, budget_s=BUDGET_S)
    assert not gate.check({"kind": "shell", "command": f"cat '{name}'"}).hallucinated
    report = gate.check({"kind": "shell", "command": "cat cafe_mod.py"})  # hint search walks the odd name
    assert report.hallucinated and report.findings(layer="gate")[0].hint is not None


def test_oversized_module_is_unknown_not_parsed(proj: Path) -> None:
    (proj / "huge.py").write_text("X = 1\n" + "# padding\n" * (fsview.MAX_READ_BYTES // 10 + 10))
    report = Gate(proj, budget_s=BUDGET_S).check({"kind": "python", "code": "from huge import X, Y"})
    assert not report.hallucinated
    assert {r.outcome for r in report.results if r.predicate.name == "symbol_defined"} == {Outcome.UNKNOWN}


def test_exhausted_budget_leaves_predicates_unknown_and_says_so(proj: Path) -> None:
    gate = Gate(proj, budget_s=0.0)
    report = gate.check({"kind": "shell", "command": "cat missing.txt && python -c 'import nothing_here'"})
    assert not report.hallucinated and report.budget_exceeded
    checks = [f.check for f in report.findings(layer="gate")]
    assert checks == ["budget_exceeded"]


def test_huge_and_deeply_nested_inputs_return_quickly(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    huge = gate.check({"kind": "shell", "command": "cat a " * 50_000})  # over the size cap: one explicit unknown
    assert [(r.predicate.name, r.outcome) for r in huge.results] == [("analysis_complete", Outcome.UNKNOWN)]
    assert huge.budget_exceeded and not huge.hallucinated
    assert gate.check({"kind": "python", "code": "(" * 100_000}).results == []
    nested = "x = " + "[" * 5000 + "]" * 5000
    assert not gate.check({"kind": "python", "code": nested}).hallucinated
    bash_c = "bash -c " + " ".join(["\"bash -c 'cat nope.txt'\""])
    assert gate.check({"kind": "shell", "command": bash_c}).hallucinated
    ten_mb = {"kind": "tool", "tool": "str_replace_editor",
              "args": {"command": "str_replace", "path": str(proj / "pkg" / "core.py"), "old_str": "x" * 10_000_000,
                       "new_str": ""}}
    assert gate.check(ten_mb).hallucinated


def test_nul_bytes_and_surrogates_never_raise(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    for text in ["cat a\x00b", "cat \udcff", "python -c 'import \x00'", "open \x00 5", "cd \ud800 && ls"]:
        gate.check({"kind": "shell", "command": text})
        gate.check({"kind": "swe_agent", "command": text})
    report = gate.check({"kind": "tool", "tool": "str_replace_editor",
                         "args": {"command": "view", "path": "/tmp/a\x00b"}})
    assert report.hallucinated
