"""SWE-agent tool bundles: the command signatures the harness loaded, shipped for its default bundles or read from a config.yaml.

A SWE-agent harness gives the model commands from *tool bundles* (``tools/<bundle>/config.yaml``: each
command's ``signature``, ``arguments`` and, for multi-line input, ``end_name``). The gate needs those
signatures to read an ACI action (``open "x.py" 10``, ``edit 3:5 ... end_of_edit``, ``str_replace_editor
create /repo/a.py --file_text '...'``) instead of taking its first word for a shell executable. This
module ships the signatures of the bundles SWE-agent 1.x uses by default (and the 0.x cursor bundle),
reads a bundle's own ``config.yaml`` when given, and carries loaded commands to the gate inside the
tool schemas (``Gate(tools=bundle_tools(...))``) under the ``x-swe-agent`` key, so no new gate
parameter is needed. Nothing here runs anything of a bundle: its config is read as data.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Argument",
    "BundleCommand",
    "BundleError",
    "SHIPPED_BUNDLES",
    "bundle_tools",
    "known_commands",
    "load_bundle",
    "signature_tokens",
]

MAX_CONFIG_BYTES = 1 << 20  # a bundle config bigger than this is refused, not parsed
SCHEMA_KEY = "x-swe-agent"  # where a tool schema carries the command's signature for the gate


class BundleError(ValueError):
    """A bundle config that cannot be read at all (missing, not YAML, no ``tools`` mapping)."""


@dataclass(frozen=True, slots=True)
class Argument:
    """One argument as a bundle's config.yaml declares it (the fields the gate uses)."""

    name: str
    type: str = "string"
    required: bool = True
    argument_format: str = "{{value}}"


@dataclass(frozen=True, slots=True)
class BundleCommand:
    """One command of a tool bundle: its signature, arguments and the line that ends its multi-line input."""

    name: str
    signature: str
    arguments: tuple[Argument, ...] = ()
    end_name: str | None = None
    bundle: str = ""

    @property
    def usage(self) -> str:
        return " ".join(self.signature.split()) if self.end_name is None else self.signature.strip()

    def schema(self) -> dict[str, Any]:
        """The command as a JSON schema of its arguments (what a function-calling harness sends), plus its signature."""
        json_type = {"integer": "integer", "int": "integer", "boolean": "boolean", "bool": "boolean",
                     "array": "array", "number": "number"}
        return {
            "type": "object",
            "properties": {a.name: {"type": json_type.get(a.type, "string")} for a in self.arguments},
            "required": [a.name for a in self.arguments if a.required],
            SCHEMA_KEY: {"signature": self.signature, "end_name": self.end_name, "bundle": self.bundle,
                         "arguments": [[a.name, a.type, a.required, a.argument_format] for a in self.arguments]},
        }

    @classmethod
    def from_schema(cls, name: str, schema: Mapping[str, Any]) -> BundleCommand | None:
        meta = schema.get(SCHEMA_KEY)
        if not isinstance(meta, Mapping) or not isinstance(meta.get("signature"), str):
            return None
        arguments = tuple(Argument(str(a[0]), str(a[1]), bool(a[2]), str(a[3]))
                          for a in meta.get("arguments") or () if isinstance(a, list | tuple) and len(a) == 4)
        end = meta.get("end_name")
        return cls(name, meta["signature"], arguments, end if isinstance(end, str) else None,
                   str(meta.get("bundle") or ""))


def signature_tokens(signature: str) -> list[tuple[str, bool]]:
    """The first line of a signature after the command name, as (token, required) pairs.

    ``open "<path>" [<line_number>]`` gives ``[("<path>", True), ("<line_number>", False)]``.
    """
    first = signature.strip().splitlines()[0] if signature.strip() else ""
    words = first.split()[1:]
    return [(w.strip("[]"), not w.startswith("[")) for w in words]


def _arg(name: str, type_: str = "string", required: bool = True, fmt: str = "{{value}}") -> Argument:
    return Argument(name, type_, required, fmt)


def _bundle(name: str, *commands: tuple[str, str, tuple[Argument, ...], str | None]) -> tuple[BundleCommand, ...]:
    return tuple(BundleCommand(cmd, sig, args, end, name) for cmd, sig, args, end in commands)


# The bundles under SWE-agent 1.x's tools/ that its shipped configs load, and the cursor commands of the 0.x
# configs. Signatures and argument lists as in each bundle's config.yaml. ``windowed_edit_rewrite``'s one-argument
# ``edit <text>`` is left out on purpose: next to the line-range form it would make ``edit 3-5`` a valid rewrite;
# a harness that loads it says so with its config.yaml (`bundle_tools`).
_WINDOWED = (
    ("open", 'open "<path>" [<line_number>]', (_arg("path"), _arg("line_number", "integer", False)), None),
    ("goto", "goto <line_number>", (_arg("line_number", "integer"),), None),
    ("scroll_up", "scroll_up", (), None),
    ("scroll_down", "scroll_down", (), None),
    ("create", "create <filename>", (_arg("filename"),), None),
)
SHIPPED_BUNDLES: dict[str, tuple[BundleCommand, ...]] = {
    "windowed": _bundle("windowed", *_WINDOWED),
    "defaults": _bundle("defaults", *_WINDOWED),
    "windowed_edit_linting": _bundle("windowed_edit_linting", (
        "edit", "edit <start_line>:<end_line>\n<replacement_text>\nend_of_edit",
        (_arg("start_line", "integer"), _arg("end_line", "integer"), _arg("replacement_text")), "end_of_edit")),
    "windowed_edit_replace": _bundle(
        "windowed_edit_replace",
        ("edit", "edit <search> <replace> [<replace-all>]",
         (_arg("search"), _arg("replace"), _arg("replace-all", "boolean", False)), None),
        ("insert", "insert <text> [<line>]", (_arg("text"), _arg("line", "integer", False)), None)),
    "cursors": _bundle(
        "cursors",
        ("set_cursors", "set_cursors <start_line> <end_line>",
         (_arg("start_line", "integer"), _arg("end_line", "integer")), None),
        ("edit", "edit\n<replacement_text>\nend_of_edit", (_arg("replacement_text"),), "end_of_edit")),
    "search": _bundle(
        "search",
        ("find_file", "find_file <file_name> [<dir>]", (_arg("file_name"), _arg("dir", required=False)), None),
        ("search_dir", "search_dir <search_term> [<dir>]", (_arg("search_term"), _arg("dir", required=False)), None),
        ("search_file", "search_file <search_term> [<file>]",
         (_arg("search_term"), _arg("file", required=False)), None)),
    "edit_anthropic": _bundle("edit_anthropic", (
        "str_replace_editor",
        "str_replace_editor <command> <path> [<file_text>] [<view_range>] [<old_str>] [<new_str>] [<insert_line>]",
        (_arg("command"), _arg("path"), _arg("file_text", required=False, fmt="--file_text {{value}}"),
         _arg("view_range", "array", False, "--view_range {{value|join(' ')}}"),
         _arg("old_str", required=False, fmt="--old_str {{value}}"),
         _arg("new_str", required=False, fmt="--new_str {{value}}"),
         _arg("insert_line", "integer", False, "--insert_line {{value}}")), None)),
    "submit": _bundle("submit", ("submit", "submit", (), None)),
    "review_on_submit_m": _bundle("review_on_submit_m", ("submit", "submit", (), None)),
    "forfeit": _bundle("forfeit", ("exit_forfeit", "exit_forfeit", (), None)),
    "filemap": _bundle("filemap", ("filemap", "filemap <file_path>", (_arg("file_path"),), None)),
    "image_tools": _bundle("image_tools", ("view_image", "view_image <image_file>", (_arg("image_file"),), None)),
}


def _shipped() -> dict[str, list[BundleCommand]]:
    table: dict[str, list[BundleCommand]] = {}
    for commands in SHIPPED_BUNDLES.values():
        for command in commands:
            forms = table.setdefault(command.name, [])
            if all(f.signature != command.signature for f in forms):
                forms.append(command)
    return table


_SHIPPED = _shipped()


def known_commands(schemas: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, list[BundleCommand]]:
    """Command name -> its possible forms: the shipped bundles, with every command a loaded bundle defines
    (carried in `schemas`) replacing the shipped forms of that name (the harness loaded that one)."""
    table = {name: list(forms) for name, forms in _SHIPPED.items()}
    loaded: dict[str, list[BundleCommand]] = {}
    for name, schema in (schemas or {}).items():
        command = BundleCommand.from_schema(name, schema) if isinstance(schema, Mapping) else None
        if command is not None:
            loaded.setdefault(name, []).append(command)
    table.update(loaded)
    return table


# ----------------------------------------------------------------------------- reading a config.yaml
def _default_signature(name: str, arguments: Iterable[Argument]) -> str:
    parts = [name] + [f"<{a.name}>" if a.required else f"[<{a.name}>]" for a in arguments]
    return " ".join(parts)


def load_bundle(path: str | os.PathLike[str]) -> tuple[list[BundleCommand], list[str]]:
    """The commands of one bundle (its directory or its ``config.yaml``), and one message per command skipped.

    Only ``signature``, ``arguments`` (name, type, required, argument_format) and ``end_name`` are
    read and checked; the other fields are left alone. Raises `BundleError` when the file itself
    cannot be read.
    """
    try:
        import yaml
    except ImportError as exc:  # PyYAML comes with the [swe] extra
        raise ImportError("reading a tool bundle's config.yaml needs PyYAML: pip install 'guardrail[swe]'") from exc
    file = Path(path)
    if file.is_dir():
        file = file / "config.yaml"
    bundle = file.parent.name
    try:
        size = file.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise BundleError(f"{file}: {size} bytes, more than the {MAX_CONFIG_BYTES} a bundle config may have")
        raw = yaml.safe_load(file.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise BundleError(f"{file}: cannot read ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise BundleError(f"{file}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    tools = raw.get("tools") if isinstance(raw, dict) else None
    if not isinstance(tools, dict):
        raise BundleError(f"{file}: no 'tools' mapping; is this a SWE-agent tool bundle config?")
    commands: list[BundleCommand] = []
    problems: list[str] = []
    for name, spec in tools.items():
        where = f"{file}: tools.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][\w-]*", name):
            problems.append(f"{where}: not a command name; skipped")
            continue
        if not isinstance(spec, dict):
            problems.append(f"{where}: not a mapping; skipped")
            continue
        arguments: list[Argument] = []
        bad = None
        for index, item in enumerate(spec.get("arguments") or []):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                bad = f"{where}.arguments[{index}]: needs a 'name' string; command skipped"
                break
            fmt = item.get("argument_format")
            arguments.append(Argument(item["name"], str(item.get("type") or "string"), bool(item.get("required", False)),
                                      fmt if isinstance(fmt, str) else "{{value}}"))
        signature = spec.get("signature")
        if signature is not None and not isinstance(signature, str):
            bad = bad or f"{where}.signature: not a string; command skipped"
        end = spec.get("end_name")
        if end is not None and not isinstance(end, str):
            bad = bad or f"{where}.end_name: not a string; command skipped"
        if bad:
            problems.append(bad)
            continue
        sig = signature.strip() if isinstance(signature, str) and signature.strip() else _default_signature(name, arguments)
        commands.append(BundleCommand(name, sig, tuple(arguments), end, bundle))
    return commands, problems


def bundle_tools(*paths: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Tool schemas for ``Gate(tools=...)`` / ``Guard.default(tools=...)`` from bundle directories or configs.

    Each command becomes the JSON schema of its arguments (checked on function-calling tool calls)
    carrying its signature for ACI lines. Commands a bundle could not declare are skipped; load
    them with `load_bundle` to see why.
    """
    tools: dict[str, dict[str, Any]] = {}
    for path in paths:
        commands, _ = load_bundle(path)
        for command in commands:
            tools[command.name] = command.schema()
    return tools
