"""What each shell command assumes: the files it reads or runs, the directories it enters, the programs, modules and tests.

`CommandSemantics` turns one simple command, its words already expanded by the walker
(`guardrail.gate.extract_shell`), into predicates, and advances the `Scope` past its effects (cwd,
created and removed files, installs). Wrappers (``env``, ``timeout``, ``nice``, ``xargs``, ``exec``,
``builtin``...) are looked through to the command they run, with the environment they give it.
"""

from __future__ import annotations

import abc
import os
import re
from dataclasses import dataclass, field, replace

from guardrail.gate.budget import BudgetExceeded
from guardrail.gate.extract_python import extract_python
from guardrail.gate.predicates import Predicate
from guardrail.gate.scope import Scope, normalize_dist

__all__ = ["INHERITED_PATH", "CommandSemantics", "SimpleCommand", "not_analysed"]

INHERITED_PATH = "\x00inherited-PATH\x00"  # `$PATH` before this action changed it: the target PATH the gate knows
_SHELL_BUILTINS = {
    "echo", "printf", "true", "false", "export", "set", "unset", "exit", "return", "test", "[", "[[",
    "read", "wait", "sleep", "type", "command", "alias", "unalias", "hash", "trap", "eval", "shift",
    "local", "declare", "typeset", "readonly", "let", "ulimit", "umask", "history", "jobs", "fg", "bg",
    "kill", "disown", "shopt", "caller", "getopts", "help", "logout", "mapfile", "readarray",
    ":", "break", "continue", "source", ".", "cd", "pushd", "popd", "dirs", "pwd", "then", "fi", "do",
    "done", "else", "elif", "esac", "{", "}", "!", "]]", "coproc", "select", "until", "while", "if",
    "for", "case", "function", "enable", "complete", "compgen", "suspend", "times",
}
# Commands that run the command in their operands; (options that take a value, attached forms handled too).
_WRAPPERS: dict[str, frozenset[str]] = {
    "nohup": frozenset(), "time": frozenset({"-f", "--format", "-o", "--output"}), "exec": frozenset({"-a"}),
    "nice": frozenset({"-n", "--adjustment"}), "stdbuf": frozenset({"-i", "-o", "-e"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}), "chrt": frozenset(), "ionice":
        frozenset({"-c", "-n", "-p"}), "taskset": frozenset(), "unbuffer": frozenset(), "strace": frozenset(
            {"-o", "-e", "-p", "-s"}), "ltrace": frozenset({"-o", "-e"}), "caffeinate": frozenset(),
}
# Commands whose every non-option argument is a file they read.
_READ_FILES = {"cat", "head", "tail", "less", "more", "wc", "sort", "uniq", "nl", "md5sum", "sha256sum",
               "sha1sum", "xxd", "od", "strings", "tac", "cut", "bat", "b2sum", "cksum", "base64", "expand",
               "fold", "fmt", "paste", "column", "hexdump", "iconv", "dos2unix"}  # tr reads stdin only; jq: cmd_jq
_READ_PATHS = {"ls", "stat", "file", "diff", "cmp", "du", "tree", "realpath", "readlink", "ll", "dir"}
_VALUE_OPTIONS = {
    "head": {"-n", "-c"}, "tail": {"-n", "-c", "-s", "--pid"}, "cut": {"-d", "-f", "-c", "-b"},
    "sort": {"-k", "-t", "-o", "-S", "-T", "--parallel"},
    "grep": {"-e", "-f", "-m", "-A", "-B", "-C", "--include", "--exclude", "--exclude-dir", "--color", "-d", "-D"},
    "egrep": {"-e", "-f", "-m", "-A", "-B", "-C"}, "rg": {"-e", "-g", "-t", "-m", "-A", "-B", "-C", "--glob"},
    "sed": {"-e", "-f", "-l"}, "awk": {"-F", "-v", "-f"}, "diff": {"-U", "-C", "-x", "-X", "-I", "--label"},
    "du": {"-d", "--max-depth"}, "tree": {"-L", "-I", "-P"},
    "stat": {"-c", "--format", "--printf", "-t"}, "ls": {"-I", "--ignore", "-w", "--width", "-T", "--hide",
                                                          "--time-style", "--color", "--sort", "--format"},
    "wc": set(), "file": {"-m", "-f", "-F"}, "column": {"-s", "-t", "-c", "-o"}, "fold": {"-w"},
    "paste": {"-d"}, "fmt": {"-w"}, "iconv": {"-f", "-t", "-o"}, "base64": {"-w"},
    "pytest": {"-k", "-m", "-p", "-c", "-o", "-n", "-W", "--deselect", "--ignore", "--rootdir", "--tb",
               "--junitxml", "--maxfail", "--durations", "--timeout", "-r", "--cov", "--log-level", "--basetemp",
               "--confcutdir", "--ignore-glob", "--cov-report", "--dist", "--import-mode", "--capture",
               "--color", "--override-ini", "--log-cli-level", "--junit-xml", "--count", "--reruns"},
    "jq": {"--indent", "--tab"}, "xxd": {"-l", "-s", "-c", "-g", "-o", "-len", "-seek", "-cols"},
    "od": {"-A", "-t", "-N", "-j", "-w"}, "strings": {"-n", "-t"}, "nl": {"-w", "-s", "-b", "-v", "-i"},
    "hexdump": {"-n", "-s", "-e"}, "cmp": {"-n", "-i"},
    "pip": {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix",
            "--root", "--python-version", "--platform", "--implementation", "--abi", "--only-binary",
            "--no-binary", "--progress-bar", "--log", "--cache-dir", "--src", "--upgrade-strategy", "--timeout",
            "--proxy", "--retries", "--trusted-host", "--config-settings", "-C", "--report"},
}
_XARGS_VALUES = {"-a", "--arg-file", "-d", "--delimiter", "-E", "-e", "--eof", "-I", "-i", "--replace", "-L", "-l",
                 "--max-lines", "-n", "--max-args", "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"}
# Commands that may create files the rest of the line uses, in ways not modelled here.
_MODELLED_WRITERS = {"mkdir", "touch", "cp", "mv", "tee", "cat", "echo", "printf", "ln", "install", "rm", "rmdir"}
_NON_WRITERS = (_READ_FILES | _READ_PATHS | {"grep", "egrep", "fgrep", "rg", "sed", "awk", "find", "which", "pip",
                                             "jq", "tr", "pip3", "pytest", "py.test", "cd", "pushd", "chmod",
                                             "whoami", "date", "env", "export", "true", "false", "sleep", "basename",
                                             "dirname", "seq", "yes", "id", "uname", "hostname", "printenv",
                                             "nproc", "expr", "xargs"}
                | _SHELL_BUILTINS)
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
# `python -m` modules that read what they are given and write nothing of their own.
_READ_ONLY_MODULES = {"json.tool", "tokenize", "dis", "ast", "pickletools", "tabnanny", "pyflakes", "flake8",
                      "pycodestyle", "timeit", "platform", "sysconfig", "site", "pydoc", "this", "calendar", "uuid",
                      "base64", "zipfile", "tarfile", "http.server", "venv"}
_GIT_READ_ONLY = {"status", "log", "diff", "show", "rev-parse", "ls-files", "grep", "blame", "describe", "shortlog",
                  "cat-file", "ls-tree", "--version", "version", "help", "remote", "config", "branch", "tag",
                  "reflog", "whatchanged", "name-rev", "show-ref", "for-each-ref", "merge-base"}
# Words in Python code that may write files: code without any of them is not taken to create what follows.
_PYTHON_WRITES = re.compile(r"open\(|write|subprocess|os\.system|popen|shutil|mkdir|makedirs|rename|replace\(|"
                            r"touch|to_csv|to_json|dump|save|exec\(|eval\(|__import__|spawn|symlink|link\(|copy")
_FILE_SUFFIX = re.compile(r"\.(py|pyi|txt|json|cfg|toml|ini|md|rst|yaml|yml|csv|ipynb)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class SimpleCommand:
    """One simple command after expansion: its words, which of them are known only at run time, its redirections,
    the environment assignments in front of it, and its heredoc body."""

    words: list[str]
    redirects: list[tuple[str, str]] = field(default_factory=list)
    next_op: str = ""
    heredoc: str | None = None
    dynamic: set[int] = field(default_factory=set)  # indexes of words with unknown values
    subshell: bool = False
    defines: str | None = None  # a shell function definition: its name
    env: dict[str, str | None] = field(default_factory=dict)  # VAR=value in front of it (None: value unknown)


def not_analysed(subject: str, why: str, kind: str, origin: str = "action") -> Predicate:
    """An explicit unknown for a part of the action extraction did not look at (never blocks)."""
    return Predicate("analysis_complete", (subject, why, kind), False, origin)


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


_PRINTF_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


def _printed(cmd: SimpleCommand) -> str | None:
    """What `echo WORDS` / `printf FORMAT` writes, when every word is known and the format has no directive."""
    if not cmd.words or cmd.dynamic or cmd.words[0] not in ("echo", "printf"):
        return None
    args = cmd.words[1:]
    if cmd.words[0] == "echo":
        newline = True
        while args and args[0] in ("-n", "-e", "-E"):
            newline = newline and args[0] != "-n"
            args = args[1:]
        return " ".join(args) + ("\n" if newline else "")
    if len(args) != 1 or "%" in args[0].replace("%%", ""):
        return None
    return re.sub(r"\\(.)", lambda m: _PRINTF_ESCAPES.get(m.group(1), "\\" + m.group(1)), args[0]).replace("%%", "%")


def _skip_options(args: list[str], values: frozenset[str] | set[str]) -> int:
    """The index of the first operand after the options (a value option takes the next word unless attached)."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return index + 1
        if not arg.startswith("-") or arg == "-":
            return index
        index += 2 if arg in values else 1
    return index


class CommandSemantics(abc.ABC):
    """Predicates and effects of simple commands; the walker subclasses it and provides the shell state."""

    def __init__(self, scope: Scope, out: list[Predicate], python_version: tuple[int, ...] | None) -> None:
        self.scope = scope
        self.out = out
        self.python_version = python_version
        self.vars: dict[str, str | list[str] | None] = {}  # shell variables this action set (None: value unknown)
        self.conditional = 0  # > 0 inside a branch that may not run: effects are not certain
        self.soft_words: set[str] = set()  # globs that matched nothing, passed on as written: never blocking

    # ------------------------------------------------------------------ hooks the walker provides
    @abc.abstractmethod
    def walk_text(self, text: str, origin: str) -> None:
        """Parse `text` (a whole line, or a script a command runs) and walk its commands."""

    def call_function(self, name: str, args: list[str], dynamic: set[int]) -> bool:  # pragma: no cover
        return False

    # ------------------------------------------------------------------ predicates
    def add(self, name: str, *args: object, necessary: bool = True, origin: str = "action",
            search: tuple[str, ...] = ()) -> None:
        self.out.append(Predicate(name, tuple(args), necessary, origin, search, self.scope.hedge()))

    def path(self, name: str, word: str, *, necessary: bool = True) -> str | None:
        if not word or "\x00" in word:
            return None
        if word in self.soft_words:
            necessary = False
        resolved = self.scope.resolve(word)
        if resolved.startswith("/dev/"):
            return resolved
        removed = self.scope.removed_by(resolved)
        if removed is not None and name != "parent_dir_exists":
            self.out.append(Predicate(name, (resolved,), necessary, "action", verdict=(
                False, f"{resolved} is removed earlier in this command ({removed})")))
            return resolved
        if self.scope.was_created(resolved):
            return resolved
        self.add(name, resolved, necessary=necessary)
        return resolved

    # ------------------------------------------------------------------ environment
    def env_value(self, name: str, env: dict[str, str | None] | None = None) -> str | None:
        """The value of an environment variable for a command (its own assignments first), "" when unset here."""
        if env is not None and name in env:
            return env[name]
        value = self.vars.get(name, "")
        if isinstance(value, list):
            return " ".join(value)
        return value

    def _python_path(self, env: dict[str, str | None]) -> tuple[tuple[str, ...], str | None]:
        """The PYTHONPATH entries a command sees, resolved against its cwd, and why they are unknown if they are."""
        value = self.env_value("PYTHONPATH", env)
        if value is None:
            return (), "PYTHONPATH is computed at run time"
        entries = [entry for entry in value.split(":") if "\x00" not in entry] if value else []
        return tuple(self.scope.resolve(entry) if entry else self.scope.cwd for entry in entries), None

    def _command_path(self, env: dict[str, str | None]) -> tuple[tuple[str, ...], str | None]:
        """Directories this action put on PATH in front of the target's, and why PATH is unknown if it is."""
        value = self.env_value("PATH", env)
        if value is None:
            return (), "PATH is computed at run time"
        if value == "":
            return (), None
        entries = value.split(":")
        if INHERITED_PATH not in entries:
            extra = tuple(self.scope.resolve(e) for e in entries if e)
            return extra, None if extra else "PATH is replaced"
        cut = entries.index(INHERITED_PATH)
        return tuple(self.scope.resolve(e) for e in entries[:cut] if e and e != INHERITED_PATH), None

    # ------------------------------------------------------------------ one command
    def command(self, cmd: SimpleCommand) -> None:
        text = _printed(cmd)
        for op, target in cmd.redirects:
            self.redirect(op, target, text if op in (">", ">|") else None)
        if not cmd.words:
            return
        saved = (self.scope.pythonpath, self.scope.path_dirs, self.scope.env_hedge)
        self._enter_env(cmd.env)
        try:
            self.run_words(list(cmd.words), set(cmd.dynamic), cmd)
        finally:
            self.scope.pythonpath, self.scope.path_dirs, self.scope.env_hedge = saved

    def _enter_env(self, env: dict[str, str | None]) -> None:
        pythonpath, why = self._python_path(env)
        dirs, path_why = self._command_path(env)
        self.scope.pythonpath, self.scope.path_dirs = pythonpath, dirs
        self.scope.env_hedge = why or path_why

    def redirect(self, op: str, target: str, text: str | None = None) -> None:
        if not target or target.startswith("&") or target.startswith("\x00") or op in ("<<", "<<<", ">&", "<&"):
            return
        if op in ("<", "<>"):
            self.path("file_exists", target)
        else:
            resolved = self.path("parent_dir_exists", target)
            if resolved:
                self.scope.create(resolved, text)

    def run_words(self, words: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        program = words[0]
        if 0 in dynamic or not program:
            self.scope.opaque = self.scope.opaque or f"`{program}` is computed at run time"
            return
        name = os.path.basename(program)
        args = words[1:]
        args_dynamic = {d - 1 for d in dynamic if d > 0}
        if "/" not in program and self.call_function(name, args, args_dynamic):
            return
        if name in _WRAPPERS or name in ("env", "xargs", "builtin", "command"):
            if self.wrapper(name, program, args, args_dynamic, cmd):
                return
        if name in ("cd", "pushd"):
            self.cd(args, args_dynamic, push=name == "pushd")
            return
        if name == "popd":
            self.popd()
            return
        if name in _SHELL_BUILTINS and "/" not in program:
            if name in ("source", ".") and args and 0 not in args_dynamic:
                self.source(args[0])
            return
        self.executable(program)
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
        if name not in _NON_WRITERS and name not in _MODELLED_WRITERS and handler != self.cmd_python and \
                not self.reads_only(name, args):  # python decides for itself (what its code or module does)
            self.scope.opaque = self.scope.opaque or f"an earlier `{name}` in this action may create files"

    @staticmethod
    def reads_only(name: str, args: list[str]) -> bool:
        """Whether a command known to write in general only reads in this use (git status, git -C d log...)."""
        if name != "git":
            return False
        index = 0
        while index < len(args) and args[index].startswith("-") and args[index] != "--version":
            index += 2 if args[index] in ("-C", "-c", "--git-dir", "--work-tree") else 1
        return index < len(args) and args[index] in _GIT_READ_ONLY

    def wrapper(self, name: str, program: str, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> bool:
        """Look through a wrapper to the command it runs (True when handled)."""
        env: dict[str, str | None] = {}
        cwd: str | None = None
        if name == "env":
            skip = 0
            while skip < len(args):
                arg = args[skip]
                if arg in ("-u", "--unset") and skip + 1 < len(args):
                    env[args[skip + 1]] = ""
                    skip += 2
                    continue
                if arg in ("-C", "--chdir") and skip + 1 < len(args):
                    cwd = args[skip + 1] if skip + 1 not in dynamic else "\x00"
                    skip += 2
                    continue
                if arg in ("-i", "--ignore-environment", "-"):
                    env.update({"PYTHONPATH": "", "PATH": ""})
                elif arg == "--":
                    skip += 1
                    break
                elif _ASSIGNMENT.match(arg):
                    key, _, value = arg.partition("=")
                    env[key] = None if skip in dynamic else value
                elif not arg.startswith("-"):
                    break
                skip += 1
        elif name == "xargs":
            skip = 0
            replace_str: str | None = None
            while skip < len(args):
                arg = args[skip]
                if not arg.startswith("-") or arg == "-":
                    break
                if arg == "--":
                    skip += 1
                    break
                option, eq, attached = arg.partition("=")
                short = arg[:2]
                if short in ("-a",) or option == "--arg-file":
                    value = attached if eq else arg[2:] if len(arg) > 2 and short == "-a" else (
                        args[skip + 1] if skip + 1 < len(args) else "")
                    if value and skip + (0 if eq or len(arg) > 2 else 1) not in dynamic:
                        self.path("file_exists", value)
                if short == "-I" or option in ("--replace", "-i"):
                    replace_str = attached if eq else arg[2:] if len(arg) > 2 and short == "-I" else (
                        "{}" if short == "-i" or option == "--replace" else args[skip + 1] if skip + 1 < len(args)
                        else "{}")
                if option in _XARGS_VALUES and not eq and len(arg) == 2 or option in _XARGS_VALUES and \
                        option.startswith("--") and not eq:
                    skip += 2 if option not in ("-i", "--replace", "-e", "-l") else 1
                    continue
                skip += 1
            self.executable(program)
            rest = args[skip:]
            if not rest:
                return True
            rest_dynamic = {d - skip for d in dynamic if d >= skip}
            if replace_str:
                rest_dynamic |= {i for i, word in enumerate(rest) if replace_str in word and i}
            # The command runs once per input batch: zero times on empty input.
            self.conditional_region(lambda: self.run_words(rest, rest_dynamic, cmd))
            return True
        elif name in ("builtin", "command"):
            if name == "command" and args[:1] and args[0] in ("-v", "-V"):
                return True  # a lookup: it tests, it assumes nothing
            skip = 1 if args[:1] == ["-p"] else 0
            if skip < len(args):
                self.run_words(args[skip:], {d - skip for d in dynamic if d >= skip}, cmd)
            return True
        else:
            skip = _skip_options(args, _WRAPPERS[name])
            if name == "timeout":
                skip += 1  # the duration
            elif name == "nice" and skip < len(args) and re.fullmatch(r"-\d+", args[skip - 1] if skip else ""):
                pass
            elif name == "sudo":
                while skip < len(args) and _ASSIGNMENT.match(args[skip]):
                    key, _, value = args[skip].partition("=")
                    env[key] = None if skip in dynamic else value
                    skip += 1
        if name not in ("exec", "time", "builtin", "command"):
            self.executable(program)
        if skip >= len(args):
            return True
        saved_cwd = self.scope.cwd
        saved = (self.scope.pythonpath, self.scope.path_dirs, self.scope.env_hedge)
        if env:
            merged = dict(cmd.env)
            merged.update(env)
            self._enter_env(merged)
        if cwd is not None:
            if cwd == "\x00":
                self.scope.cwd_unknown = "env -C to a directory computed at run time"
            else:
                resolved = self.path("dir_exists", cwd)
                if resolved:
                    self.scope.cwd = resolved
        try:
            self.run_words(args[skip:], {d - skip for d in dynamic if d >= skip}, cmd)
        finally:
            self.scope.pythonpath, self.scope.path_dirs, self.scope.env_hedge = saved
            self.scope.cwd = saved_cwd
        return True

    def conditional_region(self, run: object) -> None:
        """Run `run()` as a branch that may not run: what it assumes warns, never blocks."""
        before = len(self.out)
        self.conditional += 1
        try:
            run()  # type: ignore[operator]
        finally:
            self.conditional -= 1
            self.out[before:] = [replace(p, necessary=False) for p in self.out[before:]]

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
            self.out.append(Predicate("executable_available", (program,), True, "action", self.scope.path_dirs,
                                      self.scope.hedge() or (self.scope.env_hedge if self.scope.env_hedge and
                                                             self.scope.env_hedge.startswith("PATH") else None)))
            if self.scope.install_unknown or program.lower() in self.scope.installed:
                # `pip install -q pytest && pytest ...`: the install settles the runner (its target is still checked).
                self.out[before] = replace(self.out[before], hedge="installed earlier in this action or episode")
            elif any(created.startswith(d.rstrip("/") + "/") for d in self.scope.path_dirs
                     for created in self.scope.created):
                self.out[before] = replace(self.out[before], hedge="a PATH directory holds files made earlier")

    # ------------------------------------------------------------------ the working directory
    def cd(self, args: list[str], dynamic: set[int], *, push: bool = False) -> None:
        targets = [a for a in args if not (a.startswith("-") and a != "-")]
        if push and not targets:
            self.scope.cwd_unknown = "pushd without a directory swaps the stack"
            return
        if not targets:
            self.scope.cwd = os.path.expanduser("~")
            return
        before = self.scope.cwd
        if targets[0] == "-":
            if self.scope.oldpwd is None:
                self.scope.cwd_unknown = "cd - returns to a directory from before this action"
                return
            self.scope.cwd, self.scope.oldpwd = self.scope.oldpwd, before
            return
        if args.index(targets[0]) in dynamic:
            self.scope.cwd_unknown = "cd to a directory computed at run time"
            return
        resolved = self.path("dir_exists", targets[0])
        if resolved:
            if push:
                self.scope.dirstack.append(before)
            self.scope.oldpwd = before
            self.scope.cwd = resolved

    def popd(self) -> None:
        if not self.scope.dirstack:
            self.scope.cwd_unknown = "popd returns to a directory stack entry from before this action"
            return
        self.scope.oldpwd = self.scope.cwd
        self.scope.cwd = self.scope.dirstack.pop()

    def source(self, word: str) -> None:
        """`source FILE` / `. FILE`: the file must exist; a small workspace script is read as shell (what it
        exports counts for the rest of the command)."""
        resolved = self.path("file_exists", word)
        if resolved is None or self.scope.depth >= 3:
            return
        text = self.scope.created.get(resolved) if self.scope.was_created(resolved) else \
            self.scope.read_source(resolved) if self.scope.fs.in_workspace(resolved) else None
        if text is None or len(text) > 64_000:
            self.scope.opaque = self.scope.opaque or f"`source {word}` may change anything"
            return
        self.scope.depth += 1
        before = len(self.out)
        try:
            self.walk_text(text, f"source {word}")
        finally:
            self.scope.depth -= 1
        # What the sourced file itself assumes is its own business: reported, never blocking.
        self.out[before:] = [replace(p, necessary=False) for p in self.out[before:]]

    # ------------------------------------------------------------------ files
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

    def cmd_cp(self, args: list[str], dynamic: set[int], cmd: SimpleCommand, *, move: bool = False) -> None:
        operands = self.positional("cp", args, dynamic)
        if "-t" in args or any(a.startswith("--target-directory") for a in args):
            return
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
        if move and not self.conditional:
            for source in sources:
                self.scope.remove(self.scope.resolve(source), "mv")

    def cmd_mv(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        self.cmd_cp(args, dynamic, cmd, move=True)

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
        force = any(a.startswith("-") and not a.startswith("--") and "f" in a or a == "--force" for a in args)
        for arg in self.positional("rm", args, dynamic):
            if not force:
                self.path("path_exists", arg, necessary=False)
            if not self.conditional:
                self.scope.remove(self.scope.resolve(arg), "rm")

    def cmd_rmdir(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        for arg in self.positional("rmdir", args, dynamic):
            if not self.conditional:
                self.scope.remove(self.scope.resolve(arg), "rmdir")

    def cmd_grep(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        operands = self.positional("grep", args, dynamic)
        has_pattern_option = any(a in ("-e", "-f") or a.startswith(("--regexp", "--file")) for a in args)
        quiet = any(a in ("-s", "--no-messages") for a in args)
        files = operands if has_pattern_option else operands[1:]
        if quiet:
            return
        # Without -r grep reads each operand as a file: a directory is "Is a directory" (exit 2).
        recursive = any(a in ("--recursive", "--dereference-recursive", "--directories=recurse")
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
        has_program_file = "-f" in args
        for arg in operands if has_program_file else operands[1:]:
            if "=" not in arg:
                self.path("file_exists", arg)

    def cmd_find(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        index = 0
        while index < len(args) and args[index] in ("-H", "-L", "-P") or index < len(args) and \
                args[index].startswith("-O"):
            index += 1
        for position in range(index, len(args)):
            arg = args[position]
            if arg.startswith(("-", "(", "!")) or position in dynamic:
                break
            self.path("dir_exists", arg)
        for position, arg in enumerate(args):
            if arg in ("-exec", "-execdir", "-ok", "-okdir") and position + 1 < len(args):
                end = next((i for i in range(position + 1, len(args)) if args[i] in (";", "+")), len(args))
                words = args[position + 1:end]
                inner_dynamic = {i - position - 1 for i in dynamic if position < i < end}
                inner_dynamic |= {i for i, word in enumerate(words) if "{}" in word and i}
                if words and 0 not in inner_dynamic:
                    # Runs once per match: zero times when nothing matches.
                    self.conditional_region(lambda w=words, d=inner_dynamic: self.run_words(w, d, SimpleCommand(w)))

    def cmd_git(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        """git -C DIR, and the file operands of git apply."""
        base = self.scope.cwd
        index = 0
        while index < len(args) and args[index].startswith("-"):
            if args[index] == "-C" and index + 1 < len(args):
                if index + 1 in dynamic:
                    return
                resolved = self.path("dir_exists", args[index + 1])
                if resolved is None:
                    return
                base = resolved
                index += 2
                continue
            index += 2 if args[index] in ("-c", "--git-dir", "--work-tree", "--namespace") else 1
        if index < len(args) and args[index] == "apply" and index not in dynamic:
            rest = args[index + 1:]
            values = {"-p", "-C", "--directory", "--exclude", "--include", "--whitespace", "-S"}
            saved, self.scope.cwd = self.scope.cwd, base
            try:
                for arg in self.positional("git-apply", rest, {d - index - 1 for d in dynamic if d > index}):
                    if arg not in values:
                        self.path("file_exists", arg)
            finally:
                self.scope.cwd = saved

    def cmd_make(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        """make -C DIR and -f FILE (read relative to DIR)."""
        saved = self.scope.cwd
        try:
            index = 0
            while index < len(args):
                arg = args[index]
                value = args[index + 1] if index + 1 < len(args) and index + 1 not in dynamic else None
                if arg in ("-C", "--directory") and value:
                    resolved = self.path("dir_exists", value)
                    if resolved is None:
                        return
                    self.scope.cwd = resolved
                    index += 2
                    continue
                if arg in ("-f", "--file", "--makefile") and value:
                    self.path("file_exists", value)
                    index += 2
                    continue
                index += 1
        finally:
            self.scope.cwd = saved

    def cmd_bash(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        for at, arg in enumerate(args):
            if arg == "-c" or arg.startswith("-") and not arg.startswith("--") and "c" in arg and at + 1 < len(args):
                if at + 1 < len(args) and at + 1 not in dynamic and self.scope.depth < 3:
                    self.scope.depth += 1
                    saved = self.scope.cwd, dict(self.vars)
                    try:
                        self.walk_text(args[at + 1], "bash -c")
                    finally:
                        self.scope.depth -= 1
                        self.scope.cwd, self.vars = saved
                return
            if not arg.startswith("-") or arg == "-":
                break
        operands = [a for a in args if not a.startswith("-")]
        if operands and args.index(operands[0]) not in dynamic:
            self.path("file_exists", operands[0])

    cmd_sh = cmd_bash
    cmd_zsh = cmd_bash
    cmd_dash = cmd_bash

    # ------------------------------------------------------------------ Python
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
            removed = self.scope.removed_by(resolved)
            if removed is not None:
                self.path("path_exists", path)
                continue
            if self.scope.was_created(resolved):
                continue
            if node:
                self.add("pytest_target_exists", resolved, node)
            else:
                self.add("path_exists", resolved)

    cmd_py_test = cmd_pytest

    def python_code(self, code: str, origin: str, *, necessary: bool = True) -> None:
        self.out.extend(extract_python(code, self.scope, search=(self.scope.cwd,), necessary=necessary,
                                       origin=origin, target_version=self.python_version))

    def cmd_python(self, args: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        index = 0
        while index < len(args):
            arg = args[index]
            if arg in ("-W", "-X", "--check-hash-based-pycs"):
                index += 2
                continue
            if arg == "-c":
                code = args[index + 1] if index + 1 < len(args) and index + 1 not in dynamic else None
                if code is not None:
                    self.python_code(code, "python -c")
                if code is None or _PYTHON_WRITES.search(code):
                    self.scope.opaque = self.scope.opaque or "an earlier python -c may create files"
                return
            if arg == "-m":
                if index + 1 < len(args) and index + 1 not in dynamic:
                    self.module_run(args[index + 1], args[index + 2:], {d - index - 2 for d in dynamic}, cmd)
                return
            if arg.startswith("-") and arg != "-":
                if arg.startswith("-c") and len(arg) > 2:
                    self.python_code(arg[2:], "python -c")
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
            self.python_code(cmd.heredoc, "python heredoc")

    def script(self, arg: str) -> None:
        resolved = self.scope.resolve(arg)
        search = (os.path.dirname(resolved),)
        written_here = self.scope.was_created(resolved) and self.scope.removed_by(resolved) is None
        if written_here:
            text = self.scope.created.get(resolved)
        else:
            self.path("file_exists", arg)
            text = self.scope.read_source(resolved)
        if text is not None:
            # A script already there may be the diagnosis (running it shows the error): its assumptions are
            # reported but never block. One this same command just wrote is the agent's own code: it must run.
            try:
                self.out.extend(extract_python(text, self.scope, search=search, necessary=written_here,
                                               origin=f"script {arg}", target_version=self.python_version))
            except BudgetExceeded as exc:
                self.out.append(not_analysed(f"script {arg}", str(exc), "budget", f"script {arg}"))
        self.scope.opaque = self.scope.opaque or f"an earlier `python {arg}` may create files"

    def module_run(self, module: str, rest: list[str], dynamic: set[int], cmd: SimpleCommand) -> None:
        hedge = "installed earlier in this action" if self.scope.module_may_be_installed(module) else None
        self.out.append(Predicate("module_runnable", (module,), True, "python -m",
                                  (self.scope.cwd, *self.scope.pythonpath),
                                  hedge or self.scope.hedge() or self.scope.module_hedge(module)))
        if module == "pytest":
            self.cmd_pytest(rest, dynamic, cmd)
        elif module == "pip":
            self.pip(rest, dynamic)
        else:
            self.module_files(module, rest, dynamic)
            if module not in _READ_ONLY_MODULES:
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
