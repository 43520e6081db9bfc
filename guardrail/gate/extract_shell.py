"""Predicates assumed by a shell command line: executables, files read or run, cd targets, Python run, tests.

Every line is parsed with the complete bash grammar (tree-sitter-bash, `guardrail.gate.shell_syntax`) and
walked the way bash runs it: words are expanded first (variables this action set, ``$PWD`` and
``$(pwd)``, brace expansion, globs against the directory's listing, arrays, loop variables over literal
lists), command and process substitutions run before their command, and the environment later words see
is carried forward (``export``, ``env``, ``VAR=x cmd``, ``cd``, ``pushd``/``popd``, ``source`` of a workspace
file, functions and aliases defined in the same line). A precondition in a branch that may not run (right
of ``||``, an ``if``/``while``/``case`` body, ``&&`` after a test, ``xargs`` and ``find -exec``) warns and never
blocks; the left of ``|| fallback`` and an ``if`` condition are tests, not assumptions.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import time
from collections.abc import Callable
from dataclasses import replace

from guardrail.gate import budget
from guardrail.gate.budget import SHELL_PARSE_COST, BudgetExceeded
from guardrail.gate.predicates import Predicate
from guardrail.gate.scope import Scope
from guardrail.gate.shell_commands import INHERITED_PATH, CommandSemantics, SimpleCommand, not_analysed
from guardrail.gate.shell_syntax import QUOTE, Node, brace_expand, glob_pattern, has_glob, parse, unmark

__all__ = ["MAX_COMMAND_CHARS", "SimpleCommand", "extract_shell", "split_commands"]

MAX_COMMAND_CHARS = 100_000  # a longer command line is not analysed: one explicit unknown
_MAX_NESTING = 200  # syntax nested deeper than this is not walked (an explicit unknown)
_MAX_LOOP_VALUES = 32  # a for loop over more literal values runs its body once with the variable unknown
_MAX_CALL_DEPTH = 3  # shell functions calling functions, followed this deep
_TEST_COMMANDS = {"test", "[", "[[", "which", "type", "hash", "false", "true", ":"}
_QUIET_FLAGS = {"-q", "--quiet", "--silent", "-s"}
_HABIT_FALLBACKS = {"true", ":"}
_STATEMENTS_WITH_BODY = {"program", "compound_statement", "do_group", "else_clause"}
_DYNAMIC = None  # a word whose value is known only at run time


def extract_shell(command: str, scope: Scope, *, python_version: tuple[int, ...] | None = None) -> list[Predicate]:
    """Predicates a shell line assumes; `scope` is advanced through it (cwd, created files, installs)."""
    if len(command) > MAX_COMMAND_CHARS:
        return [not_analysed("the command line", f"{len(command)} characters is over the "
                                                 f"{MAX_COMMAND_CHARS} analysed", "limit")]
    predicates: list[Predicate] = []
    _ShellWalk(scope, predicates, python_version).walk_text(command, "action")
    return predicates


def split_commands(command: str) -> list[SimpleCommand]:
    """The simple commands of a line in the order they run, with their connecting operators (for inspection)."""
    from guardrail.gate.view import local_view

    scope = Scope(cwd=os.getcwd(), workspace=os.getcwd(), fs=local_view())
    walk = _ShellWalk(scope, [], None)
    walk.recorded = []
    walk.walk_text(command, "action")
    return walk.recorded


class _ShellWalk(CommandSemantics):
    """Walks a tree-sitter-bash tree as bash would run it, handing each simple command to `CommandSemantics`."""

    def __init__(self, scope: Scope, out: list[Predicate], python_version: tuple[int, ...] | None) -> None:
        super().__init__(scope, out, python_version)
        self.src = b""
        self.errors = "surrogateescape"
        self.functions: dict[str, tuple[Node, bytes]] = {}
        self.aliases: dict[str, list[str]] = {}
        self.positional_args: list[str] | None = None  # $1... inside a function call
        self.calling: list[str] = []
        self.nodes = 0
        self.recorded: list[SimpleCommand] | None = None
        self.attached: dict[tuple[int, int], tuple[list[tuple[str, str]], str | None]] = {}

    # ------------------------------------------------------------------ entry
    def walk_text(self, text: str, origin: str) -> None:
        SHELL_PARSE_COST.afford(len(text), "parsing the command line")
        started = time.perf_counter()
        encoded, errors = _encode(text)
        root = parse(encoded)
        saved = self.src, self.errors
        self.src, self.errors = encoded, errors
        try:
            self.statements(root, 0)
        finally:
            self.src, self.errors = saved
        SHELL_PARSE_COST.observe(len(text), time.perf_counter() - started, min_units=2_000)

    def text(self, node: Node) -> str:
        return self.decode(self.src[node.start_byte:node.end_byte])

    def decode(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8", self.errors)
        except UnicodeDecodeError:  # a node boundary inside a passed-through surrogate
            return raw.decode("utf-8", "surrogateescape")

    def tick(self, depth: int) -> None:
        self.nodes += 1
        if not self.nodes & 255:
            budget.check("analysing the command line")
        if depth > _MAX_NESTING:
            raise BudgetExceeded(f"the command line nests more than {_MAX_NESTING} deep", limit=True)

    # ------------------------------------------------------------------ statements
    def statements(self, node: Node, depth: int) -> None:
        """The statements under `node`, in order."""
        for child in node.children:
            if child.is_named:
                self.statement(child, depth + 1)

    def statement(self, node: Node, depth: int) -> None:
        self.tick(depth)
        kind = node.type
        if kind in _STATEMENTS_WITH_BODY:
            self.statements(node, depth)
        elif kind == "command":
            self.simple(node, [], None, depth)
        elif kind == "redirected_statement":
            self.redirected(node, depth)
        elif kind == "list":
            self.and_or(node, depth)
        elif kind == "pipeline":
            for child in node.children:
                if child.is_named:
                    self.isolated(functools.partial(self.statement, child, depth + 1))
                elif self.recorded:
                    self.recorded[-1].next_op = child.type  # | or |&
        elif kind == "subshell":
            self.isolated(lambda: self.statements(node, depth))
        elif kind == "negated_command":
            self.probe(lambda: self.statements(node, depth), habit=False)
        elif kind == "variable_assignment":
            self.assign(node, depth, export=False)
        elif kind == "variable_assignments":
            for child in node.children:
                if child.type == "variable_assignment":
                    self.assign(child, depth, export=False)
        elif kind == "declaration_command":
            self.declaration(node, depth)
        elif kind == "unset_command":
            for child in node.children[1:]:
                if child.is_named:
                    self.vars.pop(self.text(child), None)
        elif kind == "function_definition":
            name_node = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name_node is not None and body is not None:
                name = self.text(name_node)
                self.functions[name] = (body, self.src)
                self.scope.functions.add(name)
                if self.recorded is not None:
                    self.recorded.append(SimpleCommand([], defines=name))
        elif kind == "if_statement":
            self.if_statement(node, depth)
        elif kind in ("while_statement", "until_statement"):
            condition = node.child_by_field_name("condition")
            body = node.child_by_field_name("body")
            if condition is not None:
                self.probe(functools.partial(self.statement, condition, depth + 1), habit=False)
            if body is not None:
                self.branch(functools.partial(self.statement, body, depth + 1))
        elif kind == "for_statement":
            self.for_statement(node, depth)
        elif kind == "c_style_for_statement":
            body = node.child_by_field_name("body")
            if body is not None:
                self.branch(lambda: self.statement(body, depth + 1))
        elif kind == "case_statement":
            self.case_statement(node, depth)
        elif kind in ("test_command", "comment", "ERROR", "heredoc_body", "arithmetic_expansion", "file_redirect"):
            return  # a test assumes nothing; a syntax error runs nothing
        else:
            self.statements(node, depth)

    def isolated(self, run: Callable[[], None]) -> None:
        """Run a subshell: its cwd, variables and directory stack do not leak (files it makes do)."""
        saved = (self.scope.cwd, self.scope.cwd_unknown, self.scope.oldpwd, list(self.scope.dirstack), dict(self.vars))
        try:
            run()
        finally:
            (self.scope.cwd, self.scope.cwd_unknown, self.scope.oldpwd, self.scope.dirstack, self.vars) = saved

    def branch(self, run: Callable[[], None]) -> None:
        """A branch that may not run: its predicates warn; a cd or assignment in it leaves the state unknown."""
        cwd, variables = self.scope.cwd, dict(self.vars)
        self.conditional_region(run)
        if self.scope.cwd != cwd:
            self.scope.cwd_unknown = self.scope.cwd_unknown or "a cd in a branch that may not run"
        for name, value in list(self.vars.items()):
            if variables.get(name, "\x00unset") != value:
                self.vars[name] = _DYNAMIC

    def probe(self, run: Callable[[], None], *, habit: bool) -> None:
        """A command whose failure the line expects (left of `||`, an `if` condition, `!`): it assumes nothing.
        Left of a bare `|| true` it cannot break the line either, but a false predicate there is still a wrong
        belief: reported, never blocking."""
        before = len(self.out)
        run()
        if habit:
            self.out[before:] = [replace(p, necessary=False) for p in self.out[before:]]
        else:
            del self.out[before:]

    def and_or(self, node: Node, depth: int) -> None:
        children = [child for child in node.children if child.is_named and child.type != "comment"]
        operators = [child.type for child in node.children if not child.is_named]
        if len(children) != 2 or not operators:
            self.statements(node, depth)
            return
        left, right = children
        operator = operators[0]
        if self.recorded is not None:
            mark = len(self.recorded)
        if operator == "||":
            self.probe(lambda: self.statement(left, depth + 1), habit=self._is_habit(right))
            if self.recorded is not None and len(self.recorded) > mark:
                self.recorded[-1].next_op = "||"
            if not self._is_habit(right):
                self.branch(lambda: self.statement(right, depth + 1))
            return
        self.statement(left, depth + 1)
        if self.recorded is not None and len(self.recorded) > mark:
            self.recorded[-1].next_op = "&&"
        if self._is_test(left):
            self.branch(lambda: self.statement(right, depth + 1))
        else:
            self.statement(right, depth + 1)

    def _is_habit(self, node: Node) -> bool:
        """A bare `true` or `:` (appended out of habit so the line never fails)."""
        if node.type != "command":
            return False
        words = [child for child in node.children if child.is_named]
        return len(words) == 1 and self.text(words[0]) in _HABIT_FALLBACKS

    def _is_test(self, node: Node) -> bool:
        """Whether `node` is a test whose failure is expected: `[ ]`, `test`, `grep -q`, `command -v`, `!`..."""
        kind = node.type
        if kind in ("test_command", "negated_command"):
            return True
        if kind in ("list", "pipeline"):
            named = [child for child in node.children if child.is_named]
            return bool(named) and self._is_test(named[-1])
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            return body is not None and self._is_test(body)
        if kind != "command":
            return False
        name_node = node.child_by_field_name("name")
        name = self.text(name_node) if name_node is not None else ""
        arguments = [self.text(child) for child in node.children_by_field_name("argument")]
        if name in _TEST_COMMANDS:
            return True
        if name == "command" and arguments[:1] and arguments[0] in ("-v", "-V"):
            return True
        if name in ("grep", "egrep", "fgrep", "diff", "cmp") and _QUIET_FLAGS & set(arguments):
            return True
        return name in ("pip", "pip3") and arguments[:1] == ["show"]

    def if_statement(self, node: Node, depth: int) -> None:
        condition = node.child_by_field_name("condition")
        parts = [child for child in node.children if child.is_named]
        if condition is not None:
            self.probe(lambda: self.statement(condition, depth + 1), habit=False)
        for part in parts:
            if part is condition or part.type == "comment":
                continue
            if part.type == "elif_clause":
                elif_condition = part.child_by_field_name("condition")
                if elif_condition is not None:
                    self.probe(functools.partial(self.statement, elif_condition, depth + 1), habit=False)
                for child in part.children:
                    if child.is_named and child is not elif_condition:
                        self.branch(functools.partial(self.statement, child, depth + 1))
            else:
                self.branch(functools.partial(self.statement, part, depth + 1))

    def for_statement(self, node: Node, depth: int) -> None:
        variable = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        if variable is None or body is None:
            return
        name = self.text(variable)
        values: list[str] | None = []
        value_nodes = node.children_by_field_name("value")
        if not value_nodes:
            values = None  # `for x; do`: the positional parameters
        for value in value_nodes:
            words = self.expand(value, depth)
            if words is None or values is None:
                values = None
                continue
            values.extend(words)
        if values is None or not values or len(values) > _MAX_LOOP_VALUES:
            self.vars[name] = _DYNAMIC
            self.branch(lambda: self.statement(body, depth + 1))
            return
        for word in values:  # a loop over literal words runs its body once for each, in every case
            self.vars[name] = unmark(word)
            self.statement(body, depth + 1)

    def case_statement(self, node: Node, depth: int) -> None:
        subject = node.child_by_field_name("value")
        words = self.expand(subject, depth) if subject is not None else None
        value = unmark(words[0]) if words is not None and len(words) == 1 else None
        for item in node.children:
            if item.type != "case_item":
                continue
            patterns = item.children_by_field_name("value")
            body = [child for child in item.children if child.is_named and child not in patterns]
            if value is not None:
                literal = [self.pieces(p, depth) for p in patterns]  # patterns match, they are not expanded
                if all(w is not None for w in literal):
                    if any(fnmatch.fnmatchcase(value, glob_pattern(w or "")) for w in literal):
                        for child in body:
                            self.statement(child, depth + 1)
                        return
                    continue
            for child in body:
                self.branch(functools.partial(self.statement, child, depth + 1))

    # ------------------------------------------------------------------ assignments
    def assign(self, node: Node, depth: int, *, export: bool) -> None:
        name_node = node.child_by_field_name("name")
        if name_node is None:
            return
        name = self.text(name_node)
        if name_node.type == "subscript":  # arr[0]=x
            base = name_node.child_by_field_name("name")
            if base is not None:
                self.vars[self.text(base)] = _DYNAMIC
            return
        value_node = node.child_by_field_name("value")
        appending = any(child.type == "+=" for child in node.children)
        value: str | list[str] | None
        if value_node is None:
            value = ""
        elif value_node.type == "array":
            items: list[str] | None = []
            for child in value_node.children:
                if child.is_named:
                    words = self.expand(child, depth)
                    items = None if words is None or items is None else items + [unmark(w) for w in words]
            value = items
        else:
            words = self.expand(value_node, depth, split=False)
            value = unmark(words[0]) if words is not None and len(words) == 1 else _DYNAMIC
        if appending:
            old = self.vars.get(name, "")
            if old is None or value is None:
                value = _DYNAMIC
            elif isinstance(old, list) or isinstance(value, list):
                value = (old if isinstance(old, list) else [old]) + (value if isinstance(value, list) else [value])
            else:
                value = old + value
        self.vars[name] = value

    def declaration(self, node: Node, depth: int) -> None:
        keyword = self.text(node.children[0]) if node.children else ""
        flags = [self.text(child) for child in node.children[1:] if child.type == "word"
                 and self.text(child).startswith("-")]
        if keyword == "export" and "-n" in flags:
            return
        for child in node.children[1:]:
            if child.type == "variable_assignment":
                self.assign(child, depth, export=keyword == "export")
            elif child.type in ("word", "variable_name") and not self.text(child).startswith("-"):
                self.vars.setdefault(self.text(child), "" if keyword != "export" else self.vars.get(
                    self.text(child), ""))

    # ------------------------------------------------------------------ redirections and simple commands
    def redirected(self, node: Node, depth: int) -> None:
        body = node.child_by_field_name("body")
        redirects, heredoc = self.redirections(node.children_by_field_name("redirect"), depth)
        if body is not None and body.type == "command":
            self.simple(body, redirects, heredoc, depth)
            return
        last = body
        while last is not None and last.type in ("list", "pipeline"):
            named = [child for child in last.children if child.is_named and child.type != "comment"]
            last = named[-1] if named else None
        if body is not None and last is not None and last.type == "command":
            # `cd a && python - <<'EOF'`: the grammar hangs the redirections on the list; bash gives them to its
            # last command.
            self.attached[(last.start_byte, last.end_byte)] = (redirects, heredoc)
            self.statement(body, depth + 1)
            return
        for op, target in redirects:
            self.redirect(op, target)
        if body is not None:
            if heredoc is not None and body.type in ("while_statement", "compound_statement"):
                pass  # a loop reading a heredoc: nothing of the body changes
            self.statement(body, depth + 1)

    def redirections(self, nodes: list[Node], depth: int) -> tuple[list[tuple[str, str]], str | None]:
        redirects: list[tuple[str, str]] = []
        heredoc: str | None = None
        for redirect in nodes:
            if redirect.type == "heredoc_redirect":
                body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
                heredoc = self.text(body) if body is not None else ""
                operator = next((c.type for c in redirect.children if not c.is_named), "<<")
                redirects.append((operator, ""))
                # `cat <<EOF > file`: the file redirect can sit inside the heredoc redirect
                for inner in redirect.children:
                    if inner.type == "file_redirect":
                        redirects.extend(self.redirections([inner], depth)[0])
            elif redirect.type == "herestring_redirect":
                redirects.append(("<<<", ""))
            elif redirect.type == "file_redirect":
                operator = next((c.type for c in redirect.children if not c.is_named), ">")
                destination = redirect.child_by_field_name("destination")
                if destination is None:
                    continue
                if destination.type == "process_substitution":
                    self.isolated(functools.partial(self.statements, destination, depth))
                    continue
                words = self.expand(destination, depth)
                if words is None or len(words) != 1 or destination.type == "number":
                    continue
                redirects.append((operator, unmark(words[0])))
        return redirects, heredoc

    def simple(self, node: Node, redirects: list[tuple[str, str]], heredoc: str | None, depth: int) -> None:
        if self.attached:
            extra = self.attached.pop((node.start_byte, node.end_byte), None)
            if extra is not None:
                redirects, heredoc = redirects + extra[0], extra[1] if extra[1] is not None else heredoc
        env: dict[str, str | None] = {}
        words: list[str] = []
        dynamic: set[int] = set()
        for child in node.children:
            kind = child.type
            if kind == "variable_assignment":
                name_node = child.child_by_field_name("name")
                value_node = child.child_by_field_name("value")
                if name_node is None:
                    continue
                expanded = self.expand(value_node, depth, split=False) if value_node is not None else [""]
                env[self.text(name_node)] = unmark(expanded[0]) if expanded is not None and len(expanded) == 1 \
                    else None
            elif kind in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                more, body = self.redirections([child], depth)
                redirects = redirects + more
                heredoc = body if body is not None else heredoc
            elif kind in ("subshell", "compound_statement"):
                self.statement(child, depth + 1)  # `time ( ... )`
            elif child.is_named and kind != "comment":
                target = child.children[0] if kind == "command_name" and child.children else child
                expanded = self.expand(target, depth)
                if expanded is None:
                    dynamic.add(len(words))
                    words.append(self.text(target))
                else:
                    words.extend(unmark(word) for word in expanded)
        if words and words[0] in self.aliases and 0 not in dynamic:
            alias = self.aliases[words[0]]
            words = [*alias, *words[1:]]
            dynamic = {d + len(alias) - 1 for d in dynamic if d}
        cmd = SimpleCommand(words, redirects, heredoc=heredoc, dynamic=dynamic, env=env)
        if self.recorded is not None:
            self.recorded.append(cmd)
        if words and words[0] == "alias" and 0 not in dynamic:
            self.define_aliases(words[1:])
            return
        if not words:
            for op, destination in redirects:
                self.redirect(op, destination)
            for key, value in env.items():  # a bare assignment stays for the rest of the line
                self.vars[key] = value
            return
        self.command(cmd)

    def define_aliases(self, args: list[str]) -> None:
        for arg in args:
            name, eq, value = arg.partition("=")
            if eq and name:
                self.aliases[name] = value.split()
                self.scope.functions.add(name)

    def call_function(self, name: str, args: list[str], dynamic: set[int]) -> bool:
        if name not in self.functions:
            return False
        if name in self.calling or len(self.calling) >= _MAX_CALL_DEPTH:
            self.scope.opaque = self.scope.opaque or f"the shell function `{name}` calls itself"
            return True
        body, source = self.functions[name]
        saved_source, saved_args = self.src, self.positional_args
        self.src = source
        self.positional_args = [("\x00" if i in dynamic else arg) for i, arg in enumerate(args)]
        self.calling.append(name)
        try:
            self.statement(body, 1)
        finally:
            self.calling.pop()
            self.src, self.positional_args = saved_source, saved_args
        return True

    # ------------------------------------------------------------------ words
    def expand(self, node: Node | None, depth: int, *, split: bool = True) -> list[str] | None:
        """The words `node` expands to, quote-marked (`shell_syntax.QUOTE`), or None when known only at run time.
        Substitutions inside it run first."""
        if node is None:
            return None
        self.tick(depth)
        kind = node.type
        if kind in ("simple_expansion", "expansion") and split:
            value = self.variable(node, depth, quoted=False)
            if value is None:
                return None
            return value if isinstance(value, list) else value.split() if value.strip() else []
        if kind == "string":
            named = [child for child in node.children if child.is_named]
            if len(named) == 1 and named[0].type == "expansion" and self.text(node)[1:-1] == self.text(named[0]):
                value = self.variable(named[0], depth, quoted=True)  # "${files[@]}": one word per element
                if isinstance(value, list):
                    return [_quoted(item) for item in value]
        pieces = self.pieces(node, depth)
        if pieces is None:
            return None
        words = brace_expand(pieces) if "{" in pieces else [pieces]
        if words is None:
            return None
        out: list[str] = []
        for word in words:
            if has_glob(word):
                matches = self.glob(word)
                if matches is None:
                    return None
                out.extend(matches)
            else:
                out.append(word)
        return out

    def pieces(self, node: Node, depth: int) -> str | None:
        """One word's text with quoted characters marked, before brace and glob expansion; None when dynamic."""
        kind = node.type
        if kind in ("word", "number", "command_name", "brace_expression", "special_variable_name", "variable_name",
                    "extglob_pattern"):
            if kind == "command_name" and node.children:
                return self.pieces(node.children[0], depth)
            return _unquoted(self.text(node))
        if kind == "raw_string":
            return _quoted(self.text(node)[1:-1])
        if kind == "ansi_c_string":
            try:
                return _quoted(self.text(node)[2:-1].encode("latin-1", "backslashreplace").decode("unicode_escape"))
            except (UnicodeDecodeError, ValueError):
                return None
        if kind in ("string", "translated_string"):
            return self.string(node, depth)
        if kind in ("simple_expansion", "expansion"):
            value = self.variable(node, depth, quoted=True)
            return None if value is None or isinstance(value, list) else _quoted(value)
        if kind == "command_substitution":
            return self.substitution(node, depth)
        if kind == "process_substitution":
            self.isolated(lambda: self.statements(node, depth))
            return "/dev/fd/63"
        if kind == "concatenation":
            out: list[str] = []
            position = node.start_byte
            for child in node.children:
                if child.start_byte > position:
                    out.append(_unquoted(self.decode(self.src[position:child.start_byte])))
                part = self.pieces(child, depth + 1) if child.is_named else _unquoted(self.text(child))
                if part is None:
                    return None
                out.append(part)
                position = child.end_byte
            return "".join(out)
        return None

    def string(self, node: Node, depth: int) -> str | None:
        out: list[str] = []
        position = node.start_byte + (2 if node.type == "translated_string" else 1)
        end = node.end_byte - 1
        for child in node.children:
            if not child.is_named:
                continue
            if child.start_byte > position:
                out.append(_quoted(_dq_unescape(self.src[position:child.start_byte].decode(
                    "utf-8", "surrogateescape"))))
            if child.type == "string_content":
                out.append(_quoted(_dq_unescape(self.text(child))))
            else:
                part = self.pieces(child, depth + 1)
                if part is None:
                    return None
                out.append(part if child.type != "process_substitution" else _quoted(part))
            position = child.end_byte
        if end > position:
            out.append(_quoted(_dq_unescape(self.decode(self.src[position:end]))))
        return "".join(out)

    def substitution(self, node: Node, depth: int) -> str | None:
        """Run a `$(...)` / backquote substitution (a subshell); its value when it is `pwd`."""
        inner = [child for child in node.children if child.is_named]
        self.isolated(lambda: self.statements(node, depth))
        if len(inner) == 1 and inner[0].type == "command" and self.text(inner[0]).strip() in ("pwd", "pwd -P",
                                                                                                  "pwd -L"):
            return None if self.scope.cwd_unknown else _quoted(self.scope.cwd)
        return None

    def variable(self, node: Node, depth: int, *, quoted: bool) -> str | list[str] | None:
        """The value of `$NAME` / `${NAME}` / `${NAME[@]}` / `${NAME:-default}` when this action knows it."""
        named = [child for child in node.children if child.is_named]
        if not named:
            return None
        head = named[0]
        if head.type == "subscript":
            base = head.child_by_field_name("name")
            index = head.child_by_field_name("index")
            if base is None or index is None:
                return None
            value = self.lookup(self.text(base))
            if self.text(index) in ("@", "*") and isinstance(value, list):
                return value if not quoted or self.text(index) == "@" else " ".join(value)
            return None
        if head.type not in ("variable_name", "special_variable_name"):
            return None
        name = self.text(head)
        operators = [child.type for child in node.children if not child.is_named and child.type not in (
            "$", "${", "}")]
        value = self.lookup(name)
        if not operators:
            return value
        if operators[0] in (":-", "-") and len(named) >= 2:
            if value not in (None, ""):
                return value
            if name in self.vars or name == "PYTHONPATH":
                words = self.expand(named[1], depth, split=False)
                return unmark(words[0]) if words is not None and len(words) == 1 else None
        return None

    def lookup(self, name: str) -> str | list[str] | None:
        if name.isdigit() and self.positional_args is not None:
            position = int(name)
            if position == 0:
                return None
            value = self.positional_args[position - 1] if position <= len(self.positional_args) else ""
            return None if value == "\x00" else value
        if name in ("@", "*") and self.positional_args is not None:
            return None if "\x00" in self.positional_args else list(self.positional_args)
        if name in self.vars:
            return self.vars[name]
        if name == "PWD":
            return None if self.scope.cwd_unknown else self.scope.cwd
        if name == "OLDPWD" and self.scope.oldpwd is not None:
            return self.scope.oldpwd
        if name == "PATH":
            return INHERITED_PATH
        if name == "PYTHONPATH":
            return ""  # the agent's own PYTHONPATH is not known to the gate: its commands are judged without one
        return None

    def glob(self, word: str) -> list[str] | None:
        """A glob's matches in one directory (sorted, as bash gives them); None when it cannot be listed, spans
        directories, matches nothing (bash then passes the pattern as it is), or files made earlier in this action
        could match."""
        cut = word.rfind("/")
        head, name = word[:cut + 1], word[cut + 1:]
        if not name or has_glob(head):
            return None
        directory = unmark(head)
        base = self.scope.resolve(directory or ".")
        if any(made.startswith(base.rstrip("/") + "/") for made in self.scope.created):
            return None
        entries = self.scope.fs.list_dir(base)
        if entries is None:
            return None
        pattern = glob_pattern(name)
        hidden = unmark(name).startswith(".")
        matches = sorted(e for e in entries if (hidden or not e.startswith(".")) and fnmatch.fnmatchcase(e, pattern))
        if not matches:
            # bash passes a pattern that matches nothing as it is; what it then assumes warns, never blocks
            # (a pytest id's [param] is no pattern at all).
            literal = unmark(word)
            if "::" not in literal:
                self.soft_words.add(literal)
            return [_quoted(literal)]
        return [_quoted(directory + match) for match in matches]


def _encode(text: str) -> tuple[bytes, str]:
    """The line as bytes, and the error handler that decodes them back to the same text (a file name that is not
    UTF-8 comes as surrogate escapes; any other lone surrogate passes through)."""
    try:
        return text.encode("utf-8", "surrogateescape"), "surrogateescape"
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass"), "surrogatepass"


def _quoted(text: str) -> str:
    return "".join(QUOTE + ch for ch in text)


def _unquoted(text: str) -> str:
    """An unquoted word as written: a backslash quotes the character after it."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.append(QUOTE + text[i + 1])
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _dq_unescape(text: str) -> str:
    """Inside double quotes a backslash escapes only $ ` " \\ and a newline."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)
