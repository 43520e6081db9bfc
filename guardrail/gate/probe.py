"""Read-only probes: decide each predicate against the workspace, the target interpreter and the harness state.

Serves the gate's per-action budget (median 0.5 ms warm): every probe is a few stats and cached
listings or ASTs, all through the confined `FsView`; nothing is imported, run or written. A probe
that cannot decide returns unknown with the reason in its evidence, and so does every probe after
the time budget ends, every probe of a path outside the roots, and a probe that fails on
pathological input (one predicate is lost, never the decision).
"""

from __future__ import annotations

import ast
import builtins
import functools
import os
import re
import time
from collections.abc import Callable

from guardrail.core.pysyntax import parse_python
from guardrail.gate.budget import BudgetExceeded, Deadline
from guardrail.gate.fsview import PathState
from guardrail.gate.index import (
    ClassInfo,
    ModuleIndex,
    ModuleSymbols,
    absolute_module,
    module_symbols,
    stdlib_names,
)
from guardrail.gate.predicates import Outcome, Predicate, ProbeResult
from guardrail.gate.probe_mcp import MCP_PROBES
from guardrail.gate.view import FsView, local_view

__all__ = ["Prober", "line_count", "workspace_files"]

_LINES: dict[tuple[str, str], tuple[int, int, int | None]] = {}


def line_count(path: str, fs: FsView | None = None) -> int | None:
    """Lines in a text file, cached by (path, mtime, size); None when unreadable, outside or over the size cap."""
    view = fs or local_view()

    def compute(state: PathState) -> int | None:
        text = view.read_text(path) if state.kind == "file" else None
        return None if text is None else (text.count("\n") + (0 if text.endswith("\n") or not text else 1))

    return view.cached_by_file(_LINES, path, compute)


_SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache",
              ".pytest_cache", ".ruff_cache", "build", "dist", ".eggs"}
_FILES: dict[tuple[str, str], tuple[float, list[str]]] = {}


def workspace_files(root: str, fs: FsView | None = None, *, limit: int = 20_000) -> list[str]:
    """Relative paths of files under a workspace root (for repair hints), bounded in count, depth and by the
    decision's deadline; cached 30 s."""
    view = fs or local_view()
    key = (view.key, root)
    cached = _FILES.get(key)
    now = time.monotonic()
    if cached is not None and now - cached[0] < 30.0:
        return cached[1]
    found = view.walk(root, limit=limit, skip=frozenset(_SKIP_DIRS))
    if len(_FILES) > 1_000:
        _FILES.clear()
    _FILES[key] = (now, found)
    return found


# Bases that contribute no test_* methods: a method missing from a class built only on these is missing.
_TEST_ROOTS = {"object", "TestCase", "unittest.TestCase", "IsolatedAsyncioTestCase",
               "unittest.IsolatedAsyncioTestCase", "SimpleTestCase", "TransactionTestCase"}


def _class_methods(name: str, classes: dict[str, ClassInfo], depth: int = 0) -> tuple[set[str], str | None]:
    """Methods of a test class including those of bases in the same file; names the first base it cannot see."""
    info = classes[name]
    methods = set(info.methods)
    for base in info.bases:
        if base in _TEST_ROOTS:
            continue
        if base in classes and base != name and depth < 10:
            inherited, unresolved = _class_methods(base, classes, depth + 1)
            methods |= inherited
            if unresolved:
                return methods, unresolved
            continue
        return methods, base
    return methods, None


# Standard modules whose base classes' metaclasses set private class attributes (Enum's _member_map_...).
_MACHINERY = {"enum", "typing", "abc", "ctypes", "dataclasses", "collections"}


def _test_module_name(path: str, fs: FsView) -> tuple[str, tuple[str, ...]]:
    """The dotted name pytest (prepend import mode) imports a test file under, and the directory it puts first on
    sys.path: the first directory upward without an __init__.py."""
    directory = os.path.dirname(path)
    parts = [os.path.splitext(os.path.basename(path))[0]]
    while "__init__.py" in (fs.list_dir(directory) or ()) and os.path.dirname(directory) != directory:
        parts.insert(0, os.path.basename(directory))
        directory = os.path.dirname(directory)
    dotted = ".".join(parts)
    return (dotted if all(p.isidentifier() for p in parts) else ""), (directory,)


_BUILTIN_FIXTURES = {"tmp_path", "tmpdir", "monkeypatch", "capsys", "capfd", "caplog", "request", "recwarn",
                     "pytestconfig", "tmp_path_factory", "tmpdir_factory", "capsysbinary", "capfdbinary", "doctest_namespace"}


def parametrized_ids(path: str, function: str, fs: FsView | None = None) -> tuple[set[str] | None, str]:
    """The pytest ids of a test function parametrized only by literal `parametrize` marks, or (None, why)."""
    text = (fs or local_view()).read_text(path)
    if text is None:
        return None, "unreadable"
    try:
        tree = parse_python(text)
    except (SyntaxError, ValueError, RecursionError):
        return None, "not parseable"
    if any(isinstance(n, ast.FunctionDef) and n.name == "pytest_generate_tests" for n in tree.body) or \
            "pytestmark" in text:
        return None, "the module parametrizes at collection time"
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if node is None:
        return None, "not a top-level function"
    combined: list[str] = [""]
    covered: set[str] = set()
    marks = [d for d in node.decorator_list if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("parametrize")]
    if not marks:
        return None, "not parametrized by a mark"
    for mark in reversed(marks):  # the mark nearest the function comes first in the id
        ids, names = _mark_ids(mark)
        if ids is None:
            return None, "generated values"
        covered |= names
        combined = [f"{a}-{b}" if a else b for a in combined for b in ids]
    arguments = {a.arg for a in node.args.args}
    if arguments - covered - _BUILTIN_FIXTURES:
        return None, "other fixtures may be parametrized"
    return (set(combined), "") if len(set(combined)) == len(combined) else (None, "duplicate ids")


def _mark_ids(mark: ast.Call) -> tuple[list[str] | None, set[str]]:
    if len(mark.args) < 2:
        return None, set()
    try:
        argnames = ast.literal_eval(mark.args[0])
        values = ast.literal_eval(mark.args[1])
    except (ValueError, SyntaxError, TypeError):
        return None, set()
    names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
    if not isinstance(values, list | tuple):
        return None, set()
    explicit = next((k.value for k in mark.keywords if k.arg == "ids"), None)
    if explicit is not None:
        try:
            given = ast.literal_eval(explicit)
        except (ValueError, SyntaxError, TypeError):
            return None, set()
        if isinstance(given, list | tuple) and len(given) == len(values) and all(isinstance(i, str) for i in given):
            return [str(i) for i in given], set(names)
        return None, set()
    ids: list[str] = []
    for position, value in enumerate(values):
        parts = value if len(names) > 1 and isinstance(value, tuple | list) else (value,)
        words = []
        for name, part in zip(names, parts, strict=False):
            if isinstance(part, str) and part.isascii() and part.isprintable():
                words.append(part)
            elif isinstance(part, bool | int | float) or part is None:
                words.append(str(part))
            else:
                words.append(f"{name}{position}")
        ids.append("-".join(words))
    return ids, set(names)


class Prober:
    """Decides predicates for one action against one environment snapshot, through the confined `fs`."""

    def __init__(self, index: ModuleIndex | None, *, fs: FsView, workspace: str, deadline: Deadline,
                 index_error: str | None = None, index_evidence: dict[str, object] | None = None) -> None:
        self.index = index
        self.fs = fs
        self.workspace = workspace
        self.deadline = deadline
        self.index_error = index_error
        self.index_evidence = index_evidence or {}

    def probe(self, predicate: Predicate) -> ProbeResult:
        if predicate.verdict is not None:
            holds, why = predicate.verdict
            return ProbeResult(predicate, Outcome.TRUE if holds else Outcome.FALSE, why, {"decided_by": "syntax"})
        if self.deadline.expired():
            return _over_budget(predicate, "not checked")
        method: Callable[[Predicate], ProbeResult] | None = getattr(self, "_" + predicate.name, None)
        if method is None and predicate.name in MCP_PROBES:  # the reference MCP servers' own predicates
            method = functools.partial(MCP_PROBES[predicate.name], fs=self.fs)  # type: ignore[call-arg]
        if method is None:
            return ProbeResult(predicate, Outcome.UNKNOWN, f"no prober for {predicate.name}")
        try:
            result = method(predicate)
        except BudgetExceeded as exc:
            return _over_budget(predicate, exc.what)
        except (RecursionError, MemoryError, Exception) as exc:  # noqa: BLE001 - one predicate, never the decision
            return ProbeResult(predicate, Outcome.UNKNOWN, f"could not be analysed: {type(exc).__name__}",
                               {"analysis_error": type(exc).__name__})
        if result.outcome is Outcome.FALSE and predicate.hedge:
            result.outcome = Outcome.UNKNOWN
            result.evidence["hedged"] = predicate.hedge
            result.message = f"{result.message} (not counted: {predicate.hedge})"
        return result

    def _undecidable(self, p: Predicate, path: str, state: PathState) -> ProbeResult | None:
        """Unknown for a path outside the roots (nothing about it is told) or one that cannot be stat'ed."""
        if state.kind == "outside":
            return ProbeResult(p, Outcome.UNKNOWN, f"{path} is outside the workspace and the target's import "
                                                   "paths: not probed", {"outside": True})
        if state.kind == "unknown":
            return ProbeResult(p, Outcome.UNKNOWN, f"cannot stat {path}: {state.error}")
        return None

    # ----------------------------------------------------------------- I namespace
    def _need_index(self, predicate: Predicate) -> ProbeResult | None:
        if self.index is None:
            return ProbeResult(predicate, Outcome.UNKNOWN, f"target interpreter unavailable: {self.index_error}",
                               dict(self.index_evidence))
        return None

    def _importable(self, p: Predicate) -> ProbeResult:
        if (early := self._need_index(p)) is not None:
            return early
        assert self.index is not None
        module = str(p.args[0])
        info = self.index.find(module, p.search)
        if info.status == "found":
            return ProbeResult(p, Outcome.TRUE, f"{module} resolves to {info.path or info.kind}",
                               {"kind": info.kind, "path": info.path})
        if info.status == "unknown":
            return ProbeResult(p, Outcome.UNKNOWN, info.why, {"kind": info.kind})
        parent, _, leaf = module.rpartition(".")
        if parent and self.index.find(parent, p.search).status == "found":
            candidates = sorted(self.index.submodules(self.index.find(parent, p.search)))
            missing = leaf
        else:
            candidates = sorted(self.index.top_level_names(p.search)) if not parent else []
            missing = module.partition(".")[0]
        return ProbeResult(p, Outcome.FALSE, f"{module} is not importable: {info.why}",
                           {"searched": list(p.search)[:3], "missing": missing, "candidates": candidates})

    def _symbol_defined(self, p: Predicate) -> ProbeResult:
        if (early := self._need_index(p)) is not None:
            return early
        assert self.index is not None
        module, name = str(p.args[0]), str(p.args[1])
        info = self.index.find(module, p.search)
        if info.status != "found":
            # importable() reports the missing module itself; the symbol is moot.
            return ProbeResult(p, Outcome.UNKNOWN, f"{module} not resolvable: {info.why}")
        names, unknown_why = self.index.exported(module, p.search)
        if name in names:
            return ProbeResult(p, Outcome.TRUE, f"{module} defines {name}", {"path": info.path})
        if module.partition(".")[0] in self.index.target.stdlib:
            verdict = self._stdlib_verdict(p, module, name)
            if verdict is not None:
                return verdict
        if unknown_why:
            return ProbeResult(p, Outcome.UNKNOWN, f"{module} may define {name}: {unknown_why}",
                               {"path": info.path, "why": unknown_why})
        return ProbeResult(p, Outcome.FALSE, f"{module} ({info.path or info.kind}) defines no {name!r}",
                           {"path": info.path, "missing": name,
                            "candidates": sorted(n for n in names if not n.startswith("__"))})

    def _stdlib_verdict(self, p: Predicate, module: str, name: str) -> ProbeResult | None:
        """For a standard module: whether it has `name`, from the running interpreter's own table."""
        assert self.index is not None
        names = stdlib_names(module, self.index.target.version, self.index.target.stdlib)
        if names is None:
            return None
        if name in names:
            return ProbeResult(p, Outcome.TRUE, f"{module} has {name} at run time", {"decided_by": "stdlib table"})
        return ProbeResult(p, Outcome.FALSE, f"the standard module {module} has no {name!r}",
                           {"missing": name, "candidates": sorted(n for n in names if not n.startswith("__")),
                            "decided_by": "stdlib table"})

    def _attribute_defined(self, p: Predicate) -> ProbeResult:
        if (early := self._need_index(p)) is not None:
            return early
        assert self.index is not None
        module, path = str(p.args[0]), str(p.args[1])
        if self.index.find(module, p.search).status != "found":
            return ProbeResult(p, Outcome.UNKNOWN, f"{module} not resolvable")
        current: tuple[str, ...] = ("module", module)
        parts = path.split(".")
        for depth, part in enumerate(parts):
            if part.startswith("__") and part.endswith("__"):
                return ProbeResult(p, Outcome.UNKNOWN, f"{part} is a special attribute")
            if current[0] == "module":
                current = self._member(p, current[1], part)
            elif current[0] == "class":
                current = self._class_member(current[1], current[2], part, p.search)
            else:
                return ProbeResult(p, Outcome.UNKNOWN, f"{'.'.join(parts[:depth])} is a value: its attributes are "
                                                       "not read statically")
            if current[0] == "missing":
                owner = ".".join([module, *parts[:depth]])
                return ProbeResult(p, Outcome.FALSE, f"{owner} has no attribute {part!r}: {current[1]}",
                                   {"missing": part, "candidates": list(current[2:])[:2000]})
            if current[0] == "unknown":
                return ProbeResult(p, Outcome.UNKNOWN, current[1])
        return ProbeResult(p, Outcome.TRUE, f"{module}.{path} resolves")

    def _member(self, p: Predicate, module: str, name: str) -> tuple[str, ...]:
        """What `module.name` is at run time: ("module", dotted), ("class", module, name), ("value",),
        ("missing", why, *candidates) or ("unknown", why)."""
        assert self.index is not None
        index = self.index
        names, unknown_why = index.exported(module, p.search, submodules=False)
        info = index.find(module, p.search)
        if name in names:
            return self._what_is(module, name, p.search)
        if info.kind in ("package", "namespace") and name in index.submodules(info):
            dotted = f"{module}.{name}"
            loaded, uncertain = index.closure([*p.context, module], p.search, within=module)
            if dotted in loaded:
                return ("module", dotted)
            if module.partition(".")[0] in index.target.stdlib:
                return ("unknown", f"{dotted} may be imported at interpreter start-up")
            if uncertain:
                return ("unknown", f"{dotted} may be imported at run time: {uncertain}")
            return ("missing", f"{dotted} is a submodule that neither {module} nor this code imports "
                               f"(`import {dotted}` first)", name)
        if module.partition(".")[0] in index.target.stdlib:
            verdict = self._stdlib_verdict(p, module, name)
            if verdict is not None:
                return ("value",) if verdict.outcome is Outcome.TRUE else (
                    "missing", verdict.message, *verdict.evidence.get("candidates", ()))
        if unknown_why:
            return ("unknown", f"{module} may define {name}: {unknown_why}")
        return ("missing", f"{module} ({info.path or info.kind}) defines no {name!r}",
                *sorted(n for n in names if not n.startswith("__")))

    def _what_is(self, module: str, name: str, search: tuple[str, ...], depth: int = 0) -> tuple[str, ...]:
        """Follow `name` bound in `module` to the class or module it is, through its imports."""
        assert self.index is not None
        info = self.index.find(module, search)
        if info.kind not in ("source", "package") or depth > 8:
            return ("value",)
        symbols = module_symbols(info.path, self.fs)
        if name in symbols.classes:
            return ("class", module, name)
        if name in symbols.imports:
            source, level, original = symbols.imports[name]
            package = module if info.kind == "package" else module.rpartition(".")[0]
            absolute = absolute_module(source, level, package)
            if absolute is None:
                return ("value",)
            if not original:
                return ("module", absolute)
            candidate = f"{absolute}.{original}"
            if self.index.find(candidate, search).status == "found":
                return ("module", candidate)
            if self.index.find(absolute, search).status == "found":
                return self._what_is(absolute, original, search, depth + 1)
        return ("value",)

    def _class_member(self, module: str, cls: str, attr: str, search: tuple[str, ...],
                      depth: int = 0) -> tuple[str, ...]:
        """Whether class `module.cls` has `attr` through its MRO, read statically."""
        assert self.index is not None
        if depth > 12:
            return ("unknown", "the class hierarchy is too deep to follow")
        info = self.index.find(module, search)
        symbols = module_symbols(info.path, self.fs) if info.kind in ("source", "package") else None
        if symbols is None or cls not in symbols.classes:
            return ("unknown", f"{module}.{cls} is not readable statically")
        klass = symbols.classes[cls]
        if attr in klass.attrs:
            return self._what_is_attr(module, cls, attr)
        if attr in klass.declared:
            return ("unknown", f"{cls}.{attr} is declared without a value: a field, maybe set on instances")
        package = module if info.kind == "package" else module.rpartition(".")[0]
        for base in klass.bases:
            base = base.partition("[")[0]
            if base == "object":
                continue
            resolved = self._base(module, package, symbols, base, search)
            if resolved is None:
                builtin = getattr(builtins, base, None)
                if isinstance(builtin, type):
                    if attr in dir(builtin):
                        return ("value",)
                    continue
                return ("unknown", f"{cls} inherits from {base}, which is not readable statically")
            if resolved[0] in _MACHINERY and attr.startswith("_"):
                return ("unknown", f"{cls} derives from {resolved[0]}.{resolved[1]}, whose machinery sets "
                                   "private names")
            found = self._class_member(resolved[0], resolved[1], attr, search, depth + 1)
            if found[0] != "missing":
                return found
        if klass.dynamic:
            return ("unknown", f"{cls}: {klass.dynamic}")
        if depth:
            return ("missing", f"{cls} does not define it")
        return ("missing", f"class {cls} (in {module}) and its bases define no {attr!r}",
                *sorted(a for a in klass.attrs if not a.startswith("__")))

    def _what_is_attr(self, module: str, cls: str, attr: str) -> tuple[str, ...]:
        return ("value",)

    def _base(self, module: str, package: str, symbols: ModuleSymbols, base: str,
              search: tuple[str, ...]) -> tuple[str, str] | None:
        """The (module, class) a base expression names, when it is a class read from source."""
        assert self.index is not None
        head, _, rest = base.partition(".")
        if not rest and head in symbols.classes:
            return (module, head)
        if head not in symbols.imports:
            return None
        source, level, original = symbols.imports[head]
        absolute = absolute_module(source, level, package)
        if absolute is None:
            return None
        if not original:  # import abc; class X(abc.ABC)
            owner, _, name = f"{absolute}.{rest}".rpartition(".") if rest else ("", "", "")
        else:
            owner, name = (absolute, original) if not rest else (f"{absolute}.{original}", rest)
        if not owner or "." in name:
            return None
        what = self._what_is(owner, name, search)
        return (what[1], what[2]) if what[0] == "class" else None

    def _is_package(self, p: Predicate) -> ProbeResult:
        if (early := self._need_index(p)) is not None:
            return early
        assert self.index is not None
        info = self.index.find(str(p.args[0]), p.search)
        if info.status == "unknown":
            return ProbeResult(p, Outcome.UNKNOWN, info.why)
        ok = info.kind in ("package", "namespace")
        return ProbeResult(p, Outcome.TRUE if ok else Outcome.FALSE,
                           f"{p.args[0]} is {'a package' if ok else 'not a package'}", {"kind": info.kind})

    def _module_runnable(self, p: Predicate) -> ProbeResult:
        result = self._importable(p)
        if result.outcome is not Outcome.TRUE:
            return result
        assert self.index is not None
        info = self.index.find(str(p.args[0]), p.search)
        if info.kind in ("package", "namespace"):
            has_main = any("__main__.py" in (self.fs.list_dir(portion) or ()) for portion in info.portions)
            if not has_main:
                return ProbeResult(p, Outcome.FALSE, f"{p.args[0]} is a package with no __main__: "
                                                     "it cannot be run with python -m", {"kind": info.kind})
        return result

    # ----------------------------------------------------------------- II filesystem
    def _missing_path(self, p: Predicate, path: str, what: str, state_error: str = "") -> ProbeResult:
        evidence: dict[str, object] = {"path": path, "missing": os.path.basename(path)}
        ancestor = os.path.dirname(path)
        kind = self.fs.stat(ancestor).kind if ancestor else "missing"
        while ancestor and kind not in ("dir", "outside") and ancestor != os.path.dirname(ancestor):
            ancestor = os.path.dirname(ancestor)
            kind = self.fs.stat(ancestor).kind
        # Hints name only what lies under the roots: past them there is no nearest directory to tell.
        evidence["nearest_dir"] = ancestor if kind == "dir" else ""
        listing = self.fs.list_dir(ancestor) if kind == "dir" else None
        evidence["siblings"] = sorted(listing)[:2000] if listing is not None and len(listing) <= 50_000 else []
        if path.startswith(self.workspace.rstrip("/") + "/"):
            evidence["workspace"] = self.workspace  # the hint searches it, within the decision's deadline
        why = f" ({state_error})" if state_error else ""
        return ProbeResult(p, Outcome.FALSE, f"{what} {path} does not exist{why}", evidence)

    def _file_exists(self, p: Predicate) -> ProbeResult:
        path = str(p.args[0])
        state = self.fs.stat(path)
        if state.kind in ("file", "other"):
            return ProbeResult(p, Outcome.TRUE, f"{path} exists")
        if (undecided := self._undecidable(p, path, state)) is not None:
            return undecided
        if state.kind == "dir":
            return ProbeResult(p, Outcome.FALSE, f"{path} is a directory, not a file", {"path": path})
        return self._missing_path(p, path, "file", state.error)

    def _dir_exists(self, p: Predicate) -> ProbeResult:
        path = str(p.args[0])
        state = self.fs.stat(path)
        if state.kind == "dir":
            return ProbeResult(p, Outcome.TRUE, f"{path} is a directory")
        if (undecided := self._undecidable(p, path, state)) is not None:
            return undecided
        if state.exists:
            return ProbeResult(p, Outcome.FALSE, f"{path} is a file, not a directory", {"path": path})
        return self._missing_path(p, path, "directory", state.error)

    def _path_exists(self, p: Predicate) -> ProbeResult:
        path = str(p.args[0])
        state = self.fs.stat(path)
        if state.exists:
            return ProbeResult(p, Outcome.TRUE, f"{path} exists")
        if (undecided := self._undecidable(p, path, state)) is not None:
            return undecided
        return self._missing_path(p, path, "path", state.error)

    def _parent_dir_exists(self, p: Predicate) -> ProbeResult:
        path = str(p.args[0])
        parent = os.path.dirname(path) or "/"
        state = self.fs.stat(parent)
        if state.kind == "dir":
            return ProbeResult(p, Outcome.TRUE, f"{parent} is a directory")
        if (undecided := self._undecidable(p, parent, state)) is not None:
            return undecided
        result = self._missing_path(p, parent, "parent directory", state.error)
        result.message = f"cannot write {path}: " + result.message
        return result

    # ----------------------------------------------------------------- III command, test, runtime
    def _executable_available(self, p: Predicate) -> ProbeResult:
        program = str(p.args[0])
        if "/" in program:
            state = self.fs.stat(program)
            if (undecided := self._undecidable(p, program, state)) is not None:
                return undecided
            if state.kind == "file" and state.executable:
                return ProbeResult(p, Outcome.TRUE, f"{program} is executable")
            if state.kind == "file":
                return ProbeResult(p, Outcome.FALSE, f"{program} is not executable (no x bit)", {"path": program})
            return ProbeResult(p, Outcome.UNKNOWN, f"{program} is checked by file_exists")
        for directory in p.search:  # directories this action put in front of PATH (export PATH="$PWD/bin:$PATH")
            state = self.fs.stat(os.path.join(directory, program))
            if state.kind == "file" and state.executable:
                return ProbeResult(p, Outcome.TRUE, f"{program} found in {directory}")
            if state.kind in ("outside", "unknown"):
                return ProbeResult(p, Outcome.UNKNOWN, f"{program} may be in {directory}, which is not looked at")
        entries = list(self.fs.command_dirs)
        found = self.fs.which(program)
        if found is not None:
            return ProbeResult(p, Outcome.TRUE, f"{program} found in {os.path.dirname(found)}")
        module = _console_module(program)
        if module is not None and self.index is not None and self.index.find(module, ()).status == "found":
            # pytest, pip, flake8...: the target interpreter has the package, so the agent's environment has its
            # console script even where the PATH the gate was given does not show it.
            return ProbeResult(p, Outcome.UNKNOWN, f"{program} is not on the PATH the gate knows, but the target "
                                                   f"interpreter has {module}: the agent's environment may provide it",
                               {"module": module})
        candidates: set[str] = set()
        for directory in entries:
            candidates.update(self.fs.list_dir(directory) or ())
        return ProbeResult(p, Outcome.FALSE, f"{program}: command not found on the target PATH",
                           {"missing": program, "candidates": sorted(candidates), "path": entries[:8]})

    def _pytest_target_exists(self, p: Predicate) -> ProbeResult:
        path, node = str(p.args[0]), str(p.args[1])
        state = self.fs.stat(path)
        if (undecided := self._undecidable(p, path, state)) is not None:
            return undecided
        if state.kind != "file":
            return self._missing_path(p, path, "test file", state.error)
        symbols = module_symbols(path, self.fs)
        if symbols.error:
            return ProbeResult(p, Outcome.UNKNOWN, symbols.error)
        parts = [re.sub(r"\[.*\]$", "", part) for part in node.split("::")]
        head = parts[0]
        tests = sorted({*symbols.functions, *symbols.classes} - {"setup_module", "teardown_module"})
        if head in symbols.classes and len(parts) >= 2:
            if len(parts) > 2:
                return ProbeResult(p, Outcome.UNKNOWN, "nested test classes are not resolved statically")
            methods, unresolved = _class_methods(head, symbols.classes)
            if parts[1] in methods:
                return ProbeResult(p, Outcome.TRUE, f"{path}::{head}::{parts[1]} exists")
            if unresolved and self.index is not None:
                # A base imported from another module (tests/base.py, unittest): follow it as pytest imports it.
                module, search = _test_module_name(path, self.fs)
                found = self._class_member(module, head, parts[1], search) if module else ("unknown", "")
                if found[0] == "value":
                    return ProbeResult(p, Outcome.TRUE, f"{path}::{head}::{parts[1]} is inherited")
                if found[0] == "missing":
                    return ProbeResult(p, Outcome.FALSE, f"test class {head} in {path} and its bases have no "
                                                         f"method {parts[1]!r}",
                                       {"path": path, "missing": parts[1], "candidates": sorted(methods)})
            if unresolved:
                return ProbeResult(p, Outcome.UNKNOWN, f"{head} inherits from {unresolved}: {parts[1]} may be inherited")
            return ProbeResult(p, Outcome.FALSE, f"test class {head} in {path} has no method {parts[1]!r}",
                               {"path": path, "missing": parts[1], "candidates": sorted(methods)})
        if len(parts) == 1 and head in symbols.names:
            case = re.search(r"\[(.*)\]$", node)
            if case is not None and head in symbols.functions:
                ids, why = parametrized_ids(path, head, self.fs)
                if ids is None:
                    return ProbeResult(p, Outcome.UNKNOWN, f"{head} exists; its ids are not literal ({why})")
                if case.group(1) not in ids:
                    return ProbeResult(p, Outcome.FALSE, f"{head} in {path} has no parameter id {case.group(1)!r}",
                                       {"path": path, "missing": case.group(1), "candidates": sorted(ids)})
            return ProbeResult(p, Outcome.TRUE, f"{path}::{head} exists")
        if symbols.star_imports or symbols.dynamic:
            return ProbeResult(p, Outcome.UNKNOWN, f"{path} imports or builds names dynamically")
        return ProbeResult(p, Outcome.FALSE, f"{path} has no test {head!r}",
                           {"path": path, "missing": head, "candidates": tests})

    def _runtime_version_satisfies(self, p: Predicate) -> ProbeResult:
        return ProbeResult(p, Outcome.UNKNOWN, "only decided from syntax")

    # ----------------------------------------------------------------- IV harness
    def _tool_path_arg_exists(self, p: Predicate) -> ProbeResult:
        path, kind = str(p.args[0]), str(p.args[1])
        state = self.fs.stat(path)
        wanted = "dir" if kind == "dir" else "file"
        if state.kind == wanted:
            return ProbeResult(p, Outcome.TRUE, f"{path} is a {kind}")
        if (undecided := self._undecidable(p, path, state)) is not None:
            return undecided
        result = self._missing_path(p, path, f"{kind} argument", state.error)
        if state.exists:
            result.message = f"{kind} argument {path} is not a {kind}"
        return result

    def _editor_file_open(self, p: Predicate) -> ProbeResult:
        return ProbeResult(p, Outcome.TRUE, "a file is open")

    def _editor_line_in_range(self, p: Predicate) -> ProbeResult:
        path, line = str(p.args[0]), int(p.args[1])
        mode = str(p.args[2]) if len(p.args) > 2 else "open"
        state = self.fs.readable_state(path)
        if (undecided := self._undecidable(p, path, state)) is not None:
            return undecided
        count = line_count(path, self.fs)
        if count is None:
            return ProbeResult(p, Outcome.UNKNOWN, f"line count of {path} unknown (missing, unreadable or large)")
        low, high = {"insert": (0, count), "edit": (1, count + 1)}.get(mode, (1, max(count, 1)))
        if low <= line <= high:
            return ProbeResult(p, Outcome.TRUE, f"line {line} is within {path} ({count} lines)")
        return ProbeResult(p, Outcome.FALSE, f"line {line} is outside {path}, which has {count} lines "
                                             f"(valid for {mode}: {low}..{high})",
                           {"path": path, "lines": count, "line": line})

    def _editor_text_present(self, p: Predicate) -> ProbeResult:
        path, old = str(p.args[0]), str(p.args[1])
        state = self.fs.readable_state(path)
        if (undecided := self._undecidable(p, path, state)) is not None:
            return undecided
        text = self.fs.read_text(path)
        if text is None:
            return ProbeResult(p, Outcome.UNKNOWN, f"cannot read {path}")
        occurrences = text.count(old)
        if occurrences == 1:
            return ProbeResult(p, Outcome.TRUE, f"old_str occurs once in {path}")
        if occurrences > 1:
            return ProbeResult(p, Outcome.FALSE, f"old_str occurs {occurrences} times in {path}; it must be unique",
                               {"path": path, "occurrences": occurrences})
        first = old.strip().splitlines()[0].strip() if old.strip() else old
        evidence: dict[str, object] = {"path": path, "missing": first[:1000]}
        if self.fs.in_workspace(path):  # lines are quoted in the hint: only text under the workspace roots
            evidence["candidates"] = [ln.strip() for ln in text.splitlines()[:20_000] if ln.strip()]
        return ProbeResult(p, Outcome.FALSE, f"old_str does not occur in {path}", evidence)

    def _path_absent(self, p: Predicate) -> ProbeResult:
        path = str(p.args[0])
        state = self.fs.stat(path)
        if (undecided := self._undecidable(p, path, state)) is not None:
            return undecided
        if state.exists:
            return ProbeResult(p, Outcome.FALSE, f"{path} already exists", {"path": path})
        return ProbeResult(p, Outcome.TRUE, f"{path} is absent")

    def _analysis_complete(self, p: Predicate) -> ProbeResult:
        """An explicit unknown left by extraction: part of the action was not analysed (and why)."""
        subject, why = str(p.args[0]), str(p.args[1])
        # A size cap is a budget too (it bounds the time and memory of one uninterruptible step).
        return ProbeResult(p, Outcome.UNKNOWN, f"{subject} not analysed: {why}", {"budget_exceeded": True})


_CONSOLE_SCRIPTS = {"py.test": "pytest", "pip3": "pip", "ipython": "IPython", "ipython3": "IPython",
                    "coverage3": "coverage", "pytest-3": "pytest"}


def _console_module(program: str) -> str | None:
    """The module whose package installs the console script `program`, by the usual naming (pytest, pip3 -> pip)."""
    if program in _CONSOLE_SCRIPTS:
        return _CONSOLE_SCRIPTS[program]
    name = program.replace("-", "_")
    # A versioned name (pip3.12, python3.13) belongs to another interpreter, not to a package of the target's.
    return name if name.isidentifier() and not name[-1].isdigit() else None


def _over_budget(predicate: Predicate, what: str) -> ProbeResult:
    return ProbeResult(predicate, Outcome.UNKNOWN, f"{what}: the gate's time budget ran out", {"budget_exceeded": True})
