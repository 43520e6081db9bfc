"""The gate on the reference MCP servers' tools (no server needed): what each call assumes, and repositories and
files written by someone hostile (the gate reads git's files itself, bounded, and never runs git)."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail.core.events import Action
from guardrail.gate.extract_mcp import FILESYSTEM_TOOLS, GIT_TOOLS
from guardrail.gate.layer import Gate
from tests.fuzzing import FUZZ, json_values
from tests.mcp_servers import build_workspace, git


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return build_workspace(tmp_path / "ws")


def violations(gate: Gate, tool: str, **args) -> list[tuple[str, str, str | None]]:
    report = gate.check(Action.tool_call(tool, args))
    return [(r.predicate.name, r.message, r.hint) for r in report.violations if r.predicate.necessary]


def test_filesystem_tools_assume_what_the_server_needs(workspace):
    gate = Gate(workspace)
    assert violations(gate, "read_text_file", path="notes.txt") == []  # relative: to the first allowed directory
    assert violations(gate, "list_directory", path=str(workspace / "docs")) == []
    [(name, message, hint)] = violations(gate, "list_directory", path=str(workspace / "notes.txt"))
    assert name == "dir_exists" and "is a file" in message
    [(name, _, hint)] = violations(gate, "write_file", path=str(workspace / "nowhere" / "x.txt"), content="x")
    assert name == "parent_dir_exists"
    assert violations(gate, "create_directory", path=str(workspace / "a" / "b" / "c")) == []  # mkdir -p
    [(name, message, _)] = violations(gate, "move_file", source=str(workspace / "gone.txt"),
                                      destination=str(workspace / "docs" / "gone.txt"))
    assert name == "path_exists"
    # read_multiple_files reports a missing file inline, so it is not a reason to block
    assert violations(gate, "read_multiple_files", paths=[str(workspace / "gone.txt")]) == []
    # a tool of the same name with another server's arguments is left to its declared schema
    assert violations(gate, "read_file", filename="gone.txt") == []


def test_an_edit_is_checked_the_way_the_server_applies_it(workspace):
    gate = Gate(workspace)
    notes = str(workspace / "notes.txt")
    # whitespace around a line does not matter to the server's line match
    assert violations(gate, "edit_file", path=notes, edits=[{"oldText": "beta line  ", "newText": "b"}]) == []
    # the second edit sees the text the first one left
    assert violations(gate, "edit_file", path=notes, edits=[{"oldText": "alpha", "newText": "omega"},
                                                            {"oldText": "omega", "newText": "psi"}]) == []
    [(name, message, hint)] = violations(gate, "edit_file", path=notes, edits=[
        {"oldText": "alpha", "newText": "omega"}, {"oldText": "alpha", "newText": "psi"}])
    assert name == "mcp_edit_applies" and "edit 2" in message and "once the edits before it" in message


def test_paths_outside_the_allowed_directories_are_refused_without_looking(workspace, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    os.symlink(outside, workspace / "link")
    gate = Gate(workspace)
    for path in (str(outside / "secret.txt"), str(workspace / "link" / "secret.txt"), "../elsewhere/secret.txt"):
        [(name, message, _)] = violations(gate, "read_text_file", path=path)
        assert name == "tool_args_valid" and "outside the server's allowed directories" in message
        # it names the path asked for and the roots; nothing about what lies outside them
        assert message.endswith(f" is outside the server's allowed directories ({workspace}): the server refuses it")


def test_git_tools_assume_a_repository_and_real_revisions(workspace):
    gate = Gate(workspace)
    repo = str(workspace / "repo")
    assert violations(gate, "git_diff", repo_path=repo, target="feature") == []
    assert violations(gate, "git_diff", repo_path=repo, target="v1") == []
    assert violations(gate, "git_diff", repo_path=repo, target="HEAD~1") == []
    head = git(workspace / "repo", "rev-parse", "HEAD").strip()
    assert violations(gate, "git_show", repo_path=repo, revision=head[:7]) == []
    [(name, message, _)] = violations(gate, "git_show", repo_path=repo, revision="feature..main")
    assert "is a range" in message  # the server resolves one revision with GitPython's rev_parse
    [(name, _, hint)] = violations(gate, "git_show", repo_path=repo, revision="mian")
    assert name == "git_revision_exists" and hint == "did you mean main?"
    [(name, _, _)] = violations(gate, "git_show", repo_path=repo, revision="deadbeef")
    assert name == "git_revision_exists"
    [(name, message, _)] = violations(gate, "git_create_branch", repo_path=repo, branch_name="x", base_branch=head)
    assert "branch, tag or remote branch" in message  # the server looks base_branch up among the refs only
    [(name, _, hint)] = violations(gate, "git_status", repo_path=str(workspace / "repo" / "sub"))
    assert name == "git_repository"
    (workspace / "repo" / "sub").mkdir()
    [(name, _, hint)] = violations(gate, "git_status", repo_path=str(workspace / "repo" / "sub"))
    assert hint == f"the repository root is {repo}"


def test_revisions_in_packed_refs_and_pack_files_are_found(workspace):
    repo = workspace / "repo"
    git(repo, "pack-refs", "--all")
    git(repo, "gc", "-q")
    assert not any((repo / ".git" / "refs" / "heads").iterdir())
    head = git(repo, "rev-parse", "HEAD").strip()
    gate = Gate(workspace)
    for revision in ("feature", "v1", head[:8], head):
        assert violations(gate, "git_show", repo_path=str(repo), revision=revision) == [], revision
    assert violations(gate, "git_show", repo_path=str(repo), revision="f" * 40) != []
    # an ancestor of a packed commit cannot be walked from files: unknown, never a block
    assert violations(gate, "git_show", repo_path=str(repo), revision="HEAD~9") == []


def test_hostile_repository_files_give_unknown_not_a_crash(workspace, tmp_path):
    repo = workspace / "repo"
    dot = repo / ".git"
    (dot / "packed-refs").write_bytes(b"\xff\xfe junk\n" * 100_000)
    pack = dot / "objects" / "pack"
    pack.mkdir(parents=True, exist_ok=True)
    (pack / "pack-bad.idx").write_bytes(b"\xfftOc\x00\x00\x00\x02" + b"\xff" * 2000)  # counts past its end
    loose = dot / "objects" / "ab"
    loose.mkdir(exist_ok=True)
    (loose / ("c" * 38)).write_bytes(zlib.compress(b"commit 5\x00" + b"parent " * 100_000))
    deep = dot / "refs" / "heads"
    for level in range(20):
        deep = deep / f"d{level}"
    deep.mkdir(parents=True)
    (deep / "leaf").write_text("0" * 40)
    (dot / "commondir").write_text("../../../../../../../../etc\n")  # points outside the workspace
    gate = Gate(workspace)
    for revision in ("main", "ab" + "c" * 38 + "~1", "abcd", "nope", "@{-1}", "-x", "a" * 5000):
        report = gate.check(Action.tool_call("git_show", {"repo_path": str(repo), "revision": revision}))
        assert report.error is None, revision
        assert report.latency_ms < 5000
    os.remove(dot / "commondir")
    (tmp_path / "outside-secret").mkdir()
    (tmp_path / "outside-secret" / "main").write_text("1" * 40)
    os.symlink(tmp_path / "outside-secret", dot / "refs" / "tags" / "escape")  # a ref directory outside
    report = gate.check(Action.tool_call("git_show", {"repo_path": str(repo), "revision": "escape/main"}))
    assert report.error is None
    shown = " ".join(f"{r.message} {r.hint or ''}" for r in report.results)
    revision = next(r for r in report.results if r.predicate.name == "git_revision_exists")
    assert revision.outcome.value != "true"  # a ref read from outside the workspace never counts
    assert "outside-secret" not in shown


def test_git_add_takes_an_existing_or_tracked_path_and_mkdir_needs_a_directory_above(workspace):
    gate = Gate(workspace)
    repo = workspace / "repo"
    assert violations(gate, "git_add", repo_path=str(repo), files=["app.py", "new.txt"]) == []
    [(name, _, hint)] = violations(gate, "git_add", repo_path=str(repo), files=["app.pyy"])
    assert name == "git_path_known" and hint == "did you mean app.py?"
    (repo / "app.py").unlink()  # staging a tracked file's removal is a valid add
    assert violations(gate, "git_add", repo_path=str(repo), files=["app.py"]) == []
    assert violations(gate, "git_add", repo_path=str(repo), files=["*.py"]) == []  # a pathspec is git's to match
    (repo / ".git" / "index").write_bytes(b"DIRC\x00\x00\x00\x02\xff\xff\xff\xff" + b"\x00" * 100)  # a lying count
    assert violations(gate, "git_add", repo_path=str(repo), files=["gone.py"]) == []  # unreadable index: unknown
    [(name, message, _)] = violations(gate, "create_directory", path=str(workspace / "notes.txt" / "sub" / "deeper"))
    assert name == "dir_exists" and "is a file" in message


_REPO_FILES = ["HEAD", "packed-refs", "index", "commondir", "refs/heads/main", "objects/pack/pack-x.idx",
               "objects/ab/" + "c" * 38]


@pytest.mark.fuzz
@FUZZ
@given(files=st.dictionaries(st.sampled_from(_REPO_FILES), st.binary(max_size=3000), max_size=5),
       tool=st.sampled_from(sorted(GIT_TOOLS | FILESYSTEM_TOOLS)), args=st.dictionaries(
           st.sampled_from(["repo_path", "path", "revision", "target", "branch_name", "base_branch", "files",
                            "edits", "source", "destination", "paths", "contains"]), json_values, max_size=4),
       aimed=st.booleans())
def test_any_repository_bytes_and_any_arguments_give_a_report_not_a_crash(tmp_path_factory, files, tool, args,
                                                                           aimed):
    root = tmp_path_factory.mktemp("fuzz")
    repo = root / "repo"
    (repo / ".git" / "objects").mkdir(parents=True)
    for rel, data in files.items():
        (repo / ".git" / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / ".git" / rel).write_bytes(data)
    if aimed:  # at the hostile repository itself (else wherever the arguments point)
        args = {**args, "repo_path": str(repo), "path": str(repo / ".git" / "HEAD")}
    report = Gate(root).check(Action.tool_call(tool, args))
    assert report.error is None or "could not be analysed" in report.error
    assert report.latency_ms < 10_000
