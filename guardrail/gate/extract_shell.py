"""Predicates assumed by a shell command line: executables, files read or run, cd targets, Python run, tests.

The hot path tokenizes with ``shlex`` (about 0.05 ms a command); ``bashlex`` (0.4-0.8 ms, too slow for
the gate's 0.5 ms median budget) parses only lines with substitutions or control flow, and a line
bashlex rejects falls back to shlex. Heredoc bodies are cut out first (bashlex rejects quoted
delimiters), so ``python - <<'EOF'`` and ``cat > a.py <<EOF`` are both understood.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import time
from dataclasses import dataclass, field, replace

import bashlex

from guardrail.gate.budget import SHELL_PARSE_COST, BudgetExceeded
from guardrail.gate.extract_python import extract_python
from guardrail.gate.predicates import Predicate
from guardrail.gate.scope import Scope, normalize_dist

__all__ = ["MAX_COMMAND_CHARS", "SimpleCommand", "extract_shell", "split_commands"]

MAX_COMMAND_CHARS = 100_000  # a longer command line is not analysed: one explicit unknown
MAX_BASHLEX_CHARS = 16_000  # bashlex is pure Python (20-130 us a character): longer complex lines are not parsed
_MAX_DEPTH = 3  # bash -c "bash -c ..." nesting followed

_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_COMPLEX = re.compile(r"\$\(|`|(^|[\s;&|])(if|for|while|until|case|function)\s|(^|[;&|]\s*)[({]"
                      r"|(^|[\s;&|])[A-Za-z_][\w.:-]*\s*\(\s*\)")  # ... or a function definition: name() {
_OPERATORS = {"&&", "||", ";", "|", "&", "\n", ";;", "|&"}
_REDIRECTS = {">", ">>", "<", "&>", ">&", "&>>", ">|", "<>", "<<<"}
_SHELL_BUILTINS = {
    "echo", "printf", "true", "false", "export", "set", "unset", "exit", "return", "test", "[", "[[",
    "read", "wait", "sleep", "type", "command", "alias", "unalias", "hash", "trap", "eval", "exec", "shift",
    "local", "declare", "typeset", "readonly", "let", "ulimit", "umask", "history", "jobs", "fg", "bg",
    "kill", "disown", "shopt", "builtin", "caller", "getopts", "help", "logout", "mapfile", "readarray",
    ":", "break", "continue", "source", ".", "cd", "pushd", "popd", "dirs", "pwd", "then", "fi", "do",
    "done", "else", "elif", "esac", "{", "}", "!", "]]", "time", "coproc", "select", "until", "while", "if",
    "for", "case", "function",
}
_WRAPPERS = {"env", "nohup", "time", "sudo", "xargs", "nice", "stdbuf", "timeout", "command", "exec"}
# Commands whose every non-option argument is a file they read.
_READ_FILES = {"cat", "head", "tail", "less", "more", "wc", "sort", "uniq", "nl", "md5sum", "sha256sum",
               "sha1sum", "xxd", "od", "strings", "tac", "cut", "bat"}  # tr reads stdin only; jq: cmd_jq
_READ_PATHS = {"ls", "stat", "file", "diff", "cmp", "du", "tree", "realpath", "readlink"}
_VALUE_OPTIONS = {
    "head": {"-n", "-c"}, "tail": {"-n", "-c"}, "cut": {"-d", "-f", "-c", "-b"}, "sort": {"-k", "-t", "-o"},
    "grep": {"-e", "-f", "-m", "-A", "-B", "-C", "--include", "--exclude", "--exclude-dir"},
    "egrep": {"-e", "-f", "-m", "-A", "-B", "-C"}, "rg": {"-e", "-g", "-t", "-m", "-A", "-B", "-C", "--glob"},
    "sed": {"-e", "-f"}, "awk": {"-F", "-v", "-f"}, "diff": {"-U", "-C"}, "du": {"-d"}, "tree": {"-L", "-I"},
    "pytest": {"-k", "-m", "-p", "-c", "-o", "-n", "-W", "--deselect", "--ignore", "--rootdir", "--tb",
               "--junitxml", "--maxfail", "--durations", "--timeout", "-r", "--cov", "--log-level"},
    "jq": {"--indent", "--tab"}, "xxd": {"-l", "-s", "-c", "-g", "-o", "-len", "-seek", "-cols"},
    "od": {"-A", "-t", "-N", "-j", "-w"}, "strings": {"-n", "-t"}, "nl": {"-w", "-s", "-b", "-v", "-i"},
    "pip": {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix",
            "--root", "--python-version", "--platform", "--implementation", "--abi", "--only-binary",
            "--no-binary", "--progress-bar", "--log", "--cache-dir", "--src", "--upgrade-strategy", "--timeout",
            "--proxy", "--retries", "--trusted-host", "--config-settings", "-C", "--report"},
}
# Commands that may create files the rest of the line uses, in ways not modelled here.
_MODELLED_WRITERS = {"mkdir", "touch", "cp", "mv", "tee", "cat", "echo", "printf", "ln", "install"}
_NON_WRITERS = (_READ_FILES | _READ_PATHS | {"grep", "egrep", "rg", "sed", "awk", "find", "which", "pip", "jq", "tr",
                                             "pip3", "pytest", "py.test", "rm", "cd", "pushd", "chmod",
                                             "whoami", "date", "env", "export", "true", "false", "sleep"}
                | _SHELL_BUILTINS)


@dataclass
class SimpleCommand:
    """One simple command of a line: words, redirections, the operator after it, and its heredoc body."""

    words: list[str]
    redirects: list[tuple[str, str]] = field(default_factory=list)
    next_op: str = ""
    heredoc: str | None = None
    dynamic: set[int] = field(default_factory=set)  # indexes of words with $vars, globs or substitutions
    subshell: bool = False
    defines: str | None = None  # a shell function definition (name() {...} / function name {...}): its name


def extract_shell(command: str, scope: Scope, *, python_version: tuple[int, ...] | None = None) -> list[Predicate]:
    """Predicates a shell line assumes; `scope` is advanced through it (cwd, created files, installs)."""
    if len(command) > MAX_COMMAND_CHARS:
        return [_not_analysed("the command line", f"{len(command)} characters is over the "
                                                  f"{MAX_COMMAND_CHARS} analysed", "limit")]
    predicates: list[Predicate] = []
    _Interpreter(scope, predicates, python_version).run(split_commands(command))
    return predicates


def _not_analysed(subject: str, why: str, kind: str, origin: str = "action") -> Predicate:
    """An explicit unknown for a part of the action extraction did not look at (never blocks)."""
    return Predicate("analysis_complete", (subject, why, kind), False, origin)


# ------------------------------------------------------------------------------------------------ parsing
def split_commands(command: str) -> list[SimpleCommand]:
    """The simple commands of a line, in order, with their connecting operators."""
    text, heredocs = _cut_heredocs(command.replace("\\\n", ""))
    commands: list[SimpleCommand] | None = None
    if _COMPLEX.search(text):
        if len(text) > MAX_BASHLEX_CHARS:
            raise BudgetExceeded(f"a {len(text)}-character line with substitutions or control flow (at most "
                                 f"{MAX_BASHLEX_CHARS} are parsed)", limit=True)
        SHELL_PARSE_COST.afford(len(text), "parsing the command line")
        started = time.perf_counter()
        commands = _split_bashlex(text)
        SHELL_PARSE_COST.observe(len(text), time.perf_counter() - started, min_units=500)
    if commands is None:
        commands = _split_shlex(text)
    for cmd in commands:
        for index, (op, target) in enumerate(cmd.redirects):
            if op == "<<" and target.startswith("\x00heredoc"):
                cmd.heredoc = heredocs.get(target)
                cmd.redirects[index] = ("<<", "")
    return commands


def _cut_heredocs(command: str) -> tuple[str, dict[str, str]]:
    if "<<" not in command:
        return command, {}
    lines = command.split("\n")
    out: list[str] = []
    bodies: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        pending: list[tuple[str, str, bool]] = []
        out.append(_HEREDOC.sub(functools.partial(_mark_heredoc, line=line, pending=pending, done=len(bodies)),
                                line))
        i += 1
        for key, delimiter, strip_tabs in pending:
            body: list[str] = []
            while i < len(lines) and (lines[i].lstrip("\t") if strip_tabs else lines[i]) != delimiter:
                body.append(lines[i].lstrip("\t") if strip_tabs else lines[i])
                i += 1
            i += 1  # the delimiter line
            bodies[key] = "\n".join(body) + "\n"
    return "\n".join(out), bodies


def _mark_heredoc(match: re.Match[str], line: str, pending: list[tuple[str, str, bool]], done: int) -> str:
    if match.start() > 0 and line[match.start() - 1] == "<":
        return match.group(0)  # `<<<` is a here-string, not a heredoc
    key = f"\x00heredoc{done + len(pending)}"
    pending.append((key, match.group(3), match.group(1) == "-"))
    return "<< " + shlex.quote(key)


# One token of a simple (substitution-free) line: an operator, or a word with its quotes. A compiled
# regex instead of shlex (pure Python, char by char: ~60% of a warm check) serves the 0.5 ms median budget.
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+)
  | (?P<comment>\#[^\n]*)
  | (?P<op>&&|\|\||;;|\|&|&>>|&>|>>|>\||<<<|<<|<>|>&|<&|[;&|\n()<>])
  | (?P<word>(?:[^\s'"\\;&|()<>]+|'[^']*'|"(?:[^"\\]|\\.)*"|\\.)+)
""", re.X | re.S)
_WORD_PART = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)""", re.S)
_DQ_ESCAPE = re.compile(r"""\\([\\"$`\n])""")


def _unquote(word: str) -> str:
    if not any(ch in word for ch in "'\"\\"):
        return word
    out = []
    for single, double, escaped, plain in _WORD_PART.findall(word):
        out.append(single + _DQ_ESCAPE.sub(r"\1", double) + escaped + plain)
    return "".join(out)


def _tokens(text: str) -> list[tuple[str, str]] | None:
    """(kind, text) tokens, kind in op|word|fd; None when quotes do not balance."""
    out: list[tuple[str, str]] = []
    position = 0
    length = len(text)
    while position < length:
        match = _TOKEN.match(text, position)
        if match is None:
            return None
        kind = match.lastgroup or ""
        value = match.group()
        end = match.end()
        if kind == "word":
            follows = text[end:end + 1]
            if value.isdigit() and follows in ("<", ">"):
                out.append(("fd", value))
            else:
                out.append(("dword" if _raw_dynamic(value) else "word", _unquote(value)))
        elif kind == "op":
            out.append(("op", value))
        position = end
        if len(out) > 20_000:
            break
    return out


def _shape(tokens: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Compound commands the fast path understands: case patterns are dropped and their branch bodies'
    words marked dynamic (kind ``dword``), a function definition becomes one ``def`` token (its body may
    never run; calling it is what counts)."""
    out: list[tuple[str, str]] = []
    cases: list[str] = []  # one state per open `case`: head (until `in`), pattern (until `)`), body
    at_start = True
    i = 0
    while i < len(tokens):
        kind, token = tokens[i]
        state = cases[-1] if cases else ""
        if state == "head":
            if kind == "word" and token == "in":
                cases[-1] = "pattern"
            i += 1
            continue
        if state == "pattern":
            if kind == "word" and token == "esac":
                cases.pop()
            elif kind == "op" and token == ")":
                cases[-1] = "body"
                at_start = True
            i += 1
            continue
        if kind == "word" and at_start:
            if token == "case":
                cases.append("head")
                i += 1
                continue
            if token == "esac" and state == "body":
                cases.pop()
                at_start = False
                i += 1
                continue
            name, body = _function_head(tokens, i)
            if name is not None:
                out += [("def", name), ("op", ";")]
                i = _skip_body(tokens, body)
                continue
        if kind == "op" and token == ";;" and state == "body":
            out.append(("op", ";"))
            cases[-1] = "pattern"
            i += 1
            continue
        out.append(("dword" if state == "body" and kind == "word" else kind, token))
        at_start = kind == "op" and token not in _REDIRECTS and token not in ("<<", ")")
        i += 1
    return out


def _function_head(tokens: list[tuple[str, str]], i: int) -> tuple[str | None, int]:
    """(the function's name, where its body starts) when tokens[i] starts `name ()` or `function name [()]`."""
    kind, token = tokens[i]
    if token == "function" and i + 1 < len(tokens) and tokens[i + 1][0] == "word":
        j = i + 2
        if tokens[j:j + 2] == [("op", "("), ("op", ")")]:
            j += 2
        return tokens[i + 1][1], j
    if tokens[i + 1:i + 3] == [("op", "("), ("op", ")")] and re.fullmatch(r"[A-Za-z_][\w.:-]*", token):
        return token, i + 3
    return None, i


def _skip_body(tokens: list[tuple[str, str]], j: int) -> int:
    """The index after a function body: a { ... } group or a ( ... ) subshell (nesting counted)."""
    while j < len(tokens) and tokens[j] == ("op", "\n"):
        j += 1
    if j >= len(tokens):
        return j
    opener = tokens[j]
    if opener not in (("word", "{"), ("op", "(")):
        return j
    closer = ("word", "}") if opener[0] == "word" else ("op", ")")
    depth = 0
    for k in range(j, len(tokens)):
        if tokens[k] == opener:
            depth += 1
        elif tokens[k] == closer:
            depth -= 1
            if depth == 0:
                return k + 1
    return len(tokens)


def _split_shlex(text: str) -> list[SimpleCommand]:
    tokens = _tokens(text)
    if tokens is None:  # unbalanced quotes: shlex's best effort, then a plain split
        lexer = shlex.shlex(text, posix=True, punctuation_chars="();<>|&\n")
        lexer.whitespace = " \t\r"
        lexer.whitespace_split = True
        words: list[str] = []
        try:
            words.extend(lexer)
        except ValueError:
            words = text.replace("\n", " ; ").split()
        tokens = [("op" if w in _OPERATORS or w in _REDIRECTS or w in ("(", ")", "<<") else
                   "dword" if _is_dynamic(w) else "word", w) for w in words]
    tokens = _shape(tokens)
    commands: list[SimpleCommand] = []
    current = SimpleCommand([])
    i = 0
    while i < len(tokens):
        kind, token = tokens[i]
        if kind == "fd":
            pass  # "2>" : the fd number belongs to the redirection that follows
        elif kind == "def":
            if current.words or current.redirects:
                commands.append(current)
            commands.append(SimpleCommand([], defines=token))
            current = SimpleCommand([])
        elif kind == "op" and (token in _OPERATORS or set(token) <= set(";&|\n")) and token not in _REDIRECTS:
            current.next_op = token.strip() or ";"
            if current.words or current.redirects:
                commands.append(current)
            elif commands and current.next_op:
                commands[-1].next_op = current.next_op
            current = SimpleCommand([])
        elif kind == "op" and token in ("(", ")"):
            current.subshell = True
        elif kind == "op":
            target = tokens[i + 1][1] if i + 1 < len(tokens) and tokens[i + 1][0] in ("word", "dword") else ""
            current.redirects.append((token, target))
            i += 1 if target else 0
        else:
            if kind == "dword":
                current.dynamic.add(len(current.words))
            current.words.append(token)
        i += 1
    if current.words or current.redirects:
        commands.append(current)
    return commands


def _raw_dynamic(raw: str) -> bool:
    """Whether a word as written expands at run time: quotes keep globs literal ('[:20]' in python -c code),
    double quotes still expand $ and backquotes."""
    if not any(ch in raw for ch in "'\"\\"):
        return _is_dynamic(raw)
    start = True
    for single, double, _escaped, plain in _WORD_PART.findall(raw):
        if double and ("$" in double or "`" in double):
            return True
        if plain and (_is_dynamic(plain) and not (not start and plain.startswith("~"))):
            return True
        start = start and not (single or double or _escaped or plain)
    return False


def _is_dynamic(word: str) -> bool:
    """A word whose value is known only at run time: variables, globs (a pytest id's [param] is not a glob)."""
    if "$" in word or "*" in word or "?" in word:
        return True
    if "[" in word and "::" not in word:
        return True
    return word.startswith("~") and not word.startswith("~/")


def _split_bashlex(text: str) -> list[SimpleCommand] | None:
    try:
        trees = bashlex.parse(text)
    except Exception:  # noqa: BLE001 - bashlex raises many types on input it does not support
        return None
    commands: list[SimpleCommand] = []
    for tree in trees:
        _walk_bashlex(tree, commands, subshell=False)
    return commands


def _walk_bashlex(node: object, out: list[SimpleCommand], *, subshell: bool) -> None:
    kind = getattr(node, "kind", "")
    if kind == "command":
        cmd = SimpleCommand([], subshell=subshell)
        nested: list[object] = []
        for part in getattr(node, "parts", []):
            pkind = getattr(part, "kind", "")
            if pkind == "word":
                if getattr(part, "parts", None):
                    cmd.dynamic.add(len(cmd.words))
                    nested.extend(p for p in part.parts if getattr(p, "kind", "") == "commandsubstitution")
                elif _is_dynamic(part.word):
                    cmd.dynamic.add(len(cmd.words))
                cmd.words.append(part.word)
            elif pkind == "assignment":
                if not cmd.words:
                    cmd.words.append(part.word)
                    cmd.dynamic.add(0) if getattr(part, "parts", None) else None
                nested.extend(p for p in getattr(part, "parts", []) if getattr(p, "kind", "") == "commandsubstitution")
            elif pkind == "redirect":
                target = part.output
                target_word = getattr(target, "word", "") if not isinstance(target, int) else f"&{target}"
                cmd.redirects.append((part.type, target_word))
        for sub in nested:
            _walk_bashlex(getattr(sub, "command", None), out, subshell=True)
        out.append(cmd)
        return
    if kind == "operator" and out:
        out[-1].next_op = getattr(node, "op", ";")
        return
    if kind == "pipe" and out:
        out[-1].next_op = "|"
        return
    if kind == "function":
        # Defining a function runs nothing: its name becomes a command (what calling it does is unknown).
        name = next((getattr(p, "word", "") for p in getattr(node, "parts", []) if getattr(p, "kind", "") == "word"),
                    "")
        if name:
            out.append(SimpleCommand([], defines=name))
        return
    if kind in ("for", "while", "until", "if", "case"):
        # Loop and branch bodies may not run or run with unknown values: their words count as dynamic.
        start = len(out)
        for part in getattr(node, "parts", []) or []:
            _walk_bashlex(part, out, subshell=True)
        for cmd in out[start:]:
            cmd.dynamic.update(range(len(cmd.words)))
        return
    inner = subshell or (kind == "compound" and any(
        getattr(p, "kind", "") == "reservedword" and getattr(p, "word", "") == "(" for p in getattr(node, "list", [])))
    for part in getattr(node, "parts", None) or getattr(node, "list", None) or []:
        _walk_bashlex(part, out, subshell=inner)


# ------------------------------------------------------------------------------------------------ meaning
_HABIT_FALLBACKS = {"true", ":"}


# python -m MODULE operands: "script" (the first is a script it runs), "input" (INFILE [OUTFILE]),
# "files" (each a file it reads), "paths" (files or directories it walks).
_MODULE_OPERANDS = {
    "cProfile": "script", "profile": "script", "pdb": "script", "trace": "script",
    "json.tool": "input", "tokenize": "files", "py_compile": "files", "dis": "files", "ast": "files",
    "pickletools": "files", "tabnanny": "paths", "compileall": "paths", "pyflakes": "paths", "flake8": "paths",
    "pycodestyle": "paths", "black": "paths", "isort": "paths", "mypy": "paths", "pylint": "paths",
    "doctest": "files",
}
_MODULE_VALUE_OPTIONS = {"-o", "-s", "--indent", "--config", "--config-file", "--select", "--ignore", "--exclude",
                         "--max-line-length", "--python-version", "--line-length", "--target-version", "-l", "-d",
                         "-x", "-j", "--rcfile", "--disable", "--enable", "--format", "--cache-dir"}
_FILE_SUFFIX = re.compile(r"\.(py|pyi|txt|json|cfg|toml|ini|md|rst|yaml|yml|csv|ipynb)$")


def _other_interpreter(name: str, target: tuple[int, ...] | None) -> str | None:
    """Why a versioned interpreter name (python3.13, pip3.12) is not the target interpreter, if it is not."""
    match = re.fullmatch(r"(?:python|pip)(\d)(?:\.(\d+))?", name)
    if match is None or target is None:
        return None
    major, minor = int(match.group(1)), match.group(2)
    if major != target[0] or (minor is not None and int(minor) != target[1]):
        return f"{name} is not the target interpreter ({'.'.join(map(str, target[:2]))})"
    return None


def _local_path(spec: str) -> bool:
    """A pip requirement that names a local directory or archive, not a distribution or a URL."""
    return "://" not in spec and "@" not in spec and (spec.startswith((".", "/", "~")) or "/" in spec
                                                      or spec.endswith((".whl", ".tar.gz", ".zip")))


def _or_guards(commands: list[SimpleCommand]) -> list[str | None]:
    """For each command, whether an `||` later in its and-or list catches its failure: "habit" when the
    fallback is a bare `true`/`:` (appended out of habit), "probe" for any other fallback, else None."""
    guards: list[str | None] = [None] * len(commands)
    pending: list[int] = []  # commands of the current and-or list not yet followed by `||`
    for index, cmd in enumerate(commands):
        pending.append(index)
        if cmd.next_op == "||":
            fallback = commands[index + 1] if index + 1 < len(commands) else None
            habit = fallback is not None and not fallback.redirects and fallback.words[:1] and \
                fallback.words[0] in _HABIT_FALLBACKS and len(fallback.words) == 1 and \
                fallback.next_op in ("", ";", "\n", "&&", "||")
            for earlier in pending:
                guards[earlier] = "habit" if habit else "probe"
            pending = []
        elif cmd.next_op not in ("&&", "|", "|&"):
            pending = []
    return guards


class _Interpreter:
    def __init__(self, scope: Scope, out: list[Predicate], python_version: tuple[int, ...] | None) -> None:
        self.scope = scope
        self.out = out
        self.python_version = python_version

    def add(self, name: str, *args: object, necessary: bool = True, origin: str = "action",
            search: tuple[str, ...] = ()) -> None:
        self.out.append(Predicate(name, tuple(args), necessary, origin, search, self.scope.hedge()))

    def path(self, name: str, word: str, *, necessary: bool = True) -> str | None:
        if not word or "\x00" in word:
            return None
        resolved = self.scope.resolve(word)
        if self.scope.was_created(resolved) or resolved.startswith("/dev/"):
            return resolved
        self.add(name, resolved, necessary=necessary)
        return resolved

    def run(self, commands: list[SimpleCommand]) -> None:
        saved_cwd: str | None = None
        guards = _or_guards(commands)
        for index, cmd in enumerate(commands):
            if cmd.defines is not None:
                self.scope.functions.add(cmd.defines)
                continue
            if cmd.subshell and saved_cwd is None:
                saved_cwd = self.scope.cwd
            elif not cmd.subshell and saved_cwd is not None:
                self.scope.cwd, saved_cwd = saved_cwd, None
            guard = guards[index]
            before = len(self.out)
            self.command(cmd, commands[index + 1:] if cmd.next_op == "|" else [])
            if guard == "probe":
                # Left of `|| echo missing` and the like: a test the agent expects may fail; it assumes nothing.
                del self.out[before:]
            elif guard == "habit":
                # Left of `|| true`: it cannot break the command, so it never blocks, but a false predicate
                # there is still a wrong belief: report it.
                self.out[before:] = [replace(p, necessary=False) for p in self.out[before:]]
        if saved_cwd is not None:
            self.scope.cwd = saved_cwd

    def command(self, cmd: SimpleCommand, piped_into: list[SimpleCommand]) -> None:
        words = list(cmd.words)
        dynamic = set(cmd.dynamic)
        env: dict[str, str] = {}
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
            dynamic = {d - 1 for d in dynamic if d > 0}
        if "PYTHONPATH" in env and env["PYTHONPATH"]:
            pythonpath = tuple(self.scope.resolve(p) for p in env["PYTHONPATH"].split(":") if p and "$" not in p)
        else:
            pythonpath = ()
        for op, target in cmd.redirects:
            self.redirect(op, target)
        if not words:
            if "PYTHONPATH" in env:  # a bare assignment persists for the rest of the line
                self.scope.pythonpath = pythonpath
            return
        saved = self.scope.pythonpath
        if pythonpath:
            self.scope.pythonpath = pythonpath + self.scope.pythonpath
        try:
            self.run_words(words, dynamic, cmd)
        finally:
            self.scope.pythonpath = saved

    def redirect(self, op: str, target: str) -> None:
        if not target or target.startswith("&") or target.startswith("\x00") or op in ("<<", "<<<", ">&"):
            return
        if op in ("<", "<>"):
            self.path("file_exists", target)
        else:
            resolved = self.path("parent_dir_exists", target)
            if resolved:
                self.scope.create(resolved)

    def run_words(self, words: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        program = words[0]
        if 0 in dynamic or not program:
            self.scope.opaque = self.scope.opaque or f"`{program}` is computed at run time"
            return
        name = os.path.basename(program)
        args = words[1:]
        args_dynamic = {d - 1 for d in dynamic if d > 0}
        if name in _WRAPPERS and name not in ("command",) and args:
            skip = 0
            if name == "timeout":
                while skip < len(args) and args[skip].startswith("-"):
                    skip += 2 if args[skip] in ("-s", "-k", "--signal", "--kill-after") else 1
                skip += 1  # the duration
            elif name == "env":
                while skip < len(args) and ("=" in args[skip] or args[skip].startswith("-")):
                    skip += 1
            elif name in ("nice", "stdbuf", "sudo", "xargs"):
                while skip < len(args) and args[skip].startswith("-"):
                    skip += 1
            self.executable(program)
            if skip < len(args):
                self.run_words(args[skip:], {d - skip for d in args_dynamic if d >= skip}, cmd)
            return
        if name in ("cd", "pushd"):
            self.cd(args, args_dynamic)
            return
        if name == "popd":
            self.scope.cwd_unknown = "popd changes to a directory stack entry"
            return
        if name in self.scope.functions and "/" not in program:
            self.scope.opaque = self.scope.opaque or f"the shell function `{name}` may create files"
            return
        if name in _SHELL_BUILTINS and "/" not in program:
            if name in ("source", ".") and args and 0 not in args_dynamic:
                self.path("file_exists", args[0])
            if name == "export":
                for arg in args:
                    if arg.startswith("PYTHONPATH="):
                        self.scope.pythonpath = tuple(self.scope.resolve(p) for p in arg[11:].split(":") if p)
            return
        self.executable(program)
        operands = [a for i, a in enumerate(args) if i not in args_dynamic]
        handler = getattr(self, "cmd_" + re.sub(r"\W", "_", name), None)
        if re.fullmatch(r"python(\d(\.\d+)?)?", name):
            handler = self.cmd_python
        elif re.fullmatch(r"pip\d(\.\d+)?", name):
            handler = self.cmd_pip
        if handler is not None:
            before = len(self.out)
            handler(args, args_dynamic, cmd)
            other = _other_interpreter(name, self.python_version)
            if other:  # python3.13 when the target is 3.11: its modules are not the target's
                self.out[before:] = [replace(p, hedge=p.hedge or other) if p.family == "namespace" else p
                                     for p in self.out[before:]]
        elif name in _READ_FILES:
            for arg in self.positional(name, args, args_dynamic):
                self.path("file_exists", arg)
        elif name in _READ_PATHS:
            for arg in self.positional(name, args, args_dynamic):
                self.path("path_exists", arg)
        del operands
        if name not in _NON_WRITERS and name not in _MODELLED_WRITERS:
            self.scope.opaque = self.scope.opaque or f"an earlier `{name}` in this action may create files"

    def positional(self, name: str, args: list[str], dynamic: set[int]) -> list[str]:
        values = _VALUE_OPTIONS.get(name, set())
        out: list[str] = []
        skip_next = False
        after_dashdash = False
        for index, arg in enumerate(args):
            if skip_next:
                skip_next = False
                continue
            if not after_dashdash and arg == "--":
                after_dashdash = True
                continue
            if not after_dashdash and arg.startswith("-") and arg != "-":
                if arg in values:
                    skip_next = True
                continue
            if index in dynamic or arg == "-":
                continue
            out.append(arg)
        return out

    def executable(self, program: str) -> None:
        if "/" in program:
            self.path("file_exists", program)
            resolved = self.scope.resolve(program)
            if not self.scope.was_created(resolved):
                self.add("executable_available", resolved)
        elif program not in self.scope.functions:
            before = len(self.out)
            self.add("executable_available", program)
            if self.scope.install_unknown or program.lower() in self.scope.installed:
                # `pip install -q pytest && pytest ...`: the install settles the runner (its target is still checked).
                self.out[before] = replace(self.out[before], hedge="installed earlier in this action or episode")

    # ------------------------------------------------------------------ command handlers
    def cd(self, args: list[str], dynamic: set[int]) -> None:
        targets = [a for a in args if not (a.startswith("-") and a != "-")]
        if not targets:
            self.scope.cwd = os.path.expanduser("~")
            return
        if 0 in dynamic or targets[0] == "-":
            self.scope.cwd_unknown = "cd to a directory computed at run time"
            return
        resolved = self.path("dir_exists", targets[0])
        if resolved:
            self.scope.cwd = resolved

    def cmd_mkdir(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        parents = any(a.startswith("-") and "p" in a and not a.startswith("--") or a == "--parents" for a in args)
        for arg in self.positional("mkdir", args, dynamic):
            resolved = self.scope.resolve(arg)
            if not parents:
                self.path("parent_dir_exists", arg)
            self.scope.create(resolved)

    def cmd_touch(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        for arg in self.positional("touch", args, dynamic):
            resolved = self.path("parent_dir_exists", arg)
            if resolved:
                self.scope.create(resolved)

    def cmd_cp(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        operands = self.positional("cp", args, dynamic)
        if len(operands) < 2 or len(operands) != len([a for a in args if not a.startswith("-")]):
            return
        *sources, dest = operands
        for source in sources:
            self.path("path_exists", source)
        dest_path = self.scope.resolve(dest)
        if self.scope.is_dir(dest_path) or self.scope.created.get(dest_path, "") is None:
            for source in sources:
                self.scope.create(os.path.join(dest_path, os.path.basename(source)))
        else:
            self.path("parent_dir_exists", dest)
            self.scope.create(dest_path, self.scope.created.get(self.scope.resolve(sources[0])))

    cmd_mv = cmd_cp

    def cmd_ln(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        operands = self.positional("ln", args, dynamic)
        if operands:
            self.scope.create(self.scope.resolve(operands[-1]))

    def cmd_tee(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        for arg in self.positional("tee", args, dynamic):
            resolved = self.path("parent_dir_exists", arg)
            if resolved:
                self.scope.create(resolved, cmd.heredoc)

    def cmd_cat(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        for arg in self.positional("cat", args, dynamic):
            self.path("file_exists", arg)
        if cmd.heredoc is not None:
            for op, target in cmd.redirects:
                if op in (">", ">>", ">|") and target:
                    self.scope.create(self.scope.resolve(target), cmd.heredoc)

    def cmd_rm(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        if any(a.startswith("-") and "f" in a for a in args):
            return
        for arg in self.positional("rm", args, dynamic):
            self.path("path_exists", arg, necessary=False)

    def cmd_grep(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        operands = self.positional("grep", args, dynamic)
        has_pattern_option = any(a in ("-e", "-f") or a.startswith("--regexp") for a in args)
        quiet = any(a in ("-s", "--no-messages") for a in args)
        files = operands if has_pattern_option else operands[1:]
        if quiet:
            return
        # Without -r grep reads each operand as a file: a directory is "Is a directory" (exit 2).
        recursive = any(a in ("--recursive", "--dereference-recursive", "--directories=recurse", "-d")
                        or a.startswith("-") and not a.startswith("--") and ("r" in a or "R" in a) for a in args)
        for arg in files:
            self.path("path_exists" if recursive else "file_exists", arg)

    cmd_egrep = cmd_grep
    cmd_fgrep = cmd_grep

    def cmd_jq(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        """jq FILTER [FILES...]: the filter is no path; --arg/--argjson take two values, --args ends the files."""
        positional: list[str] = []
        filter_from_file = False
        index = 0
        while index < len(args):
            arg = args[index]
            if arg in ("--args", "--jsonargs"):
                break
            if arg in ("--arg", "--argjson"):
                index += 3
                continue
            if arg in ("--slurpfile", "--rawfile"):
                if index + 2 < len(args) and index + 2 not in dynamic:
                    self.path("file_exists", args[index + 2])
                index += 3
                continue
            if arg in ("-f", "--from-file"):
                filter_from_file = True
            elif arg in ("--indent", "-L"):
                index += 1
            elif not arg.startswith("-") or arg == "-":
                if index not in dynamic and arg != "-":
                    positional.append(arg)
                elif index in dynamic:
                    positional.append("")  # a computed word still takes its place
            index += 1
        files = positional if filter_from_file else positional[1:]
        for arg in files:
            if arg:
                self.path("file_exists", arg)

    def cmd_sed(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        operands = self.positional("sed", args, dynamic)
        has_script_option = any(a in ("-e", "-f") or a.startswith("--expression") for a in args)
        for arg in operands if has_script_option else operands[1:]:
            self.path("file_exists", arg)

    def cmd_awk(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        operands = self.positional("awk", args, dynamic)
        for arg in operands[1:]:
            if "=" not in arg:
                self.path("file_exists", arg)

    def cmd_find(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        for index, arg in enumerate(args):
            if arg.startswith(("-", "(", "!")) or index in dynamic:
                break
            self.path("dir_exists", arg)

    def cmd_bash(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        if "-c" in args:
            at = args.index("-c")
            if at + 1 < len(args) and at + 1 not in dynamic and self.scope.depth < _MAX_DEPTH:
                self.scope.depth += 1
                try:
                    self.run(split_commands(args[at + 1]))
                finally:
                    self.scope.depth -= 1
            return
        operands = [a for a in args if not a.startswith("-")]
        if operands and args.index(operands[0]) not in dynamic:
            self.path("file_exists", operands[0])

    cmd_sh = cmd_bash
    cmd_zsh = cmd_bash
    cmd_dash = cmd_bash

    def cmd_pip(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        self.pip(args, dynamic)

    cmd_pip3 = cmd_pip

    def pip(self, args: list[str], dynamic: set[int]) -> None:
        if "install" not in args:
            return
        start = args.index("install") + 1
        after = args[start:]
        skip_next = False
        for offset, arg in enumerate(after):
            if skip_next:
                skip_next = False
                continue
            given = after[offset + 1] if offset + 1 < len(after) and start + offset + 1 not in dynamic else None
            if arg in ("-r", "--requirement", "-c", "--constraint"):
                skip_next = True
                self.scope.install_unknown = True
                if given:  # pip reads it before anything else: a missing file is "Could not open requirements file"
                    self.path("file_exists", given)
                continue
            if arg.startswith(("--requirement=", "--constraint=")):
                self.scope.install_unknown = True
                self.path("file_exists", arg.partition("=")[2])
                continue
            if arg in ("-e", "--editable"):
                skip_next = True
                self.scope.install_unknown = True
                if given and _local_path(given):
                    self.path("path_exists", given.partition("[")[0])
                continue
            if arg in _VALUE_OPTIONS["pip"]:
                skip_next = True
                continue
            if arg.startswith("-"):
                continue
            if start + offset in dynamic:
                self.scope.install_unknown = True
                continue
            if _local_path(arg):
                self.scope.install_unknown = True
                self.path("path_exists", arg.partition("[")[0])
                continue
            module = normalize_dist(arg)
            if module is None:
                self.scope.install_unknown = True  # a path, URL or archive: what it provides is unknown
            else:
                self.scope.installed.add(module)
                self.scope.installed.add(module.lower())

    def cmd_pytest(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        for index, arg in enumerate(args[:-1]):
            if arg in ("-c", "--config-file") and index + 1 not in dynamic:
                self.path("file_exists", args[index + 1])  # pytest reads it first: "could not load" otherwise
        for arg in args:
            if arg.startswith("--config-file="):
                self.path("file_exists", arg.partition("=")[2])
        for arg in self.positional("pytest", args, dynamic):
            if "=" in arg and not arg.startswith(("/", ".")) and "::" not in arg:
                continue
            path, _, node = arg.partition("::")
            resolved = self.scope.resolve(path)
            if self.scope.was_created(resolved):
                continue
            if node:
                self.add("pytest_target_exists", resolved, node)
            else:
                self.add("path_exists", resolved)

    cmd_py_test = cmd_pytest

    def cmd_python(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        version = self.python_version
        index = 0
        while index < len(args):
            arg = args[index]
            if arg in ("-W", "-X", "--check-hash-based-pycs"):
                index += 2
                continue
            if arg == "-c":
                if index + 1 < len(args) and index + 1 not in dynamic:
                    self.out.extend(extract_python(args[index + 1], self.scope, search=(self.scope.cwd,),
                                                   necessary=True, origin="python -c", target_version=version))
                self.scope.opaque = self.scope.opaque or "an earlier python -c may create files"
                return
            if arg == "-m":
                if index + 1 < len(args) and index + 1 not in dynamic:
                    self.module_run(args[index + 1], args[index + 2:], {d - index - 2 for d in dynamic}, cmd)
                return
            if arg.startswith("-") and arg != "-":
                if arg.startswith("-c") and len(arg) > 2:
                    self.out.extend(extract_python(arg[2:], self.scope, search=(self.scope.cwd,),
                                                   necessary=True, origin="python -c", target_version=version))
                    return
                if arg.startswith("-m") and len(arg) > 2:
                    self.module_run(arg[2:], args[index + 1:], set(), cmd)
                    return
                index += 1
                continue
            if arg == "-" or cmd.heredoc is not None and index in dynamic:
                break
            if index in dynamic:
                return
            self.script(arg)
            return
        if cmd.heredoc is not None:
            self.out.extend(extract_python(cmd.heredoc, self.scope, search=(self.scope.cwd,), necessary=True,
                                           origin="python heredoc", target_version=version))

    def script(self, arg: str) -> None:
        resolved = self.scope.resolve(arg)
        search = (os.path.dirname(resolved),)
        if self.scope.was_created(resolved):
            text = self.scope.created.get(resolved)
        else:
            self.add("file_exists", resolved)
            text = self.scope.read_source(resolved)
        if text is not None:
            # The script's own assumptions are reported but never block: running it may be the diagnosis.
            try:
                self.out.extend(extract_python(text, self.scope, search=search, necessary=False,
                                               origin=f"script {arg}", target_version=self.python_version))
            except BudgetExceeded as exc:
                self.out.append(_not_analysed(f"script {arg}", str(exc), "budget", f"script {arg}"))
        self.scope.opaque = self.scope.opaque or f"an earlier `python {arg}` may create files"

    def module_run(self, module: str, rest: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        hedge = "installed earlier in this action" if self.scope.module_may_be_installed(module) else None
        self.out.append(Predicate("module_runnable", (module,), True, "python -m",
                                  (self.scope.cwd, *self.scope.pythonpath), hedge or self.scope.hedge()))
        if module == "pytest":
            self.cmd_pytest(rest, dynamic, cmd)
        elif module == "pip":
            self.pip(rest, dynamic)
        else:
            self.module_files(module, rest, dynamic)
            self.scope.opaque = self.scope.opaque or f"an earlier `python -m {module}` may create files"

    def module_files(self, module: str, rest: list[str], dynamic: set[int]) -> None:
        """The file operands of `python -m MODULE FILE...` for modules whose operands are files they read."""
        kind = _MODULE_OPERANDS.get(module)
        if kind is None or any(a in ("-m", "-p", "-c", "--command", "--package", "--module") for a in rest):
            return
        operands: list[str] = []
        skip = False
        for index, arg in enumerate(rest):
            if skip:
                skip = False
                continue
            if arg.startswith("-"):
                skip = arg in _MODULE_VALUE_OPTIONS and "=" not in arg
                continue
            if index in dynamic:
                return
            operands.append(arg)
            if kind == "script":
                break  # the rest are the script's own arguments
        if kind == "input" and len(operands) > 1:
            self.path("parent_dir_exists", operands[1])  # json.tool INFILE OUTFILE
            operands = operands[:1]
        for operand in operands:
            # Tools with many value options: only words that look like paths (E501 after --select is no file).
            if kind == "paths" and not ("/" in operand or operand in (".", "..") or _FILE_SUFFIX.search(operand)):
                continue
            self.path("file_exists" if kind in ("script", "input", "files") else "path_exists", operand)

    def cmd_function(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        if args:
            self.scope.functions.add(args[0].removesuffix("()"))
