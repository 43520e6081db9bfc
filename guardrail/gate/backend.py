"""Where the gate's probes read: the probe-backend protocol and the local filesystem backend.

A backend answers six questions about the machine the agent's actions run on: what a path is
(`stat_many`, several paths in one call so a remote backend can batch an action's probes into one
round-trip), the names in a directory (`list_dir`), a bounded prefix of a regular file
(`read_prefix`), the target interpreter's import paths (`import_paths`), where a command
resolves (`which`), and, for repair hints only, a bounded list of the files under a root (`walk`). Every filesystem question carries the `Roots` it is confined to: a backend
answers ``outside`` for a path whose real location (after symlinks) is not under them, and never
reads, lists or reports on it. The caches and the policy of which roots apply live above, in
`guardrail.gate.view`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from guardrail.gate import budget, remote_probe
from guardrail.gate.budget import BudgetExceeded
from guardrail.gate.fsview import PathState

if TYPE_CHECKING:
    from guardrail.gate.interpreter import TargetPython

__all__ = ["LocalBackend", "ProbeBackend", "ProbeUnavailable", "Roots", "prepare_path", "under"]



def under(path: str, root: str) -> bool:
    """Whether normalized absolute `path` is `root` or lies below it."""
    if root == os.sep:
        return path.startswith(os.sep)
    return path == root or path.startswith(root + os.sep)


def _normalize(path: str) -> str:
    # normpath is C code; abspath (Python) only for the rare relative path
    return os.path.normpath(path) if path.startswith(os.sep) else os.path.normpath(os.path.abspath(path))


class ProbeUnavailable(BudgetExceeded):
    """A question the backend could not answer (its machine did not respond in time, or answered nonsense).

    A `BudgetExceeded`: whatever depended on the answer is *unknown*, handled wherever the gate handles
    a deadline (the predicate, the extraction or the hint), never false."""


# What the decision in progress has resolved already (directory -> its real path): set by the gate per decision.
DECISION_MEMO: ContextVar[dict[Any, Any] | None] = ContextVar("guardrail_gate_decision_memo", default=None)
_TAINTS = ("unanswered probes",)  # in the memo: how many questions of this decision went unanswered


def taint() -> None:
    """Count an unanswered probe in the decision in progress (a remote backend's round-trip failed or ran out of
    time): what was being derived from the probes meanwhile (a symbol table, an import closure) is not cached."""
    memo = DECISION_MEMO.get()
    if memo is not None:
        memo[_TAINTS] = memo.get(_TAINTS, 0) + 1


def taints() -> int:
    """How many probes of the decision in progress went unanswered so far: a cache stores a value only when this
    did not change while the value was computed."""
    memo = DECISION_MEMO.get()
    return 0 if memo is None else int(memo.get(_TAINTS, 0))


def _resolved(paths: Iterable[str | os.PathLike[str]], resolve: Callable[..., Sequence[str | None]] | None,
              trusted: bool) -> list[tuple[str, str]]:
    """(normalized path, its real path) for each path that can be normalized (and resolved)."""
    found: list[tuple[str, str]] = []
    if resolve is None:
        for raw in paths:
            try:
                path = os.path.normpath(os.path.abspath(os.fspath(raw)))
                found.append((path, os.path.realpath(path)))
            except (OSError, ValueError, TypeError):
                continue
        return found
    normalized: list[str] = []
    for raw in paths:
        try:
            normalized.append(os.path.normpath(os.path.abspath(os.fspath(raw))))
        except (OSError, ValueError, TypeError):
            continue
    reals = list(resolve(normalized, trusted=trusted)) if normalized else []
    return [(path, real if isinstance(real, str) and real else path)
            for path, real in zip(normalized, reals + [None] * (len(normalized) - len(reals)), strict=False)]



@dataclass(frozen=True)
class Roots:
    """Directories a probe may look under, as given (`lexical`) and with symlinks resolved (`real`).

    `trusted` are the roots the agent cannot write (the target's import paths, the PATH
    directories): a path under one of them, and under no other root, is stat'ed as written. A
    path under an untrusted root (the workspace) is checked by where it really is, since the
    agent may have put a symlink anywhere on it.
    """

    lexical: tuple[str, ...] = ()
    real: tuple[str, ...] = ()
    trusted: tuple[str, ...] = ()
    untrusted: tuple[str, ...] = ()  # both forms of every root the agent can write
    pairs: tuple[tuple[str, str], ...] = ()  # (as written, resolved) for each root

    def __post_init__(self) -> None:
        # The confinement tests themselves live in the probe program (one copy, run here and in the sandbox).
        object.__setattr__(self, "_core", remote_probe.Roots(self.lexical, self.real, self.trusted, self.untrusted,
                                                             self.pairs))
        # Hashed once: a remote decision keys hundreds of (path, roots) pairs, and the generated hash walks every field.
        object.__setattr__(self, "_hash", hash((self.lexical, self.real, self.trusted, self.untrusted, self.pairs)))
        object.__setattr__(self, "_starts", {})
        object.__setattr__(self, "_trusted", {})

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined, no-any-return]

    @classmethod
    def of(cls, paths: Iterable[str | os.PathLike[str]], *, trusted: bool = False,
           resolve: Callable[..., Sequence[str | None]] | None = None) -> Roots:
        """Roots as given and resolved; `resolve(paths, trusted=...)` resolves symlinks on the backend's machine
        when that is not this one (a root it cannot resolve is taken as written)."""
        lexical: list[str] = []
        real: list[str] = []
        pairs: list[tuple[str, str]] = []
        for path, resolved in _resolved(paths, resolve, trusted):
            if path not in lexical:
                lexical.append(path)
            if resolved not in real:
                real.append(resolved)
            pairs.append((path, resolved))
        forms = tuple(dict.fromkeys(lexical + real))
        return cls(tuple(lexical), tuple(real), forms if trusted else (), () if trusted else forms,
                   tuple(dict.fromkeys(pairs)))

    def __add__(self, other: Roots) -> Roots:
        def union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys(a + b))

        return Roots(union(self.lexical, other.lexical), union(self.real, other.real),
                     union(self.trusted, other.trusted), union(self.untrusted, other.untrusted),
                     tuple(dict.fromkeys(self.pairs + other.pairs)))

    def holds_lexically(self, path: str) -> bool:
        """A cheap first test: a path outside every root as written is not touched at all."""
        return self._core.holds_lexically(path)  # type: ignore[attr-defined, no-any-return]

    def holds_really(self, real_path: str) -> bool:
        return self._core.holds_really(real_path)  # type: ignore[attr-defined, no-any-return]

    def start_of(self, path: str) -> tuple[str, str] | None:
        """The (as written, resolved) root `path` lies under as written, the longest one."""
        memo: dict[str, Any] = self._starts  # type: ignore[attr-defined]
        found = memo.get(path, _UNSEEN)
        if found is _UNSEEN:
            found = self._core.start_of(path)  # type: ignore[attr-defined]
            _remember(memo, path, found)
        return found  # type: ignore[no-any-return]

    def trusts(self, path: str) -> bool:
        """Whether `path` lies under a trusted root and under no root the agent can write (lexically)."""
        memo: dict[str, bool] = self._trusted  # type: ignore[attr-defined]
        found = memo.get(path)
        if found is None:
            found = self._core.trusts(path)  # type: ignore[attr-defined]
            _remember(memo, path, found)
        return found  # type: ignore[return-value]


# A remote decision asks these of the same few hundred paths every time (its revalidation): the answers are a pure
# function of the path and these immutable roots, kept per Roots up to a bound and then started afresh.
_UNSEEN = object()
_MEMO_CAP = 8192


def _remember(memo: dict[str, Any], path: str, value: Any) -> None:
    if len(memo) >= _MEMO_CAP:
        memo.clear()
    memo[path] = value


@runtime_checkable
class ProbeBackend(Protocol):
    """The machine the agent's actions run on, as far as the gate may look at it (read-only, confined)."""

    key: str  # names the filesystem: caches keep paths of different backends apart
    batches: bool  # True when one stat_many call is cheaper than many stats (a remote backend): the gate prefetches

    def stat_many(self, paths: Sequence[str], within: Roots | None) -> list[PathState]:
        """One PathState per path (kind ``outside`` for a path not really under `within`)."""
        ...

    def list_dir(self, path: str, within: Roots | None, limit: int) -> tuple[int, frozenset[str]] | None:
        """(the directory's mtime_ns, its entry names), or None when missing, outside, unreadable or over `limit`."""
        ...

    def read_prefix(self, path: str, within: Roots | None, limit: int) -> bytes | None:
        """Up to `limit` + 1 bytes of a regular file (so the caller sees it was cut), or None."""
        ...

    def which(self, program: str, directories: Sequence[str], within: Roots | None) -> str | None:
        """The first executable `program` in `directories`, or None."""
        ...

    def import_paths(self, python: str | None, untrusted: Roots) -> TargetPython:
        """What the target interpreter searches, learned without running anything under `untrusted`."""
        ...

    def walk(self, root: str, within: Roots | None, limit: int, skip: frozenset[str]) -> list[str]:
        """Relative paths of regular files under `root` (symlinks not followed, `skip` and dot dirs pruned),
        at most `limit` of them; stops early when the decision's deadline passes."""
        ...


def prepare_path(path: str, within: Roots | None) -> str | PathState:
    """The normalized path, or the answer every backend gives without touching a filesystem (a NUL byte, a path
    that cannot be normalized, one lexically outside `within`)."""
    if "\x00" in path:
        return PathState("missing", error="invalid path: embedded NUL byte")
    try:
        path = _normalize(path)
    except (ValueError, TypeError) as exc:
        return PathState("missing", error=f"invalid path: {exc}")
    if within is not None and not within.holds_lexically(path):
        return PathState("outside")
    return path


class LocalBackend:
    """The filesystem of this machine. Never writes, never opens a file for reading unless it is a regular
    file under the roots (devices and FIFOs are stat'ed through an O_PATH handle, never opened)."""

    key = "local"
    batches = False

    # ------------------------------------------------------------------ stat
    def stat_many(self, paths: Sequence[str], within: Roots | None) -> list[PathState]:
        return [self.stat(path, within) for path in paths]

    def stat(self, path: str, within: Roots | None) -> PathState:
        """Under a root the agent can write, a path is stat'ed by where it really is (`remote_probe.op_stat`: its
        components walked from the root with lstat, a symlink out of the roots answering ``outside``); the
        directories resolved are remembered for the rest of the decision."""
        prepared = prepare_path(path, within)
        if isinstance(prepared, PathState):
            return prepared
        memo = DECISION_MEMO.get()
        kind, mtime_ns, size, executable, error = remote_probe.op_stat(prepared, within, {} if memo is None else memo)
        return PathState(kind, mtime_ns, size, executable, error)

    # ------------------------------------------------------------------ list
    def list_dir(self, path: str, within: Roots | None, limit: int) -> tuple[int, frozenset[str]] | None:
        if "\x00" in path:
            return None
        try:
            path = _normalize(path)
        except (ValueError, TypeError):
            return None
        if within is not None and not within.holds_lexically(path):
            return None
        deadline = budget.current()
        stop = time.monotonic() + deadline.remaining() if deadline is not None else float("inf")
        listing = remote_probe.op_list(path, within, limit, stop)  # opened, then verified by where it really is
        if listing == remote_probe._OUT_OF_TIME:
            raise BudgetExceeded(f"listing {path}")
        if not isinstance(listing, tuple):
            return None
        return listing[0], frozenset(listing[1])

    # ------------------------------------------------------------------ read
    def read_prefix(self, path: str, within: Roots | None, limit: int) -> bytes | None:
        if "\x00" in path:
            return None
        try:
            path = _normalize(path)
        except (ValueError, TypeError):
            return None
        if within is not None and not within.holds_lexically(path):
            return None
        # Opened through an O_PATH handle whose real path is checked, then the very inode reopened: a FIFO or device
        # swapped in after the check is never opened.
        return remote_probe.op_read(path, within, limit)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ commands and interpreters
    def which(self, program: str, directories: Sequence[str], within: Roots | None) -> str | None:
        if not program or "/" in program or "\x00" in program:
            return None
        for directory in directories:
            candidate = os.path.join(directory, program)
            state = self.stat(candidate, within)
            if state.kind == "file" and state.executable:
                return candidate
        return None

    def import_paths(self, python: str | None, untrusted: Roots) -> TargetPython:
        from guardrail.gate.interpreter import target_python

        return target_python(python, untrusted=untrusted, backend=self)

    def walk(self, root: str, within: Roots | None, limit: int, skip: frozenset[str]) -> list[str]:
        root = _normalize(root)
        deadline = budget.current()
        # Half of what is left of the decision at most: the hint built from the walk needs the rest.
        stop_at = time.monotonic() + deadline.remaining() / 2 if deadline is not None else float("inf")
        return remote_probe.op_walk(root, within, limit, skip, stop_at)  # the sandbox's probe walks the same way
