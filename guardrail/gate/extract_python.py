"""Predicates assumed by Python source: imports, imported names, module attributes, file paths, syntax version."""

from __future__ import annotations

import ast
import os
import sys
import time
from dataclasses import replace

from guardrail.core.pysyntax import parse_python
from guardrail.gate import budget
from guardrail.gate.budget import PARSE_COST
from guardrail.gate.predicates import Predicate
from guardrail.gate.scope import Scope, resolve_path

__all__ = ["MAX_CODE_CHARS", "extract_python"]

MAX_CODE_CHARS = 500_000  # larger code is not analysed: one explicit unknown instead of its predicates
_CHEAP_CODE_CHARS = 4_000  # shorter code parses in well under a millisecond: no cost estimate needed

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "AttributeError"}
# Calls whose first string argument is a file the call reads.
_READERS = {
    "read_csv", "read_json", "read_excel", "read_parquet", "read_table", "read_pickle", "read_feather",
    "read_fwf", "read_hdf", "read_sql_table", "loadtxt", "genfromtxt", "load", "imread", "parse",
}
_READER_OWNERS = {"pd", "pandas", "np", "numpy", "json", "yaml", "toml", "tomllib", "plt", "cv2", "ET",
                  "ElementTree", "torch", "joblib", "imageio", "Image"}
_PATH_READ_METHODS = {"read_text", "read_bytes", "open"}
_PATH_WRITE_METHODS = {"write_text", "write_bytes", "touch"}
_DIR_CALLS = {("os", "listdir"), ("os", "scandir"), ("os", "chdir")}


def extract_python(code: str, scope: Scope, *, search: tuple[str, ...], necessary: bool, origin: str,
                   target_version: tuple[int, ...] | None = None) -> list[Predicate]:
    """Predicates the code assumes. `search` is what the run puts in front of sys.path (cwd or script dir).

    Raises `budget.BudgetExceeded` when parsing the code would not fit in the decision's deadline.
    """
    if len(code) > MAX_CODE_CHARS:
        return [Predicate("analysis_complete", (origin, f"{len(code)} characters of code is over the "
                                                        f"{MAX_CODE_CHARS} analysed", "limit"), False, origin)]
    # Typical action code is a few lines: its parse costs microseconds and is not worth estimating.
    units = budget.python_parse_units(code) if len(code) > _CHEAP_CODE_CHARS else 0
    if units:
        PARSE_COST.afford(units, f"parsing the {origin} code")
    started = time.perf_counter()
    try:
        tree = parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # not Python we can read: a syntax error is not a state predicate
    if units:
        PARSE_COST.observe(units, time.perf_counter() - started)
    walker = _Walker(scope, tuple(search) + scope.pythonpath, necessary, origin, script_dir=(
        search[0] if origin.startswith("script") and search else None))
    try:
        walker.visit(tree)
    except RecursionError:
        return walker.predicates
    # An attribute read may rely on any module the same code imports (it loads submodules): known only now.
    context = tuple(sorted(walker.imported_modules))
    predicates = [replace(p, context=context) if p.name == "attribute_defined" else p for p in walker.predicates]
    if target_version is not None and tuple(target_version[:2]) < sys.version_info[:2]:
        if units:
            PARSE_COST.afford(units * (sys.version_info[1] - target_version[1] + 1), "checking the syntax version")
        version = _syntax_version_problem(code, (target_version[0], target_version[1]))
        if version is not None:
            predicates.append(Predicate(
                "runtime_version_satisfies", (f">={version[0]}.{version[1]}", "syntax"), necessary, origin,
                verdict=(False, f"the code's syntax needs Python {version[0]}.{version[1]}+, the target "
                                f"runs {'.'.join(map(str, target_version))}")))
    return predicates


def _syntax_version_problem(code: str, target: tuple[int, int]) -> tuple[int, int] | None:
    try:
        parse_python(code, feature_version=target)
        return None
    except SyntaxError:
        pass
    for minor in range(target[1] + 1, sys.version_info[1] + 1):
        try:
            parse_python(code, feature_version=(3, minor))
            return (3, minor)
        except SyntaxError:
            continue
    return None


class _Walker(ast.NodeVisitor):
    def __init__(self, scope: Scope, search: tuple[str, ...], necessary: bool, origin: str, *,
                 script_dir: str | None = None) -> None:
        self.scope = scope
        self.search = search
        self.script_dir = script_dir  # what __file__'s directory is (None for -c code and heredocs)
        self.cwd = scope.cwd  # os.getcwd() as the code runs (os.chdir moves it)
        self.search_hedge: str | None = None  # sys.path changed in a way not read statically
        self.necessary = necessary
        self.origin = origin
        self.predicates: list[Predicate] = []
        self.guarded = 0  # inside try/except ImportError or `if TYPE_CHECKING`/version checks
        self.module_aliases: dict[str, str] = {}  # local name -> module it is bound to by `import`
        self.from_names: dict[str, tuple[str, str]] = {}  # local name -> (module, name) from `from m import n`
        self.paths: dict[str, str] = {}  # a name assigned once to a path literal (str, Path(...), join)
        self.imported_modules: set[str] = set()
        self.rebound: set[str] = set()
        self.seen: set[tuple[str, tuple[object, ...]]] = set()
        self.written: set[str] = set()
        self.visited = 0

    def visit(self, node: ast.AST) -> None:
        self.visited += 1
        if not self.visited & 1023:  # the walk is pure Python: keep the decision's deadline while it runs
            budget.check("analysing the code")
        super().visit(node)

    def add(self, name: str, *args: object, necessary: bool | None = None) -> None:
        key = (name, args)
        if key in self.seen:
            return
        self.seen.add(key)
        hedge = None
        if name in ("importable", "symbol_defined", "module_runnable"):
            if self.scope.module_may_be_installed(str(args[0])):
                hedge = "installed earlier in this action or episode"
            else:
                hedge = self.search_hedge or self.scope.module_hedge(str(args[0]), self.search)
        self.predicates.append(Predicate(name, tuple(args), self.necessary if necessary is None else necessary,
                                         self.origin, self.search, hedge))

    # ----------------------------------------------------------------- scoping
    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches_import_error(h.type) for h in node.handlers)
        self.guarded += guarded
        for stmt in node.body:
            self.visit(stmt)
        self.guarded -= guarded
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    visit_TryStar = visit_Try  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        guarded = any(word in test for word in ("TYPE_CHECKING", "version", "platform", "find_spec", "os.name"))
        self.guarded += guarded
        self.generic_visit(node)
        self.guarded -= guarded

    def visit_Assign(self, node: ast.Assign) -> None:
        self._environ_assign(node)
        for target in node.targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Name):
                    if sub.id in self.paths or sub.id in self.rebound:
                        self.paths.pop(sub.id, None)  # assigned twice: its value depends on the path taken
                    self.rebound.add(sub.id)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and not self.guarded:
            value = self._path_of(node.value)
            if value is not None and node.targets[0].id not in self.paths:
                self.paths[node.targets[0].id] = value
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        # `with suppress(ImportError): import x` guards the import like try/except does.
        guarded = any(isinstance(item.context_expr, ast.Call) and _dotted(item.context_expr.func) in (
            "suppress", "contextlib.suppress") and any(_catches_import_error(a) for a in item.context_expr.args)
            for item in node.items if isinstance(item.context_expr.func if isinstance(
                item.context_expr, ast.Call) else None, ast.Name | ast.Attribute))
        self.guarded += guarded
        self.generic_visit(node)
        self.guarded -= guarded

    def _path_of(self, node: ast.expr) -> str | None:
        """The path an expression names when it is made of literals: 'a', Path('a') / 'b', os.path.join(...)."""
        text = _literal_str(node)
        if text is not None:
            return text
        if isinstance(node, ast.Name):
            if node.id == "__file__" and self.script_dir is not None:
                return os.path.join(self.script_dir, "__file__")
            return self.paths.get(node.id) if node.id not in self.from_names else None
        if isinstance(node, ast.Call) and not node.keywords:
            name = _dotted(node.func) if isinstance(node.func, ast.Name | ast.Attribute) else None
            if name in ("os.getcwd", "getcwd", "Path.cwd", "pathlib.Path.cwd") and not node.args:
                return self.cwd
            if name in ("os.path.abspath", "os.path.realpath", "os.path.normpath", "abspath", "realpath", "str",
                        "os.fspath", "os.path.expanduser") and len(node.args) == 1:
                inner = self._path_of(node.args[0])
                return None if inner is None else os.path.normpath(os.path.join(self.cwd, inner))
            if name in ("os.path.dirname", "dirname") and len(node.args) == 1:
                inner = self._path_of(node.args[0])
                return None if inner is None else os.path.dirname(os.path.join(self.cwd, inner))
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("resolve", "absolute") and not node.args:
                inner = self._path_of(node.func.value)
                return None if inner is None else os.path.normpath(os.path.join(self.cwd, inner))
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            inner = self._path_of(node.value)
            return None if inner is None else os.path.dirname(os.path.join(self.cwd, inner))
        if isinstance(node, ast.Call) and (_is_path_ctor(node) or _dotted(node.func) in (
                "os.path.join", "path.join", "join")) and node.args and not node.keywords:
            parts = [self._path_of(a) for a in node.args]
            if any(p is None for p in parts):
                return None
            return os.path.join(*[p for p in parts if p is not None])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left, right = self._path_of(node.left), self._path_of(node.right)
            if left is not None and right is not None and isinstance(node.left, ast.Call | ast.BinOp | ast.Name):
                return os.path.join(left, right)
        return None

    # ----------------------------------------------------------------- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not self.guarded:
                self.add("importable", alias.name)
            self.imported_modules.add(alias.name)
            if alias.asname:
                self.module_aliases[alias.asname] = alias.name
            else:
                top = alias.name.partition(".")[0]
                self.module_aliases[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # relative imports in a script fail for other reasons
        self.imported_modules.add(node.module)
        for alias in node.names:
            if alias.name != "*":
                self.imported_modules.add(f"{node.module}.{alias.name}")  # loaded when it is a submodule
                if not self.guarded:
                    self.from_names[alias.asname or alias.name] = (node.module, alias.name)
        if self.guarded:
            return  # guarded imports are optional
        self.add("importable", node.module)
        for alias in node.names:
            if alias.name != "*":
                self.add("symbol_defined", node.module, alias.name)

    # ----------------------------------------------------------------- calls and attributes
    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = _dotted(node)
        if isinstance(node.ctx, ast.Load) and not self.guarded and dotted is not None:
            self._check_module_attribute(dotted)
        if dotted is None:
            self.generic_visit(node)  # a chain of plain names holds nothing else to visit

    def _check_module_attribute(self, dotted: str) -> None:
        parts = dotted.split(".")
        if parts[0] in self.rebound:
            return
        if parts[0] in self.from_names and parts[0] not in self.module_aliases:
            module, name = self.from_names[parts[0]]
            self.add("attribute_defined", module, ".".join([name, *parts[1:]]), necessary=False)
            return
        if parts[0] not in self.module_aliases:
            return
        real = [self.module_aliases[parts[0]], *parts[1:]]
        # The longest prefix that is a module the code imported; the rest are attributes read at run time.
        for cut in range(len(real) - 1, 0, -1):
            module = ".".join(real[:cut])
            if module in self.imported_modules or cut == 1:
                self.add("attribute_defined", module, ".".join(real[cut:]), necessary=False)
                return

    def visit_Call(self, node: ast.Call) -> None:
        if not self.guarded:
            self._call(node)
        self.generic_visit(node)

    def _call(self, node: ast.Call) -> None:
        func = node.func
        first = self._path_of(node.args[0]) if node.args else None
        if isinstance(func, ast.Name):
            if func.id == "open" and first is not None:
                self._open(first, _open_mode(node))
            elif func.id == "__import__" and first is not None:
                self.add("importable", first)
            return
        if not isinstance(func, ast.Attribute):
            return
        owner = _dotted(func.value) if isinstance(func.value, ast.Name | ast.Attribute) else None
        if owner == "sys.path" and func.attr in ("insert", "append", "extend"):
            target = node.args[1] if func.attr == "insert" and len(node.args) > 1 else node.args[0] if node.args \
                else None
            entries = [target] if func.attr != "extend" else list(target.elts) if isinstance(
                target, ast.List | ast.Tuple) else [None]
            self._extend_search([self._path_of(e) if e is not None else None for e in entries], "sys.path")
            return
        if (owner, func.attr) in (("site", "addsitedir"),):
            self._extend_search([first], "site.addsitedir")
            return
        if func.attr == "import_module" and owner in ("importlib",) and first is not None:
            self.add("importable", first)
        elif (owner, func.attr) in _DIR_CALLS and first is not None:
            self._path("dir_exists", first)
            if func.attr == "chdir":
                self.cwd = self._resolve(first)
                if not self.script_dir:  # -c code imports from '' (the cwd at import time)
                    self._extend_search([self.cwd], "os.chdir")
        elif owner in _READER_OWNERS and func.attr in _READERS and first is not None:
            self._path("file_exists", first)
        elif isinstance(func.value, ast.Call | ast.Name | ast.BinOp) and (
                func.attr in _PATH_READ_METHODS | _PATH_WRITE_METHODS | {"iterdir", "mkdir"}) and (
                not isinstance(func.value, ast.Call) or _is_path_ctor(func.value)):
            path = self._path_of(func.value)
            if path is None or isinstance(func.value, ast.Name) and _literal_str(node.args[0] if node.args else
                                                                                 ast.Constant(None)) is None \
                    and func.attr == "open" and node.args:
                return
            if func.attr in _PATH_READ_METHODS:
                mode = _literal_str(node.args[0]) if node.args else "r"
                self._open(path, mode or "r")
            elif func.attr in _PATH_WRITE_METHODS:
                self._write(path)
            elif func.attr == "iterdir":
                self._path("dir_exists", path)
            elif func.attr == "mkdir":
                parents = any(k.arg == "parents" and _truthy(k.value) for k in node.keywords)
                resolved = self._resolve(path)
                if not parents:
                    self._path("parent_dir_exists", path)
                self.scope.create(resolved)

    def _extend_search(self, entries: list[str | None], how: str) -> None:
        """Imports after a sys.path edit search the new entries too; an entry not read statically hedges them."""
        for entry in entries:
            if entry is None:
                self.search_hedge = self.search_hedge or f"{how} is changed at run time"
                continue
            resolved = os.path.normpath(os.path.join(self.cwd, entry))
            if resolved not in self.search:
                self.search = (*self.search, resolved)

    def _environ_assign(self, node: ast.Assign) -> None:
        """os.environ["PYTHONPATH"] = ...: the code's own subprocesses may import from there: searched too."""
        for target in node.targets:
            if isinstance(target, ast.Subscript) and _dotted(target.value) == "os.environ" and \
                    _literal_str(target.slice) == "PYTHONPATH":
                value = self._path_of(node.value)
                entries: list[str | None] = list(value.split(os.pathsep)) if value is not None else [None]
                self._extend_search(entries, "PYTHONPATH")

    def _open(self, path: str, mode: str) -> None:
        if any(flag in mode for flag in "wax"):
            self._write(path)
        else:
            self._path("file_exists", path)

    def _write(self, path: str) -> None:
        if not _plausible_path(path):
            return
        self._path("parent_dir_exists", path)
        self.scope.create(self._resolve(path))

    def _resolve(self, path: str) -> str:
        return resolve_path(path, self.cwd)

    def _path(self, name: str, path: str) -> None:
        if not _plausible_path(path):
            return
        resolved = self._resolve(path)
        if self.scope.was_created(resolved):
            return
        self.add(name, resolved)


def _catches_import_error(handler: ast.expr | None) -> bool:
    if handler is None:
        return True
    names = [handler] if not isinstance(handler, ast.Tuple) else list(handler.elts)
    return any(isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS for n in names)


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _literal_str(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _truthy(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and bool(node.value)


def _open_mode(node: ast.Call) -> str:
    if len(node.args) > 1:
        return _literal_str(node.args[1]) or "w"  # an unknown mode might write: treat as write (no file check)
    for keyword in node.keywords:
        if keyword.arg == "mode":
            return _literal_str(keyword.value) or "w"
    return "r"


def _is_path_ctor(node: ast.Call) -> bool:
    name = _dotted(node.func) if isinstance(node.func, ast.Name | ast.Attribute) else None
    return name in ("Path", "pathlib.Path", "PosixPath", "pathlib.PosixPath")


def _plausible_path(path: str) -> bool:
    """A literal that names a file, not a URL, a template or a pseudo-file."""
    return bool(path) and "://" not in path and "{" not in path and "%" not in path and "\x00" not in path \
        and len(path) < 4096 and path not in ("-", ".")
