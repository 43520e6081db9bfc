"""Family I: importable, symbol_defined (re-exports, star imports, conditional imports), is_package, python -m."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from guardrail.gate import Gate, Outcome
from guardrail.gate.index import ModuleIndex, module_symbols, target_python

FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"
# Generous: these tests pin behaviour, not speed, on a shared loaded machine (speed is `guardrail bench gate`).
BUDGET_S = 10.0


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "proj"))


@pytest.fixture
def gate(proj: Path) -> Gate:
    return Gate(proj, budget_s=BUDGET_S)


def outcomes(gate: Gate, code: str) -> dict[tuple[str, tuple[object, ...]], Outcome]:
    report = gate.check({"kind": "python", "code": code})
    return {(r.predicate.name, r.predicate.args): r.outcome for r in report.results}


def test_from_import_of_reexported_name_is_defined(gate: Gate) -> None:
    found = outcomes(gate, "from pkg import Engine, make_engine")
    assert found[("symbol_defined", ("pkg", "Engine"))] is Outcome.TRUE
    assert found[("symbol_defined", ("pkg", "make_engine"))] is Outcome.TRUE


def test_name_reexported_through_star_import_is_defined(gate: Gate) -> None:
    assert outcomes(gate, "from pkg import helper_two")[("symbol_defined", ("pkg", "helper_two"))] is Outcome.TRUE


def test_conditionally_defined_names_are_defined(gate: Gate) -> None:
    found = outcomes(gate, "from pkg import fast_path, HIDDEN_FLAG")
    assert found[("symbol_defined", ("pkg", "fast_path"))] is Outcome.TRUE
    assert found[("symbol_defined", ("pkg", "HIDDEN_FLAG"))] is Outcome.TRUE


def test_missing_symbol_is_false_with_sibling_exports_as_hint(gate: Gate) -> None:
    report = gate.check({"kind": "python", "code": "from pkg import Engin"})
    assert report.hallucinated
    (violation,) = report.violations
    assert violation.predicate.name == "symbol_defined"
    finding = report.findings(layer="gate")[0]
    assert finding.hint is not None and "Engine" in finding.hint
    assert finding.blocking


def test_submodule_counts_as_package_attribute(gate: Gate) -> None:
    assert outcomes(gate, "from pkg import sub")[("symbol_defined", ("pkg", "sub"))] is Outcome.TRUE


def test_missing_module_is_not_importable(gate: Gate) -> None:
    found = outcomes(gate, "import pkg.nothing_here")
    assert found[("importable", ("pkg.nothing_here",))] is Outcome.FALSE


def test_dotted_import_through_a_plain_module_is_not_a_package(gate: Gate) -> None:
    report = gate.check({"kind": "python", "code": "import pkg.core.deeper"})
    assert report.hallucinated
    assert "not a package" in report.violations[0].message


def test_module_getattr_makes_missing_names_unknown(gate: Gate) -> None:
    found = outcomes(gate, "from pkg.lazy import anything")
    assert found[("symbol_defined", ("pkg.lazy", "anything"))] is Outcome.UNKNOWN


def test_namespace_package_names_are_unknown_but_submodules_found(gate: Gate) -> None:
    found = outcomes(gate, "from nspkg import inner, mystery\nimport nspkg.inner.part")
    assert found[("symbol_defined", ("nspkg", "inner"))] is Outcome.TRUE
    assert found[("symbol_defined", ("nspkg", "mystery"))] is Outcome.UNKNOWN
    assert found[("importable", ("nspkg.inner.part",))] is Outcome.TRUE


def test_compiled_extension_names_are_unknown(proj: Path) -> None:
    import _json  # a compiled stdlib module of this interpreter

    suffix = Path(_json.__file__).name[len("_json"):] if getattr(_json, "__file__", None) else ".so"
    (proj / f"fastext{suffix}").write_bytes(b"\x7fELF not really")
    found = outcomes(Gate(proj, budget_s=BUDGET_S), "from fastext import anything")
    assert found[("importable", ("fastext",))] is Outcome.TRUE
    assert found[("symbol_defined", ("fastext", "anything"))] is Outcome.UNKNOWN


def test_import_guarded_by_import_error_is_not_required(gate: Gate) -> None:
    report = gate.check({"kind": "python", "code": "try:\n    import not_installed_mod\nexcept ImportError:\n    pass"})
    assert not report.hallucinated


def test_attribute_on_imported_module_is_checked(gate: Gate) -> None:
    report = gate.check({"kind": "python", "code": "import pkg.core\npkg.core.make_engin()"})
    assert [v.predicate.args for v in report.violations] == [("pkg.core", "make_engin")]
    assert not report.violations[0].predicate.necessary  # attribute use may be guarded at run time


def test_stdlib_and_installed_packages_resolve_on_target_sys_path(gate: Gate) -> None:
    found = outcomes(gate, "import json, os.path\nfrom collections import OrderedDict\nimport pydantic")
    assert found[("importable", ("json",))] is Outcome.TRUE
    assert found[("symbol_defined", ("collections", "OrderedDict"))] is Outcome.TRUE
    assert found[("importable", ("pydantic",))] is Outcome.TRUE


def test_script_dir_not_cwd_is_on_path_for_a_script(proj: Path) -> None:
    (proj / "tools").mkdir()
    (proj / "tools" / "runner.py").write_text("import pkg\n")  # pkg is next to cwd, not next to the script
    report = Gate(proj, budget_s=BUDGET_S).check({"kind": "shell", "command": "python tools/runner.py"})
    assert [v.predicate.args for v in report.violations] == [("pkg",)]
    assert not report.blocking  # inside a script the action runs: a diagnostic, never blocks


def test_python_m_needs_a_main_module(gate: Gate) -> None:
    assert not gate.check({"kind": "shell", "command": "python -m pkg"}).hallucinated
    report = gate.check({"kind": "shell", "command": "python -m pkg.sub"})
    assert report.violations[0].predicate.name == "module_runnable"


def test_symbol_table_cache_follows_file_changes(proj: Path) -> None:
    gate = Gate(proj, budget_s=BUDGET_S)
    assert gate.check({"kind": "python", "code": "from pkg.core import later"}).hallucinated
    core = proj / "pkg" / "core.py"
    core.write_text(core.read_text() + "\nlater = 1\n")
    os.utime(core, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert not gate.check({"kind": "python", "code": "from pkg.core import later"}).hallucinated


def test_star_import_cycle_terminates(proj: Path) -> None:
    (proj / "cyc").mkdir()
    (proj / "cyc" / "__init__.py").write_text("from cyc.a import *\n")
    (proj / "cyc" / "a.py").write_text("from cyc import *\nA = 1\n")
    found = outcomes(Gate(proj, budget_s=BUDGET_S), "from cyc import A, B")
    assert found[("symbol_defined", ("cyc", "A"))] is Outcome.TRUE
    assert found[("symbol_defined", ("cyc", "B"))] is Outcome.FALSE


def test_all_literal_is_read(proj: Path) -> None:
    symbols = module_symbols(str(proj / "pkg" / "helpers.py"))
    assert symbols.all_names == ("helper_one", "helper_two")


def test_index_resolves_without_the_guard_process_importing(proj: Path) -> None:
    index = ModuleIndex(target_python())
    info = index.find("pkg.sub.leaf", (str(proj),))
    assert info.status == "found" and info.path.endswith("leaf.py")
    import sys

    assert "pkg" not in sys.modules and "pkg.sub.leaf" not in sys.modules


def test_top_level_del_unbinds_a_name(proj: Path) -> None:
    (proj / "tidy.py").write_text("import os\nKEEP = 1\ndel os\n")
    found = outcomes(Gate(proj, budget_s=BUDGET_S), "from tidy import KEEP, os")
    assert found[("symbol_defined", ("tidy", "KEEP"))] is Outcome.TRUE
    assert found[("symbol_defined", ("tidy", "os"))] is Outcome.FALSE


def test_setattr_inside_a_method_does_not_make_the_module_dynamic(proj: Path) -> None:
    (proj / "plain.py").write_text("class A:\n    def set(self, k, v):\n        setattr(self, k, v)\n")
    found = outcomes(Gate(proj, budget_s=BUDGET_S), "from plain import B")
    assert found[("symbol_defined", ("plain", "B"))] is Outcome.FALSE


def test_globals_written_at_module_level_make_missing_names_unknown(proj: Path) -> None:
    (proj / "gen.py").write_text("for n in ('a', 'b'):\n    globals()[n.upper()] = n\n")
    found = outcomes(Gate(proj, budget_s=BUDGET_S), "from gen import A")
    assert found[("symbol_defined", ("gen", "A"))] is Outcome.UNKNOWN


def test_module_with_an_import_hook_has_unknown_submodules(proj: Path) -> None:
    (proj / "hooked.py").write_text("import sys\nsys.meta_path.append(object())\n")
    found = outcomes(Gate(proj, budget_s=BUDGET_S), "import hooked.moves")
    assert found[("importable", ("hooked.moves",))] is Outcome.UNKNOWN


def test_reading_globals_does_not_make_the_module_dynamic(proj: Path) -> None:
    (proj / "reader.py").write_text("if globals().get('__spec__') is not None:\n    SPEC = 1\n")
    found = outcomes(Gate(proj, budget_s=BUDGET_S), "from reader import SPEC, OTHER")
    assert found[("symbol_defined", ("reader", "SPEC"))] is Outcome.TRUE
    assert found[("symbol_defined", ("reader", "OTHER"))] is Outcome.FALSE
