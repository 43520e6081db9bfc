"""The gate's one door to the filesystem: a probe backend confined to the roots, with caches and a per-decision memo.

Three sets of roots apply. Content (a file's text, a module's names) is read only under the
workspace roots and the target's trusted import paths; names are listed and paths stat'ed there
and also in the command directories of the target's PATH (what ``which`` would look at). A path
anywhere else is ``outside``: its predicate is unknown, and no listing, line or count of it is
ever reported. Only text under the workspace roots is ever quoted in a hint.

Directory listings are cached by the directory's mtime, parsed files by (path, mtime, size);
within one decision every path is stat'ed at most once (`snapshot`), and `prefetch` hands a
backend all the paths an action needs in one call so a remote backend can batch them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from guardrail.gate import fsview
from guardrail.gate.backend import DECISION_MEMO, LocalBackend, ProbeBackend, Roots, taints
from guardrail.gate.fsview import MAX_READ_BYTES, PathState

__all__ = ["MAX_LISTING", "FsView", "local_view"]

MAX_LISTING = 200_000  # a directory with more entries than this is not listed: lookups in it are unknown
_MAX_CACHED_NAMES = 4_000_000  # all cached listings together; past it the cache starts over

T = TypeVar("T")

_MEMO = DECISION_MEMO  # one memo per decision, shared with the backend (which keeps resolved directories in it)
_LISTINGS_LOCK = threading.Lock()
_cached_names = 0


class FsView:
    """Confined, cached, read-only access to one backend. `roots=None` (the default) means unconfined."""

    def __init__(self, backend: ProbeBackend | None = None, workspace: Roots | None = None, *,
                 import_roots: Iterable[str] = (), command_dirs: Iterable[str] = ()) -> None:
        self.backend: ProbeBackend = backend or LocalBackend()
        self.key = self.backend.key
        # A backend that does not batch may offer a one-path stat: no list built per probe on the hot path.
        self._stat: Callable[[str, Roots | None], PathState] | None = (
            None if getattr(self.backend, "batches", True) else getattr(self.backend, "stat", None))
        self.workspace = workspace
        self._import_roots = tuple(import_roots)
        self._command_dirs = tuple(command_dirs)
        self._rebuild()

    def _rebuild(self) -> None:
        if self.workspace is None:
            self.readable: Roots | None = None
            self.listable: Roots | None = None
            return
        resolve = getattr(self.backend, "realpaths", None)  # symlinks resolve on the backend's machine
        self.readable = self.workspace + Roots.of(self._import_roots, trusted=True, resolve=resolve)
        self.listable = self.readable + Roots.of(self._command_dirs, trusted=True, resolve=resolve)

    def set_import_roots(self, roots: Iterable[str]) -> None:
        """The target's trusted import paths, once they are known."""
        self._import_roots = tuple(roots)
        self._rebuild()

    def set_command_dirs(self, directories: Iterable[str]) -> None:
        self._command_dirs = tuple(directories)
        self._rebuild()

    @property
    def command_dirs(self) -> tuple[str, ...]:
        return self._command_dirs

    def workspace_roots(self) -> tuple[str, ...]:
        """The roots the agent can write, as given and resolved."""
        return self.workspace.untrusted if self.workspace is not None else ()

    # ------------------------------------------------------------------ stat
    @staticmethod
    @contextmanager
    def snapshot() -> Iterator[None]:
        """Within the block each path is stat'ed once: one decision sees one state of the filesystem."""
        token = _MEMO.set({})
        try:
            yield
        finally:
            _MEMO.reset(token)

    def _stat_one(self, path: str, roots: Roots | None, label: str) -> PathState:
        memo = _MEMO.get()
        key = (id(self), label, path)
        state = memo.get(key) if memo is not None else None
        if state is None:
            stat = self._stat
            state = stat(path, roots) if stat is not None else self.backend.stat_many([path], roots)[0]
            if memo is not None:
                memo[key] = state
        return state

    def prefetch(self, paths: Iterable[str], programs: Iterable[str] = ()) -> None:
        """Stat every path an action needs in one backend call (one round-trip for a backend that batches); a
        backend with its own ``prefetch`` also looks up the command names `programs` in the same call."""
        memo = _MEMO.get()
        if memo is None or not getattr(self.backend, "batches", False):
            return
        me = id(self)
        wanted = list(dict.fromkeys(p for p in paths if isinstance(p, str) and (me, "list", p) not in memo))
        batch = getattr(self.backend, "prefetch", None)
        if batch is not None:
            commands = [os.path.join(directory, program) for program in dict.fromkeys(programs)
                        for directory in self._command_dirs]
            if not wanted and not commands:
                return  # nothing to ask: no round-trip (a call checked against its schema alone)
            for path, state in zip(wanted, batch(wanted, self.listable, commands), strict=True):
                memo[(me, "list", path)] = state
            return
        if wanted:
            for path, state in zip(wanted, self.backend.stat_many(wanted, self.listable), strict=True):
                memo[(me, "list", path)] = state

    def stat(self, path: str) -> PathState:
        return self._stat_one(path, self.listable, "list")

    def readable_state(self, path: str) -> PathState:
        """The stat of a path whose content may be read (``outside`` for a command dir's file)."""
        return self._stat_one(path, self.readable, "read")

    def in_workspace(self, path: str) -> bool:
        """Whether `path` really lies under the workspace roots (only such text may be quoted in a hint)."""
        if self.workspace is None:
            return True
        return self._stat_one(path, self.workspace, "workspace").kind != "outside"

    # ------------------------------------------------------------------ list
    def list_dir(self, path: str) -> frozenset[str] | None:
        """Entry names of a directory, cached by its mtime; None when missing, outside, unreadable or huge."""
        global _cached_names
        state = self.stat(path)
        if state.kind != "dir":
            return None
        key = (self.key, path)
        cached = fsview._LISTINGS.get(key)
        if cached is not None and cached[0] == state.mtime_ns:
            return cached[1]
        listing = self.backend.list_dir(path, self.listable, MAX_LISTING)
        names = None if listing is None else listing[1]
        with _LISTINGS_LOCK:
            if _cached_names > _MAX_CACHED_NAMES:
                fsview._LISTINGS.clear()
                _cached_names = 0
            fsview._LISTINGS[key] = (listing[0] if listing else state.mtime_ns, names)
            _cached_names += len(names or ())
        return names

    # ------------------------------------------------------------------ read
    def read_ahead(self, paths: Iterable[str], cap: int = MAX_READ_BYTES,
                   wanted: Callable[[str, PathState], bool] | None = None) -> None:
        """On a backend that reads many files in one round-trip (``read_many``), read the files among `paths` that
        `read_text(path, cap)` would read next, and that `wanted(path, state)` says are not known already, in one;
        elsewhere, nothing (each read is as cheap as a batch)."""
        read_many = getattr(self.backend, "read_many", None)
        memo = _MEMO.get()
        if read_many is None or memo is None:
            return
        me = id(self)
        todo = [p for p in dict.fromkeys(paths) if isinstance(p, str) and not fsview.unsafe_to_read(p)]
        unknown = [p for p in todo if (me, "read", p) not in memo]
        if unknown:  # their stats first, in one call (most are in the decision's revalidation already)
            for path, state in zip(unknown, self.backend.stat_many(unknown, self.readable), strict=True):
                memo[(me, "read", path)] = state
        files = [p for p in todo if memo[(me, "read", p)].kind == "file"
                 and (wanted is None or wanted(p, memo[(me, "read", p)]))]
        if len(files) > 1:
            read_many(files, self.readable, cap)

    def read_text(self, path: str, cap: int = MAX_READ_BYTES) -> str | None:
        """The text of a regular file under the readable roots, or None (outside, not regular, over `cap`)."""
        if self.readable is not None and self.readable_state(path).kind != "file":
            return None
        if fsview.unsafe_to_read(path):
            return None
        data = self.backend.read_prefix(path, self.readable, cap)
        if data is None or len(data) > cap:
            return None
        return data.decode("utf-8", errors="surrogateescape")

    def cached_by_file(self, cache: dict[tuple[str, str], tuple[int, int, Any]], path: str,
                       compute: Callable[[PathState], T], *, limit: int = 20_000) -> T:
        """`compute(state)` for a file, cached by (path, mtime, size); not cached unless it is a readable file."""
        state = self.readable_state(path) if self.readable is not None else self.stat(path)
        key = (self.key, path)
        if state.kind == "file":
            hit = cache.get(key)
            if hit is not None and hit[0] == state.mtime_ns and hit[1] == state.size:
                return hit[2]  # type: ignore[no-any-return]
        unanswered = taints()
        value = compute(state)
        if state.kind == "file" and taints() == unanswered:  # nothing it read went unanswered
            if len(cache) > limit:
                cache.clear()
            cache[key] = (state.mtime_ns, state.size, value)
        return value

    # ------------------------------------------------------------------ commands and hints
    def which(self, program: str) -> str | None:
        """Where `program` resolves on the target's PATH. The command directories are the operator's, and an
        entry there is often a symlink to an interpreter or tool installed elsewhere: only whether it is an
        executable is asked (no content), so the entry's target is not confined."""
        if getattr(self.backend, "batches", False):
            return self.backend.which(program, self._command_dirs, None)
        for directory in self._command_dirs:  # the cached listings answer most lookups without a stat
            names = self.list_dir(directory)
            if names is not None and program in names:
                candidate = directory + "/" + program
                state = self.backend.stat_many([candidate], None)[0]
                if state.kind == "file" and state.executable:
                    return candidate
        return None

    def walk(self, root: str, *, limit: int, skip: frozenset[str]) -> list[str]:
        """Files under a workspace root (for repair hints), bounded in count and by the decision's deadline."""
        return self.backend.walk(root, self.workspace, limit, skip)


_LOCAL = FsView()


def local_view() -> FsView:
    """The unconfined local view (for callers that chose their paths themselves, e.g. tests and tools)."""
    return _LOCAL
