"""Issue 16: what the gate used to miss or flag wrongly, on miniature layouts copied from real packages' shapes."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from guardrail.gate import Gate, Outcome

# Generous: these tests pin behaviour, not speed, on a shared loaded machine (speed is `guardrail bench gate`).
BUDGET_S = 10.0


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A miniature of the shapes real projects use (attrs' class hierarchy, toolz's tlz proxy, flask's module
    __getattr__ table, pluggy's private modules, a package that never imports a submodule)."""
    return write(tmp_path / "ws", {
        # attrs style: bases defined in another module of the project, re-exported by the package.
        "shapes/__init__.py": "from ._base import Base\nfrom .circle import Circle\n__all__ = ['Base', 'Circle']\n",
        "shapes/_base.py": "class Root:\n    def describe(self):\n        return 'root'\n\n\n"
                           "class Base(Root):\n    kind = 'base'\n    size: int\n\n    def area(self):\n"
                           "        return 0\n",
        "shapes/circle.py": "from ._base import Base\nfrom compiled_ext import Fast\n\n\nclass Circle(Base):\n"
                            "    def radius(self):\n        return 1\n\n\nclass Quick(Fast):\n    pass\n\n\n"
                            "class Err(ValueError):\n    pass\n\n\nCircle.patched = 1\n",
        "shapes/unused.py": "def helper():\n    return 1\n",
        # toolz's tlz: the package imports a module that installs an import hook and copies names in.
        "proxy/__init__.py": "from . import _build\n",
        "proxy/_build.py": "import sys\n\n\nclass Loader:\n    pass\n\n\nsys.meta_path.append(Loader())\n",
        # flask 3.0 style: a module __getattr__ serving one deprecated name, AttributeError for the rest.
        "webapp/__init__.py": "def __getattr__(name):\n    if name == '__version__':\n        return '3.0'\n"
                              "    if name in _OLD:\n        return None\n    raise AttributeError(name)\n\n\n"
                              "_OLD = {'escape': 1, 'Markup': 2}\n\ndef create_app():\n    return None\n",
        "table.py": "import enum\nglobals().update({'ALPHA': 1, 'BETA': 2})\n\n\n@enum.global_enum\n"
                    "class Flag(enum.IntFlag):\n    GAMMA = 4\n",
        "tests/test_things.py": "import pytest\n\n\nclass TestBase:\n    def test_inherited(self):\n        pass\n\n\n"
                                "class TestChild(TestBase):\n    def test_own(self):\n        pass\n\n\n"
                                "@pytest.mark.parametrize('value', ['small', 'large', 3])\n"
                                "def test_sizes(value):\n    pass\n\n\n"
                                "@pytest.mark.parametrize('a,b', [(1, 2), (3, 4)], ids=['low', 'high'])\n"
                                "def test_pairs(a, b):\n    pass\n\n\n"
                                "@pytest.mark.parametrize('case', [object(), object()])\n"
                                "def test_generated(case):\n    pass\n",
        "data/notes.txt": "hello\n",
    })


def results(gate: Gate, action: dict[str, object]) -> dict[tuple[str, tuple[object, ...]], Outcome]:
    return {(r.predicate.name, r.predicate.args): r.outcome for r in gate.check(action).results}


def code(gate: Gate, source: str) -> dict[tuple[str, tuple[object, ...]], Outcome]:
    return results(gate, {"kind": "python", "code": source})


def violated(gate: Gate, command: str) -> list[str]:
    return [r.predicate.name for r in gate.check({"kind": "shell", "command": command}).violations]


@pytest.fixture
def gate(ws: Path) -> Gate:
    return Gate(ws, budget_s=BUDGET_S)


# ------------------------------------------------------------------------------------------------ classes
def test_class_attributes_resolve_through_a_project_mro(gate: Gate) -> None:
    found = code(gate, "import shapes.circle\nprint(shapes.circle.Circle.radius, shapes.circle.Circle.area, "
                       "shapes.circle.Circle.describe, shapes.circle.Circle.kind, shapes.circle.Circle.patched)")
    assert set(found.values()) == {Outcome.TRUE}
    found = code(gate, "from shapes import Circle\nprint(Circle.diameter)")
    assert found[("attribute_defined", ("shapes", "Circle.diameter"))] is Outcome.FALSE


def test_a_base_from_an_unreadable_module_makes_the_attribute_unknown(gate: Gate) -> None:
    found = code(gate, "from shapes.circle import Quick\nprint(Quick.anything)")
    assert found[("attribute_defined", ("shapes.circle", "Quick.anything"))] is Outcome.UNKNOWN


def test_builtin_bases_and_declared_fields(gate: Gate) -> None:
    found = code(gate, "from shapes.circle import Err\nfrom shapes._base import Base\n"
                       "print(Err.with_traceback, Err.nope, Base.size)")
    assert found[("attribute_defined", ("shapes.circle", "Err.with_traceback"))] is Outcome.TRUE
    assert found[("attribute_defined", ("shapes.circle", "Err.nope"))] is Outcome.FALSE
    assert found[("attribute_defined", ("shapes._base", "Base.size"))] is Outcome.UNKNOWN  # annotated only


# ------------------------------------------------------------------------------------------------ submodules
def test_a_submodule_the_package_never_imports_is_no_attribute(gate: Gate) -> None:
    found = code(gate, "import shapes\nshapes.unused.helper()")
    assert found[("attribute_defined", ("shapes", "unused.helper"))] is Outcome.FALSE
    # Imported by the package (circle) or by the same code (unused): attributes then.
    assert set(code(gate, "import shapes\nshapes.circle.Circle").values()) == {Outcome.TRUE}
    assert set(code(gate, "import shapes\nimport shapes.unused\nshapes.unused.helper()").values()) == {Outcome.TRUE}


def test_a_missing_attribute_of_a_real_submodule_is_false(gate: Gate) -> None:
    found = code(gate, "import shapes.unused\nshapes.unused.helpers()")
    assert found[("attribute_defined", ("shapes.unused", "helpers"))] is Outcome.FALSE


def test_standard_packages_keep_submodules_unknown(gate: Gate) -> None:
    found = code(gate, "import importlib\nimportlib.util.find_spec")  # often imported at start-up
    assert found[("attribute_defined", ("importlib", "util.find_spec"))] is not Outcome.FALSE


# ------------------------------------------------------------------------------------------------ dynamic modules
def test_module_getattr_serving_a_fixed_table_is_read(gate: Gate) -> None:
    found = code(gate, "from webapp import escape, create_app, Markup, render")
    assert found[("symbol_defined", ("webapp", "escape"))] is Outcome.TRUE
    assert found[("symbol_defined", ("webapp", "Markup"))] is Outcome.TRUE
    assert found[("symbol_defined", ("webapp", "render"))] is Outcome.FALSE


def test_globals_update_from_a_literal_and_global_enum_are_read(gate: Gate) -> None:
    found = code(gate, "from table import ALPHA, GAMMA, DELTA")
    assert found[("symbol_defined", ("table", "ALPHA"))] is Outcome.TRUE
    assert found[("symbol_defined", ("table", "GAMMA"))] is Outcome.TRUE
    assert found[("symbol_defined", ("table", "DELTA"))] is Outcome.FALSE


def test_stdlib_dynamic_exports_come_from_the_running_interpreter(gate: Gate) -> None:
    source = "import re, signal\nfrom re import M, S\nprint(re.IGNORECASE, signal.SIGTERM, re.MULTI)"
    report = gate.check({"kind": "python", "code": source})
    found = {(r.predicate.name, r.predicate.args): r.outcome for r in report.results}
    why = [r.message for r in report.results if r.predicate.args == ("re", "M")]
    assert found[("symbol_defined", ("re", "M"))] is Outcome.TRUE, why
    assert found[("attribute_defined", ("signal", "SIGTERM"))] is Outcome.TRUE
    assert found[("attribute_defined", ("re", "MULTI"))] is Outcome.FALSE


def test_proxy_package_names_are_unknown_not_missing(gate: Gate) -> None:
    found = code(gate, "from proxy import curry")
    assert found[("symbol_defined", ("proxy", "curry"))] is Outcome.UNKNOWN


def test_workspace_module_named_like_the_stdlib_is_never_imported(ws: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (ws / "signal.py").write_text(f"open({str(marker)!r}, 'w')\n")
    code(Gate(ws, budget_s=BUDGET_S), "import signal\nprint(signal.NOPE)")
    assert not marker.exists()


# ------------------------------------------------------------------------------------------------ guards
def test_guarded_imports_are_not_required(gate: Gate) -> None:
    for source in ("try:\n    import fast_json\nexcept ModuleNotFoundError:\n    fast_json = None\n",
                   "from contextlib import suppress\nwith suppress(ImportError):\n    import fast_json\n"):
        assert not gate.check({"kind": "python", "code": source}).hallucinated


# ------------------------------------------------------------------------------------------------ files
def test_path_literals_through_variables_join_and_division(gate: Gate, ws: Path) -> None:
    for source in ("from pathlib import Path\np = Path('data') / 'missing.txt'\nprint(p.read_text())",
                   "import os\nprint(open(os.path.join('data', 'missing.txt')).read())",
                   "name = 'data/missing.txt'\nwith open(name) as fh:\n    print(fh.read())",
                   "import numpy as np\nnp.loadtxt('data/missing.txt')"):
        report = gate.check({"kind": "shell", "command": f"python -c {source!r}".replace("\\n", "\n")})
        assert [v.predicate.args for v in report.violations] == [(str(ws / "data" / "missing.txt"),)], source
    assert not gate.check({"kind": "python", "code": "from pathlib import Path\nPath('data/notes.txt').read_text()"}
                          ).hallucinated


def test_file_operands_of_tools(gate: Gate) -> None:
    assert violated(gate, "pip install -q -r requirements-dev.txt") == ["file_exists"]
    assert violated(gate, "pytest -c missing.ini") == ["file_exists"]
    assert violated(gate, "python -m json.tool data/missing.json") == ["file_exists"]
    assert violated(gate, "python -m tokenize data/notes.txt") == []
    assert violated(gate, "python -m cProfile -s time run_me.py --flag") == ["file_exists"]


def test_directories_handed_to_file_tools(gate: Gate) -> None:
    assert violated(gate, "grep -n import shapes") == ["file_exists"]
    assert violated(gate, "grep -rn import shapes") == []
    assert violated(gate, "cat shapes") == ["file_exists"]


def test_here_strings_and_tool_arguments_are_not_paths(gate: Gate, ws: Path) -> None:
    bindir = ws.parent / "bin"
    bindir.mkdir()
    for tool in ("jq", "tr"):
        (bindir / tool).write_text("#!/bin/sh\n")
        os.chmod(bindir / tool, 0o755)
    gate = Gate(ws, budget_s=BUDGET_S, path_env=str(bindir))
    assert violated(gate, "jq -r .name <<< '{\"name\": 1}'") == []
    assert violated(gate, "jq -r .name data/missing.json") == ["file_exists"]
    assert violated(gate, "tr a-z A-Z < data/notes.txt") == []


# ------------------------------------------------------------------------------------------------ || true
def test_or_true_warns_but_never_blocks(gate: Gate) -> None:
    report = gate.check({"kind": "shell", "command": "cd nowhere && cat x.txt || true"})
    assert report.hallucinated and not report.blocking
    assert not gate.check({"kind": "shell", "command": "ls nowhere 2>/dev/null || echo missing"}).hallucinated


# ------------------------------------------------------------------------------------------------ tests and runners
def test_parametrized_ids_and_inherited_methods(gate: Gate, ws: Path) -> None:
    path = str(ws / "tests" / "test_things.py")

    def target(node: str) -> Outcome:
        found = results(gate, {"kind": "shell", "command": f"pytest 'tests/test_things.py::{node}'"})
        return found[("pytest_target_exists", (path, node))]

    assert target("TestChild::test_inherited") is Outcome.TRUE
    assert target("test_sizes[small]") is Outcome.TRUE
    assert target("test_sizes[3]") is Outcome.TRUE
    assert target("test_sizes[medium]") is Outcome.FALSE
    assert target("test_pairs[high]") is Outcome.TRUE
    assert target("test_pairs[1-2]") is Outcome.FALSE  # explicit ids replace the generated ones
    assert target("test_generated[case0]") is Outcome.UNKNOWN


def test_an_install_earlier_settles_the_runner_not_the_target(ws: Path) -> None:
    bindir = ws.parent / "pbin"
    bindir.mkdir()
    shutil.copy(os.devnull, bindir / "pip")
    os.chmod(bindir / "pip", 0o755)
    gate = Gate(ws, budget_s=BUDGET_S, path_env=str(bindir))  # pip but no pytest on this PATH
    names = violated(gate, "pip install -q pytest && pytest tests/test_things.py::test_absent")
    assert names == ["pytest_target_exists"]


def test_versioned_interpreters_missing_from_the_target_path(gate: Gate, ws: Path) -> None:
    bindir = ws.parent / "vbin"
    bindir.mkdir()
    shutil.copy(os.devnull, bindir / "python3.11")
    os.chmod(bindir / "python3.11", 0o755)
    gate = Gate(ws, budget_s=BUDGET_S, path_env=str(bindir))
    assert violated(gate, "python3.13 -c 'import sys'") == ["executable_available"]
    assert violated(gate, "pip3.12 install -q x") == ["executable_available"]
    assert violated(gate, "python3.11 -c 'import sys'") == []


def test_test_methods_inherited_from_another_module(tmp_path: Path) -> None:
    ws = write(tmp_path / "ws2", {
        "tests/__init__.py": "",
        "tests/base.py": "import unittest\n\n\nclass Shared(unittest.TestCase):\n    def test_shared(self):\n"
                         "        pass\n",
        "tests/test_child.py": "from .base import Shared\n\n\nclass TestChild(Shared):\n    def test_own(self):\n"
                               "        pass\n",
    })
    gate = Gate(ws, budget_s=BUDGET_S)
    path = str(ws / "tests" / "test_child.py")
    for node, outcome in (("TestChild::test_shared", Outcome.TRUE), ("TestChild::test_sharde", Outcome.FALSE),
                          ("TestChild::assertEqual", Outcome.TRUE)):
        found = results(gate, {"kind": "shell", "command": f"pytest tests/test_child.py::{node}"})
        assert found[("pytest_target_exists", (path, node))] is outcome, node


def test_the_import_closure_follows_file_changes(gate: Gate, ws: Path) -> None:
    source = "import shapes\nshapes.unused.helper()"
    assert code(gate, source)[("attribute_defined", ("shapes", "unused.helper"))] is Outcome.FALSE
    init = ws / "shapes" / "__init__.py"
    init.write_text(init.read_text() + "from . import unused\n")
    os.utime(init, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert code(gate, source)[("attribute_defined", ("shapes", "unused.helper"))] is Outcome.TRUE
