"""Probes for the predicates of the reference MCP servers' tools: an edit that must apply, a git repository,
a revision that must resolve, a branch name that must be free."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable

from guardrail.gate.fsview import PathState
from guardrail.gate.gitrefs import open_repo, resolve_revision, short_names
from guardrail.gate.predicates import Outcome, Predicate, ProbeResult
from guardrail.gate.view import FsView

__all__ = ["MCP_PROBES", "edit_applies"]


def _undecidable(p: Predicate, path: str, state: PathState) -> ProbeResult | None:
    if state.kind == "outside":
        return ProbeResult(p, Outcome.UNKNOWN, f"{path} is outside the workspace: not probed", {"outside": True})
    if state.kind == "unknown":
        return ProbeResult(p, Outcome.UNKNOWN, f"cannot stat {path}: {state.error}")
    return None


def edit_applies(text: str, edits: tuple[tuple[str, str], ...]) -> int | None:
    """The index of the first edit the filesystem server cannot apply to `text`, None when all apply.

    The server's own rule (``applyFileEdits``): edits apply in order, each to the text the previous ones
    left; an edit's old text is found verbatim (line endings normalized), else as a run of lines equal
    once each line is stripped of surrounding whitespace.
    """
    content = text.replace("\r\n", "\n")
    for index, (old, new) in enumerate(edits):
        old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
        if old in content:
            content = content.replace(old, new, 1)
            continue
        old_lines = [line.strip() for line in old.split("\n")]
        lines = content.split("\n")
        for start in range(len(lines) - len(old_lines) + 1):
            if all(lines[start + j].strip() == want for j, want in enumerate(old_lines)):
                content = "\n".join(lines[:start] + new.split("\n") + lines[start + len(old_lines):])
                break
        else:
            return index
    return None


def _mcp_edit_applies(p: Predicate, fs: FsView) -> ProbeResult:
    path, flat = str(p.args[0]), p.context
    edits = tuple(zip(flat[0::2], flat[1::2], strict=True))
    state = fs.readable_state(path)
    if (undecided := _undecidable(p, path, state)) is not None:
        return undecided
    text = fs.read_text(path)
    if text is None:
        return ProbeResult(p, Outcome.UNKNOWN, f"cannot read {path}")
    failed = edit_applies(text, edits)
    if failed is None:
        return ProbeResult(p, Outcome.TRUE, f"every edit applies to {path}")
    old = edits[failed][0]
    first = old.strip().splitlines()[0].strip() if old.strip() else old
    evidence: dict[str, object] = {"path": path, "missing": first[:1000], "edit": failed}
    if fs.in_workspace(path):  # lines are quoted in the hint: only text under the workspace roots
        evidence["candidates"] = [ln.strip() for ln in text.splitlines()[:20_000] if ln.strip()]
    return ProbeResult(p, Outcome.FALSE, f"the old text of edit {failed + 1} does not occur in {path}"
                                         + (" once the edits before it are applied" if failed else ""), evidence)


def _git_repository(p: Predicate, fs: FsView) -> ProbeResult:
    path = str(p.args[0])
    state = fs.stat(path)
    if (undecided := _undecidable(p, path, state)) is not None:
        return undecided
    if not state.exists:
        return ProbeResult(p, Outcome.FALSE, f"{path} does not exist", {"path": path, "hint": _nearest_repo(fs, path)})
    repo, why = open_repo(fs, path)
    if repo is not None:
        return ProbeResult(p, Outcome.TRUE, f"{path} is a git repository")
    return ProbeResult(p, Outcome.FALSE, why, {"path": path, "hint": _nearest_repo(fs, path)})


def _nearest_repo(fs: FsView, path: str) -> str:
    """A hint naming the repository root above `path`, when one lies under the roots."""
    parent = os.path.dirname(path)
    for _ in range(32):
        if not parent or parent == os.path.dirname(parent):
            break
        if fs.stat(parent).kind == "outside":
            break
        if open_repo(fs, parent)[0] is not None:
            return f"the repository root is {parent}"
        parent = os.path.dirname(parent)
    return "give the repository's root directory (the one holding .git)"


def _revision(p: Predicate, fs: FsView, *, refs_only: bool) -> ProbeResult:
    path, revision = str(p.args[0]), str(p.args[1])
    state = fs.stat(path)
    if (undecided := _undecidable(p, path, state)) is not None:
        return undecided
    repo, why = open_repo(fs, path) if state.kind == "dir" else (None, f"{path} is not a directory")
    if repo is None:
        return ProbeResult(p, Outcome.UNKNOWN, f"revision not checked: {why}")
    # mcp-server-git resolves one revision (GitPython's rev_parse): a range is an error there
    found = resolve_revision(repo, revision, refs_only=refs_only, ranges=False)
    if found.holds is None:
        return ProbeResult(p, Outcome.UNKNOWN, found.why)
    if found.holds:
        return ProbeResult(p, Outcome.TRUE, found.why)
    evidence: dict[str, object] = {"repository": path, "missing": revision[:200], "hint": _revision_hint(
        revision, found.candidates)}
    return ProbeResult(p, Outcome.FALSE, found.why, evidence)


def _revision_hint(revision: str, names: tuple[str, ...]) -> str:
    if not names:
        return "list the history with git_log or the branches with git_branch"
    close = difflib.get_close_matches(revision[:200], list(names[:2000]), n=3, cutoff=0.5)
    if close:
        return f"did you mean {', '.join(close)}?"
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f"the repository has {shown}"


def _git_revision_exists(p: Predicate, fs: FsView) -> ProbeResult:
    return _revision(p, fs, refs_only=len(p.args) > 2 and p.args[2] == "ref")


def _git_branch_absent(p: Predicate, fs: FsView) -> ProbeResult:
    path, name = str(p.args[0]), str(p.args[1])
    repo, why = open_repo(fs, path)
    if repo is None:
        return ProbeResult(p, Outcome.UNKNOWN, f"branch not checked: {why}")
    refs, complete = repo.refs()
    if f"refs/heads/{name}" in refs:
        taken = {n for n in short_names(refs)}
        free = next((f"{name}-{i}" for i in range(2, 100) if f"{name}-{i}" not in taken), name + "-new")
        return ProbeResult(p, Outcome.FALSE, f"branch {name!r} already exists in {path}",
                           {"repository": path, "hint": f"pick a new name (e.g. {free!r}) or git_checkout {name!r}"})
    if not complete:
        return ProbeResult(p, Outcome.UNKNOWN, "the repository has more refs than the gate lists")
    return ProbeResult(p, Outcome.TRUE, f"no branch named {name!r} yet")


def _git_path_known(p: Predicate, fs: FsView) -> ProbeResult:
    """A path `git add` can take: it exists in the working tree, or the index tracks it (staging its removal)."""
    path, rel = str(p.args[0]), str(p.args[1])
    full = os.path.normpath(os.path.join(path, rel))
    state = fs.stat(full)
    if (undecided := _undecidable(p, full, state)) is not None:
        return undecided
    if state.exists:
        return ProbeResult(p, Outcome.TRUE, f"{full} exists")
    repo, why = open_repo(fs, path)
    tracked = repo.tracked() if repo is not None else None
    if tracked is None:
        return ProbeResult(p, Outcome.UNKNOWN, f"whether the index tracks {rel} could not be read")
    relative = os.path.relpath(full, path)
    if relative in tracked or any(t.startswith(relative.rstrip("/") + "/") for t in tracked):
        return ProbeResult(p, Outcome.TRUE, f"{rel} is tracked (its removal is staged)")
    close = difflib.get_close_matches(relative, sorted(tracked)[:5000], n=3, cutoff=0.6)
    return ProbeResult(p, Outcome.FALSE, f"{rel} neither exists in {path} nor is tracked there",
                       {"repository": path, "missing": rel,
                        "hint": f"did you mean {', '.join(close)}?" if close else "git_status lists the changed files"})


# predicate name -> its probe (the Prober looks here for names it has no method of its own for)
MCP_PROBES: dict[str, Callable[[Predicate, FsView], ProbeResult]] = {
    "mcp_edit_applies": _mcp_edit_applies,
    "git_repository": _git_repository,
    "git_revision_exists": _git_revision_exists,
    "git_branch_absent": _git_branch_absent,
    "git_path_known": _git_path_known,
}
