"""Predicates assumed by calls to the reference MCP servers' tools: filesystem (paths, edits) and git (repository,
revisions), as the gate reads shell commands.

A call is recognised by its tool name and the argument shape the server declares
(``@modelcontextprotocol/server-filesystem``: ``read_text_file(path)``, ``edit_file(path, edits=[{oldText,
newText}])``, ``move_file(source, destination)``...; ``mcp-server-git``: ``git_*(repo_path, ...)``), the way
AutoGen's ``McpWorkbench``, ``langchain-mcp-adapters`` and ``guardrail mcp-proxy`` all pass it. Any other call
returns None and falls back to its declared schema. Every path must lie inside the gate's workspace roots, which
stand for the server's allowed directories (``guardrail mcp-proxy`` takes them from the server's command line):
the server refuses anything else, and the gate never looks there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from guardrail.gate.predicates import Predicate
from guardrail.gate.scope import Scope

__all__ = ["FILESYSTEM_TOOLS", "GIT_TOOLS", "extract_mcp"]

# tool -> what its `path` must be (file, dir, or either)
_PATH_TOOLS = {"read_file": "file", "read_text_file": "file", "read_media_file": "file", "get_file_info": "path",
               "list_directory": "dir", "list_directory_with_sizes": "dir", "directory_tree": "dir",
               "search_files": "dir"}
FILESYSTEM_TOOLS = frozenset({*_PATH_TOOLS, "read_multiple_files", "write_file", "edit_file", "create_directory",
                              "move_file", "list_allowed_directories"})
GIT_TOOLS = frozenset({"git_status", "git_diff_unstaged", "git_diff_staged", "git_diff", "git_commit", "git_add",
                       "git_reset", "git_log", "git_create_branch", "git_checkout", "git_show", "git_branch"})
# git tool -> (argument, "rev" for any revision, "ref" for a ref name only)
_REVISIONS = {"git_diff": [("target", "rev")], "git_show": [("revision", "rev")],
              "git_checkout": [("branch_name", "rev")], "git_create_branch": [("base_branch", "ref")],
              "git_branch": [("contains", "rev"), ("not_contains", "rev")]}
_ORIGIN = "mcp"
_GLOB = re.compile(r"[*?\[:]")  # a pathspec with magic (a glob, ":(exclude)...") is git's to match
_MAX_EDITS = 200


def _bad(tool: str, why: str, *, necessary: bool = True) -> Predicate:
    return Predicate("tool_args_valid", (tool, why), necessary, _ORIGIN, verdict=(False, why))


def _path(tool: str, raw: Any, scope: Scope, out: list[Predicate], *, necessary: bool = True) -> str | None:
    """`raw` resolved as the server resolves it (relative to the first allowed directory, ``~`` expanded), or
    None with a verdict in `out` when it is no path or lies outside the allowed directories."""
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        return None  # the declared schema says what is wrong with it; nothing to probe
    path = scope.resolve(raw)
    if scope.fs.workspace is not None and not scope.fs.in_workspace(path):
        allowed = ", ".join(scope.fs.workspace.lexical[:4])
        out.append(_bad(tool, f"{path} is outside the server's allowed directories ({allowed}): the server "
                              "refuses it", necessary=necessary))
        return None
    return path


def _filesystem(tool: str, args: Mapping[str, Any], scope: Scope) -> list[Predicate]:
    out: list[Predicate] = []
    hedge = scope.hedge()
    if tool in _PATH_TOOLS:
        path = _path(tool, args.get("path"), scope, out)
        if path is not None:
            name = {"file": "file_exists", "dir": "dir_exists", "path": "path_exists"}[_PATH_TOOLS[tool]]
            out.append(Predicate(name, (path,), True, _ORIGIN, hedge=hedge))
    elif tool == "read_multiple_files":
        # The server reads each file on its own and reports a failed one inline: a missing file is not a failed call.
        for raw in (args.get("paths") or [])[:1000] if isinstance(args.get("paths"), list) else []:
            path = _path(tool, raw, scope, out, necessary=False)
            if path is not None:
                out.append(Predicate("file_exists", (path,), False, _ORIGIN, hedge=hedge))
    elif tool == "write_file":
        path = _path(tool, args.get("path"), scope, out)
        if path is not None:
            out.append(Predicate("parent_dir_exists", (path,), True, _ORIGIN, hedge=hedge))
            scope.create(path)
    elif tool == "create_directory":
        path = _path(tool, args.get("path"), scope, out)
        if path is not None:
            # like mkdir -p: whatever exists nearest above the new directory must be a directory
            ancestor = os.path.dirname(path)
            for _ in range(64):
                kind = scope.fs.stat(ancestor).kind
                if kind != "missing" or ancestor == os.path.dirname(ancestor):
                    break
                ancestor = os.path.dirname(ancestor)
            if scope.fs.stat(ancestor).kind == "file":
                out.append(Predicate("dir_exists", (ancestor,), True, _ORIGIN, hedge=hedge))
            scope.create(path)
    elif tool == "edit_file":
        path = _path(tool, args.get("path"), scope, out)
        edits = _edits(args.get("edits"))
        if path is not None:
            out.append(Predicate("file_exists", (path,), True, _ORIGIN, hedge=hedge))
            if edits:
                # The edits ride in `context` (old, new, old, new...): the label and the finding show only their count.
                out.append(Predicate("mcp_edit_applies", (path, f"{len(edits)} edit(s)"), True, _ORIGIN, hedge=hedge,
                                     context=tuple(text for pair in edits for text in pair)))
    elif tool == "move_file":
        source = _path(tool, args.get("source"), scope, out)
        destination = _path(tool, args.get("destination"), scope, out)
        if source is not None:
            out.append(Predicate("path_exists", (source,), True, _ORIGIN, hedge=hedge))
        if destination is not None:
            out.append(Predicate("parent_dir_exists", (destination,), True, _ORIGIN, hedge=hedge))
            out.append(Predicate("path_absent", (destination,), True, _ORIGIN, hedge=hedge))
            scope.create(destination)
    return out


def _edits(raw: Any) -> tuple[tuple[str, str], ...] | None:
    """The (oldText, newText) pairs of an edit_file call; None when they are not all strings (the schema says)."""
    if not isinstance(raw, list) or not raw or len(raw) > _MAX_EDITS:
        return None
    pairs = []
    for edit in raw:
        if not isinstance(edit, Mapping) or not isinstance(edit.get("oldText"), str) \
                or not isinstance(edit.get("newText"), str):
            return None
        pairs.append((edit["oldText"], edit["newText"]))
    return tuple(pairs)


def _git(tool: str, args: Mapping[str, Any], scope: Scope) -> list[Predicate]:
    out: list[Predicate] = []
    repo = _path(tool, args.get("repo_path"), scope, out)
    if repo is None:
        return out
    hedge = scope.hedge()
    out.append(Predicate("git_repository", (repo,), True, _ORIGIN, hedge=hedge))
    for argument, mode in _REVISIONS.get(tool, []):
        value = args.get(argument)
        if isinstance(value, str) and value:
            out.append(Predicate("git_revision_exists", (repo, value, mode), True, _ORIGIN, hedge=hedge))
    if tool == "git_create_branch" and isinstance(args.get("branch_name"), str) and args["branch_name"]:
        out.append(Predicate("git_branch_absent", (repo, args["branch_name"]), True, _ORIGIN, hedge=hedge))
    if tool == "git_add" and isinstance(args.get("files"), list):
        # `git add` takes a path that exists or that the index tracks (a deleted file: its removal is staged).
        for raw in args["files"][:1000]:
            if isinstance(raw, str) and raw and raw != "." and "\x00" not in raw and not _GLOB.search(raw):
                out.append(Predicate("git_path_known", (repo, raw), True, _ORIGIN, hedge=hedge))
    return out


def extract_mcp(tool: str, args: Mapping[str, Any], scope: Scope) -> list[Predicate] | None:
    """The predicates a call to a reference MCP server's tool assumes, or None when `tool` is not one of them."""
    if tool in FILESYSTEM_TOOLS and _shaped_like_filesystem(tool, args):
        return _filesystem(tool, args, scope)
    if tool in GIT_TOOLS and "repo_path" in args:
        return _git(tool, args, scope)
    return None


def _shaped_like_filesystem(tool: str, args: Mapping[str, Any]) -> bool:
    """Whether the arguments are the filesystem server's (another server's ``read_file`` may take other ones)."""
    if tool == "move_file":
        return "source" in args or "destination" in args
    if tool == "read_multiple_files":
        return "paths" in args
    if tool == "list_allowed_directories":
        return True
    return "path" in args
