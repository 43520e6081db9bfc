"""`guardrail mcp-proxy` in front of the real reference servers, driven by the MCP SDK's own client.

The filesystem server (npm) and the git server (PyPI) run as their users run them; the proxy runs as its
users run it (the `guardrail` command). Blocked calls come back as tool results with isError and the guard's
hint; every valid call of every tool comes back exactly as the unproxied server answers it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="pip install 'guardrail[mcp]'")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from tests.mcp_servers import GIT_ENV, build_workspace, filesystem_server, git, git_server, proxy  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@asynccontextmanager
async def connect(command: list[str]):
    """An initialized SDK client session over stdio to `command`."""
    env = {**os.environ, **GIT_ENV}
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def text_of(result: Any) -> str:
    return "\n".join(getattr(item, "text", "") for item in result.content)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return build_workspace(tmp_path / "ws")


async def test_filesystem_calls_with_false_preconditions_are_blocked_with_a_hint(workspace):
    server = filesystem_server()
    async with connect(proxy("--", *server, str(workspace))) as session:
        await session.list_tools()
        missing = await session.call_tool("read_text_file", {"path": str(workspace / "note.txt")})
        assert missing.isError
        assert "does not exist" in text_of(missing) and "notes.txt" in text_of(missing)  # the hint names it
        bad = await session.call_tool("read_text_file", {"path": str(workspace / "notes.txt"), "head": "two"})
        assert bad.isError and "tool_args_valid" in text_of(bad) and "read_text_file(path: string" in text_of(bad)
        edit = await session.call_tool("edit_file", {"path": str(workspace / "notes.txt"),
                                                     "edits": [{"oldText": "beta lime", "newText": "x"}]})
        assert edit.isError and "closest line in the file: 'beta line'" in text_of(edit)
        outside = await session.call_tool("list_directory", {"path": "/etc"})
        assert outside.isError and "outside the server's allowed directories" in text_of(outside)
        moved = await session.call_tool("move_file", {"source": str(workspace / "notes.txt"),
                                                      "destination": str(workspace / "docs" / "guide.md")})
        assert moved.isError and "already exists" in text_of(moved)
        # nothing of that reached the server: the file is untouched, and a valid call goes through
        ok = await session.call_tool("read_text_file", {"path": str(workspace / "notes.txt")})
        assert not ok.isError and text_of(ok) == "alpha\n    beta line\ngamma\n"


async def test_git_calls_with_a_wrong_revision_or_repository_are_blocked_with_a_hint(workspace):
    repo = workspace / "repo"
    async with connect(proxy("--", *git_server(), "--repository", str(repo))) as session:
        await session.list_tools()
        wrong = await session.call_tool("git_diff", {"repo_path": str(repo), "target": "featrue"})
        assert wrong.isError and "did you mean feature?" in text_of(wrong)
        too_far = await session.call_tool("git_show", {"repo_path": str(repo), "revision": "HEAD~5"})
        assert too_far.isError and "past the first commit" in text_of(too_far)
        taken = await session.call_tool("git_create_branch", {"repo_path": str(repo), "branch_name": "feature"})
        assert taken.isError and "already exists" in text_of(taken)
        not_repo = await session.call_tool("git_status", {"repo_path": str(workspace)})
        assert not_repo.isError
        bad = await session.call_tool("git_log", {"repo_path": str(repo), "max_count": "ten"})
        assert bad.isError and "git_log(repo_path: string" in text_of(bad)
        shown = await session.call_tool("git_show", {"repo_path": str(repo), "revision": "HEAD~1"})
        assert not shown.isError and "first" in text_of(shown)
    assert "feature" in subprocess.run(["git", "-C", str(repo), "branch"], capture_output=True, text=True).stdout


Setup = Callable[[Path], None] | None  # None: the call leaves the workspace as it is


def _fresh(_ws: Path) -> None:
    """A call that changes the workspace starts from the freshly built one."""


def _staged(ws: Path) -> None:
    (ws / "repo" / "app.py").write_text("print('three')\n")
    git(ws / "repo", "add", "app.py")


def _filesystem_calls(ws: Path) -> list[tuple[str, dict[str, Any], Setup]]:
    """One valid call per filesystem tool: (tool, arguments, how to set the workspace up when it changes it)."""
    return [
        ("read_file", {"path": str(ws / "notes.txt")}, None),
        ("read_text_file", {"path": str(ws / "notes.txt"), "head": 2}, None),
        ("read_media_file", {"path": str(ws / "docs" / "pixel.png")}, None),
        ("read_multiple_files", {"paths": [str(ws / "notes.txt"), str(ws / "docs" / "guide.md")]}, None),
        ("write_file", {"path": str(ws / "docs" / "new.md"), "content": "new\n"}, _fresh),
        ("edit_file", {"path": str(ws / "notes.txt"), "edits": [{"oldText": "beta line", "newText": "BETA"}]}, _fresh),
        ("create_directory", {"path": str(ws / "build" / "out")}, _fresh),
        ("list_directory", {"path": str(ws)}, None),
        ("list_directory_with_sizes", {"path": str(ws / "docs"), "sortBy": "size"}, None),
        ("directory_tree", {"path": str(ws / "docs")}, None),
        ("move_file", {"source": str(ws / "notes.txt"), "destination": str(ws / "docs" / "notes.txt")}, _fresh),
        ("search_files", {"path": str(ws), "pattern": "**/*.md"}, None),
        ("get_file_info", {"path": str(ws / "docs" / "guide.md")}, None),
        ("list_allowed_directories", {}, None),
    ]


def _git_calls(repo: Path) -> list[tuple[str, dict[str, Any], Setup]]:
    r = str(repo)
    return [
        ("git_status", {"repo_path": r}, None),
        ("git_diff_unstaged", {"repo_path": r}, None),
        ("git_diff_staged", {"repo_path": r}, None),
        ("git_diff", {"repo_path": r, "target": "feature"}, None),
        ("git_add", {"repo_path": r, "files": ["app.py"]}, _fresh),
        ("git_commit", {"repo_path": r, "message": "third"}, _staged),
        ("git_reset", {"repo_path": r}, _staged),
        ("git_log", {"repo_path": r, "max_count": 5}, None),
        ("git_create_branch", {"repo_path": r, "branch_name": "topic", "base_branch": "feature"}, _fresh),
        ("git_checkout", {"repo_path": r, "branch_name": "feature"}, _fresh),
        ("git_show", {"repo_path": r, "revision": "v1:app.py"}, None),
        ("git_branch", {"repo_path": r, "branch_type": "local"}, None),
    ]


def _as_json(result: Any) -> str:
    return json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)


async def test_every_valid_call_of_both_servers_passes_byte_identical_to_the_unproxied_server(tmp_path):
    """Each tool once, unproxied and proxied side by side: a call that reads runs in both sessions on the same
    state; one that changes the workspace runs in each on a freshly built one (same files, same commit ids)."""
    ws = build_workspace(tmp_path / "ws")
    for server, calls in ((filesystem_server() + [str(ws)], _filesystem_calls(ws)),
                          (git_server() + ["--repository", str(ws / "repo")], _git_calls(ws / "repo"))):
        async with connect(server) as direct, connect(proxy("--", *server)) as proxied:
            names = sorted(t.name for t in (await direct.list_tools()).tools)
            assert sorted(t.name for t in (await proxied.list_tools()).tools) == names
            assert names == sorted(name for name, _, _ in calls), "a tool of the server is not exercised"
            for name, args, setup in calls:
                answers = []
                for session in (direct, proxied):
                    if setup is not None:
                        build_workspace(ws)
                        setup(ws)
                    answers.append(_as_json(await session.call_tool(name, args)))
                assert '"isError": true' not in answers[0], f"{name} failed unproxied: {answers[0][:300]}"
                assert answers[0] == answers[1], f"{name}: the proxied answer differs from the server's own"
        build_workspace(ws)


async def test_a_session_is_an_episode_in_the_run_store(workspace, tmp_path):
    store = tmp_path / "runs"
    async with connect(proxy("--record", str(store), "--", *filesystem_server(), str(workspace))) as session:
        await session.list_tools()
        await session.call_tool("read_text_file", {"path": str(workspace / "missing.txt")})
        await session.call_tool("read_text_file", {"path": str(workspace / "notes.txt")})
    listed = subprocess.run([*proxy()[:-1], "runs", str(store), "--json"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]
    assert len(rows) == 1
    row = rows[0]
    assert row["framework"] == "mcp" and row["n_steps"] == 2 and row["status"] == "complete"
    assert [(f["layer"], f["check"], f["step"]) for f in row["findings"]] == [("gate", "hallucinated_tool_call", 0)]


async def test_report_mode_lets_the_call_reach_the_server(workspace):
    async with connect(proxy("--mode", "report", "--", *filesystem_server(), str(workspace))) as session:
        result = await session.call_tool("read_text_file", {"path": str(workspace / "missing.txt")})
    assert result.isError and "ENOENT" in text_of(result)  # the server's own error, unchanged


async def test_a_deployment_file_configures_the_proxy(workspace, tmp_path):
    config = tmp_path / "guardrail.toml"
    config.write_text('mode = "report"\n\n[record]\nstore = "runs"\n')
    # the file's report mode lets the call through; its store records the session
    async with connect(proxy("--config", str(config), "--", *filesystem_server(), str(workspace))) as session:
        missing = await session.call_tool("read_text_file", {"path": str(workspace / "missing.txt")})
        assert missing.isError and "ENOENT" in text_of(missing)
    listed = subprocess.run([*proxy()[:-1], "runs", str(tmp_path / "runs"), "--json"], capture_output=True, text=True,
                            timeout=60)
    assert [json.loads(line)["framework"] for line in listed.stdout.splitlines()] == ["mcp"]
    # a flag given on the command line wins over the file
    async with connect(proxy("--config", str(config), "--mode", "intervene", "--",
                             *filesystem_server(), str(workspace))) as session:
        blocked = await session.call_tool("read_text_file", {"path": str(workspace / "missing.txt")})
        assert blocked.isError and "does not exist" in text_of(blocked)
    config.write_text('mode = "sometimes"\n')
    done = subprocess.run(proxy("--config", str(config), "--", "true"), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "mode" in done.stderr and "Traceback" not in done.stderr
