"""`guardrail bench mcp`: what `guardrail mcp-proxy` costs per call, and how well it blocks, on the reference servers.

Both reference servers (``@modelcontextprotocol/server-filesystem`` from npm, ``mcp-server-git`` from PyPI) run
twice side by side, unproxied and behind ``guardrail mcp-proxy`` (intervene mode, the workspace the server's
own directory), each driven by the MCP SDK's client over stdio on this machine.

- **latency**: the same read-only call, unproxied and proxied in alternating order, ``--pairs`` times per
  server; each pair gives the proxied round-trip minus the unproxied one (wall time: this is latency, not
  CPU). Median and 95th percentile of the added milliseconds; the target is a median of at most 2 ms. A
  third server written here with the SDK (``echo``, answering at once) shows the proxy's own cost; the git
  server's round-trip is tens of milliseconds of git subprocesses, so its figure is mostly their spread.
  On a shared machine the wall-time spread is several milliseconds, so the proxy process's own CPU time
  per call (all its threads, from /proc) is reported beside it: the part of the added latency that
  neighbours cannot inflate. ``--pairs`` sets the count for the two reference servers; the echo server
  runs ten times as many (its pairs are cheap, and its median is the one that resolves a millisecond).
- **blocking**: ``--calls`` generated calls per server (seeded): real and misspelt paths, files where
  directories go, edits whose old text is or is not in the file, moves onto existing files, revisions real,
  misspelt or past the root, branch names taken or free, arguments of the wrong type. Each call is labelled by
  running it unproxied (it failed: ``isError`` or a JSON-RPC error) and then sent through the proxy on the
  same state (blocked: the answer is the guard's). Precision = blocked calls that fail / blocked calls;
  recall = failing calls blocked / failing calls. The generated set is a mechanism check, not a sample of
  what agents send.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import numpy as np

from guardrail.core.cliutil import Command, emit_json, print_table

__all__ = ["BENCH", "measure_mcp"]

TARGET_ADDED_MEDIAN_MS = 2.0
_DATE = "1704164645 +0000"
_GIT_ENV = {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_COMMITTER_NAME": "Bench",
            "GIT_COMMITTER_EMAIL": "bench@example.com", "GIT_AUTHOR_DATE": _DATE, "GIT_COMMITTER_DATE": _DATE,
            "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
_FILES = {"README.md": "# Demo\n\nA small project.\n", "src/app.py": "def main():\n    return 'hi'\n",
          "src/util.py": "import os\n\n\ndef home():\n    return os.environ.get('HOME')\n",
          "docs/guide.md": "Install it.\nRun it.\n", "docs/notes/todo.txt": "ship\n  test\nrelease\n",
          "data/table.csv": "a,b\n1,2\n"}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **_GIT_ENV})


def _build(root: Path) -> Path:
    """The benchmark's workspace (emptied first): a few files and a repository with three commits, two branches
    and a tag; the same commit ids every time."""
    if root.exists():
        shutil.rmtree(root)
    for rel, text in _FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for n, text in enumerate(("one", "two", "three")):
        (repo / "lib.py").write_text(f"VALUE = '{text}'\n")
        _git(repo, "add", "lib.py")
        _git(repo, "commit", "-q", "-m", f"commit {n + 1}")
        if n == 1:
            _git(repo, "branch", "develop")
            _git(repo, "tag", "v0.2")
    (repo / "lib.py").write_text("VALUE = 'four'\n")
    return root


def _reset(ws: Path) -> None:
    _build(ws)


# A server that answers at once (the SDK's own low-level server): what the proxy adds, without a server's noise.
_ECHO_SERVER = """
import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
server = Server("echo")

@server.list_tools()
async def list_tools():
    return [types.Tool(name="echo", description="Echo the text.", inputSchema={
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})]

@server.call_tool()
async def call_tool(name, arguments):
    return [types.TextContent(type="text", text=arguments["text"])]

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""


def _filesystem_server() -> list[str] | None:
    home = os.environ.get("GUARDRAIL_MCP_SERVERS", os.path.expanduser("~/.cache/guardrail/mcp-servers"))
    entry = Path(home) / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
    return ["node", str(entry)] if entry.exists() and shutil.which("node") else None


def _git_server() -> list[str] | None:
    exe = Path(sys.executable).parent / "mcp-server-git"
    return [str(exe)] if exe.exists() else None


def _proxy(server: list[str]) -> list[str]:
    exe = Path(sys.executable).parent / "guardrail"
    head = [str(exe)] if exe.exists() else [sys.executable, "-m", "guardrail.core.cli"]
    return [*head, "mcp-proxy", "--", *server]


# ----------------------------------------------------------------------------- the generated calls
Call = tuple[str, dict[str, Any], bool]  # (tool, arguments, whether it may change the workspace)


def _typo(word: str, rng: random.Random) -> str:
    if len(word) < 3:
        return word + "x"
    i = rng.randrange(1, len(word) - 1)
    return word[:i] + word[i + 1] + word[i] + word[i + 2:] if rng.random() < 0.5 else word[:i] + word[i + 1:]


def _filesystem_calls(ws: Path, n: int, rng: random.Random) -> list[Call]:
    files = [str(ws / rel) for rel in _FILES]
    dirs = [str(ws), str(ws / "src"), str(ws / "docs"), str(ws / "docs" / "notes")]

    def path(kind: str) -> str:
        pick = rng.random()
        if pick < 0.45:
            return rng.choice(files if kind == "file" else dirs)
        if pick < 0.75:
            real = rng.choice(files if kind == "file" else dirs)
            return os.path.join(os.path.dirname(real), _typo(os.path.basename(real), rng))
        if pick < 0.9:
            return rng.choice(dirs if kind == "file" else files)  # the wrong kind
        return rng.choice(["/etc/hostname", str(ws.parent / "other.txt"), "../outside.txt"])

    def line_of(file: str) -> str:
        lines = [ln for ln in _FILES[os.path.relpath(file, ws)].splitlines() if ln.strip()]
        text = rng.choice(lines)
        return text if rng.random() < 0.55 else _typo(text, rng)

    out: list[Call] = []
    for _ in range(n):
        tool = rng.choice(["read_text_file", "read_file", "list_directory", "get_file_info", "directory_tree",
                           "search_files", "edit_file", "write_file", "move_file", "create_directory",
                           "list_directory_with_sizes", "read_multiple_files"])
        if tool in ("read_text_file", "read_file"):
            args: dict[str, Any] = {"path": path("file")}
            if rng.random() < 0.25:
                args["head"] = rng.choice([2, "2", None])
        elif tool in ("list_directory", "directory_tree", "list_directory_with_sizes"):
            args = {"path": path("dir")}
            if tool == "list_directory_with_sizes" and rng.random() < 0.4:
                args["sortBy"] = rng.choice(["size", "name", "date"])
        elif tool == "get_file_info":
            args = {"path": path(rng.choice(["file", "dir"]))}
        elif tool == "search_files":
            args = {"path": path("dir"), "pattern": rng.choice(["*.py", "**/*.md", "todo*"])}
        elif tool == "edit_file":
            target = path("file")
            old = line_of(target) if target in files else "anything"
            args = {"path": target, "edits": [{"oldText": old, "newText": "changed"}], "dryRun": rng.random() < 0.5}
            if rng.random() < 0.1:
                args["edits"] = [{"old": old, "new": "x"}]  # the wrong keys
        elif tool == "write_file":
            base = rng.choice(dirs + [str(ws / "missing"), str(ws / "src" / "app.py")])
            args = {"path": os.path.join(base, "out.txt"), "content": "x"}
        elif tool == "move_file":
            args = {"source": path("file"), "destination": rng.choice(
                [str(ws / "moved.txt"), rng.choice(files), str(ws / "nowhere" / "moved.txt")])}
        elif tool == "create_directory":
            args = {"path": rng.choice([str(ws / "new" / "deep"), str(ws / "src" / "pkg"), files[0] + "/sub"])}
        else:
            args = {"paths": [path("file") for _ in range(rng.randint(1, 3))]}
        out.append((tool, args, tool in ("edit_file", "write_file", "move_file", "create_directory")))
    return out


def _git_calls(ws: Path, n: int, rng: random.Random) -> list[Call]:
    repo = str(ws / "repo")
    refs = ["main", "develop", "v0.2", "HEAD"]

    def revision() -> str:
        pick = rng.random()
        if pick < 0.4:
            return rng.choice(refs)
        if pick < 0.6:
            return f"HEAD~{rng.randint(0, 4)}"
        if pick < 0.85:
            return _typo(rng.choice(refs[:3]), rng)
        return rng.choice(["deadbeef", "v0.2:lib.py", "main..develop", "release"])

    out: list[Call] = []
    for _ in range(n):
        tool = rng.choice(["git_diff", "git_show", "git_checkout", "git_create_branch", "git_log", "git_status",
                           "git_add", "git_branch", "git_diff_unstaged", "git_diff_staged"])
        where = repo if rng.random() < 0.85 else rng.choice([str(ws), str(ws / "src"), repo + "x"])
        args: dict[str, Any] = {"repo_path": where}
        if tool == "git_diff":
            args["target"] = revision()
        elif tool == "git_show":
            args["revision"] = revision()
        elif tool == "git_checkout":
            args["branch_name"] = revision()
        elif tool == "git_create_branch":
            args["branch_name"] = rng.choice(["feature", "develop", "main", "fix-1"])
            if rng.random() < 0.6:
                args["base_branch"] = rng.choice(["main", "develop", "v0.2", _typo("develop", rng)])
        elif tool == "git_log":
            args["max_count"] = rng.choice([3, 10, "5"])
        elif tool == "git_add":
            args["files"] = [rng.choice(["lib.py", "missing.py", "lib.pyy"])]
        elif tool == "git_branch":
            args["branch_type"] = rng.choice(["local", "all", "remote"])
            if rng.random() < 0.4:
                args["contains"] = revision()
        out.append((tool, args, tool in ("git_checkout", "git_create_branch", "git_add")))
    return out


# ----------------------------------------------------------------------------- running them
async def _session(stack: AsyncExitStack, command: list[str]) -> Any:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    quiet = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed with the stack
    params = StdioServerParameters(command=command[0], args=command[1:], env={**os.environ, **_GIT_ENV})
    read, write = await stack.enter_async_context(stdio_client(params, errlog=quiet))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    await session.list_tools()  # what a client does first: the proxy learns the declared schemas here
    return session


async def _call(session: Any, tool: str, args: dict[str, Any]) -> tuple[bool, str]:
    """(failed, text) of one call; a JSON-RPC error counts as failed."""
    from mcp.shared.exceptions import McpError

    try:
        result = await session.call_tool(tool, args)
    except McpError as exc:
        return True, str(exc)
    text = "\n".join(getattr(item, "text", "") for item in result.content)
    return bool(result.isError), text


def _proxy_cpu_s() -> float | None:
    """CPU seconds (all threads) the running `guardrail mcp-proxy` child of this process has used; None off Linux."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[1] == me and b"mcp-proxy" in cmdline:
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return None


async def _latency(direct: Any, proxied: Any, tool: str, args: dict[str, Any], pairs: int) -> dict[str, Any]:
    for session in (direct, proxied):  # warm: first calls load the gate's caches and the server's
        for _ in range(5):
            await session.call_tool(tool, args)
    added, base = [], []
    cpu_before = _proxy_cpu_s()
    for index in range(pairs):
        seconds = {}
        # alternate which goes first, so a drift of the machine within a pair cancels over pairs
        for which, session in ((("direct", direct), ("proxied", proxied)) if index % 2 == 0 else
                               (("proxied", proxied), ("direct", direct))):
            started = time.perf_counter()
            await session.call_tool(tool, args)
            seconds[which] = time.perf_counter() - started
        base.append(seconds["direct"] * 1000)
        added.append((seconds["proxied"] - seconds["direct"]) * 1000)
    cpu_after = _proxy_cpu_s()
    cpu = None if cpu_before is None or cpu_after is None else round((cpu_after - cpu_before) * 1000 / pairs, 3)
    return {"call": tool, "pairs": pairs, "proxy_cpu_ms_per_call": cpu,
            "direct_median_ms": round(statistics.median(base), 3),
            "added_median_ms": round(statistics.median(added), 3), "added_p95_ms": round(float(np.percentile(added, 95)), 3)}


async def _blocking(direct: Any, proxied: Any, ws: Path, calls: list[Call],
                    reset: Callable[[], None]) -> dict[str, Any]:
    counts = {"calls": 0, "failed": 0, "blocked": 0, "blocked_and_failed": 0}
    wrongly: list[dict[str, Any]] = []
    missed: list[dict[str, Any]] = []
    for tool, args, changes in calls:
        if changes:
            reset()
        failed, _ = await _call(direct, tool, args)
        if changes:
            reset()
        _, text = await _call(proxied, tool, args)
        blocked = text.startswith("[guardrail:")
        counts["calls"] += 1
        counts["failed"] += failed
        counts["blocked"] += blocked
        counts["blocked_and_failed"] += blocked and failed
        if blocked and not failed and len(wrongly) < 10:
            wrongly.append({"tool": tool, "args": args, "guard": text[:300]})
        if failed and not blocked and len(missed) < 20:
            missed.append({"tool": tool, "args": args, "server": text[:200]})
    precision = counts["blocked_and_failed"] / counts["blocked"] if counts["blocked"] else None
    recall = counts["blocked_and_failed"] / counts["failed"] if counts["failed"] else None
    return {**counts, "precision": None if precision is None else round(precision, 3),
            "recall": None if recall is None else round(recall, 3), "false_blocks": wrongly,
            "missed": missed}


async def _one_server(name: str, server: list[str], ws: Path, *, pairs: int, calls: int, seed: int) -> dict[str, Any]:
    rng = random.Random(f"{seed}-{name}")
    generated = {"filesystem": _filesystem_calls, "git": _git_calls}.get(name, lambda *_: [])(ws, calls, rng)
    probe = {"filesystem": ("read_text_file", {"path": str(ws / "README.md")}),
             "git": ("git_status", {"repo_path": str(ws / "repo")}), "echo": ("echo", {"text": "ping"})}[name]
    async with AsyncExitStack() as stack:
        direct = await _session(stack, server)
        proxied = await _session(stack, _proxy(server))
        latency = await _latency(direct, proxied, *probe, pairs * (10 if name == "echo" else 1))
        if not generated:
            return {"latency": latency}
        blocking = await _blocking(direct, proxied, ws, generated, lambda: _reset(ws))
    return {"latency": latency, "blocking": blocking}


def measure_mcp(*, pairs: int = 200, calls: int = 150, seed: int = 0) -> dict[str, Any]:
    """Both servers' figures (a server that is not installed is reported as skipped, with how to get it)."""
    import anyio

    out: dict[str, Any] = {"target_added_median_ms": TARGET_ADDED_MEDIAN_MS, "servers": {}}
    with tempfile.TemporaryDirectory(prefix="guardrail-bench-mcp-") as tmp:
        ws = _build(Path(tmp) / "ws")
        echo = Path(tmp) / "echo_server.py"
        echo.write_text(_ECHO_SERVER)
        for name, found, how in (("echo", [sys.executable, str(echo)], ""),
                                 ("filesystem", _filesystem_server(), "bash scripts/mcp-servers.sh install"),
                                 ("git", _git_server(), "pip install 'guardrail[mcp]'")):
            if found is None:
                out["servers"][name] = {"skipped": f"not installed: {how}"}
                continue
            command = {"filesystem": [*found, str(ws)], "git": [*found, "--repository", str(ws / "repo")]}.get(
                name, found)
            out["servers"][name] = anyio.run(functools.partial(_one_server, name, command, ws, pairs=pairs,
                                                               calls=calls, seed=seed))
            _build(ws)
    timed = [s for s in out["servers"].values() if "latency" in s]
    ran = [s for s in timed if "blocking" in s]
    blocked = sum(s["blocking"]["blocked"] for s in ran)
    hit = sum(s["blocking"]["blocked_and_failed"] for s in ran)
    failed = sum(s["blocking"]["failed"] for s in ran)
    out["blocking"] = {"precision": round(hit / blocked, 3) if blocked else None,
                       "recall": round(hit / failed, 3) if failed else None, "calls": sum(
                           s["blocking"]["calls"] for s in ran)}
    # Judged on the servers that answer in a few milliseconds; the git server's round-trip is tens of
    # milliseconds of git subprocesses whose spread swamps a millisecond (its figure is reported all the same).
    quick = [out["servers"][n] for n in ("echo", "filesystem") if "latency" in out["servers"].get(n, {})]
    out["meets_target"] = bool(quick) and all(s["latency"]["added_median_ms"] <= TARGET_ADDED_MEDIAN_MS
                                              for s in quick)
    return out


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pairs", type=int, default=200, help="latency pairs per server")
    parser.add_argument("--calls", type=int, default=150, help="generated calls per server")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")


def _run(args: argparse.Namespace) -> int:
    result = measure_mcp(pairs=args.pairs, calls=args.calls, seed=args.seed)
    if args.json:
        emit_json(result)
        return 0
    rows = []
    for name, figures in result["servers"].items():
        if "latency" not in figures:
            rows.append({"server": name, "note": figures["skipped"]})
            continue
        lat, blk = figures["latency"], figures.get("blocking", {})
        rows.append({"server": name, "direct_ms": lat["direct_median_ms"], "added_median_ms": lat["added_median_ms"],
                     "proxy_cpu_ms": lat["proxy_cpu_ms_per_call"],
                     "added_p95_ms": lat["added_p95_ms"], "calls": blk.get("calls"), "failed": blk.get("failed"),
                     "blocked": blk.get("blocked"), "precision": blk.get("precision"), "recall": blk.get("recall")})
    print_table(rows)
    print(json.dumps({"blocking": result["blocking"], "meets_target": result["meets_target"]}))
    return 0


BENCH = Command(help="guardrail mcp-proxy: added latency per call and blocking precision/recall on both servers",
                add_arguments=_add_arguments, run=_run)
