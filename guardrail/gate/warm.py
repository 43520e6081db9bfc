"""Warm before the first action: the workspace's modules and test files parsed in the background, and kept on disk.

When a gate starts (a Guard or an episode, `guardrail check --batch` per workspace) a background thread
parses every Python file of the workspace (tests included) and the modules they import from the target's
paths, into the same symbol cache decisions use, so the first decisions find them parsed. The tables
are written to a JSON file in the user's cache directory (``$GUARDRAIL_CACHE_DIR``, else
``$XDG_CACHE_HOME/guardrail/gate``, else ``~/.cache/guardrail/gate``), one file per workspace, each entry
keyed by (path, mtime, size): a second process on the same workspace starts warm, and an entry whose file
changed is never used. The cache directory is never one under the workspace roots (nothing is written
where the agent works); the file is versioned and schema-checked on load, and a bad one is ignored.
Only the local backend's files are kept (a sandbox's files are another machine's).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardrail.gate import budget
from guardrail.gate.budget import BudgetExceeded

if TYPE_CHECKING:
    from guardrail.gate.index import ModuleIndex
    from guardrail.gate.view import FsView

__all__ = ["CACHE_VERSION", "MAX_WARM_FILES", "SymbolCache", "cache_directory", "warm_workspace"]

CACHE_VERSION = 1
MAX_WARM_FILES = 4_000  # workspace files parsed ahead at most (a larger tree warms its first 4,000)
MAX_WARM_BYTES = 256 * 1024  # bigger files are parsed when a decision needs them, not ahead
MAX_WARM_S = 60.0  # the background warm-up stops after this long
MAX_CACHE_ENTRIES = 20_000
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox",
                        "build", "dist", ".mypy_cache", ".pytest_cache", "site-packages", ".eggs"})
_LOCK = threading.Lock()
_ONE_AT_A_TIME = threading.Lock()


def cache_directory() -> Path | None:
    """Where warm symbol tables are kept (None: nowhere; GUARDRAIL_CACHE_DIR="" turns persistence off)."""
    configured = os.environ.get("GUARDRAIL_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "guardrail" / "gate"


def _kept_directory(directory: Path | None, fs: FsView) -> tuple[str | None, str | None]:
    """(the resolved directory to keep files in, or None; why not): never one under the workspace roots."""
    if directory is None:
        return None, "persistence is off"
    resolved = os.path.realpath(directory)
    if any(resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep) for root in fs.workspace_roots()):
        return None, f"{directory} lies under the workspace roots: nothing is written there"
    return resolved, None


def _read_kept(path: Path, key: str, max_bytes: int) -> dict[str, Any] | None:
    """The mapping under `key` of a kept file of this version; None when missing, too large or not that shape."""
    try:
        if path.stat().st_size > max_bytes:
            return None
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(raw, dict) or raw.get("version") != CACHE_VERSION or not isinstance(raw.get(key), dict):
        return None
    return raw[key]  # type: ignore[no-any-return]


class SymbolCache:
    """The on-disk symbol tables of one workspace: ``{"version": 1, "entries": {path: [mtime_ns, size, table]}}``."""

    def __init__(self, workspace: str, fs: FsView, directory: Path | None = None) -> None:
        self.fs = fs
        directory = cache_directory() if directory is None else directory
        self.path: Path | None = None
        resolved, self.refused = _kept_directory(directory, fs)
        if resolved is None:
            return
        digest = hashlib.sha256(os.path.realpath(workspace).encode("utf-8", "surrogateescape")).hexdigest()[:20]
        self.path = Path(resolved) / f"symbols-v{CACHE_VERSION}-{digest}.json"

    def load(self) -> int:
        """Put the kept tables into the decision cache; how many were loaded (0 when missing or unreadable)."""
        from guardrail.gate.index import _SYMBOLS
        from guardrail.gate.parse_worker import load_symbols

        if self.path is None or self.fs.key != "local":
            return 0
        entries = _read_kept(self.path, "entries", 256 * 1024 * 1024)
        if entries is None:
            return 0
        loaded = 0
        for path, entry in entries.items():
            if loaded >= MAX_CACHE_ENTRIES:
                break
            try:
                mtime, size, table = entry
                if not (isinstance(path, str) and isinstance(mtime, int) and isinstance(size, int)):
                    continue
                key = (self.fs.key, path)
                if key not in _SYMBOLS:
                    _SYMBOLS[key] = (mtime, size, load_symbols(table))
                    loaded += 1
            except (TypeError, ValueError, KeyError):
                continue  # one bad entry is skipped, the rest are used
        return loaded

    def save(self, paths: list[str]) -> int:
        """Write the tables of `paths` now in the decision cache (merged with what the file holds)."""
        from guardrail.core.fileio import atomic_write_text
        from guardrail.gate.index import _SYMBOLS
        from guardrail.gate.parse_worker import dump_symbols

        if self.path is None or self.fs.key != "local":
            return 0
        entries: dict[str, Any] = {}
        for path in paths[:MAX_CACHE_ENTRIES]:
            hit = _SYMBOLS.get((self.fs.key, path))
            if hit is not None:
                entries[path] = [hit[0], hit[1], dump_symbols(hit[2])]
        if not entries:
            return 0
        with _LOCK:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(self.path, json.dumps({"version": CACHE_VERSION, "entries": entries}))
            except OSError:
                return 0
        return len(entries)


def _stdlib_cache_file(fs: FsView) -> Path | None:
    """Where this interpreter's standard-module names are kept: one file per interpreter build and stdlib, never
    under the workspace roots (as the symbol tables)."""
    resolved, _ = _kept_directory(cache_directory(), fs)
    if resolved is None:
        return None
    stdlib_dir = os.path.dirname(os.__file__)
    try:
        stamp = os.stat(stdlib_dir).st_mtime_ns
    except OSError:
        return None
    key = f"{os.path.realpath(sys.executable)}\0{sys.version}\0{stdlib_dir}\0{stamp}"
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return Path(resolved) / f"stdlib-v{CACHE_VERSION}-{digest}.json"


def _learn_stdlib(version: tuple[int, ...], stdlib: frozenset[str], fs: FsView) -> int:
    """Every standard module's run-time names: from the kept file when this interpreter wrote one, else learned
    in a child and kept (a second process, `guardrail check` run in a loop, starts none). How many are known."""
    from guardrail.core.fileio import atomic_write_text
    from guardrail.gate.index import known_stdlib_names, prefetch_stdlib_names, remember_stdlib_names

    path = _stdlib_cache_file(fs)
    kept = _read_kept(path, "modules", 16 * 1024 * 1024) if path is not None else None
    known = len(remember_stdlib_names(kept)) if kept is not None else 0  # a missing or bad file: learned again
    learned = prefetch_stdlib_names([], version, stdlib)
    if learned and path is not None:
        with _LOCK:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(path, json.dumps({"version": CACHE_VERSION, "modules": known_stdlib_names()}))
            except OSError:
                pass
    return known + len(learned)


def warm_workspace(workspace: str, fs: FsView, index: ModuleIndex | None, *, cache: SymbolCache | None = None,
                   stop: threading.Event | None = None) -> dict[str, Any]:
    """Parse the workspace's Python files (tests too) and the modules they import, ahead of any decision; keep them
    in `cache`. Returns what was done (files, seconds), for the benchmark and the tests."""
    with _ONE_AT_A_TIME:  # gates started together warm one after the other: parses hold the GIL
        return _warm(workspace, fs, index, cache, stop)


def _warm(workspace: str, fs: FsView, index: ModuleIndex | None, cache: SymbolCache | None,
          stop: threading.Event | None) -> dict[str, Any]:
    from guardrail.gate.index import module_symbols

    started = time.monotonic()
    cache = cache or SymbolCache(workspace, fs)
    loaded = cache.load()
    done: list[str] = []
    learned: list[int] = []
    stdlib_thread = None
    if index is not None:
        # The standard modules' run-time names, learned in a child process meanwhile (it holds no GIL of ours):
        # else the first decision naming one (`socket.AF_INET7`) starts a child on its own clock.
        target = index.target
        stdlib_thread = threading.Thread(
            target=lambda: learned.append(_learn_stdlib(target.version, target.stdlib, fs)),
            name="guardrail-gate-stdlib", daemon=True)
        stdlib_thread.start()
    with budget.within(None):  # no decision in progress: nothing here is on any decision's clock
        files = [os.path.join(workspace, relative) for relative in fs.walk(workspace, limit=MAX_WARM_FILES * 4,
                                                                           skip=_SKIP_DIRS)
                 if relative.endswith(".py")][:MAX_WARM_FILES]
        imported: set[str] = set()
        for path in files:
            if stop is not None and stop.is_set() or time.monotonic() - started > MAX_WARM_S:
                break
            if fs.stat(path).size > MAX_WARM_BYTES:
                continue
            try:
                symbols = module_symbols(path, fs)
            except BudgetExceeded:
                continue
            done.append(path)
            imported.update(module.partition(".")[0] for module, level in symbols.imported if level == 0 and module)
        if index is not None:
            for name in sorted(imported):  # the modules the workspace imports, from the target's paths
                if stop is not None and stop.is_set() or time.monotonic() - started > MAX_WARM_S:
                    break
                try:
                    info = index.find(name, ())
                    if info.status == "found" and info.kind in ("source", "package") and \
                            fs.stat(info.path).size <= MAX_WARM_BYTES:
                        module_symbols(info.path, fs)
                        done.append(info.path)
                except (BudgetExceeded, OSError):
                    continue
            for name in sorted(imported - index.target.stdlib):
                # What importing a third-party package loads (`np.loadtxt` follows numpy's import closure):
                # parsed now, so a decision finds the closure's files in the symbol cache.
                if stop is not None and stop.is_set() or time.monotonic() - started > MAX_WARM_S:
                    break
                try:
                    if index.find(name, ()).status == "found":
                        index.closure([name], (), within=name)
                except (BudgetExceeded, OSError):
                    continue
    if stdlib_thread is not None:
        stdlib_thread.join(max(0.0, MAX_WARM_S - (time.monotonic() - started)))
    saved = cache.save(done)
    return {"loaded": loaded, "parsed": len(done), "saved": saved, "seconds": round(time.monotonic() - started, 3),
            "stdlib_modules": learned[0] if learned else 0, "cache": str(cache.path) if cache.path else cache.refused}
