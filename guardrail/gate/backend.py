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

import errno
import os
import stat
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

_PSEUDO_ROOTS = ("/proc/", "/sys/", "/dev/")  # files there report odd sizes or block: never read
_O_PATH = getattr(os, "O_PATH", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_PROC_FD = "/proc/self/fd"
_HAS_PROC_FD = os.path.isdir(_PROC_FD)


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


def _prefixes(roots: Iterable[str]) -> tuple[str, ...]:
    return tuple(root if root == os.sep else root + os.sep for root in roots)


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
        untrusted = self.untrusted
        object.__setattr__(self, "_all", frozenset(self.lexical + self.real))
        object.__setattr__(self, "_lexical", _prefixes(self.lexical + self.real))
        object.__setattr__(self, "_real", _prefixes(self.real))
        object.__setattr__(self, "_real_set", frozenset(self.real))
        object.__setattr__(self, "_trusted", _prefixes(self.trusted))
        object.__setattr__(self, "_untrusted", (frozenset(untrusted), _prefixes(untrusted)))
        # (root as written, root resolved) pairs, longest first: where a verified walk starts
        pairs = [(lexical, real) for lexical, real in self.pairs] + [(real, real) for _, real in self.pairs]
        object.__setattr__(self, "_starts", tuple(sorted(set(pairs), key=lambda pair: -len(pair[0]))))

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
        return path in self._all or path.startswith(self._lexical)  # type: ignore[attr-defined]

    def holds_really(self, real_path: str) -> bool:
        return real_path in self._real_set or real_path.startswith(self._real)  # type: ignore[attr-defined]

    def start_of(self, path: str) -> tuple[str, str] | None:
        """The (as written, resolved) root `path` lies under as written, the longest one."""
        for lexical, real in self._starts:  # type: ignore[attr-defined]
            if path == lexical or path.startswith(lexical if lexical == os.sep else lexical + os.sep):
                return lexical, real
        return None

    def trusts(self, path: str) -> bool:
        """Whether `path` lies under a trusted root and under no root the agent can write (lexically)."""
        if not path.startswith(self._trusted) and path not in self.trusted:  # type: ignore[attr-defined]
            return False
        names, prefixes = self._untrusted  # type: ignore[attr-defined]
        return path not in names and not path.startswith(prefixes)


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


def _fd_path(fd: int) -> str | None:
    """The real path of an open file (no race with a symlink swapped in after the open), where the OS tells."""
    if not _HAS_PROC_FD:
        return None
    try:
        return os.readlink(f"{_PROC_FD}/{fd}")
    except OSError:
        return None


def _missing_parent(exc: OSError) -> PathState:
    if exc.errno == errno.ELOOP:
        return PathState("loop", error="symlink loop")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
        return PathState("missing")
    return PathState("unknown", error=f"{type(exc).__name__}: {exc.strerror}")


def _real_of_missing(path: str) -> str:
    """Where a path that does not resolve would be: its nearest existing ancestor, resolved, plus the rest."""
    rest: list[str] = []
    head = path
    for _ in range(64):
        head, tail = os.path.split(head)
        rest.append(tail)
        if not _O_PATH or not _HAS_PROC_FD:
            break
        try:
            fd = os.open(head, _O_PATH | _O_CLOEXEC)
        except OSError:
            if head == os.sep:
                break
            continue
        try:
            real = _fd_path(fd)
        finally:
            os.close(fd)
        if real is not None:
            return os.path.join(real, *reversed(rest))
        break
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return ""


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


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
        prepared = prepare_path(path, within)
        if isinstance(prepared, PathState):
            return prepared
        path = prepared
        if within is None or within.trusts(path):
            return self._plain_stat(path)
        try:
            return self._stat_verified(path, within)
        except (ValueError, TypeError) as exc:
            return PathState("missing", error=f"invalid path: {exc}")

    def _stat_verified(self, path: str, within: Roots) -> PathState:
        """Stat a path under a root the agent can write, by where it really is: walk its components from the
        root with lstat, resolving any symlink met, so a link out of the roots answers ``outside``. Directories
        resolved are remembered for the rest of the decision. (Content reads verify again, on the open file.)"""
        start = within.start_of(path)
        if start is None:
            return self._stat_by_name(path, within)
        memo = DECISION_MEMO.get()
        current, real = start
        parts = [part for part in path[len(current):].split(os.sep) if part]
        for index, part in enumerate(parts):
            current = current + os.sep + part if current != os.sep else os.sep + part
            last = index == len(parts) - 1
            known = None if last or memo is None else memo.get(current)
            if known is not None:
                real = known
                continue
            try:
                st = os.lstat(current)
            except OSError as exc:
                return self._failed(current, exc, None) if last else _missing_parent(exc)
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(current)
                if not within.holds_really(real):
                    return PathState("outside")
                try:
                    st = os.stat(current)
                except OSError as exc:
                    return self._failed(current, exc, None) if last else _missing_parent(exc)
            else:
                real = real + os.sep + part if real != os.sep else os.sep + part
            if not last:
                if not stat.S_ISDIR(st.st_mode):
                    return PathState("missing", error="a parent is a file, not a directory")
                if memo is not None:
                    memo[current] = real
        if not parts:  # the root itself
            return self._plain_stat(path)
        return PathState(_kind(st.st_mode), st.st_mtime_ns, st.st_size, bool(st.st_mode & 0o111))

    def _stat_by_name(self, path: str, within: Roots | None) -> PathState:
        if within is not None and not within.holds_really(os.path.realpath(path)):
            return PathState("outside")
        return self._plain_stat(path)

    def _plain_stat(self, path: str) -> PathState:
        try:
            st = os.stat(path)
        except OSError as exc:
            return self._failed(path, exc, None)
        except (ValueError, TypeError) as exc:
            return PathState("missing", error=f"invalid path: {exc}")
        return PathState(_kind(st.st_mode), st.st_mtime_ns, st.st_size, bool(st.st_mode & 0o111))

    @staticmethod
    def _failed(path: str, exc: OSError, within: Roots | None) -> PathState:
        # A missing path is reported only when the directory it would be in is itself under the roots.
        if within is not None and exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            if not within.holds_really(_real_of_missing(path)):
                return PathState("outside")
        if exc.errno == errno.ENOENT:
            return PathState("missing")
        if exc.errno == errno.ENOTDIR:
            return PathState("missing", error="a parent is a file, not a directory")
        if exc.errno == errno.ELOOP:  # a symlink loop behaves like a missing file for the action too
            return PathState("loop", error="symlink loop")
        if exc.errno == errno.ENAMETOOLONG:
            return PathState("missing", error="name too long")
        return PathState("unknown", error=f"{type(exc).__name__}: {exc.strerror}")

    # ------------------------------------------------------------------ list
    def list_dir(self, path: str, within: Roots | None, limit: int) -> tuple[int, frozenset[str]] | None:
        if "\x00" in path:
            return None
        try:
            path = _normalize(path)
            if within is not None and not within.holds_lexically(path):
                return None
            fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC | _O_NONBLOCK)
        except (OSError, ValueError, TypeError):
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode):
                return None
            if within is not None:
                real = _fd_path(fd) or os.path.realpath(path)
                if not within.holds_really(real):
                    return None
            names: list[str] = []
            with os.scandir(fd) as entries:
                for count, entry in enumerate(entries, 1):
                    if count > limit:
                        return None  # too many entries to hold: lookups in it are unknown
                    if not count & 4095:
                        budget.check(f"listing {path}")
                    names.append(entry.name)
            return st.st_mtime_ns, frozenset(names)
        except OSError:
            return None
        finally:
            os.close(fd)

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
        if not _O_PATH or not _HAS_PROC_FD:
            return self._read_by_name(path, within, limit)
        try:
            handle = os.open(path, _O_PATH | _O_CLOEXEC)
        except (OSError, ValueError, TypeError):
            return None
        try:
            st = os.fstat(handle)
            real = _fd_path(handle)
            if not stat.S_ISREG(st.st_mode) or real is None or real.startswith(_PSEUDO_ROOTS):
                return None
            if within is not None and not within.holds_really(real):
                return None
            # Reopen the very inode the handle holds: a path swapped for a FIFO or device after the
            # check cannot be what gets opened.
            fd = os.open(f"{_PROC_FD}/{handle}", os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC)
        except OSError:
            return None
        finally:
            os.close(handle)
        return self._read_fd(fd, limit)

    def _read_by_name(self, path: str, within: Roots | None, limit: int) -> bytes | None:
        real = os.path.realpath(path)
        if real.startswith(_PSEUDO_ROOTS) or (within is not None and not within.holds_really(real)):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC)
        except OSError:
            return None
        return self._read_fd(fd, limit)

    @staticmethod
    def _read_fd(fd: int, limit: int) -> bytes | None:
        """Up to `limit` + 1 bytes of an open regular file (None for anything else); closes `fd`."""
        return remote_probe._read_fd(fd, limit)  # the sandbox's probe reads the same way: one copy

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
