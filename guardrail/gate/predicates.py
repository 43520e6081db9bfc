"""The typed state predicates an action assumes, their families, and what a probe says about each."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["FAMILY", "Outcome", "Predicate", "ProbeResult"]

# Each predicate name belongs to one of the paper's four families.
FAMILY: dict[str, str] = {
    # I: Python namespace and package layout
    "importable": "namespace",
    "symbol_defined": "namespace",
    "is_package": "namespace",
    "attribute_defined": "namespace",
    "module_runnable": "namespace",
    # II: filesystem and working directory
    "file_exists": "filesystem",
    "dir_exists": "filesystem",
    "path_exists": "filesystem",
    "parent_dir_exists": "filesystem",
    # III: command, test and runtime state
    "executable_available": "command",
    "pytest_target_exists": "command",
    "runtime_version_satisfies": "command",
    # IV: harness and tool schema
    "tool_args_valid": "harness",
    "tool_path_arg_exists": "harness",
    "editor_file_open": "harness",
    "editor_line_in_range": "harness",
    "editor_text_present": "harness",
    "path_absent": "harness",
    # the reference MCP servers' tools (guardrail.gate.extract_mcp): an edit's old text, git repository state
    "mcp_edit_applies": "harness",
    "git_repository": "filesystem",
    "git_revision_exists": "command",
    "git_branch_absent": "command",
    "git_path_known": "filesystem",
    # an explicit unknown: part of the action was not analysed (over a size or time budget)
    "analysis_complete": "other",
}


class Outcome(StrEnum):
    TRUE = "true"
    FALSE = "false"
    UNKNOWN = "unknown"  # cannot be decided statically or within budget: passes, and the evidence says why


@dataclass(frozen=True, slots=True)
class Predicate:
    """One precondition an action assumes, e.g. ``symbol_defined("dvc", "DVC")``.

    `necessary` is the paper's conservative blocking rule: True only when the action itself
    cannot do what it is for if the predicate is false (a file it reads or runs, an
    executable, a test target or runner, a module the inline code imports). Predicates read
    out of files the action merely runs (a reproduce script, a test module) and intended side
    effects are reported but never block.

    `attribute_defined(module, "a.b")` is ``module.a.b`` read as attributes at run time: a submodule counts
    only when something imports it, a class attribute only when its MRO binds it.

    `search` holds the sys.path entries the run puts in front of the interpreter's own
    (the script's directory, the cwd for ``-c``, PYTHONPATH from an env assignment).
    `hedge` says why a false outcome must be read as unknown (an earlier part of the same
    command may have created the path). `verdict` is set when extraction alone decides the
    predicate (an argument that is not a number, a wrong argument count).
    """

    name: str
    args: tuple[Any, ...]
    necessary: bool = True
    origin: str = "action"
    search: tuple[str, ...] = ()
    hedge: str | None = None
    verdict: tuple[bool, str] | None = None  # (holds, why) decided at extraction time
    # attribute_defined: the modules the same code imports (they load submodules); mcp_edit_applies: its edits
    context: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        return FAMILY.get(self.name, "other")

    def label(self) -> str:
        return f"{self.name}({', '.join(repr(a) for a in self.args)})"


@dataclass(slots=True)
class ProbeResult:
    """What the read-only prober found for one predicate."""

    predicate: Predicate
    outcome: Outcome
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    hint: str | None = None

    @property
    def violated(self) -> bool:
        return self.outcome is Outcome.FALSE
