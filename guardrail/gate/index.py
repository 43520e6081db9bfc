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
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from guardrail.core.pysyntax import parse_python
from guardrail.gate import budget
from guardrail.gate.backend import taints
from guardrail.gate.fsview import PathState
from guardrail.gate.interpreter import _TARGETS, TargetPython, TargetPythonError, target_python
from guardrail.gate.view import FsView, local_view

__all__ = [
    "ClassInfo",
    "absolute_module",
    "known_stdlib_names",
    "prefetch_stdlib_names",
    "remember_stdlib_names",
    "stdlib_names",
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
# A module up to this size is normal: its first parse is cold work the decision waits for (`budget.Deadline`). The
# largest module of the benchmark's twelve projects is 214 KB (more_itertools/more.py); past 512 KB it is
# the hard deadline's business.
MAX_COLD_PARSE_BYTES = 512 * 1024
_INLINE_PARSE_S = 0.05  # a parse estimated longer than this goes to the parse worker (it would hold the GIL)
_ = _TARGETS  # re-exported: the gate benchmark empties it for its fully cold figure


# --------------------------------------------------------------------------- symbol tables
@dataclass(frozen=True)
class ClassInfo:
    methods: frozenset[str]
    inherits: bool  # has a base other than object: a missing method may be inherited
    bases: tuple[str, ...] = ()  # the base class expressions, as written
    attrs: frozenset[str] = frozenset()  # every name the class body (or a module-level `C.x = ...`) binds
    declared: frozenset[str] = frozenset()  # annotated without a value: no class attribute, may be an instance one
    dynamic: str | None = None  # why a missing attribute is unknown: metaclass, unknown decorator, locals()...


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
    # Module-level imports: local name -> (module, relative level, imported name or "" for `import m`).
    imports: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    imported: tuple[tuple[str, int], ...] = ()  # every module its top level imports (module, level)
    dynamic_imports: bool = False  # importlib.import_module/__import__ at module level: more modules may load


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
        estimate = budget.PARSE_COST.estimate(units)
        if deadline is None or estimate <= min(deadline.remaining(), _INLINE_PARSE_S):
            return _parse_inline(text, units)
        # A module of normal size the decision has not seen: cold work, waited for (up to the cold cap).
        cold = state.size <= MAX_COLD_PARSE_BYTES and estimate <= deadline.cold_allowance()
        if cold and estimate <= _INLINE_PARSE_S:
            with deadline.cold_work():
                return _parse_inline(text, units)
        # Too slow to parse here within the deadline: the worker parses it, and keeps it for the next decision.
        from guardrail.gate.parse_worker import parse_worker

        key = (view.key, path, state.mtime_ns, state.size)
        if cold:
            with deadline.cold_work():
                answer = parse_worker().symbols(key, text, deadline.cold_allowance())
        else:  # half of what is left at most: the action's other predicates still get their turn
            answer = parse_worker().symbols(key, text, deadline.remaining() / 2)
        if answer is None:
            raise budget.BudgetExceeded(f"parsing {os.path.basename(path)}, which goes on in the background")
        return answer

    return view.cached_by_file(_SYMBOLS, path, compute)


def _symbols_known(view: FsView, path: str, state: PathState) -> bool:
    """Whether `module_symbols(path)` is cached for the file in `state` (so it will not read it)."""
    hit = _SYMBOLS.get((view.key, path))
    return hit is not None and hit[0] == state.mtime_ns and hit[1] == state.size


def _parse_inline(text: str, units: int) -> ModuleSymbols:
    started = time.perf_counter()
    symbols = symbols_of_source(text)
    if budget.current() is not None:  # a background warm-up's parses (no decision) would skew the decisions' model
        budget.PARSE_COST.observe(units, time.perf_counter() - started)
    return symbols


def symbols_of_source(text: str) -> ModuleSymbols:
    """The names a module binds, read from its AST; a pathological module is unknown, never an exception."""
    try:
        tree = parse_python(text)
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
    all_dynamic = False
    walk_lines = _lines_with(text, _WALK_WORDS)
    for node in _walk_near(tree, walk_lines) if walk_lines else ():
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "__all__":
            all_dynamic = True  # __all__.extend(...), __all__.append(...)
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
                    if _literal_strings(node.value, None) is None:
                        all_dynamic = True  # __all__ = other.__all__ + [...]: not known statically
                    all_names = _literal_strings(node.value, all_names)
                if isinstance(target, ast.Subscript):
                    if isinstance(target.value, ast.Call) and _called(target.value, "globals"):
                        dynamic = "assigns into globals()"
                    elif "modules" in ast.unparse(target.value) and ast.unparse(target.slice) == "__name__":
                        dynamic = "replaces itself in sys.modules"
    literals = _module_literals(tree.body)
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef) and statement.name == "__getattr__":
            served = _static_getattr(statement, literals)
            if served is None:
                dynamic = "defines a module-level __getattr__"
            else:  # it serves a fixed table and raises AttributeError for everything else
                names |= served
                names.discard("__getattr__")
        elif isinstance(statement, ast.ClassDef) and any(_decorator_name(d).endswith("global_enum")
                                                         for d in statement.decorator_list):
            names |= {n for n in classes.get(statement.name, ClassInfo(frozenset(), False)).attrs
                      if not n.startswith("_")}  # enum.global_enum puts the members in the module (re.M)
    if dynamic in ("updates globals()", "calls globals() at module level"):
        exported_by_update = _globals_updates(tree.body, classes)
        if exported_by_update is not None:
            names |= exported_by_update
            dynamic = _module_level_dynamic(tree.body, dynamic_lines, allow_update=True)
    _class_monkeypatches(tree.body, classes)
    imports, imported, dynamic_imports = _module_imports(tree.body)
    return ModuleSymbols(
        names=frozenset(names), star_imports=tuple(stars),
        all_names=None if all_names is None or all_dynamic else tuple(all_names), dynamic=dynamic,
        path_assigned=path_assigned, functions=frozenset(functions), classes=classes, import_hooks=import_hooks,
        imports=imports, imported=imported, dynamic_imports=dynamic_imports,
    )


def _called(node: ast.Call, name: str) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == name


def _module_level_dynamic(body: list[ast.stmt], lines: list[int], *, allow_update: bool = False) -> str | None:
    """exec/globals()/vars()/locals() run by the module's own top level (not inside a def or class).

    `lines` are those on which one of the four names occurs: a subtree spanning none of them is skipped.
    With `allow_update`, `globals().update(...)` calls already read statically do not count.
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
            reading = isinstance(parent, ast.Attribute) and (
                parent.attr in _READ_ONLY_METHODS or allow_update and parent.attr == "update")
            if node.func.id == "exec" or not reading:
                return f"calls {node.func.id}() at module level"
        stack.extend((child, node) for child in ast.iter_child_nodes(node))
    return None


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target)


def _module_literals(body: list[ast.stmt]) -> dict[str, set[str]]:
    """Top-level names bound to a literal dict/set/list/tuple of strings: the keys or elements."""
    out: dict[str, set[str]] = {}
    for node in body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        strings = _string_keys(value)
        if strings is None:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                out[target.id] = strings
    return out


def _string_keys(value: ast.expr | None) -> set[str] | None:
    if isinstance(value, ast.Dict):
        keys = [k for k in value.keys if k is not None]
        if len(keys) == len(value.keys) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                for k in keys):
            return {str(k.value) for k in keys if isinstance(k, ast.Constant)}
        return None
    if isinstance(value, ast.Set | ast.List | ast.Tuple):
        if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
            return {str(e.value) for e in value.elts if isinstance(e, ast.Constant)}
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in (
            "dict", "frozenset", "set") and not value.args and all(k.arg for k in value.keywords):
        return {k.arg for k in value.keywords if k.arg}
    return None


def _static_getattr(func: ast.FunctionDef, literals: dict[str, set[str]]) -> set[str] | None:
    """The names a module `__getattr__` can serve, when it only serves names it tests against literals (or a
    literal table) and raises AttributeError for the rest; None when it may serve anything."""
    if not func.args.args or not func.body:
        return None
    param = func.args.args[0].arg
    last = func.body[-1]
    if not (isinstance(last, ast.Raise) and last.exc is not None
            and _decorator_name(last.exc).rpartition(".")[2] == "AttributeError"):
        return None  # falls through to None (or anything else) for unknown names
    served: set[str] = set()

    def tested(test: ast.expr) -> set[str] | None:
        if isinstance(test, ast.BoolOp):
            parts = [tested(v) for v in test.values]
            if isinstance(test.op, ast.Or):
                return None if any(p is None for p in parts) else set().union(*[p for p in parts if p])
            known = [p for p in parts if p is not None]
            return set.intersection(*known) if known else None
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
                and test.left.id == param:
            right = test.comparators[0]
            if isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
                return {right.value}
            if isinstance(test.ops[0], ast.In):
                if isinstance(right, ast.Name) and right.id in literals:
                    return literals[right.id]
                return _string_keys(right)
        return None

    def walk(statements: list[ast.stmt], guard: set[str] | None) -> bool:
        for statement in statements:
            if isinstance(statement, ast.Return):
                if guard is None:
                    return False
                served.update(guard)
            elif isinstance(statement, ast.If):
                names = tested(statement.test)
                if not walk(statement.body, names if names is not None else guard):
                    return False
                if not walk(statement.orelse, guard):
                    return False
            elif isinstance(statement, ast.Try):
                for part in (statement.body, *[h.body for h in statement.handlers], statement.orelse,
                             statement.finalbody):
                    if not walk(part, guard):
                        return False
            elif isinstance(statement, ast.For | ast.While | ast.With):
                if any(isinstance(n, ast.Return) for n in ast.walk(statement)) and guard is None:
                    return False
            elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            elif any(isinstance(n, ast.Return) for n in ast.walk(statement)):
                return False
        return True

    return served if walk(func.body, None) else None


def _globals_updates(body: list[ast.stmt], classes: dict[str, ClassInfo]) -> set[str] | None:
    """Names `globals().update(...)` binds at module level when every such call is a literal, `dict(a=...)`
    or `SomeEnum.__members__` of a class of this module; None when one of them is not."""
    found: set[str] = set()
    for node in ast.walk(ast.Module(body=[n for n in body if not isinstance(
            n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)], type_ignores=[])):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                and isinstance(node.func.value, ast.Call) and _called(node.func.value, "globals")):
            continue
        if len(node.args) != 1 or node.keywords:
            return None
        argument = node.args[0]
        keys = _string_keys(argument)
        if keys is None and isinstance(argument, ast.Attribute) and argument.attr == "__members__" \
                and isinstance(argument.value, ast.Name) and argument.value.id in classes:
            keys = {n for n in classes[argument.value.id].attrs if not n.startswith("_")}
        if keys is None:
            return None
        found |= keys
    return found


def _class_monkeypatches(body: list[ast.stmt], classes: dict[str, ClassInfo]) -> None:
    """`C.x = ...` at module level adds x to class C; `setattr(C, ...)` makes its attributes unknown."""
    for node in body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign | ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id in classes:
                info = classes[target.value.id]
                classes[target.value.id] = replace(info, attrs=info.attrs | {target.attr})
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _called(node.value, "setattr") \
                and node.value.args and isinstance(node.value.args[0], ast.Name) \
                and node.value.args[0].id in classes:
            name = node.value.args[0].id
            classes[name] = replace(classes[name], dynamic="setattr() on the class at module level")


def _module_imports(body: list[ast.stmt]) -> tuple[dict[str, tuple[str, int, str]], tuple[tuple[str, int], ...],
                                                   bool]:
    """Module-level imports (following if/try/with bodies, not defs): what each local name is bound to,
    every module imported, and whether it imports dynamically at module level."""
    bound: dict[str, tuple[str, int, str]] = {}
    modules: list[tuple[str, int]] = []
    dynamic = False
    stack = list(body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules.append((alias.name, 0))
                if alias.asname:
                    bound[alias.asname] = (alias.name, 0, "")
                else:
                    top = alias.name.partition(".")[0]
                    bound.setdefault(top, (top, 0, ""))
        elif isinstance(node, ast.ImportFrom):
            modules.append((node.module or "", node.level))
            for alias in node.names:
                if alias.name != "*":
                    bound[alias.asname or alias.name] = (node.module or "", node.level, alias.name)
                    modules.append((f"{node.module}.{alias.name}" if node.module else alias.name, -node.level - 1))
        elif isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try | ast.TryStar):
            for name in ("body", "orelse", "finalbody"):
                stack.extend(getattr(node, name, []) or [])
            for handler in getattr(node, "handlers", []) or []:
                stack.extend(handler.body)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and (_decorator_name(sub).endswith("import_module")
                                                  or _called(sub, "__import__")):
                    dynamic = True
    return bound, tuple(modules), dynamic


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
            classes[node.name] = _class_info(node)
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


# Class decorators that add only dunders or fields to a class, never arbitrary attributes.
_PLAIN_DECORATORS = {"dataclass", "dataclasses.dataclass", "total_ordering", "functools.total_ordering",
                     "unique", "enum.unique", "final", "typing.final", "runtime_checkable", "typing.runtime_checkable",
                     "attr.s", "attr.attrs", "attrs.define", "attr.define", "define", "frozen", "attrs.frozen",
                     "attr.frozen", "mutable", "attrs.mutable", "six.add_metaclass",
                     "enum.global_enum", "global_enum", "verify", "enum.verify", "attrs", "attr.mutable"}
_PLAIN_METACLASSES = {"ABCMeta", "abc.ABCMeta", "type"}


def _class_info(node: ast.ClassDef) -> ClassInfo:
    methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    for n in node.body:
        if isinstance(n, ast.Assign):
            methods.update(t.id for t in n.targets if isinstance(t, ast.Name))
    attrs: set[str] = set()
    classes: dict[str, ClassInfo] = {}
    _bind_block(node.body, attrs, [], set(), classes)
    declared = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and n.value is None
                and isinstance(n.target, ast.Name)}
    attrs -= declared
    for n in node.body:  # __slots__ entries are member descriptors on the class
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in n.targets):
            attrs |= set(_literal_strings(n.value, None) or ())
    inherits = any(not (isinstance(b, ast.Name) and b.id == "object") for b in node.bases) or bool(node.keywords)
    dynamic = None
    metaclass = next((ast.unparse(k.value) for k in node.keywords if k.arg == "metaclass"), None)
    if metaclass is not None and metaclass not in _PLAIN_METACLASSES:
        dynamic = f"its metaclass {metaclass} may add attributes"
    unknown = [d for d in node.decorator_list if _decorator_name(d) not in _PLAIN_DECORATORS]
    if unknown:
        dynamic = f"decorated with {_decorator_name(unknown[0])}, which may replace or extend it"
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _DYNAMIC_CALLS
           for n in ast.walk(ast.Module(body=[s for s in node.body if not isinstance(
               s, ast.FunctionDef | ast.AsyncFunctionDef)], type_ignores=[]))):
        dynamic = "its body writes locals()/vars() or calls exec()"
    if any(isinstance(b, ast.Starred) for b in node.bases) or any(k.arg is None for k in node.keywords):
        dynamic = "its bases are computed"
    return ClassInfo(frozenset(methods), inherits, tuple(ast.unparse(b) for b in node.bases),
                     frozenset(attrs), frozenset(declared), dynamic)


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
        self._closures: dict[tuple[object, ...], tuple[tuple[tuple[str, int], ...], frozenset[str],
                                                       str | None]] = {}

    def search_path(self, search: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(search) + self.target.sys_path

    def find(self, dotted: str, search: tuple[str, ...] = (), *, hooks: bool = True) -> ModuleInfo:
        """Where `dotted` resolves; with `hooks`, a submodule missing from a package whose import runs an
        import hook is unknown."""
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
            parent_info = info
            info = self._find_in(parts[depth], info.portions, parent_info=info, parent=parent)
            if info.status == "missing" and hooks and parent_info.kind == "package" and self._hooked(parent, search):
                return ModuleInfo("unknown", why=f"{parent} imports a module that installs an import hook")
        return info

    def _mtime(self, path: str) -> int:
        # The readable roots' stat: the one `module_symbols` takes of the same file (one stat a decision, not two).
        state = self.fs.readable_state(path)
        return state.mtime_ns if state.exists else -1

    def _hooked(self, package: str, search: tuple[str, ...]) -> bool:
        """Whether importing `package` runs a module of it that installs an import hook (toolz's tlz)."""
        loaded, _ = self.closure([package], search, within=package, limit=50)
        for name in loaded:
            info = self.find(name, search, hooks=False)
            path = info.path if info is not None and info.kind in ("source", "package") else ""
            if path and module_symbols(path, self.fs).import_hooks:
                return True
        return False

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
                 submodules: bool = True) -> tuple[set[str], str | None]:
        """Names `dotted` binds (with star re-exports), and why missing names are unknown, if they are.
        With `submodules` a package's submodules count (``from pkg import sub`` imports them)."""
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
        if info.kind == "package" and submodules:
            names |= self.submodules(info)
        unknown = symbols.dynamic
        if info.kind == "package" and not unknown and not _seen:
            # A package whose __init__ imports a module that installs an import hook (toolz's tlz proxy)
            # gets its names at run time.
            _, hooked = self.closure([dotted], search, within=dotted)
            unknown = hooked
        if len(_seen) > 8:
            return names, unknown or "star imports nest too deep"
        package = dotted if info.kind == "package" else dotted.rpartition(".")[0]
        for module, level in symbols.star_imports:
            budget.check(f"following the star imports of {dotted}")
            source = absolute_module(module, level, package)
            if source is None or source in _seen:
                continue
            star_names, star_unknown = self.exported(source, search, _seen=_seen | {dotted}, submodules=False)
            star_info = self.find(source, search)
            star_all = module_symbols(star_info.path, self.fs).all_names if star_info.kind in ("source", "package") else None
            # `from m import *` binds m.__all__ when m defines it, else m's public names.
            names |= set(star_all) if star_all is not None else {n for n in star_names if not n.startswith("_")}
            unknown = unknown or star_unknown
        return names, unknown


    def closure(self, modules: list[str], search: tuple[str, ...], *, within: str,
                limit: int = 400) -> tuple[set[str], str | None]:
        """The modules under `within`'s top-level package that importing `modules` loads (their packages and
        module-level imports, followed), and why more may load, if they may (dynamic imports, import hooks).
        Cached until one of the files read, or a directory holding one, changes."""
        key = (tuple(modules), search, within, limit)
        cached = self._closures.get(key)
        if cached is not None and all(self._mtime(path) == mtime for path, mtime in cached[0]):
            return set(cached[1]), cached[2]
        unanswered = taints()
        loaded, uncertain, stamp = self._closure(modules, search, within=within, limit=limit)
        if taints() != unanswered:  # a probe went unanswered: the closure may be wrong, not kept
            return loaded, uncertain
        if len(self._closures) > 5_000:
            self._closures.clear()
        self._closures[key] = (stamp, frozenset(loaded), uncertain)
        return loaded, uncertain

    def _read_ahead(self, modules: list[str], search: tuple[str, ...], top: str, loaded: set[str],
                    ahead: set[str]) -> None:
        """The sources of `modules` (a parsed module's imports) and of their packages under `top` that the closure
        walk has not parsed or asked for (`ahead`), read in one round-trip on a remote backend instead of one each
        (`FsView.read_ahead`; a no-op on the local one)."""
        view = self.fs or local_view()
        if getattr(view.backend, "read_many", None) is None:
            return
        paths: list[str] = []
        for dotted in modules:
            parts = dotted.split(".")
            if parts[0] != top:
                continue
            for depth in range(1, len(parts) + 1):
                name = ".".join(parts[:depth])
                if name in loaded:
                    continue
                info = self.find(name, search, hooks=False)
                if info.status != "found":
                    break
                if info.kind in ("source", "package") and info.path not in ahead:
                    paths.append(info.path)
                if info.kind != "package":
                    break  # a name below a module is an attribute (`from m import name`): finding it would read m
        ahead.update(paths)
        view.read_ahead(paths, MAX_PARSE_BYTES, wanted=lambda path, state: not _symbols_known(view, path, state))

    def _closure(self, modules: list[str], search: tuple[str, ...], *, within: str,
                 limit: int) -> tuple[set[str], str | None, tuple[tuple[str, int], ...]]:
        top = within.partition(".")[0]
        read: dict[str, int] = {}
        loaded: set[str] = set()
        uncertain: str | None = None
        todo = list(modules)
        ahead: set[str] = set()
        while todo and len(loaded) < limit:
            dotted = todo.pop()
            parts = dotted.split(".")
            for depth in range(1, len(parts) + 1):
                name = ".".join(parts[:depth])
                if name in loaded or parts[0] != top:
                    continue
                info = self.find(name, search, hooks=False)
                if info.status != "found":
                    if info.status == "unknown":
                        uncertain = uncertain or info.why
                    break
                loaded.add(name)
                if info.kind not in ("source", "package"):
                    if info.kind != "namespace":
                        uncertain = uncertain or f"{name} is {info.kind}: its imports are not readable"
                    continue
                for path in (info.path, os.path.dirname(info.path)):
                    read[path] = self._mtime(path)
                symbols = module_symbols(info.path, self.fs)
                if symbols.error or symbols.import_hooks or symbols.dynamic_imports or symbols.path_assigned:
                    uncertain = uncertain or f"{name} imports modules dynamically or installs an import hook"
                package = name if info.kind == "package" else name.rpartition(".")[0]
                # What the loop below and the walk after it parse (each `from X import name` reads X for its hooks).
                self._read_ahead([absolute_module(module, -level - 1 if level < 0 else level, package) or ""
                                  for module, level in symbols.imported], search, top, loaded, ahead)
                for module, level in symbols.imported:
                    if level < 0:  # `from X import name`: X.name is loaded when it is a module
                        candidate = absolute_module(module, -level - 1, package)
                        if candidate and candidate.partition(".")[0] == top and candidate not in loaded \
                                and self.find(candidate, search, hooks=False).status == "found":
                            todo.append(candidate)
                        continue
                    absolute = absolute_module(module, level, package)
                    if absolute and absolute.partition(".")[0] == top and absolute not in loaded:
                        todo.append(absolute)
        if todo:
            uncertain = uncertain or "the import closure is too large to follow"
        return loaded, uncertain, tuple(read.items())


# --------------------------------------------------------------------------- the running interpreter's stdlib
_STDLIB_NAMES: dict[str, frozenset[str] | None] = {}
_STDLIB_LOCK = threading.Lock()
# Standard modules whose import does something visible (opens a browser, prints, needs a display).
_NEVER_IMPORT = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "__hello__", "__phello__",
                 "pydoc_data", "lib2to3", "ensurepip", "venv", "test", "xxsubtype", "msvcrt", "winreg", "winsound"}
_DIR_QUERY = "import importlib, json, sys; m = importlib.import_module(sys.argv[1]); print(json.dumps(dir(m)))"


def stdlib_names(module: str, target_version: tuple[int, ...], stdlib: frozenset[str]) -> frozenset[str] | None:
    """The names a standard-library module has at run time (``re.M``, ``errno.ENOENT``), read from this
    process's own interpreter, in a child started with ``-I -S`` from a neutral directory so that nothing
    of a workspace or of site-packages is on its path; None when the target runs another Python version,
    the module is not standard or importing it would have side effects."""
    top = module.partition(".")[0]
    if top not in stdlib or top in _NEVER_IMPORT or tuple(target_version[:2]) != sys.version_info[:2]:
        return None
    if module in _STDLIB_NAMES:
        return _STDLIB_NAMES[module]
    names: frozenset[str] | None = None
    timed_out = False
    with budget.cold_work() as allowance, tempfile.TemporaryDirectory(prefix="guardrail-stdlib-") as neutral:
        # The decision's deadline (with its cold credit) bounds the child; 5 s when no decision is in progress.
        timeout = 5.0 if allowance is None else min(5.0, allowance)
        if timeout <= 0.005:
            raise budget.BudgetExceeded(f"looking up the names of {module}")
        try:
            proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", _DIR_QUERY, module], cwd=neutral,
                                  capture_output=True, text=True, timeout=timeout,
                                  env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
            if proc.returncode == 0:
                names = frozenset(json.loads(proc.stdout))
            elif "Error" not in proc.stderr[-2000:]:
                timed_out = True  # killed or starved, not an answer about the module
        except subprocess.TimeoutExpired:
            timed_out = True
        except (OSError, subprocess.SubprocessError):
            timed_out = True  # no process to be had just now (a loaded machine): asked again next time
        except json.JSONDecodeError:
            names = None
    if timed_out:  # out of time, not an answer: asked again next time
        raise budget.BudgetExceeded(f"looking up the names of {module}")
    with _STDLIB_LOCK:
        _STDLIB_NAMES[module] = names
    return names


# Every module's names at once, for the warm-up: one child that forks a fresh copy of itself per module, so each
# module is imported alone, exactly as `_DIR_QUERY` does (importing them all in one process would leave packages
# holding submodules other modules imported). A module printing on import prints into /dev/null.
_DIR_QUERY_MANY = """
import importlib, json, os, signal, sys
out = {}
for name in sys.argv[1:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        signal.alarm(5)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            data = json.dumps(dir(importlib.import_module(name))).encode()
        except BaseException:
            data = b"null"
        with os.fdopen(w, "wb") as pipe:
            pipe.write(data)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status == 0 and data:
        out[name] = json.loads(data)
sys.stdout.write(json.dumps(out))
"""
MAX_PREFETCH_MODULES = 600


def prefetch_stdlib_names(modules: list[str], target_version: tuple[int, ...], stdlib: frozenset[str], *,
                          timeout_s: float = 30.0) -> dict[str, list[str] | None]:
    """Learn the run-time names of standard `modules` (every top-level standard module when empty) in one child,
    ahead of any decision: what `stdlib_names` would learn one child at a time, inside a decision's deadline.
    Only answers are kept (a module whose child died is asked again when a decision needs it); returns them."""
    if tuple(target_version[:2]) != sys.version_info[:2]:
        return {}
    wanted = modules or sorted(getattr(sys, "stdlib_module_names", ()))
    todo = sorted({m for m in wanted if m.partition(".")[0] in stdlib and m.partition(".")[0] not in _NEVER_IMPORT
                   and m not in _STDLIB_NAMES and all(part.isidentifier() for part in m.split("."))})
    todo = todo[:MAX_PREFETCH_MODULES]
    if not todo or not hasattr(os, "fork"):
        return {}
    with tempfile.TemporaryDirectory(prefix="guardrail-stdlib-") as neutral:
        try:
            proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", _DIR_QUERY_MANY, *todo], cwd=neutral,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                                  env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
            found = json.loads(proc.stdout) if proc.returncode == 0 else {}
        except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
            return {}
    learned = {m: found[m] for m in todo if isinstance(found, dict) and m in found}
    return remember_stdlib_names(learned)


def known_stdlib_names() -> dict[str, list[str] | None]:
    """Every standard module's names known to this process (what `remember_stdlib_names` takes back)."""
    with _STDLIB_LOCK:
        return {module: None if names is None else sorted(names) for module, names in _STDLIB_NAMES.items()}


def remember_stdlib_names(table: dict[str, object]) -> dict[str, list[str] | None]:
    """Take standard modules' names learned before (a list of names, or None: the import fails); what was
    well-formed and new is kept and returned, anything else skipped."""
    kept: dict[str, list[str] | None] = {}
    with _STDLIB_LOCK:
        for module, names in table.items():
            if not isinstance(module, str) or module in _STDLIB_NAMES or len(_STDLIB_NAMES) >= 4 * MAX_PREFETCH_MODULES:
                continue
            if names is None:
                _STDLIB_NAMES[module] = kept[module] = None
            elif isinstance(names, list) and len(names) <= 100_000 and all(isinstance(n, str) for n in names):
                _STDLIB_NAMES[module] = frozenset(names)
                kept[module] = names
    return kept


def absolute_module(module: str, level: int, package: str) -> str | None:
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    if module:
        base.append(module)
    return ".".join(base) or None
