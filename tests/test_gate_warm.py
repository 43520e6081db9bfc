"""Warm before the first action (issue 30): symbol tables parsed in the background and kept on disk outside the
workspace, a cold-work credit that normal projects never exhaust, and the stdlib lookup under the decision's deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from guardrail.gate import Gate
from guardrail.gate import index as index_module


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from pkg.core import Engine\n")
    (root / "pkg" / "core.py").write_text("import json\n\n\nclass Engine:\n    def run(self):\n        return 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_core.py").write_text("def test_engine():\n    pass\n")
    return root


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "user-cache"
    monkeypatch.setenv("GUARDRAIL_CACHE_DIR", str(directory))
    return directory


def _warmed_again(project: Path, cache_dir: Path, pattern: str, content: str,
                  memory: dict[Any, Any]) -> tuple[Gate, dict[str, Any]]:
    """A gate warmed after the kept file matching `pattern` was overwritten with `content` (and `memory`, what
    the process had learned, forgotten)."""
    Gate(project).wait_warm(60)
    (kept,) = cache_dir.glob(pattern)
    kept.write_text(content)
    memory.clear()
    gate = Gate(project)
    warmed = gate.wait_warm(60)
    assert warmed is not None
    return gate, warmed


def _second_process(project: Path, cache_dir: Path) -> dict[str, object]:
    """A fresh interpreter with a gate on `project`: what its warm-up did."""
    code = textwrap.dedent(f"""
        import json
        from guardrail.gate import Gate
        gate = Gate({str(project)!r})
        print(json.dumps(gate.wait_warm(60)))
    """)
    env = dict(os.environ, GUARDRAIL_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_workspace_is_parsed_ahead_and_a_second_process_starts_warm(project: Path, cache_dir: Path) -> None:
    warmed = Gate(project).wait_warm(60)
    assert warmed is not None and warmed["parsed"] >= 3 and warmed["saved"] >= 3  # the modules and the test file
    (cache_file,) = cache_dir.glob("symbols-v1-*.json")
    saved = json.loads(cache_file.read_text())
    assert saved["version"] == 1 and str(project / "tests" / "test_core.py") in saved["entries"]
    second = _second_process(project, cache_dir)
    assert second["loaded"] >= 3


def test_a_kept_table_of_a_changed_file_is_not_used(project: Path, cache_dir: Path) -> None:
    Gate(project).wait_warm(60)
    index_module._SYMBOLS.clear()
    (project / "pkg" / "core.py").write_text("class Engine:\n    pass\n\n\nclass Motor:\n    pass\n")
    gate = Gate(project)
    gate.wait_warm(60)
    assert not gate.check({"kind": "python", "code": "from pkg.core import Motor"}).hallucinated


def test_nothing_is_kept_under_the_workspace(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inside = project / ".cache"
    monkeypatch.setenv("GUARDRAIL_CACHE_DIR", str(inside))
    warmed = Gate(project).wait_warm(60)
    assert warmed is not None and "under the workspace roots" in str(warmed["cache"])
    assert not inside.exists()


@pytest.mark.parametrize("content", [
    "not json", "[]", '{"version": 99, "entries": {}}', '{"version": 1, "entries": []}',
    '{"version": 1, "entries": {"/x.py": [1, 2, {"names": 7}], "/y.py": "bad", "/z.py": [1]}}',
    "[" * 100_000 + "]" * 100_000,
])
def test_a_bad_cache_file_is_ignored(project: Path, cache_dir: Path, content: str) -> None:
    gate, warmed = _warmed_again(project, cache_dir, "symbols-v1-*.json", content, index_module._SYMBOLS)
    assert "error" not in warmed
    assert gate.check({"kind": "python", "code": "from pkg.core import Nope"}).hallucinated


def test_a_decision_waits_for_its_own_cold_parse_up_to_the_credit(project: Path, cache_dir: Path) -> None:
    """A budget too short for the module's first parse: with the cold credit the decision still decides; without it
    the symbol is unknown (the parse goes on in the background)."""
    (project / "pkg" / "extra.py").write_text("".join(f"def f{i}(a, b=(1, 2)):\n    return a + b[0] * {i}\n"
                                                      for i in range(1500)))
    from guardrail.gate.parse_worker import parse_worker

    parse_worker().symbols(("warm-up", 0), "x = 1\n", 30.0)  # the worker's own start is not the parse's time
    for cold_s, decided in ((1.0, True), (0.0, False)):
        index_module._SYMBOLS.clear()
        (project / "pkg" / "extra.py").touch()  # a new mtime: the parse worker's kept answer does not apply
        os.utime(project / "pkg" / "extra.py", ns=(time.time_ns(), time.time_ns() + int(cold_s * 1e9) + 7))
        gate = Gate(project, budget_s=0.02, warm=False, cold_s=cold_s)
        gate.index()
        report = gate.check({"kind": "python", "code": "from pkg.extra import f7, f_missing"})
        assert report.hallucinated is decided, (cold_s, [(r.predicate.label(), r.message) for r in report.results])
        assert report.budget_exceeded is not decided


def test_the_stdlib_lookup_keeps_the_decisions_deadline(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child that lists a standard module's names used to get a fixed 5 s; now the decision's time bounds it."""
    monkeypatch.setattr(index_module, "_DIR_QUERY", "import time; time.sleep(4)")
    index_module._STDLIB_NAMES.clear()
    gate = Gate(project, budget_s=0.2, cold_s=0.3, warm=False)
    gate.index()
    started = time.perf_counter()
    report = gate.check({"kind": "python", "code": "import errno\nprint(errno.ENOPE_ZZ)"})
    assert time.perf_counter() - started < 2.0
    assert not report.hallucinated and report.budget_exceeded
    assert "errno" not in index_module._STDLIB_NAMES  # out of time is not an answer: asked again next time


def test_the_warm_up_learns_every_standard_module_so_no_decision_starts_a_child(
        project: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first standard-module lookup used to start a child inside the decision (on a loaded machine, past its
    deadline); the warm-up now learns them all ahead, so decisions about any standard module start none."""
    index_module._STDLIB_NAMES.clear()
    gate = Gate(project)
    warmed = gate.wait_warm(60)
    assert warmed is not None and warmed["stdlib_modules"] > 200

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("a decision started a child process")

    monkeypatch.setattr(index_module.subprocess, "run", no_child)
    for code, hallucinated in (("import socket\nprint(socket.AF_INET7)", True), ("import socket\nsocket.AF_INET", False),
                               ("from errno import ENOPE_ZZ", True), ("import xml.etree.ElementTree", False)):
        report = gate.check({"kind": "python", "code": code})
        assert report.hallucinated is hallucinated and not report.budget_exceeded, code


@pytest.mark.parametrize("module", ["xml", "collections", "email", "socket", "os", "builtins", "importlib"])
def test_the_names_learned_ahead_are_those_a_lookup_of_the_module_alone_finds(module: str) -> None:
    """Learned together, each module is still imported alone: a package does not gain the submodules other
    modules imported (`xml.etree` is no attribute of a bare `import xml`)."""
    version, stdlib = sys.version_info[:2], frozenset(sys.stdlib_module_names)
    index_module._STDLIB_NAMES.clear()
    assert len(index_module.prefetch_stdlib_names(["xml.etree.ElementTree", "plistlib", module], version, stdlib)) >= 2
    together = index_module._STDLIB_NAMES[module]
    index_module._STDLIB_NAMES.clear()
    assert index_module.stdlib_names(module, version, stdlib) == together
    if module == "xml":
        assert together is not None and "etree" not in together


def test_a_second_process_reads_the_standard_modules_it_kept(project: Path, cache_dir: Path) -> None:
    index_module._STDLIB_NAMES.clear()
    Gate(project).wait_warm(60)
    (kept,) = cache_dir.glob("stdlib-v1-*.json")
    written = kept.stat().st_mtime_ns
    second = _second_process(project, cache_dir)
    assert int(second["stdlib_modules"]) > 200  # type: ignore[call-overload]
    assert kept.stat().st_mtime_ns == written  # nothing new to learn: no child, nothing rewritten


@pytest.mark.parametrize("content", ['{"version": 1, "modules": {"socket": [1, 2], "errno": "ENOENT", "7": null}}',
                                     "["])
def test_a_bad_standard_module_file_is_ignored(project: Path, cache_dir: Path, content: str) -> None:
    index_module._STDLIB_NAMES.clear()
    gate, warmed = _warmed_again(project, cache_dir, "stdlib-v1-*.json", content, index_module._STDLIB_NAMES)
    assert int(warmed["stdlib_modules"]) > 200
    assert gate.check({"kind": "python", "code": "import socket\nprint(socket.AF_INET7)"}).hallucinated
    assert not gate.check({"kind": "python", "code": "import errno\nprint(errno.ENOENT)"}).hallucinated
