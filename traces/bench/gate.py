"""`guardrail bench gate`: the gate against execution-confirmed labels on real projects downloaded from PyPI.

Builds labelled actions from each project's real modules, names, files and tests (valid ones and
plausible hallucinations: typo'd or invented names, missing files, tests and executables, plus the
tricky valid cases: files created earlier in the same command, heredocs, `||` probes, re-exports).
Every shell and Python label is confirmed by running the action in a throwaway copy of the project
and classifying the error; ACI and editor-tool labels come from their construction (no harness here).
The gate is compared in the same run with an action-only baseline (every extracted predicate
counts as a hallucination) and, for the namespace family, a jedi resolver.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table, progress
from guardrail.core.fileio import atomic_write_text
from traces.bench.gate_more import (
    HELD_OUT,
    STYLES,
    more_cases,
    prepare_tree,
    pyright_available,
    run_mypy,
    run_pyright,
    target_venv,
)

__all__ = ["BENCH", "PROJECTS", "Case", "bench_cases", "build_cases", "confirm_label"]

# Pinned pure-Python projects whose sdists ship their tests.
PROJECTS = ["sqlparse==0.5.1", "toolz==0.12.1", "more-itertools==10.5.0", "six==1.16.0", "idna==3.10",
            "attrs==24.2.0"]
FAMILIES = ("namespace", "filesystem", "command", "harness")
_POSITIVE_ERRORS = re.compile(
    r"ModuleNotFoundError|ImportError|No module named|cannot import name|FileNotFoundError|"
    r"No such file or directory|command not found|ERROR: not found|file or directory not found|"
    r"AttributeError: module|Is a directory|Not a directory|can't open file|no tests ran.*not found|"
    r"Error while finding module specification|AttributeError: type object|Could not open requirements file|"
    r"not a regular file")
_HABIT = re.compile(r"\|\|\s*(true|:)\s*$")
_FAKE_SUBMODULES = ["utils_ext", "helpers2", "compat3", "core_impl", "internal_api"]
_PLAUSIBLE_FAKES = ["Client", "parse_all", "Config", "load_all", "format_all", "Registry", "run_main", "Pipeline"]


@dataclass
class Case:
    """One labelled action on one project."""

    id: str
    project: str
    family: str
    intended: bool  # what the generator meant (a hallucination or not)
    action: dict[str, Any]
    cwd: str = "."  # relative to the project root
    open_file: str | None = None  # relative to the project root
    code: str | None = None  # the Python code of a namespace case (for the jedi baseline)
    label: bool | None = None  # confirmed by execution (or by construction for ACI/editor actions)
    label_source: str = "construction"
    label_evidence: str = ""


# ------------------------------------------------------------------------------------------------ projects
def fetch_project(spec: str, cache: Path) -> Path:
    """The extracted source tree of a pinned sdist, downloaded into `cache` on first use."""
    name, _, version = spec.partition("==")
    src_root = cache / "src"
    sdists = cache / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    stem = "[-_.]".join(re.escape(part) for part in re.split(r"[-_.]", name))
    pattern = re.compile(rf"^{stem}-{re.escape(version)}\.(tar\.gz|zip)$", re.I)
    archive = next((p for p in sdists.iterdir() if pattern.match(p.name)), None)
    if archive is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        spec, "-d", str(sdists)], check=True, timeout=300)
        archive = next(p for p in sdists.iterdir() if pattern.match(p.name))
    target = src_root / archive.name.removesuffix(".tar.gz").removesuffix(".zip")
    if not target.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix="extract-", dir=cache))
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        (inner,) = list(tmp.iterdir())
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(inner, target)
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _symbols(path: Path) -> tuple[set[str], dict[str, set[str]], bool]:
    """Top-level names, classes -> methods, and whether the module is dynamic (no fakes from it)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return set(), {}, True
    names: set[str] = set()
    classes: dict[str, set[str]] = {}
    dynamic = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            dynamic = True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "exec"):
            dynamic = True
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            classes[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).partition(".")[0] for a in node.names if a.name != "*")
    return names, classes, dynamic or "__getattr__" in names


def _mutations(name: str) -> list[str]:
    variants = [name + "s", name[:-1] if len(name) > 3 else name + "_x", "get_" + name, name + "_all",
                name.swapcase(), name.replace("_", "") if "_" in name else name + "2"]
    return [v for v in variants if v.isidentifier() and v != name]


def project_modules(root: Path) -> tuple[Path, dict[str, Path]]:
    """The import root (src/ or the project root) and the project's modules, dotted name -> file."""
    base = root / "src" if (root / "src").is_dir() else root
    skip_parts = {"tests", "test", "testing", "docs", "doc", "examples", "benchmarks", "build"}
    modules: dict[str, Path] = {}
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base)
        # Private modules (pluggy._hooks, attr._make) are kept: agents import them; dunder modules are not.
        if any(p in skip_parts or p.startswith((".", "__")) and p != "__init__.py" for p in rel.parts) or \
                rel.name.startswith(("test_", "conftest", "setup")) or \
                not all(p.isidentifier() for p in rel.with_suffix("").parts):
            continue
        # Any depth; a directory without __init__.py is a namespace package under src/ (opentelemetry's style).
        if len(rel.parts) > 1 and not (base / rel.parts[0] / "__init__.py").is_file() and base.name != "src":
            continue
        dotted = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        modules[dotted] = path
    return base, modules


def build_cases(root: Path, project: str, *, seed: int = 0, python_version: tuple[int, int] | None = None,
                ) -> list[Case]:
    """Labelled actions built from the project's real modules, names, files and tests."""
    rng = random.Random(f"{seed}:{project}")
    cases: list[Case] = []
    base, modules = project_modules(root)
    cwd = os.path.relpath(base, root)
    if not modules:
        return []
    packages = sorted(m for m in modules if "." not in m)
    pkg = packages[0] if packages else next(iter(modules)).partition(".")[0]
    table = {m: _symbols(p) for m, p in modules.items()}
    usable = [m for m in sorted(modules) if not table[m][2]
              and [n for n in table[m][0] if not n.startswith("_")]]
    rng.shuffle(usable)
    n_id = iter(range(10_000))

    def add(family: str, intended: bool, action: dict[str, Any], **extra: Any) -> None:
        cases.append(Case(id=f"{project}-{next(n_id):03d}", project=project, family=family, intended=intended,
                          action=action, **extra))

    def shell(command: str) -> dict[str, Any]:
        return {"kind": "shell", "command": command}

    # ---------------------------------------------------------------- I namespace
    for module in usable[:4]:
        names = sorted(n for n in table[module][0] if not n.startswith("_"))
        name = rng.choice(names)
        fake = next((v for v in _mutations(name) if v not in table[module][0]), None)
        code = f"from {module} import {name}"
        add("namespace", False, shell(f'python -c "{code}"'), cwd=cwd, code=code)
        if fake:
            code = f"from {module} import {fake}"
            add("namespace", True, shell(f'python -c "{code}"'), cwd=cwd, code=code)
        other = rng.choice(names)
        code = f"import {module}\nprint({module}.{other})"
        add("namespace", False, {"kind": "python", "code": code}, cwd=cwd, code=code)
        fake2 = next((v for v in reversed(_mutations(other)) if v not in table[module][0]), None)
        if fake2:
            code = f"import {module}\nprint({module}.{fake2})"
            add("namespace", True, {"kind": "python", "code": code}, cwd=cwd, code=code)
    code = f"import {pkg}"
    add("namespace", False, shell(f"python -c '{code}'"), cwd=cwd, code=code)
    code = f"import {pkg}_extras"
    add("namespace", True, shell(f"python -c '{code}'"), cwd=cwd, code=code)
    if pkg in table:
        fake_sub = next(s for s in _FAKE_SUBMODULES if f"{pkg}.{s}" not in modules)
        code = f"import {pkg}.{fake_sub}"
        add("namespace", True, shell(f"python -c '{code}'"), cwd=cwd, code=code)
        invented = [f for f in _PLAUSIBLE_FAKES if f not in table[pkg][0]]
        for fake in rng.sample(invented, 2):
            code = f"from {pkg} import {fake}\nprint({fake})"
            add("namespace", True, {"kind": "python", "code": code}, cwd=cwd, code=code)
        reexports = sorted(n for n in table[pkg][0] if not n.startswith("_") and n[0].isalpha())
        for name in rng.sample(reexports, min(2, len(reexports))):
            code = f"from {pkg} import {name}"
            add("namespace", False, shell(f"python - <<'EOF'\n{code}\nEOF"), cwd=cwd, code=code)
    if len(usable) > 1:
        module = usable[1]
        name = sorted(n for n in table[module][0] if not n.startswith("_"))[0]
        fake = next((v for v in _mutations(name) if v not in table[module][0]), name + "_zz")
        code = f"from {module} import {fake}"
        add("namespace", True, shell(f"cat > repro_case.py <<'EOF'\n{code}\nEOF\npython repro_case.py"),
            cwd=cwd, code=code)
        code = f"from {module} import {name}"
        add("namespace", False, shell(f"cat > repro_ok.py <<'EOF'\n{code}\nEOF\npython repro_ok.py"),
            cwd=cwd, code=code)

    # ---------------------------------------------------------------- II filesystem
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts and p.stat().st_size > 0
                   and p.suffix in (".py", ".txt", ".rst", ".md", ".cfg", ".toml", ".ini", ".in"))
    dirs = sorted({p.parent for p in files if p.parent != root})
    rel_files = [str(p.relative_to(root)) for p in files]
    reldirs = [str(d.relative_to(root)) for d in dirs]
    picks = rng.sample(rel_files, min(4, len(rel_files)))
    for pick in picks[:2]:
        add("filesystem", False, shell(f"cat {shlex.quote(pick)} | head -n 3"))
    add("filesystem", False, shell(f"wc -l {shlex.quote(picks[-1])}"))
    if reldirs:
        d = rng.choice(reldirs)
        add("filesystem", False, shell(f"cd {shlex.quote(d)} && ls"))
        add("filesystem", False, shell(f"ls {shlex.quote(d)}"))
        add("filesystem", True, shell(f"cd {shlex.quote(d + '_old')} && ls"))
        add("filesystem", True, shell(f"ls {shlex.quote(os.path.join(d, 'fixtures'))}"))
    add("filesystem", False, {"kind": "python", "code": f"print(open({picks[0]!r}).read()[:20])"})
    for pick in picks[1:3]:
        stem, ext = os.path.splitext(pick)
        add("filesystem", True, shell(f"head -n 5 {shlex.quote(stem + '_v2' + ext)}"))
    add("filesystem", True, shell("python reproduce.py"))
    add("filesystem", True, shell("python scripts/reproduce_issue.py"))
    add("filesystem", True, {"kind": "python", "code": "import json\nprint(json.load(open('config.json')))"})
    add("filesystem", True, shell(f"grep -n import {shlex.quote(os.path.join(os.path.dirname(picks[0]), 'main.py'))}"))
    # Tricky valid: made earlier in the same command, or probed with ||.
    add("filesystem", False, shell("echo 'print(1)' > tmp_check.py && python tmp_check.py"))
    add("filesystem", False, shell("mkdir -p build_tmp/x && cd build_tmp/x && touch a.txt && cat a.txt"))
    add("filesystem", False, shell("ls no_such_dir_here 2>/dev/null || echo missing"))
    add("filesystem", False, shell(f"cp {shlex.quote(picks[0])} copy.bak && cat copy.bak | head -n 1"))

    # ---------------------------------------------------------------- III command and tests
    tests: list[tuple[str, str, str | None]] = []
    for path in sorted(root.rglob("test_*.py")):
        test_names, classes, _ = _symbols(path)
        relp = str(path.relative_to(root))
        tests += [(relp, n, None) for n in sorted(test_names) if n.startswith("test")]
        tests += [(relp, c, m) for c, ms in sorted(classes.items()) if c.startswith("Test")
                  for m in sorted(ms) if m.startswith("test")]
    rng.shuffle(tests)
    collect = "python -m pytest --collect-only -q -p no:cacheprovider"
    for relp, name, method in tests[:3]:
        node = f"{relp}::{name}" + (f"::{method}" if method else "")
        add("command", False, shell(f"{collect} {node}"))
        fake = next(v for v in _mutations(method or name) if v.startswith("test"))
        fake_node = f"{relp}::{name}::{fake}" if method else f"{relp}::{fake}"
        add("command", True, shell(f"{collect} {fake_node}"))
    if tests:
        relp = tests[0][0]
        add("command", True, shell(f"{collect} {os.path.join(os.path.dirname(relp), 'test_integration_new.py')}"))
    add("command", True, shell("pytset -q"))
    add("command", True, shell(f"python -m {pkg}.cli_main --help"))
    add("command", False, shell("python -m json.tool --help"))
    add("command", False, shell("ls -la | head -n 2"))
    more_cases(add, shell, rng=rng, root=root, cwd=cwd, modules=modules, table=table, pkg=pkg, mutations=_mutations,
               rel_files=rel_files, reldirs=reldirs, tests=tests,
               python_version=python_version or (sys.version_info[0], sys.version_info[1]))

    # ---------------------------------------------------------------- IV harness (labels by construction)
    py_files = [p for p in files if p.suffix == ".py" and len(p.read_text(errors="replace").splitlines()) > 5]
    chosen = rng.sample(py_files, min(3, len(py_files)))
    for path in chosen:
        relp = str(path.relative_to(root))
        lines = path.read_text(errors="replace").splitlines()
        count = len(lines)
        add("harness", False, {"kind": "swe_agent", "command": f"open {relp} {rng.randint(1, count)}"})
        add("harness", True, {"kind": "swe_agent", "command": f"open {relp} {count + 50}"})
        add("harness", False, {"kind": "swe_agent", "command": f"goto {rng.randint(1, count)}"}, open_file=relp)
        unique = next((ln for ln in lines if ln.strip() and len(ln) > 12 and lines.count(ln) == 1), None)
        absolute = str(root / relp)
        if unique:
            add("harness", False, {"kind": "tool", "tool": "str_replace_editor", "args": {
                "command": "str_replace", "path": absolute, "old_str": unique, "new_str": unique + "  # x"}})
            add("harness", True, {"kind": "tool", "tool": "str_replace_editor", "args": {
                "command": "str_replace", "path": absolute, "old_str": unique.replace(" ", "  ", 1) + "x",
                "new_str": "pass"}})
        add("harness", False, {"kind": "tool", "tool": "str_replace_editor", "args": {
            "command": "view", "path": absolute, "view_range": [1, min(count, 5)]}})
        add("harness", True, {"kind": "tool", "tool": "str_replace_editor", "args": {
            "command": "view", "path": absolute, "view_range": [count + 10, count + 20]}})
    add("harness", True, {"kind": "swe_agent", "command": "goto 5"})
    add("harness", True, {"kind": "swe_agent", "command": "scroll_down"})
    add("harness", True, {"kind": "swe_agent", "command": 'search_file "def" 100 200'})
    add("harness", False, {"kind": "swe_agent", "command": f"search_dir import {reldirs[0] if reldirs else '.'}"})
    add("harness", True, {"kind": "swe_agent", "command": "find_file setup.py lib"})
    add("harness", True, {"kind": "swe_agent", "command": f"create {rel_files[0]}"})
    add("harness", False, {"kind": "swe_agent", "command": "create new_module_x.py"})
    add("harness", True, {"kind": "swe_agent", "command": "open src/nothing/here.py"})
    return cases


# ------------------------------------------------------------------------------------------------ labels
def confirm_label(case: Case, root: Path, python: str, *, timeout_s: float = 240.0) -> tuple[bool | None, str]:
    """Run the action in a throwaway copy of the project and classify the error it raises, if any."""
    env = {"PATH": os.pathsep.join([os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"]),
           "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8"}
    with tempfile.TemporaryDirectory(prefix="gate-bench-") as tmp:
        copy = Path(tmp) / "proj"
        shutil.copytree(root, copy, symlinks=True)
        env["HOME"] = tmp
        cwd = copy / case.cwd
        if case.action["kind"] == "python":
            argv = [python, "-c", case.action["code"]]
        else:
            argv = ["bash", "-c", case.action["command"]]
        try:
            proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s,
                                  errors="replace")
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout_s:.0f} s: unconfirmed, left out of the scores"
    output = proc.stdout[-4000:] + proc.stderr[-4000:]
    match = _POSITIVE_ERRORS.search(output) if proc.returncode != 0 or "ERROR: not found" in output else None
    if match is None and proc.returncode == 0 and _HABIT.search(str(case.action.get("command", ""))):
        # `X || true`: the exit status hides the failure, the error on stderr still says X's belief was wrong.
        match = _POSITIVE_ERRORS.search(proc.stderr[-4000:])
    if match is None and proc.returncode in (4, 5) and "not found" in output:
        match = re.search("not found", output)
    if match is None and _pytest_broken(case, proc.returncode):
        return None, f"rc={proc.returncode}: pytest could not run in this environment; unconfirmed, left out"
    return match is not None, (match.group(0) if match else f"rc={proc.returncode}")


def _pytest_broken(case: Case, returncode: int) -> bool:
    """pytest exited with an internal (3) or usage (4) error that names no missing target: the project's
    pytest configuration does not run here, so the target's existence was never tested."""
    return returncode in (3, 4) and "pytest" in str(case.action.get("command", ""))


def _case_key(case: Case, python: str) -> str:
    blob = json.dumps([case.project, case.cwd, case.action, python], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def label_cases(cases: list[Case], roots: dict[str, Path], python: str, cache: Path, *, workers: int = 2,
                show: bool = True) -> int:
    """Confirm shell/Python labels by execution (cached on disk); returns how many disagreed with intent."""
    store = cache / "labels.json"
    known: dict[str, Any] = {}
    if store.is_file():
        try:
            known = json.loads(store.read_text())
        except (OSError, json.JSONDecodeError):
            known = {}
    todo = [c for c in cases if c.action["kind"] in ("shell", "python")
            and str(known.get(_case_key(c, python), {"evidence": "timed out"}).get("evidence", "")).startswith(
                "timed out")]  # new, or timed out last time

    def run(case: Case) -> tuple[str, bool | None, str]:
        label, evidence = confirm_label(case, roots[case.project], python)
        return _case_key(case, python), label, evidence

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for key, label, evidence in progress(pool.map(run, todo), desc="executing actions", total=len(todo),
                                             enabled=show):
            known[key] = {"label": label, "evidence": evidence}
    if todo:
        atomic_write_text(store, json.dumps(known, indent=0, sort_keys=True))
    disagreements = 0
    for case in cases:
        if case.action["kind"] in ("shell", "python"):
            entry = known[_case_key(case, python)]
            case.label, case.label_evidence, case.label_source = entry["label"], entry["evidence"], "execution"
            rc = re.fullmatch(r"rc=(\d+)", str(entry["evidence"]))
            if rc and not case.label and _pytest_broken(case, int(rc.group(1))):
                case.label = None  # cached before this rule: same verdict as confirm_label gives now
                case.label_evidence = f"rc={rc.group(1)}: pytest could not run in this environment; unconfirmed"
        else:
            case.label = case.intended
        disagreements += case.label is not None and case.label != case.intended
    return disagreements


# ------------------------------------------------------------------------------------------------ methods
def _gate_for(root: Path, python: str, backend: Any = None) -> Any:
    from guardrail.gate.layer import Gate

    return Gate(root, python=python, path_env=os.pathsep.join([os.path.dirname(python), "/usr/local/bin",
                                                               "/usr/bin", "/bin"]), backend=backend)


def _state(case: Case, root: Path) -> Any:
    from guardrail.gate.layer import EditorState, GateState

    return GateState(cwd=str(root / case.cwd), editor=EditorState(str(root / case.open_file) if case.open_file
                                                                 else None))


def run_statemirror(cases: list[Case], roots: dict[str, Path], python: str,
                    passes: dict[str, Any] | None = None) -> tuple[list[bool], list[float]]:
    """The gate's verdicts and warm latencies (a first pass warms the caches; `passes`, when given, gets the first
    pass's verdicts, how many decisions of each pass ran past their budget, and the cold work waited for)."""
    gates = {name: _gate_for(root, python) for name, root in roots.items()}
    started = time.perf_counter()
    for gate in gates.values():  # what a Guard does when it starts, before the agent's first action comes
        gate.wait_warm(120)
    warm_s = time.perf_counter() - started
    first, first_budget, cold, over = [], 0, [], []
    for case in cases:  # warm-up pass: the figures below are warm-cache latencies
        report = gates[case.project].check(case.action, _state(case, roots[case.project]))
        first.append(report.hallucinated)
        first_budget += report.budget_exceeded
        cold.append(report.cold_ms)
        if report.budget_exceeded:
            over.append(case.id)
    predictions, latencies, budget_hits = [], [], 0
    for case in cases:
        state = _state(case, roots[case.project])
        started = time.perf_counter()
        report = gates[case.project].check(case.action, state)
        report.findings(layer="gate")  # what the Guard layer pays: the typed warnings and their hints, too
        latencies.append((time.perf_counter() - started) * 1000.0)
        predictions.append(report.hallucinated)
        budget_hits += report.budget_exceeded
    if passes is not None:
        passes.update(first=first, first_budget_exceeded=first_budget, budget_exceeded=budget_hits,
                      cold_max_ms=round(max(cold, default=0.0), 1), cold_decisions=sum(c > 0 for c in cold),
                      first_budget_cases=over[:20], warm_up_s=round(warm_s, 2))
    return predictions, latencies


def clear_caches() -> None:
    """Empty every cache a gate keeps in this process (a fresh process, as far as the gate can tell)."""
    from guardrail.gate import fsview, parse_worker, probe
    from guardrail.gate import index as index_module

    for cache in (index_module._TARGETS, index_module._SYMBOLS, index_module._STDLIB_NAMES, fsview._LISTINGS,
                  probe._LINES, probe._FILES):
        cache.clear()
    worker = parse_worker._WORKER
    if worker is not None:
        worker._results.clear()


@contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """`count` busy-loop processes running for the duration of the block (the loaded-machine figures)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
             for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait(timeout=10)


def evaluate(cases: list[Case], roots: dict[str, Path], python: str, *, busy: int = 0) -> dict[str, Any]:
    """One full run of the gate on the cases from a cold start (empty caches, a fresh warm-symbol directory), with
    `busy` busy-loop processes alongside; what `summarize` needs plus the per-pass counts."""
    clear_caches()
    passes: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gate-bench-warm-", ignore_cleanup_errors=True) as warm_dir, \
            busy_loops(busy):
        saved = os.environ.get("GUARDRAIL_CACHE_DIR")
        os.environ["GUARDRAIL_CACHE_DIR"] = warm_dir
        try:
            predictions, latencies = run_statemirror(cases, roots, python, passes)
            cold_new_workspace, cold_interpreter = cold_latency(cases, roots, python)
        finally:
            if saved is None:
                os.environ.pop("GUARDRAIL_CACHE_DIR", None)
            else:
                os.environ["GUARDRAIL_CACHE_DIR"] = saved
    return {"predictions": predictions, "latencies": latencies, "cold": cold_new_workspace,
            "cold_interpreter": cold_interpreter, "load_average": round(os.getloadavg()[0], 2), **passes}


def cold_latency(cases: list[Case], roots: dict[str, Path], python: str) -> tuple[float, float]:
    """First-action latency on a fresh copy of each project (median ms; the interpreter's sys.path answer and
    its stdlib/site-packages ASTs may be cached from earlier actions), and once with every cache emptied."""
    from guardrail.gate import index as index_module

    fresh: list[float] = []
    fully_cold = float("nan")
    for position, (name, root) in enumerate(roots.items()):
        first = next(c for c in cases if c.project == name and c.family == "namespace")
        with tempfile.TemporaryDirectory(prefix="gate-cold-") as tmp:
            copy = Path(tmp) / "proj"
            shutil.copytree(root, copy, symlinks=True)
            if position == 0:  # fully cold once: no sys.path answer, no listing, AST or line-count cache
                from guardrail.gate import fsview, probe

                for cache in (index_module._TARGETS, index_module._SYMBOLS, fsview._LISTINGS, probe._LINES,
                              probe._FILES):
                    cache.clear()
            started = time.perf_counter()
            gate = _gate_for(copy, python)
            gate.check(first.action, _state(first, copy)).findings(layer="gate")
            elapsed = (time.perf_counter() - started) * 1000.0
            if position == 0:
                fully_cold = elapsed
            else:
                fresh.append(elapsed)
    return (statistics.median(fresh) if fresh else fully_cold), fully_cold


def run_action_only(cases: list[Case], roots: dict[str, Path], python: str) -> tuple[list[bool], list[float]]:
    from guardrail.gate.index import target_python
    from guardrail.gate.normalize import ActionError, extract, normalize_action
    from guardrail.gate.scope import Scope

    version = target_python(python).version
    predictions, latencies = [], []
    for case in cases:
        root = roots[case.project]
        started = time.perf_counter()
        try:
            action = normalize_action(case.action)
            scope = Scope(cwd=str(root / case.cwd), workspace=str(root))
            open_file = str(root / case.open_file) if case.open_file else None
            predicates = extract(action, scope, open_file=open_file, schemas={}, python_version=version)
        except ActionError:
            predicates = []
        predictions.append(bool(predicates))
        latencies.append((time.perf_counter() - started) * 1000.0)
    return predictions, latencies


def jedi_hallucinated(code: str, cwd: Path, python: str) -> bool:
    """Whether jedi fails to resolve a name the code imports or reads from an imported module."""
    import jedi

    project = jedi.Project(str(cwd), environment_path=python, added_sys_path=[str(cwd)], smart_sys_path=False)
    script = jedi.Script(code, path=str(cwd / "_gate_bench_case.py"), project=project)
    tree = ast.parse(code)
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules.add(alias.asname or alias.name)
                line = code.splitlines()[node.lineno - 1]
                column = line.index(alias.name) + len(alias.name) - 1
                if not script.goto(node.lineno, column, follow_imports=True):
                    return True
        elif isinstance(node, ast.ImportFrom) and node.module:
            line = code.splitlines()[node.lineno - 1]
            for alias in node.names:
                column = line.rindex(alias.name)
                if not script.goto(node.lineno, column, follow_imports=True):
                    return True
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute | ast.Name):
            if ast.unparse(node.value) in modules:
                if not script.goto(node.end_lineno or node.lineno, (node.end_col_offset or 1) - 1):
                    return True
    return False


def run_jedi(cases: list[Case], roots: dict[str, Path], python: str) -> tuple[list[bool], list[float]]:
    predictions, latencies = [], []
    for case in cases:
        started = time.perf_counter()
        try:
            predicted = jedi_hallucinated(case.code or "", roots[case.project] / case.cwd, python)
        except Exception:  # noqa: BLE001 - a resolver crash counts as "no finding"
            predicted = False
        predictions.append(predicted)
        latencies.append((time.perf_counter() - started) * 1000.0)
    return predictions, latencies


# ------------------------------------------------------------------------------------------------ metrics
def scores(labels: Iterable[bool], predictions: Iterable[bool]) -> dict[str, float | int]:
    pairs = list(zip(labels, predictions, strict=True))
    tp = sum(1 for y, p in pairs if y and p)
    fp = sum(1 for y, p in pairs if not y and p)
    fn = sum(1 for y, p in pairs if y and not p)
    tn = len(pairs) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4),
            "accuracy": round((tp + tn) / len(pairs), 4) if pairs else 0.0, "n": len(pairs),
            "tp": tp, "fp": fp, "fn": fn, "tn": tn}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _block(cases: list[Case], predictions: list[bool], idx: list[int]) -> dict[str, Any]:
    """Scores of the cases at `idx`, overall and per family."""
    labels = [bool(cases[i].label) for i in idx]
    guesses = [predictions[i] for i in idx]
    out: dict[str, Any] = scores(labels, guesses)
    out["per_family"] = {family: scores([bool(cases[i].label) for i in idx if cases[i].family == family],
                                        [predictions[i] for i in idx if cases[i].family == family])
                         for family in FAMILIES if any(cases[i].family == family for i in idx)}
    return out


def summarize(method: str, cases: list[Case], predictions: list[bool], latencies: list[float],
              cold_ms: float | None) -> dict[str, Any]:
    """The headline is the execution-labelled cases; the construction-labelled harness family is reported apart,
    and so are the held-out projects (added before any change made on seeing them) and each project."""
    executed = [i for i, c in enumerate(cases) if c.label_source == "execution"]
    constructed = [i for i, c in enumerate(cases) if c.label_source != "execution"]
    head = _block(cases, predictions, executed)
    result: dict[str, Any] = {
        "method": method, **{k: head[k] for k in ("precision", "recall", "f1", "accuracy")},
        "median_ms": round(statistics.median(latencies), 4), "p95_ms": round(_percentile(latencies, 0.95), 4),
        "p99_ms": round(_percentile(latencies, 0.99), 4), "cold_ms": None if cold_ms is None else round(cold_ms, 3),
        "n": head["n"], "labels": "execution", "per_family": head["per_family"],
    }
    held = [i for i in executed if cases[i].project in HELD_OUT]
    development = [i for i in executed if cases[i].project not in HELD_OUT]
    if held:
        result["held_out"] = _block(cases, predictions, held)
    if held and development:
        result["development"] = _block(cases, predictions, development)
    if constructed:
        result["construction"] = _block(cases, predictions, constructed)
    result["per_project"] = {
        project: {"style": STYLES.get(project, "local"), **_block(cases, predictions,
                                                                  [i for i in executed if cases[i].project == project])}
        for project in dict.fromkeys(c.project for c in cases)}
    return result


# ------------------------------------------------------------------------------------------------ command
def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per method")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/guardrail/bench-gate"),
                        help="where sdists, extracted trees and execution labels are kept (outside the repo)")
    parser.add_argument("--project", action="append", default=None,
                        help="NAME==VERSION to download (repeatable; default: the pinned set)")
    parser.add_argument("--project-dir", action="append", default=None,
                        help="a local project tree to use instead of downloading (repeatable; no network)")
    parser.add_argument("--python", default=None,
                        help="the target interpreter the actions run under (default: a venv in the cache with every "
                             "project and its test dependencies; this interpreter with --project-dir)")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N cases per project")
    parser.add_argument("--workers", type=int, default=2, help="parallel executions for label confirmation")
    parser.add_argument("--no-jedi", action="store_true", help="skip the jedi baseline")
    parser.add_argument("--no-mypy", action="store_true", help="skip the mypy baseline (namespace family)")
    parser.add_argument("--no-pyright", action="store_true", help="skip the pyright baseline (namespace family)")
    parser.add_argument("--cases-out", help="write the labelled cases (JSONL) here for inspection")
    parser.add_argument("--busy", type=int, default=2,
                        help="run the gate a second time with this many busy-loop processes alongside (0: skip)")


def bench_cases(args: argparse.Namespace) -> tuple[list[Case], list[Case], dict[str, Path], int]:
    """The benchmark's labelled cases from `args` (as `_add_arguments` defines them; sets ``args.python``):
    (confirmed cases, unconfirmed cases, project roots, label/intent disagreements)."""
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    roots: dict[str, Path] = {}
    if args.project_dir:
        args.python = args.python or sys.executable
        for directory in args.project_dir:
            roots[Path(directory).name] = Path(directory).resolve()
    else:
        args.python = args.python or target_venv(cache)
        for spec in args.project or [*PROJECTS, *HELD_OUT]:
            roots[spec] = fetch_project(spec, cache)
            prepare_tree(spec, roots[spec], args.python)
    from guardrail.gate.index import target_python

    version = target_python(args.python).version
    cases: list[Case] = []
    for name, root in roots.items():
        built = build_cases(root, name, python_version=(version[0], version[1]))
        cases += built[: args.limit] if args.limit else built
    disagreements = label_cases(cases, roots, args.python, cache, workers=args.workers, show=not args.json)
    if getattr(args, "cases_out", None):
        atomic_write_text(args.cases_out, "".join(json.dumps(asdict(c)) + "\n" for c in cases))
    return ([c for c in cases if c.label is not None], [c for c in cases if c.label is None], roots,
            disagreements)


def _load_row(method: str, cases: list[Case], run: dict[str, Any]) -> dict[str, Any]:
    row = summarize(method, cases, run["predictions"], run["latencies"], run["cold"])
    first = summarize(method, cases, run["first"], run["latencies"], None)
    row.update(cold_first_interpreter_ms=round(run["cold_interpreter"], 3), load_average=run["load_average"],
               budget_exceeded=run["budget_exceeded"], first_pass_budget_exceeded=run["first_budget_exceeded"],
               first_pass={k: first[k] for k in ("precision", "recall", "f1")}, cold_max_ms=run["cold_max_ms"],
               cold_decisions=run["cold_decisions"], first_budget_cases=run["first_budget_cases"],
               warm_up_s=run["warm_up_s"])
    return row


def _run(args: argparse.Namespace) -> int:
    cases, unconfirmed, roots, disagreements = bench_cases(args)
    idle = evaluate(cases, roots, args.python)
    results = [_load_row("statemirror", cases, idle)]
    predictions, latencies = idle["predictions"], idle["latencies"]
    if args.busy:
        busy = evaluate(cases, roots, args.python, busy=args.busy)
        row = _load_row(f"statemirror_busy{args.busy}", cases, busy)
        row["verdicts_identical_to_idle"] = busy["predictions"] == idle["predictions"]
        row["first_pass_identical_to_idle"] = busy["first"] == idle["first"]
        row["differing_cases"] = [c.id for c, a, b in zip(cases, idle["predictions"], busy["predictions"],
                                                           strict=True) if a != b][:20]
        results.append(row)
    only_predictions, only_latencies = run_action_only(cases, roots, args.python)
    results.append(summarize("action_only", cases, only_predictions, only_latencies, None))
    namespace = [c for c in cases if c.family == "namespace" and c.code]
    if not args.no_jedi and namespace:
        try:
            import jedi  # noqa: F401
        except ImportError:
            pass
        else:
            jedi_predictions, jedi_latencies = run_jedi(namespace, roots, args.python)
            results.append(summarize("jedi", namespace, jedi_predictions, jedi_latencies, None))
            gate_namespace = [p for p, c in zip(predictions, cases, strict=True) if c in namespace]
            gate_ns_lat = [t for t, c in zip(latencies, cases, strict=True) if c in namespace]
            results.append(summarize("statemirror_namespace", namespace, gate_namespace, gate_ns_lat, None))
    if not args.no_mypy and namespace:
        mypy_predictions, mypy_latencies = run_mypy(namespace, roots, args.python)
        results.append(summarize("mypy_batch", namespace, mypy_predictions, mypy_latencies, None))
    if not args.no_pyright and namespace:
        why_not = pyright_available()
        if why_not is None:
            pyright_predictions, pyright_latencies = run_pyright(namespace, roots, args.python)
            results.append(summarize("pyright_batch", namespace, pyright_predictions, pyright_latencies, None))
        elif not args.json:
            print(f"pyright baseline skipped: {why_not}")
    meta = {"projects": list(roots), "cases": len(cases), "positives": sum(bool(c.label) for c in cases),
            "executed": sum(c.label_source == "execution" for c in cases),
            "intent_disagreements": disagreements, "unconfirmed": len(unconfirmed), "python": args.python}
    for result in results:
        result["meta"] = meta
    if args.json:
        for result in results:
            emit_json(result)
        return 0
    print(f"{meta['cases']} actions over {len(roots)} projects, {meta['positives']} positive; "
          f"{meta['executed']} labels confirmed by execution ({disagreements} differed from the generator's intent, "
          f"{len(unconfirmed)} timed out and are left out)")
    keys = ("precision", "recall", "f1", "accuracy", "n")
    print_table([{k: v for k, v in r.items() if not isinstance(v, dict)} for r in results])
    rows = [{"method": r["method"], "subset": subset, "family": fam, **{k: s[k] for k in keys}}
            for r in results for subset in ("headline", "held_out", "development", "construction")
            for fam, s in (r if subset == "headline" else r.get(subset, {"per_family": {}}))["per_family"].items()]
    print()
    print_table(rows)
    print()
    print_table([{"project": name, "style": block["style"], **{k: block[k] for k in keys},
                  **{f"R_{fam}": block["per_family"][fam]["recall"] for fam in block["per_family"]}}
                 for name, block in results[0]["per_project"].items()])
    return 0


BENCH = Command(
    help="gate precision/recall/latency on execution-labelled actions over real PyPI projects",
    add_arguments=_add_arguments,
    run=_run,
)
