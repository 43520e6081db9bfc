"""A static module and symbol index of the target interpreter's sys.path and the workspace.

Nothing here imports, executes or writes anything of the workspace or of the target's
packages: the target's paths come from `guardrail.gate.interpreter` (which never runs what the
agent can write), modules are found by listing directories the way the import system's
FileFinder does, through the confined `FsView`, and symbol tables come from ASTs. Parsed files
are cached by (path, mtime, size) so repeated actions on one workspace stay sub-millisecond; a
file is parsed only when it is small enough and its estimated cost fits in the decision's budget.
"""

from __future__ import annotations

import ast
import bisect
import collections
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from guardrail.gate import budget
from guardrail.gate.fsview import PathState
from guardrail.gate.interpreter import _TARGETS, TargetPython, TargetPythonError, target_python
from guardrail.gate.view import FsView, local_view

__all__ = [
    "ClassInfo",
    "ModuleIndex",
    "ModuleInfo",
    "ModuleSymbols",
    "TargetPython",
    "TargetPythonError",
    "MAX_PARSE_BYTES",
    "module_symbols",
    "target_python",
]

MAX_PARSE_BYTES = 1024 * 1024  # a larger module is not parsed (its AST could take a GB): unknown
_INLINE_PARSE_S = 0.05  # a parse estimated longer than this goes to the parse worker (it would hold the GIL)
_ = _TARGETS  # re-exported: the gate benchmark empties it for its fully cold figure


# --------------------------------------------------------------------------- symbol tables
@dataclass(frozen=True)
class ClassInfo:
    methods: frozenset[str]
    inherits: bool  # has a base other than object: a missing method may be inherited
    bases: tuple[str, ...] = ()  # the base class expressions, as written


@dataclass(frozen=True)
class ModuleSymbols:
    """The names a module's top level binds, read from its AST."""

    names: frozenset[str] = frozenset()
    star_imports: tuple[tuple[str, int], ...] = ()  # (module, relative level) of each `from m import *`
    all_names: tuple[str, ...] | None = None
    dynamic: str | None = None  # why missing names are unknown: module __getattr__, globals() writes...
    path_assigned: bool = False  # __init__ rewrites __path__: submodules cannot be listed statically
    import_hooks: bool = False  # touches sys.meta_path/path_hooks: its submodules may be synthesized
    functions: frozenset[str] = frozenset()
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    error: str | None = None  # unreadable, too big or not valid Python: everything about it is unknown


_SYMBOLS: dict[tuple[str, str], tuple[int, int, ModuleSymbols]] = {}
_DYNAMIC_CALLS = {"globals", "exec", "vars", "locals"}
_READ_ONLY_METHODS = {"get", "keys", "items", "values", "copy", "__contains__", "__getitem__"}


def module_symbols(path: str, fs: FsView | None = None) -> ModuleSymbols:
    """The symbol table of a Python source file, cached by (path, mtime, size).

    Raises `budget.BudgetExceeded` (nothing cached) when parsing it would not fit in the decision's budget.
    """
    view = fs or local_view()

    def compute(state: PathState) -> ModuleSymbols:
        if state.kind != "file":
            return ModuleSymbols(error=f"{path} is not a readable file ({state.kind})")
        if state.size > MAX_PARSE_BYTES:
            return ModuleSymbols(error=f"{path} is too large to analyse ({state.size} bytes)")
        text = view.read_text(path, MAX_PARSE_BYTES)
        if text is None:
            return ModuleSymbols(error=f"{path} is too large or unreadable")
        units = budget.python_parse_units(text)
        deadline = budget.current()
        if deadline is None or budget.PARSE_COST.estimate(units) <= min(deadline.remaining(), _INLINE_PARSE_S):
            started = time.perf_counter()
            symbols = symbols_of_source(text)
            budget.PARSE_COST.observe(units, time.perf_counter() - started)
            return symbols
        # Too slow to parse here within the deadline: the worker parses it, and keeps it for the next decision.
        from guardrail.gate.parse_worker import parse_worker

        # Half of what is left at most: the action's other predicates still get their turn.
        answer = parse_worker().symbols((view.key, path, state.mtime_ns, state.size), text, deadline.remaining() / 2)
        if answer is None:
            raise budget.BudgetExceeded(f"parsing {os.path.basename(path)}, which goes on in the background")
        return answer

    return view.cached_by_file(_SYMBOLS, path, compute)


def symbols_of_source(text: str) -> ModuleSymbols:
    """The names a module binds, read from its AST; a pathological module is unknown, never an exception."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return ModuleSymbols(error=f"not parseable: {type(exc).__name__}")
    try:
        return _symbols_of_tree(tree, text)
    except (RecursionError, MemoryError) as exc:  # e.g. subscripts nested hundreds deep
        return ModuleSymbols(error=f"too deeply nested to analyse ({type(exc).__name__})")


# Words a node must span for the whole-tree walk below to flag it. The walk is pure Python (a few
# microseconds a node, more than the parse itself), so it descends only into statements and expressions
# whose lines hold one of them: the same nodes are found, in the same order, at a fraction of the cost.
_WALK_WORDS = ("global", "meta_path", "path_hooks", "globals", "__path__", "__all__", "modules")


def _lines_with(text: str, words: Iterable[str]) -> list[int]:
    """The sorted 1-based numbers of the lines on which any of `words` occurs."""
    newlines: list[int] | None = None
    found: set[int] = set()
    for word in words:
        at = text.find(word)
        while at != -1:
            if newlines is None:
                newlines = [match.start() for match in re.finditer("\n", text)]
            found.add(bisect.bisect_left(newlines, at) + 1)
            at = text.find(word, at + len(word))
    return sorted(found)


def _spans(node: ast.AST, lines: list[int]) -> bool:
    """Whether a node with a position spans one of `lines` (nodes without one, like a Module, always do)."""
    start = getattr(node, "lineno", None)
    if start is None:
        return True
    index = bisect.bisect_left(lines, start)
    return index < len(lines) and lines[index] <= (getattr(node, "end_lineno", None) or start)


def _walk_near(tree: ast.AST, lines: list[int]) -> Iterator[ast.AST]:
    """`ast.walk` (breadth first, same order) restricted to the nodes that span one of `lines`."""
    todo = collections.deque([tree])
    while todo:
        node = todo.popleft()
        if _spans(node, lines):
            todo.extend(ast.iter_child_nodes(node))
            yield node


def _symbols_of_tree(tree: ast.Module, text: str) -> ModuleSymbols:
    names: set[str] = set()
    stars: list[tuple[str, int]] = []
    functions: set[str] = set()
    classes: dict[str, ClassInfo] = {}
    all_names: list[str] | None = None
    _bind_block(tree.body, names, stars, functions, classes)
    for statement in tree.body:  # an unconditional top-level `del x` unbinds x
        if isinstance(statement, ast.Delete):
            names.difference_update(t.id for t in statement.targets if isinstance(t, ast.Name))
    dynamic_lines = _lines_with(text, _DYNAMIC_CALLS)
    dynamic = _module_level_dynamic(tree.body, dynamic_lines) if dynamic_lines else None
    path_assigned = False
    import_hooks = False
    walk_lines = _lines_with(text, _WALK_WORDS)
    for node in _walk_near(tree, walk_lines) if walk_lines else ():
        if isinstance(node, ast.Global):
            names.update(node.names)  # a function that declares a global may bind it when called
        elif isinstance(node, ast.Attribute) and node.attr in ("meta_path", "path_hooks"):
            import_hooks = True  # an import hook: submodules may come from anywhere
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and isinstance(node.func.value, ast.Call) and _called(node.func.value, "globals"):
            dynamic = "updates globals()"
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == "__path__":
                    path_assigned = True
                if isinstance(target, ast.Name) and target.id == "__all__":
                    all_names = _literal_strings(node.value, all_names)
                if isinstance(target, ast.Subscript):
                    if isinstance(target.value, ast.Call) and _called(target.value, "globals"):
                        dynamic = "assigns into globals()"
                    elif "modules" in ast.unparse(target.value) and ast.unparse(target.slice) == "__name__":
                        dynamic = "replaces itself in sys.modules"
    if "__getattr__" in names:
        dynamic = "defines a module-level __getattr__"
    return ModuleSymbols(
        names=frozenset(names), star_imports=tuple(stars),
        all_names=None if all_names is None else tuple(all_names), dynamic=dynamic,
        path_assigned=path_assigned, functions=frozenset(functions), classes=classes, import_hooks=import_hooks,
    )


def _called(node: ast.Call, name: str) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == name


def _module_level_dynamic(body: list[ast.stmt], lines: list[int]) -> str | None:
    """exec/globals()/vars()/locals() run by the module's own top level (not inside a def or class).

    `lines` are those on which one of the four names occurs: a subtree spanning none of them is skipped.
    """
    stack: list[tuple[ast.AST, ast.AST | None]] = [(node, None) for node in body]
    while stack:
        node, parent = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if not _spans(node, lines):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC_CALLS:
            # globals().get(...) and friends only read; exec, globals() handed to a call, or .update write.
            reading = isinstance(parent, ast.Attribute) and parent.attr in _READ_ONLY_METHODS
            if node.func.id == "exec" or not reading:
                return f"calls {node.func.id}() at module level"
        stack.extend((child, node) for child in ast.iter_child_nodes(node))
    return None


def _literal_strings(value: ast.expr | None, previous: list[str] | None) -> list[str] | None:
    if isinstance(value, ast.List | ast.Tuple | ast.Set):
        found = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return (previous or []) + found
    return previous


def _bind_block(body: list[ast.stmt], names: set[str], stars: list[tuple[str, int]],
                functions: set[str], classes: dict[str, ClassInfo]) -> None:
    """Names bound by a block at module level, following if/try/with/for bodies (every branch counts)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
            functions.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            for n in node.body:
                if isinstance(n, ast.Assign):
                    methods.update(t.id for t in n.targets if isinstance(t, ast.Name))
            inherits = any(not (isinstance(b, ast.Name) and b.id == "object") for b in node.bases) or bool(
                node.keywords)
            classes[node.name] = ClassInfo(frozenset(methods), inherits, tuple(ast.unparse(b) for b in node.bases))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names.add(alias.asname or alias.name.partition(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    stars.append((node.module or "", node.level))
                else:
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                _bind_target(target, names)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            _bind_target(node.target, names)
        elif isinstance(node, ast.For | ast.AsyncFor):
            _bind_target(node.target, names)
            _bind_block(node.body + node.orelse, names, stars, functions, classes)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    _bind_target(item.optional_vars, names)
            _bind_block(node.body, names, stars, functions, classes)
        elif isinstance(node, ast.If | ast.While):
            _bind_block(node.body + node.orelse, names, stars, functions, classes)
        elif isinstance(node, ast.Try | ast.TryStar):
            _bind_block(node.body + node.orelse + node.finalbody, names, stars, functions, classes)
            for handler in node.handlers:
                if handler.name:
                    names.add(handler.name)
                _bind_block(handler.body, names, stars, functions, classes)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                _bind_block(case.body, names, stars, functions, classes)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.NamedExpr):
            _bind_target(node.value.target, names)
        elif type(node).__name__ == "TypeAlias":  # `type X = ...` (3.12+)
            names.add(getattr(getattr(node, "name", None), "id", ""))


def _bind_target(target: ast.expr, names: set[str]) -> None:
    if isinstance(target, ast.Name):
        names.add(target.id)
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            _bind_target(element, names)
    elif isinstance(target, ast.Starred):
        _bind_target(target.value, names)


# --------------------------------------------------------------------------- module resolution
class ModuleInfo(NamedTuple):
    """Where a dotted module name resolves: status found|missing|unknown and, when found, its kind."""

    status: str
    kind: str = ""  # source | package | namespace | extension | builtin | editable
    path: str = ""  # the .py file (the __init__.py of a package)
    portions: tuple[str, ...] = ()  # a package's __path__ directories
    why: str = ""


_MISSING_ROOT = "missing"


class ModuleIndex:
    """Resolves dotted module names and their symbols against one target interpreter, statically."""

    def __init__(self, target: TargetPython, fs: FsView | None = None) -> None:
        self.target = target
        self.fs = fs or local_view()  # the gate passes its confined view; tests and tools the local one

    def search_path(self, search: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(search) + self.target.sys_path

    def find(self, dotted: str, search: tuple[str, ...] = ()) -> ModuleInfo:
        parts = dotted.split(".")
        if not all(p.isidentifier() for p in parts):
            return ModuleInfo("missing", why=f"{dotted!r} is not a valid module name")
        info = self._find_top(parts[0], search)
        for depth in range(1, len(parts)):
            if info.status != "found":
                return info
            parent = ".".join(parts[:depth])
            if info.kind in ("builtin", "extension"):
                return ModuleInfo("unknown", info.kind, why=f"{parent} is compiled: its submodules are not listable")
            if info.kind in ("source", "package") and module_symbols(info.path, self.fs).import_hooks:
                sub = self._find_in(parts[depth], info.portions, parent_info=info, parent=parent) \
                    if info.kind == "package" else ModuleInfo("missing")
                if sub.status != "found":
                    return ModuleInfo("unknown", why=f"{parent} installs an import hook: its submodules are dynamic")
                info = sub
                continue
            if info.kind == "source":
                return ModuleInfo("missing", why=f"{parent} is a module, not a package", kind="not_package")
            info = self._find_in(parts[depth], info.portions, parent_info=info, parent=parent)
        return info

    def _find_top(self, name: str, search: tuple[str, ...]) -> ModuleInfo:
        if name in self.target.builtins:
            return ModuleInfo("found", "builtin")
        info = self._find_in(name, self.search_path(search), parent_info=None, parent="")
        if info.status == "missing":
            if name in self.target.editable:
                where = self.target.editable[name]
                init = os.path.join(where, "__init__.py")
                if self.fs.stat(init).kind == "file":
                    return ModuleInfo("found", "package", init, (where,))
                if self.fs.stat(where).kind == "file":
                    return ModuleInfo("found", "source", where)
                return ModuleInfo("unknown", "editable", where, why="editable install mapping")
            if name in self.target.stdlib:
                return ModuleInfo("unknown", "frozen", why=f"{name} is a standard module not found as a file")
        return info

    def _find_in(self, name: str, dirs: tuple[str, ...], *, parent_info: ModuleInfo | None,
                 parent: str) -> ModuleInfo:
        portions: list[str] = []
        unsearchable: list[str] = []
        for directory in dirs:
            entries = self.fs.list_dir(directory)
            if entries is None:
                if self.fs.stat(directory).kind not in ("missing", "loop"):
                    # a zip, an unreadable or huge dir, or one outside the roots: the module may hide there
                    unsearchable.append(directory)
                continue
            if name in entries:
                sub = os.path.join(directory, name)
                sub_entries = self.fs.list_dir(sub)
                if sub_entries is not None:
                    if "__init__.py" in sub_entries:
                        return ModuleInfo("found", "package", os.path.join(sub, "__init__.py"), (sub,))
                    if any(e.startswith("__init__.") for e in sub_entries):
                        return ModuleInfo("found", "extension", os.path.join(sub, "__init__"), (sub,))
                    portions.append(sub)
            for suffix in self.target.ext_suffixes:
                if name + suffix in entries:
                    return ModuleInfo("found", "extension", os.path.join(directory, name + suffix))
            if name + ".py" in entries:
                return ModuleInfo("found", "source", os.path.join(directory, name + ".py"))
            if name + ".pyc" in entries:
                return ModuleInfo("found", "extension", os.path.join(directory, name + ".pyc"))
        if portions:
            return ModuleInfo("found", "namespace", "", tuple(portions))
        full = f"{parent}.{name}" if parent else name
        if unsearchable:
            return ModuleInfo("unknown", why=f"cannot list {unsearchable[0]}")
        if parent_info is not None and parent_info.kind == "package":
            if module_symbols(parent_info.path, self.fs).path_assigned:
                return ModuleInfo("unknown", why=f"{parent} rewrites __path__")
        return ModuleInfo("missing", why=f"no module named {full!r}")

    # ----------------------------------------------------------------- names
    def submodules(self, info: ModuleInfo) -> set[str]:
        found: set[str] = set()
        for portion in info.portions:
            for entry in self.fs.list_dir(portion) or ():
                stem, dot, ext = entry.partition(".")
                if not stem.isidentifier() or stem == "__init__":
                    continue
                if (dot and (ext == "py" or entry.endswith(self.target.ext_suffixes))) or (
                    not dot and self.fs.list_dir(os.path.join(portion, entry)) is not None
                ):
                    found.add(stem)
        return found

    def top_level_names(self, search: tuple[str, ...] = ()) -> set[str]:
        """Every importable top-level name (for repair hints)."""
        found = set(self.target.builtins) | set(self.target.editable)
        for directory in self.search_path(search):
            for entry in self.fs.list_dir(directory) or ():
                stem = entry.partition(".")[0]
                if stem.isidentifier():
                    found.add(stem)
        return found

    def exported(self, dotted: str, search: tuple[str, ...], *, _seen: frozenset[str] = frozenset(),
                 ) -> tuple[set[str], str | None]:
        """Names `dotted` binds (with star re-exports), and why missing names are unknown, if they are."""
        info = self.find(dotted, search)
        if info.status != "found":
            return set(), info.why or "module not resolvable"
        if info.kind in ("builtin", "extension", "editable"):
            return set(), f"{dotted} is {info.kind}: its names are not readable statically"
        names: set[str] = set()
        if info.kind == "namespace":
            return self.submodules(info), f"{dotted} is a namespace package: other portions may add names"
        symbols = module_symbols(info.path, self.fs)
        if symbols.error:
            return set(), symbols.error
        names |= symbols.names
        if info.kind == "package":
            names |= self.submodules(info)
        unknown = symbols.dynamic
        if len(_seen) > 8:
            return names, unknown or "star imports nest too deep"
        package = dotted if info.kind == "package" else dotted.rpartition(".")[0]
        for module, level in symbols.star_imports:
            budget.check(f"following the star imports of {dotted}")
            source = _absolute(module, level, package)
            if source is None or source in _seen:
                continue
            star_names, star_unknown = self.exported(source, search, _seen=_seen | {dotted})
            names |= star_names
            unknown = unknown or star_unknown
        return names, unknown


def _absolute(module: str, level: int, package: str) -> str | None:
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    if module:
        base.append(module)
    return ".".join(base) or None
