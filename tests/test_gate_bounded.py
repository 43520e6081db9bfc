"""Bounded work on hostile workspaces: FIFOs, symlink loops, /proc, unreadable dirs, odd names, huge inputs, budgets."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from guardrail.gate import Gate, Outcome, fsview

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
    from guardrail.gate.backend import LocalBackend, Roots

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
    for text in ["cat a\x00b", "cat \udcff", "python -c 'import \x00'", "open \x00 5", "cd \ud800 && ls",
                 "create ~\x00", "cat ~a\x00b/x"]:  # `~` then a NUL: os.path.expanduser raised on the user name
        gate.check({"kind": "shell", "command": text})
        gate.check({"kind": "swe_agent", "command": text})
    report = gate.check({"kind": "tool", "tool": "str_replace_editor",
                         "args": {"command": "view", "path": "/tmp/a\x00b"}})
    assert report.hallucinated


# ------------------------------------------------------------------ issue 15, item 3: the budget bounds the decision
def test_hints_are_built_inside_the_decision(proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """latency_ms used to leave hint building out: findings() computed hints after the clock stopped."""
    from guardrail.gate import report as report_module

    gate = Gate(proj, budget_s=BUDGET_S)
    report = gate.check({"kind": "shell", "command": "cat pkg/cor.py"})
    assert report.violations[0].hint is not None and "core.py" in report.violations[0].hint

    def no_more_hints(*_: object, **__: object) -> str:
        raise AssertionError("a hint was built after the decision")

    monkeypatch.setattr(report_module, "repair_hint", no_more_hints)
    (finding,) = report.findings(layer="gate")
    assert "core.py" in (finding.hint or "") and "core.py" in report.to_json()["violations"][0]["hint"]


def test_a_shell_parse_that_would_overrun_the_budget_is_refused_and_said(proj: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from guardrail.gate.budget import SHELL_PARSE_COST

    gate = Gate(proj, budget_s=BUDGET_S)
    monkeypatch.setattr(SHELL_PARSE_COST, "rate", 1.0)  # a second per character: no shell parse fits
    report = gate.check({"kind": "shell", "command": "cat nope.txt && echo $(cat nope)"})
    assert not report.hallucinated and report.budget_exceeded
    (finding,) = report.findings(layer="gate")
    assert finding.check == "budget_exceeded" and "budget" in finding.message
    monkeypatch.setattr(SHELL_PARSE_COST, "rate", 5e-6)
    assert gate.check({"kind": "shell", "command": "cat nope.txt && echo $(cat nope)"}).hallucinated


def test_a_module_too_slow_to_parse_in_the_decision_goes_to_the_worker(proj: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision says its budget ran out; the worker's answer decides the next one. The worker here starts
    two seconds late, standing in for a parse that takes that long."""
    from guardrail.gate import parse_worker
    from guardrail.gate.budget import PARSE_COST

    slow = parse_worker.ParseWorker(argv=[sys.executable, "-I", "-B", "-c",
                                          "import time; time.sleep(2)\nfrom guardrail.gate.parse_worker import _serve"
                                          f"\n_serve({parse_worker.WORKER_MEMORY_BYTES})"])
    monkeypatch.setattr(parse_worker, "_WORKER", slow)
    monkeypatch.setattr(PARSE_COST, "rate", 1.0)  # every parse is estimated too slow for the decision itself
    (proj / "helper_mod.py").write_text("X = 1\n" * 50)
    gate = Gate(proj, budget_s=0.3, warm=False)  # the decision's own parse, not the warm-up's
    gate.index()
    report = gate.check({"kind": "python", "code": "from helper_mod import X, Y"})
    assert not report.hallucinated and report.budget_exceeded
    assert "background" in report.findings(layer="gate")[-1].message
    for _ in range(100):  # the worker answers once it is up
        report = gate.check({"kind": "python", "code": "from helper_mod import X, Y"})
        if not report.budget_exceeded:
            break
    assert [v.predicate.args for v in report.violations] == [("helper_mod", "Y")]
    slow.close()


def test_a_slow_interpreter_answer_leaves_imports_unknown_within_the_budget(proj: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from guardrail.gate.backend import LocalBackend, Roots

    release = threading.Event()
    real = LocalBackend.import_paths

    def slow_import_paths(self: LocalBackend, python: str | None, untrusted: Roots):  # type: ignore[no-untyped-def]
        release.wait(30)
        return real(self, python, untrusted)

    monkeypatch.setattr(LocalBackend, "import_paths", slow_import_paths)
    gate = Gate(proj, budget_s=0.05)
    report = gate.check({"kind": "python", "code": "import nosuchmodule_q"})
    assert not report.hallucinated and report.budget_exceeded
    release.set()
    assert gate.index() is not None
    assert gate.check({"kind": "python", "code": "import nosuchmodule_q"}).hallucinated


# ------------------------------------------------------------------ issue 15, item 8: one predicate, never the decision
def test_a_pathological_helper_module_does_not_switch_the_gate_off(proj: Path) -> None:
    from guardrail import Action, Guard
    from guardrail.core.events import Verdict
    from guardrail.gate import GateLayer

    (proj / "deephelper.py").write_text("import sys\nx = 1\nsys.modules" + "[0]" * 500 + " = 1\n")
    guard = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="intervene")
    decision = guard.start_episode().before_action(Action.python("from deephelper import x, y\nimport nosuchmodule"))
    assert decision.verdict is Verdict.BLOCK
    assert "internal_error" not in [f.check for f in decision.findings]
    assert [f.predicate for f in decision.findings if f.blocking] == ["importable"]


def test_a_probe_that_fails_loses_only_its_predicate(proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from guardrail.gate.probe import Prober

    def broken(self: Prober, predicate: object) -> object:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(Prober, "_dir_exists", broken)
    report = Gate(proj, budget_s=BUDGET_S).check({"kind": "shell", "command": "cd docs && cat nothing.txt"})
    assert report.error is None
    outcomes = {r.predicate.name: r.outcome for r in report.results}
    assert outcomes["dir_exists"] is Outcome.UNKNOWN and outcomes["file_exists"] is Outcome.FALSE


@pytest.mark.parametrize("command", ["goto " + "9" * 5000, "open docs/thirty.txt " + "9" * 5000,
                                     "edit " + "1" * 5000 + ":" + "2" * 5000])
def test_swe_agent_line_numbers_past_int_limits_are_out_of_range(proj: Path, command: str) -> None:
    from guardrail.gate import EditorState, GateState

    state = GateState(editor=EditorState(str(proj / "docs" / "thirty.txt")))
    report = Gate(proj, budget_s=BUDGET_S).check({"kind": "swe_agent", "command": command}, state)
    assert report.error is None
    assert [v.predicate.name for v in report.violations] == ["editor_line_in_range"]


RICH_MODULE = '''
import os
from .base import Shared as S
from pkg import thing
__all__ = ["Child", "helper"]


class Child(S, metaclass=type):
    count = 1
    label: str

    def test_one(self):
        pass


def helper():
    global LATER
    LATER = 1
'''


def test_the_parse_workers_answer_is_the_symbol_table_the_gate_would_have_built() -> None:
    """A module parsed in the worker (when a parse is too slow for the decision) must read exactly as one parsed
    in process: a field lost on the way (a class's attributes, the module's imports) turns an inherited method
    or a re-exported name into a false 'missing'."""
    from guardrail.gate import parse_worker
    from guardrail.gate.index import symbols_of_source

    local = symbols_of_source(RICH_MODULE)
    assert local.classes["Child"].attrs and local.imports and local.imported  # the fields worth carrying
    assert parse_worker.load_symbols(json.loads(json.dumps(parse_worker.dump_symbols(local)))) == local
    worker = parse_worker.ParseWorker()
    try:
        answer = None
        for _ in range(200):  # the worker starts, then answers the same request
            answer = worker.symbols(("test", "rich.py", 1, len(RICH_MODULE)), RICH_MODULE, 0.05)
            if answer is not None:
                break
        assert answer == local
    finally:
        worker.close()
