"""Predicates assumed by SWE-agent ACI commands, read with the signatures of the tool bundles the harness loaded.

The bundle table (`guardrail.gate.bundles`) says which commands exist and how their arguments are
laid out; this module knows what each known command assumes (a file to open exists, a line is in
range, a search directory exists, ``str_replace_editor``'s old_str occurs once). A line whose first
word is no command of any known bundle is a shell line for the harness, except that its first
word is never reported as a missing executable: the harness may provide it.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping
from typing import Any

from guardrail.gate.bundles import BundleCommand, known_commands, signature_tokens
from guardrail.gate.extract_shell import extract_shell
from guardrail.gate.extract_tool import extract_tool
from guardrail.gate.predicates import Predicate
from guardrail.gate.scope import Scope

__all__ = ["ACI_SIGNATURES", "editor_args", "extract_aci"]


def _counts(command: BundleCommand) -> tuple[int, int, str]:
    tokens = signature_tokens(command.signature)
    required = sum(1 for _, needed in tokens if needed)
    return required, len(tokens) - required, command.usage


# name -> (required args, optional args, usage) of each shipped line command (the first form of each name).
ACI_SIGNATURES: dict[str, tuple[int, int, str]] = {
    name: _counts(forms[0]) for name, forms in known_commands().items() if name != "str_replace_editor"
}
_UNKNOWN_COMMAND = "not a command of any known tool bundle: the harness may provide it"


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def editor_args(command: str, form: BundleCommand | None = None) -> dict[str, Any] | None:
    """The arguments of a ``str_replace_editor`` action line as the tool call that produced it.

    SWE-agent renders a function call as ``str_replace_editor <command> <path> --file_text '...'
    --view_range 1 50 ...`` (string values shell-quoted); this reverses it. None when the line is not
    one (too few words, an unknown flag).
    """
    flags = {"file_text": "string", "view_range": "array", "old_str": "string", "new_str": "string",
             "insert_line": "integer"}
    if form is not None:
        flags = {a.name: a.type for a in form.arguments if a.argument_format.startswith("--")}
    try:
        words = shlex.split(command, posix=True)
    except ValueError:
        return None
    if len(words) < 3 or words[0] != "str_replace_editor":
        return None
    args: dict[str, Any] = {"command": words[1], "path": words[2]}
    rest = words[3:]
    while rest:
        flag = rest.pop(0)
        name = flag[2:] if flag.startswith("--") else None
        if name not in flags or not rest:
            return None
        if flags[name] == "array":
            values: list[Any] = []
            while rest and re.fullmatch(r"-?\d+", rest[0]):
                values.append(int(rest.pop(0)))
            args[name] = values
        elif flags[name] == "integer":
            value = rest.pop(0)
            args[name] = int(value) if re.fullmatch(r"-?\d+", value) else value
        else:
            args[name] = rest.pop(0)
    return args


def _hedge_first_word(predicates: list[Predicate], name: str) -> list[Predicate]:
    return [dataclasses.replace(p, hedge=p.hedge or _UNKNOWN_COMMAND)
            if p.name == "executable_available" and p.args[:1] == (name,) else p for p in predicates]


def _misfit(form: BundleCommand, args: list[str], has_body: bool) -> tuple[float, str] | None:
    """Why a line does not fit one form of its command, with how far off it is (None: it fits)."""
    tokens = signature_tokens(form.signature)
    required = sum(1 for _, needed in tokens if needed)
    if tokens and ":" in tokens[0][0]:  # edit <start_line>:<end_line> (its first line says which form it is)
        if not args or re.fullmatch(r"\d+:\d+", args[0]) is None:
            return 3.0, f"{args[0] if args else 'nothing'!r} is not <start_line>:<end_line>"
        return None if len(args) == 1 else (len(args) - 1, f"takes only <start_line>:<end_line> on its line, "
                                                           f"got {len(args)} words")
    if form.end_name is not None and not has_body:
        return 1.5, f"needs its text on the following lines, ended by {form.end_name}"
    if len(args) < required:
        return required - len(args), f"needs {required} argument(s), got {len(args)}"
    if len(args) > len(tokens):
        return len(args) - len(tokens), f"takes at most {len(tokens)} argument(s), got {len(args)}"
    integers = {f"<{a.name}>" for a in form.arguments if a.type in ("integer", "int")}
    for (token, _), arg in zip(tokens, args, strict=False):
        if token.strip('"') in integers and not re.fullmatch(r"-?\d+", arg):
            label = token.strip('"<>')
            return 0.5, f"{label} {arg!r} is not an integer"
    return None


def _pick_form(forms: list[BundleCommand], args: list[str], has_body: bool) -> tuple[BundleCommand, str | None]:
    """The form of a command this line uses: the first of the forms the bundles define for the name that fits it
    (``edit`` has four, ``insert`` two shapes), or the closest one with why none fits."""
    misfits: list[tuple[float, int, BundleCommand, str]] = []
    for position, form in enumerate(forms):
        found = _misfit(form, args, has_body)
        if found is None:
            return form, None
        misfits.append((found[0], position, form, found[1]))
    _, _, form, why = min(misfits, key=lambda item: (item[0], item[1]))
    if len(forms) > 1:
        others = "; ".join(f.usage.splitlines()[0] for f in forms if f is not form)
        why = f"{why} (other forms: {others})"
    return form, why


def extract_aci(command: str, scope: Scope, open_file: str | None, *,
                schemas: Mapping[str, Mapping[str, Any]] | None = None,
                python_version: tuple[int, ...] | None = None) -> list[Predicate]:
    """Predicates of one ACI action line (its first word a bundle command); any other line is a shell line."""
    commands = known_commands(schemas)
    first_line, _, body = command.strip().partition("\n")
    words = _words(first_line)
    if not words or words[0] not in commands:
        predicates = extract_shell(command, scope, python_version=python_version)
        return _hedge_first_word(predicates, words[0]) if words else predicates
    name, args = words[0], words[1:]
    forms = commands[name]
    if name == "str_replace_editor":
        parsed = editor_args(command.strip(), forms[0])
        if parsed is None:
            usage = forms[0].usage
            return [Predicate("tool_args_valid", (name, "unparsable"), True, "aci",
                              verdict=(False, f"cannot read the str_replace_editor arguments; usage: {usage}"))]
        return extract_tool(name, parsed, scope, open_file=open_file, schemas={}, python_version=python_version)
    form, misfit = _pick_form(forms, args, bool(body.strip()))
    required, optional, usage = _counts(form)
    out: list[Predicate] = []

    def bad(why: str) -> list[Predicate]:
        out.append(Predicate("tool_args_valid", (name, why), True, "aci", verdict=(False, f"{why}; usage: {usage}")))
        return out

    if misfit is not None and len(forms) > 1:
        return bad(f"{name} fits none of its forms: {misfit}")

    if len(args) < required:
        return bad(f"{name} needs {required} argument(s), got {len(args)}")
    if len(args) > required + optional:
        # The paper's example: `search_file "ClassDef" 100 1200` -- extra words are not a line range.
        if name in ("search_file", "search_dir", "find_file"):
            kind = "file" if name == "search_file" else "dir"
            out.append(Predicate("tool_path_arg_exists", (scope.resolve(args[1]), kind), True, "aci", hedge=scope.hedge()))
        return bad(f"{name} takes at most {required + optional} argument(s), got {len(args)}")
    integers = [(token, arg) for (token, _), arg in zip(signature_tokens(form.signature), args, strict=False)
                if any(a.type in ("integer", "int") and f"<{a.name}>" == token.strip('"') for a in form.arguments)]
    for token, arg in integers:
        if not re.fullmatch(r"-?\d+", arg):
            return bad(f"{token.strip('<>')} {arg!r} is not an integer")

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
        if need_open():
            out.append(Predicate("editor_line_in_range", (open_file, _line_number(args[0])), True, "aci"))
    elif name in ("scroll_up", "scroll_down"):
        need_open()
    elif name == "create":
        path = scope.resolve(args[0])
        out.append(Predicate("parent_dir_exists", (path,), True, "aci", hedge=scope.hedge()))
        out.append(Predicate("path_absent", (path,), False, "aci"))  # an intended side effect: never blocks
        scope.create(path, "")
    elif name == "edit":
        _edit(form, args, scope, open_file, out, bad, need_open)
    elif name == "insert":
        if need_open() and len(args) == 2:
            out.append(Predicate("editor_line_in_range", (open_file, _line_number(args[1]), "insert"), True, "aci"))
    elif name == "set_cursors":
        start, end = _line_number(args[0]), _line_number(args[1])
        if end < start:
            return bad(f"end line {end} is before start line {start}")
        if need_open():
            out.append(Predicate("editor_line_in_range", (open_file, start), True, "aci"))
            out.append(Predicate("editor_line_in_range", (open_file, end), True, "aci"))
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
    elif name in ("filemap", "view_image"):
        out.append(Predicate("file_exists", (scope.resolve(args[0]),), True, "aci", hedge=scope.hedge()))
    return out


def _edit(form: BundleCommand, args: list[str], scope: Scope, open_file: str | None, out: list[Predicate],
          bad: Any, need_open: Any) -> None:
    """``edit`` in the form the harness loaded: a line range, search/replace, a window rewrite or between cursors."""
    tokens = signature_tokens(form.signature)
    if tokens and ":" in tokens[0][0]:  # edit <start_line>:<end_line>
        match = re.fullmatch(r"(\d+):(\d+)", args[0])
        if match is None:
            bad(f"{args[0]!r} is not <start_line>:<end_line>")
            return
        start, end = _line_number(match.group(1)), _line_number(match.group(2))
        if end < start - 1:
            bad(f"end line {end} is before start line {start}")
            return
        if need_open():
            out.append(Predicate("editor_line_in_range", (open_file, start, "edit"), True, "aci"))
        return
    # search/replace, rewrite and cursor edits work on the open file's window; the text to find may occur
    # more than once (the first occurrence in the window is replaced), so no uniqueness predicate here.
    need_open()


def _line_number(digits: str) -> int:
    """A decimal line number; one too long for int() (over 4300 digits) is a number past the end of any file."""
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= 18 else 10**18
