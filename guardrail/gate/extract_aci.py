"""Predicates assumed by SWE-agent ACI commands (open, goto, scroll, create, edit, search_*, find_file, submit)."""

from __future__ import annotations

import re
import shlex

from guardrail.gate.extract_shell import extract_shell
from guardrail.gate.predicates import Predicate
from guardrail.gate.scope import Scope

__all__ = ["ACI_SIGNATURES", "extract_aci"]

# name -> (required args, optional args, usage) as SWE-agent documents them.
ACI_SIGNATURES: dict[str, tuple[int, int, str]] = {
    "open": (1, 1, 'open "<path>" [<line_number>]'),
    "goto": (1, 0, "goto <line_number>"),
    "scroll_up": (0, 0, "scroll_up"),
    "scroll_down": (0, 0, "scroll_down"),
    "create": (1, 0, "create <filename>"),
    "edit": (1, 0, "edit <start_line>:<end_line>"),
    "search_dir": (1, 1, "search_dir <search_term> [<dir>]"),
    "search_file": (1, 1, "search_file <search_term> [<file>]"),
    "find_file": (1, 1, "find_file <file_name> [<dir>]"),
    "submit": (0, 0, "submit"),
}


def extract_aci(command: str, scope: Scope, open_file: str | None, *,
                python_version: tuple[int, ...] | None = None) -> list[Predicate]:
    """Predicates of one ACI command; a command that is not an ACI command is a shell line for the harness."""
    first_line, _, _body = command.strip().partition("\n")
    try:
        words = shlex.split(first_line)
    except ValueError:
        words = first_line.split()
    if not words or words[0] not in ACI_SIGNATURES:
        return extract_shell(command, scope, python_version=python_version)
    name, args = words[0], words[1:]
    required, optional, usage = ACI_SIGNATURES[name]
    out: list[Predicate] = []

    def bad(why: str) -> list[Predicate]:
        out.append(Predicate("tool_args_valid", (name, why), True, "aci", verdict=(False, f"{why}; usage: {usage}")))
        return out

    if len(args) < required:
        return bad(f"{name} needs {required} argument(s), got {len(args)}")
    if len(args) > required + optional:
        # The paper's example: `search_file "ClassDef" 100 1200` -- extra words are not a line range.
        if name in ("search_file", "search_dir", "find_file"):
            kind = "file" if name == "search_file" else "dir"
            out.append(Predicate("tool_path_arg_exists", (scope.resolve(args[1]), kind), True, "aci", hedge=scope.hedge()))
        return bad(f"{name} takes at most {required + optional} argument(s), got {len(args)}")

    def need_open() -> bool:
        out.append(Predicate("editor_file_open", (), True, "aci",
                             verdict=None if open_file else (False, "no file is open in the editor")))
        return open_file is not None

    if name == "open":
        path = scope.resolve(args[0])
        out.append(Predicate("file_exists", (path,), True, "aci", hedge=scope.hedge()))
        if len(args) == 2:
            if not re.fullmatch(r"\d+", args[1]):
                return bad(f"line number {args[1]!r} is not an integer")
            out.append(Predicate("editor_line_in_range", (path, _line_number(args[1])), True, "aci"))
    elif name == "goto":
        if not re.fullmatch(r"\d+", args[0]):
            return bad(f"line number {args[0]!r} is not an integer")
        if need_open():
            out.append(Predicate("editor_line_in_range", (open_file, _line_number(args[0])), True, "aci"))
    elif name in ("scroll_up", "scroll_down"):
        need_open()
    elif name == "create":
        path = scope.resolve(args[0])
        out.append(Predicate("parent_dir_exists", (path,), True, "aci", hedge=scope.hedge()))
        out.append(Predicate("path_absent", (path,), False, "aci"))  # an intended side effect: never blocks
    elif name == "edit":
        match = re.fullmatch(r"(\d+):(\d+)", args[0])
        if match is None:
            return bad(f"{args[0]!r} is not <start_line>:<end_line>")
        start, end = _line_number(match.group(1)), _line_number(match.group(2))
        if end < start - 1:
            return bad(f"end line {end} is before start line {start}")
        if need_open():
            out.append(Predicate("editor_line_in_range", (open_file, start, "edit"), True, "aci"))
    elif name in ("search_dir", "find_file"):
        if len(args) == 2:
            out.append(Predicate("tool_path_arg_exists", (scope.resolve(args[1]), "dir"), True, "aci",
                                 hedge=scope.hedge()))
    elif name == "search_file":
        if len(args) == 2:
            out.append(Predicate("tool_path_arg_exists", (scope.resolve(args[1]), "file"), True, "aci",
                                 hedge=scope.hedge()))
        else:
            need_open()
    return out


def _line_number(digits: str) -> int:
    """A decimal line number; one too long for int() (over 4300 digits) is a number past the end of any file."""
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= 18 else 10**18
