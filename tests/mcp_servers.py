"""The reference MCP servers the MCP tests run (npm's filesystem server, PyPI's git server) and the workspace they
serve, built the same way every time (fixed file times, fixed commit dates: the same commit ids)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
INSTALL_FILESYSTEM = "bash scripts/mcp-servers.sh install"
FIXED_DATE = "1704164645 +0000"  # git's own date format, which git and GitPython both read
GIT_ENV = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com", "GIT_COMMITTER_NAME": "Ada",
           "GIT_COMMITTER_EMAIL": "ada@example.com", "GIT_AUTHOR_DATE": FIXED_DATE, "GIT_COMMITTER_DATE": FIXED_DATE}


def filesystem_server() -> list[str]:
    """The command line of @modelcontextprotocol/server-filesystem (skips with the install command when missing)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (Debian: apt-get install nodejs npm), so the MCP filesystem server "
                    f"cannot run; then: {INSTALL_FILESYSTEM}")
    found = subprocess.run(["bash", str(REPO / "scripts" / "mcp-servers.sh"), "path"], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"the MCP filesystem server is not installed: {INSTALL_FILESYSTEM}")
    return ["node", found.stdout.strip()]


def git_server() -> list[str]:
    """The command line of mcp-server-git (skips with the install command when missing)."""
    exe = Path(sys.executable).parent / "mcp-server-git"
    if not exe.exists():
        pytest.skip("mcp-server-git is not installed: pip install 'guardrail[mcp]'")
    return [str(exe)]


def proxy(*args: str) -> list[str]:
    """The `guardrail mcp-proxy` command line with `args`."""
    exe = Path(sys.executable).parent / "guardrail"
    head = [str(exe)] if exe.exists() else [sys.executable, "-m", "guardrail.core.cli"]
    return [*head, "mcp-proxy", *args]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def build_workspace(root: Path) -> Path:
    """`root` (emptied) with a few files and a git repository of two commits and a branch, always the same."""
    if root.exists():
        shutil.rmtree(root)
    (root / "docs").mkdir(parents=True)
    (root / "notes.txt").write_text("alpha\n    beta line\ngamma\n")
    (root / "docs" / "guide.md").write_text("# Guide\n\nRead the notes.\n")
    (root / "docs" / "pixel.png").write_bytes(bytes.fromhex("89504e470d0a1a0a") + b"\x00" * 16)
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("print('one')\n")
    git(repo, "add", "app.py")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "app.py").write_text("print('two')\n")
    git(repo, "commit", "-q", "-am", "second")
    git(repo, "branch", "feature")
    git(repo, "tag", "v1")
    (repo / "app.py").write_text("print('three')\n")  # an unstaged change
    (repo / "new.txt").write_text("untracked\n")
    for path in root.rglob("*"):
        if ".git" not in path.parts:
            os.utime(path, (1_700_000_000, 1_700_000_000))
    os.utime(root, (1_700_000_000, 1_700_000_000))
    return root
