"""The gate benchmark's held-out projects, its target interpreter, and the case kinds added for issue 16.

The six projects of `HELD_OUT` were added before any change to the gate made on seeing them, one per
style the issue names; their first-pass figures are reported as such. The target interpreter is a
venv in the bench cache with every project (same pinned version) and its test dependencies, so a
label confirmed by execution says what the project's own tests and code do, not what the
developer's environment happens to hold.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from random import Random
from typing import Any

__all__ = ["HELD_OUT", "STYLES", "TARGET_REQUIREMENTS", "more_cases", "prepare_tree", "target_venv"]

# One project per style the issue asks for: name==version -> style.
HELD_OUT = {
    "bitarray==2.9.2": "C-extension-heavy (built in place)",
    "opentelemetry-api==1.27.0": "namespace package (src/)",
    "structlog==24.4.0": "src/ layout",
    "pluggy==1.5.0": "plugin system",
    "flask==3.0.3": "Flask-style web framework/app",
    "uncertainties==3.2.2": "scientific (numpy)",
}
STYLES = {
    "sqlparse==0.5.1": "pure Python", "toolz==0.12.1": "pure Python, proxy package (tlz)",
    "more-itertools==10.5.0": "pure Python", "six==1.16.0": "single module, import hook",
    "idna==3.10": "pure Python", "attrs==24.2.0": "src/ layout", **HELD_OUT,
}
# The target interpreter's packages (pinned as the resolver chose them on the day the projects were added).
TARGET_REQUIREMENTS = [
    "attrs==24.2.0", "bitarray==2.9.2", "blinker==1.9.0", "click==8.5.1", "Deprecated==1.3.1", "Flask==3.0.3",
    "freezegun==1.5.5", "hypothesis==6.170.17", "idna==3.10", "importlib_metadata==8.4.0", "iniconfig==2.3.1",
    "itsdangerous==2.2.0", "Jinja2==3.1.6", "MarkupSafe==3.0.4", "more-itertools==10.5.0", "numpy==2.4.6",
    "opentelemetry-api==1.27.0", "packaging==26.4", "pluggy==1.5.0", "pretend==1.0.9", "pytest==8.3.3",
    "pytest-asyncio==1.3.0", "python-dateutil==4.0.0", "simplejson==4.3.0", "six==1.16.0",
    "sortedcontainers==2.4.0", "sqlparse==0.5.1", "structlog==24.4.0", "toolz==0.12.1",
    "typing_extensions==4.16.0", "tzdata==2026.6", "uncertainties==3.2.2", "Werkzeug==3.1.9", "wrapt==2.5.2",
    "zipp==4.1.2",
]
_BUILD_IN_PLACE = {"bitarray"}  # C extensions compiled into the extracted tree, as a developer checkout has them


def target_venv(cache: Path) -> str:
    """The bench's target interpreter: a venv in `cache` holding `TARGET_REQUIREMENTS` (made on first use)."""
    digest = hashlib.sha256("\n".join([sys.version, *TARGET_REQUIREMENTS]).encode()).hexdigest()[:10]
    venv = cache / f"target-{digest}"
    python = venv / "bin" / "python"
    if not (venv / ".complete").is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *TARGET_REQUIREMENTS], check=True, timeout=1800)
        (venv / ".complete").write_text("ok\n")
    return str(python)


def prepare_tree(spec: str, target: Path, python: str) -> None:
    """Build a C-extension project's modules in place (once), so its tree is what a developer checkout holds."""
    name = spec.partition("==")[0]
    marker = target / ".gate-bench-built"
    if name in _BUILD_IN_PLACE and not marker.is_file():
        subprocess.run([python, "setup.py", "-q", "build_ext", "--inplace"], cwd=target, check=True, timeout=900,
                       capture_output=True)
        marker.write_text("ok\n")


# ------------------------------------------------------------------------------------------------ analysis
def parametrized_ids(path: Path) -> list[tuple[str, list[str]]]:
    """(test function, pytest ids) for functions with one literal `parametrize` whose ids pytest derives simply."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return []
    out: list[tuple[str, list[str]]] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
            continue
        marks = [d for d in node.decorator_list if isinstance(d, ast.Call) and ast.unparse(d.func).endswith(
            "parametrize")]
        if len(marks) != 1 or len(marks[0].args) < 2:
            continue
        mark = marks[0]
        ids = _literal_ids(mark)
        if ids:
            out.append((node.name, ids))
    return out


def _literal_ids(mark: ast.Call) -> list[str] | None:
    for keyword in mark.keywords:
        if keyword.arg == "ids":
            try:
                given = ast.literal_eval(keyword.value)
            except (ValueError, SyntaxError, TypeError):
                return None
            return [str(i) for i in given] if isinstance(given, list | tuple) and all(
                isinstance(i, str) and re.fullmatch(r"[\w.-]+", i) for i in given) else None
    try:
        values = ast.literal_eval(mark.args[1])
    except (ValueError, SyntaxError, TypeError):
        return None
    if not isinstance(values, list | tuple):
        return None
    ids: list[str] = []
    for value in values:
        parts = value if isinstance(value, tuple) else (value,)
        words = []
        for part in parts:
            if isinstance(part, bool) or not isinstance(part, str | int) or not re.fullmatch(r"[\w.-]+", str(part)):
                return None
            words.append(str(part))
        ids.append("-".join(words))
    return ids if len(set(ids)) == len(ids) else None


def class_bases(path: Path) -> dict[str, list[str]]:
    """Class name -> base expressions, for the module's top-level classes."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return {}
    return {n.name: [ast.unparse(b) for b in n.bases] for n in tree.body if isinstance(n, ast.ClassDef)}


def star_sources(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return []
    return [("." * n.level) + (n.module or "") for n in tree.body
            if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]


# ------------------------------------------------------------------------------------------------ cases
# Standard-library names exported at import time (enum members, platform constants) and invented ones.
_STDLIB_VALID = [("re", "M"), ("re", "S"), ("re", "IGNORECASE"), ("signal", "SIGTERM"), ("socket", "AF_INET"),
                 ("errno", "ENOENT"), ("os", "O_RDONLY"), ("ssl", "CERT_REQUIRED"), ("http", "HTTPStatus"),
                 ("logging", "INFO"), ("uuid", "NAMESPACE_DNS"), ("tokenize", "NAME")]
_STDLIB_FAKE = [("re", "MULTI"), ("signal", "SIGFOO"), ("socket", "AF_INET7"), ("errno", "ENOFILE"),
                ("os", "O_READ"), ("logging", "TRACE"), ("uuid", "NAMESPACE_EMAIL")]


def more_cases(add: Callable[..., None], shell: Callable[[str], dict[str, Any]], *, rng: Random, root: Path,
               cwd: str, modules: dict[str, Path], table: dict[str, tuple[set[str], dict[str, set[str]], bool]],
               pkg: str, mutations: Callable[[str], list[str]], rel_files: list[str], reldirs: list[str],
               tests: list[tuple[str, str, str | None]], python_version: tuple[int, int]) -> None:
    """The case kinds issue 16 lists as missing from the benchmark (labels still come from execution)."""

    def python(code: str) -> dict[str, Any]:
        return {"kind": "python", "code": code}

    def fake_of(name: str, taken: set[str]) -> str | None:
        return next((v for v in mutations(name) if v not in taken), None)

    # ------------------------------------------------------------ namespace: dynamic and deep modules
    dynamic = sorted(m for m in modules if table[m][2] and [n for n in table[m][0] if not n.startswith("_")])
    deep = sorted(m for m in modules if m.count(".") >= 3 and not table[m][2]
                  and [n for n in table[m][0] if not n.startswith("_")])
    for module in rng.sample(dynamic, min(3, len(dynamic))) + rng.sample(deep, min(2, len(deep))):
        names = sorted(n for n in table[module][0] if not n.startswith("_"))
        name = rng.choice(names)
        code = f"from {module} import {name}"
        add("namespace", False, shell(f'python -c "{code}"'), cwd=cwd, code=code)
        fake = fake_of(name, table[module][0])
        if fake:
            code = f"from {module} import {fake}"
            add("namespace", True, shell(f'python -c "{code}"'), cwd=cwd, code=code)
            code = f"import {module}\nprint({module}.{fake})"
            add("namespace", True, python(code), cwd=cwd, code=code)
        for source in star_sources(modules[module])[:1]:  # a name that arrives through the star import
            absolute = _absolute(source, module, modules[module].name == "__init__.py")
            if absolute in table:
                starred = sorted(n for n in table[absolute][0] if not n.startswith("_"))
                if starred:
                    code = f"import {module}\nprint({module}.{rng.choice(starred)})"
                    add("namespace", False, python(code), cwd=cwd, code=code)

    # ------------------------------------------------------------ namespace: attributes of classes
    with_classes = [(m, c, ms) for m in sorted(modules) for c, ms in sorted(table[m][1].items())
                    if not c.startswith("_") and [x for x in ms if not x.startswith("__")]]
    for module, cls, methods in rng.sample(with_classes, min(3, len(with_classes))):
        method = rng.choice(sorted(x for x in methods if not x.startswith("__")))
        code = f"import {module}\nprint({module}.{cls}.{method})"
        add("namespace", False, python(code), cwd=cwd, code=code)
        fake = fake_of(method, methods)
        if fake:
            code = f"from {module} import {cls}\nprint({cls}.{fake})"
            add("namespace", True, python(code), cwd=cwd, code=code)
    inherited: list[tuple[str, str, str]] = []
    for module in sorted(modules):
        bases = class_bases(modules[module])
        for cls, base_list in bases.items():
            for base in base_list:
                if base in table[module][1] and not cls.startswith("_"):
                    own = table[module][1].get(cls, set())
                    inherited += [(module, cls, m) for m in sorted(table[module][1][base] - own)
                                  if not m.startswith("__")]
    for module, cls, method in rng.sample(inherited, min(2, len(inherited))):
        code = f"import {module}\nprint({module}.{cls}.{method})"
        add("namespace", False, python(code), cwd=cwd, code=code)

    # ------------------------------------------------------------ namespace: submodules and their attributes
    subs = sorted(m for m in modules if m.count(".") >= 1 and m.rpartition(".")[0] in modules)
    for module in rng.sample(subs, min(3, len(subs))):
        parent = module.rpartition(".")[0]
        names = sorted(n for n in table[module][0] if not n.startswith("_"))
        if not names:
            continue
        code = f"import {parent}\nprint({module}.{rng.choice(names)})"  # runs only if the parent imports it
        add("namespace", False, python(code), cwd=cwd, code=code)

    # ------------------------------------------------------------ namespace: stdlib dynamic exports, guards
    for module, name in rng.sample(_STDLIB_VALID, 2):
        code = f"from {module} import {name}\nprint({name})"
        add("namespace", False, shell(f"python -c {shlex.quote(code)}"), cwd=cwd, code=code)
    module, name = rng.choice(_STDLIB_FAKE)
    code = f"import {module}\nprint({module}.{name})"
    add("namespace", True, shell(f"python -c {shlex.quote(code)}"), cwd=cwd, code=code)
    code = f"try:\n    import {pkg}_speedups\nexcept ImportError:\n    {pkg}_speedups = None\nimport {pkg}"
    add("namespace", False, python(code), cwd=cwd, code=code)

    # ------------------------------------------------------------ filesystem: directories, file arguments
    if reldirs:
        directory = rng.choice(reldirs)
        add("filesystem", True, shell(f"grep -n import {shlex.quote(directory)}"))
        add("filesystem", False, shell(f"grep -rn import {shlex.quote(directory)} | head -n 3"))
        add("filesystem", True, shell(f"cat {shlex.quote(directory)}"))
        add("filesystem", True, python(f"print(open({os.path.join(directory, 'notes.txt')!r}).read())"))
    py_rel = [f for f in rel_files if f.endswith(".py")]
    if py_rel:
        real = rng.choice(py_rel)
        stem, ext = os.path.splitext(real)
        add("filesystem", False, shell(f"python -m tokenize {shlex.quote(real)} | head -n 2"))
        add("filesystem", True, shell(f"python -m tokenize {shlex.quote(stem + '_old' + ext)}"))
    text = [f for f in rel_files if not f.endswith(".py")] or rel_files
    if text:
        real = rng.choice(text)
        stem, ext = os.path.splitext(real)
        code = f"from pathlib import Path\nprint(Path({real!r}).read_text()[:20])"
        add("filesystem", False, shell(f"python -c {shlex.quote(code)}"))
        code = f"from pathlib import Path\np = Path({stem + '_draft' + ext!r})\nprint(p.read_text()[:20])"
        add("filesystem", True, shell(f"python -c {shlex.quote(code)}"))
        code = f"import numpy as np\nprint(np.loadtxt({stem + '.csv'!r}))"
        add("filesystem", True, python(code))
        add("filesystem", True, shell(f"cat {shlex.quote(stem + '_v3' + ext)} || true"))
        add("filesystem", False, shell(f"cat {shlex.quote(real)} | head -n 2 || true"))
    if not (root / "requirements-test.txt").exists():
        add("filesystem", True, shell("pip install -q --no-index -r requirements-test.txt"))

    # ------------------------------------------------------------ command: versions, ids, inherited, installs
    major, minor = python_version
    add("command", False, shell(f"python{major}.{minor} -c 'import sys; print(sys.version_info[:2])'"))
    add("command", True, shell(f"python{major}.{minor + 2} -c 'import sys'"))
    add("command", True, shell(f"pip{major}.{minor + 1} --version"))
    add("command", False, shell(f"pip{major} --version"))
    collect = "python -m pytest --collect-only -q -p no:cacheprovider"
    test_files = sorted({relp for relp, _, _ in tests})
    params = [(relp, fn, ids) for relp in test_files for fn, ids in parametrized_ids(root / relp)]
    for relp, function, ids in rng.sample(params, min(2, len(params))):
        add("command", False, shell(f"{collect} '{relp}::{function}[{rng.choice(ids)}]'"))
        add("command", True, shell(f"{collect} '{relp}::{function}[{ids[0]}_missing]'"))
    inherited_tests: list[tuple[str, str, str]] = []
    for relp in test_files:
        bases = class_bases(root / relp)
        _, classes, _ = _symbols_of(root / relp)
        for cls, base_list in bases.items():
            for base in base_list:
                if base in classes and cls.startswith("Test"):
                    inherited_tests += [(relp, cls, m) for m in sorted(classes[base] - classes.get(cls, set()))
                                        if m.startswith("test")]
    for relp, cls, inherited_method in rng.sample(inherited_tests, min(2, len(inherited_tests))):
        add("command", False, shell(f"{collect} {relp}::{cls}::{inherited_method}"))
    if tests:
        relp, test, test_method = tests[-1]
        node = f"{relp}::{test}" + (f"::{test_method}" if test_method else "")
        fake_test = next(v for v in mutations(test_method or test) if v.startswith("test"))
        fake_node = f"{relp}::{test}::{fake_test}" if test_method else f"{relp}::{fake_test}"
        add("command", True, shell(f"pip install -q --no-index pytest && {collect} {fake_node}"))
        add("command", False, shell(f"pip install -q --no-index pytest && {collect} {node}"))


def _symbols_of(path: Path) -> tuple[set[str], dict[str, set[str]], bool]:
    from traces.bench.gate import _symbols

    return _symbols(path)


def _absolute(source: str, module: str, is_package: bool) -> str:
    level = len(source) - len(source.lstrip("."))
    if not level:
        return source
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
    rest = source[level:]
    return ".".join([*parts, rest] if rest else parts)


# ------------------------------------------------------------------------------------------------ mypy baseline
_MYPY_FLAGS = {"import-not-found", "attr-defined", "name-defined", "import", "misc"}


def run_mypy(cases: list[Any], roots: dict[str, Path], python: str) -> tuple[list[bool], list[float]]:
    """mypy on each namespace snippet against the target interpreter, one batch run per project (so the latency
    is the batch's wall time shared out per snippet: warm-cache, amortized). A snippet counts as flagged when mypy
    reports a missing module, attribute or name in it."""
    import tempfile
    import time

    flagged: dict[int, bool] = {}
    latency: dict[int, float] = {}
    by_project: dict[str, list[int]] = {}
    for position, case in enumerate(cases):
        by_project.setdefault(case.project, []).append(position)
    for project, positions in by_project.items():
        with tempfile.TemporaryDirectory(prefix="gate-mypy-") as tmp:
            files = []
            for position in positions:
                path = Path(tmp) / f"gate_case_{position}.py"
                path.write_text(cases[position].code or "")
                files.append(str(path))
            cwd = roots[project] / cases[positions[0]].cwd
            env = {**os.environ, "MYPYPATH": str(cwd)}
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "mypy", "--python-executable", python,
                                   "--follow-imports=silent", "--no-error-summary", "--show-error-codes",
                                   "--cache-dir", str(Path(tmp) / ".cache"), *files],
                                  cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
            elapsed = (time.perf_counter() - started) * 1000.0
        for position in positions:
            latency[position] = elapsed / len(positions)
            flagged[position] = False
        for line in proc.stdout.splitlines():
            match = re.match(r".*gate_case_(\d+)\.py:\d+: error: .*\[([\w-]+)\]$", line)
            if match and match.group(2) in _MYPY_FLAGS:
                flagged[int(match.group(1))] = True
    return [flagged[i] for i in range(len(cases))], [latency[i] for i in range(len(cases))]


# ------------------------------------------------------------------------------------------------ pyright baseline
_PYRIGHT_RULES = {"reportMissingImports", "reportAttributeAccessIssue", "reportUndefinedVariable"}


def pyright_available() -> str | None:
    """Why pyright cannot run here (its PyPI wrapper needs node and the npm registry once), or None."""
    import shutil

    if shutil.which("pyright") is None and not (Path(sys.executable).parent / "pyright").exists():
        return "pyright is not installed (pip install pyright)"
    try:
        proc = subprocess.run([_pyright(), "--version"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"pyright does not start: {exc}"
    return None if proc.returncode == 0 else f"pyright does not start: {proc.stderr.strip()[-200:]}"


def _pyright() -> str:
    local = Path(sys.executable).parent / "pyright"
    return str(local) if local.exists() else "pyright"


def run_pyright(cases: list[Any], roots: dict[str, Path], python: str) -> tuple[list[bool], list[float]]:
    """pyright on each namespace snippet against the target interpreter (one batch per project, amortized
    latency, like the mypy baseline); flagged when it reports a missing import, attribute or name."""
    import json
    import tempfile
    import time

    flagged: dict[int, bool] = {}
    latency: dict[int, float] = {}
    by_project: dict[str, list[int]] = {}
    for position, case in enumerate(cases):
        by_project.setdefault(case.project, []).append(position)
    for project, positions in by_project.items():
        with tempfile.TemporaryDirectory(prefix="gate-pyright-") as tmp:
            files = []
            for position in positions:
                path = Path(tmp) / f"gate_case_{position}.py"
                path.write_text(cases[position].code or "")
                files.append(str(path))
            cwd = roots[project] / cases[positions[0]].cwd
            version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                     capture_output=True, text=True, timeout=60).stdout.strip()
            (Path(tmp) / "pyrightconfig.json").write_text(json.dumps({
                "extraPaths": [str(cwd)], "pythonVersion": version, "reportMissingModuleSource": False}))
            started = time.perf_counter()
            proc = subprocess.run([_pyright(), "--pythonpath", python, "--outputjson", *files], cwd=tmp,
                                  capture_output=True, text=True, timeout=900)
            elapsed = (time.perf_counter() - started) * 1000.0
        for position in positions:
            latency[position] = elapsed / len(positions)
            flagged[position] = False
        try:
            diagnostics = json.loads(proc.stdout).get("generalDiagnostics", [])
        except json.JSONDecodeError:
            diagnostics = []
        for diagnostic in diagnostics:
            match = re.search(r"gate_case_(\d+)\.py$", str(diagnostic.get("file", "")))
            if match and diagnostic.get("severity") == "error" and diagnostic.get("rule") in _PYRIGHT_RULES:
                flagged[int(match.group(1))] = True
    return [flagged[i] for i in range(len(cases))], [latency[i] for i in range(len(cases))]
