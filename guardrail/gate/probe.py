"""Read-only probes: decide each predicate against the workspace, the target interpreter and the harness state.

Serves the gate's per-action budget (median 0.5 ms warm): every probe is a few stats and cached
listings or ASTs, all through the confined `FsView`; nothing is imported, run or written. A probe
that cannot decide returns unknown with the reason in its evidence, and so does every probe after
the time budget ends, every probe of a path outside the roots, and a probe that fails on
pathological input (one predicate is lost, never the decision).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

from guardrail.gate.budget import BudgetExceeded, Deadline
from guardrail.gate.fsview import PathState
from guardrail.gate.index import ClassInfo, ModuleIndex, module_symbols
from guardrail.gate.predicates import Outcome, Predicate, ProbeResult
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
        if unknown_why:
            return ProbeResult(p, Outcome.UNKNOWN, f"{module} may define {name}: {unknown_why}",
                               {"path": info.path, "why": unknown_why})
        return ProbeResult(p, Outcome.FALSE, f"{module} ({info.path or info.kind}) defines no {name!r}",
                           {"path": info.path, "missing": name,
                            "candidates": sorted(n for n in names if not n.startswith("__"))})

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
        entries = list(self.fs.command_dirs)
        found = self.fs.which(program)
        if found is not None:
            return ProbeResult(p, Outcome.TRUE, f"{program} found in {os.path.dirname(found)}")
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
            if unresolved:
                return ProbeResult(p, Outcome.UNKNOWN, f"{head} inherits from {unresolved}: {parts[1]} may be inherited")
            return ProbeResult(p, Outcome.FALSE, f"test class {head} in {path} has no method {parts[1]!r}",
                               {"path": path, "missing": parts[1], "candidates": sorted(methods)})
        if len(parts) == 1 and head in symbols.names:
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


def _over_budget(predicate: Predicate, what: str) -> ProbeResult:
    return ProbeResult(predicate, Outcome.UNKNOWN, f"{what}: the gate's time budget ran out", {"budget_exceeded": True})
