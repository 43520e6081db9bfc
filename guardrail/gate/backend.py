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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from guardrail.gate import budget
from guardrail.gate.fsview import PathState

if TYPE_CHECKING:
    from guardrail.gate.interpreter import TargetPython

__all__ = ["LocalBackend", "ProbeBackend", "Roots", "under"]

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
    return os.path.normpath(os.path.abspath(path))


@dataclass(frozen=True)
class Roots:
    """Directories a probe may look under, as given (`lexical`) and with symlinks resolved (`real`)."""

    lexical: tuple[str, ...] = ()
    real: tuple[str, ...] = ()

    @classmethod
    def of(cls, paths: Iterable[str | os.PathLike[str]]) -> Roots:
        lexical: list[str] = []
        real: list[str] = []
        for raw in paths:
            try:
                path = _normalize(os.fspath(raw))
                resolved = os.path.realpath(path)
            except (OSError, ValueError, TypeError):
                continue
            if path not in lexical:
                lexical.append(path)
            if resolved not in real:
                real.append(resolved)
        return cls(tuple(lexical), tuple(real))

    def __add__(self, other: Roots) -> Roots:
        return Roots(tuple(dict.fromkeys(self.lexical + other.lexical)), tuple(dict.fromkeys(self.real + other.real)))

    def holds_lexically(self, path: str) -> bool:
        """A cheap first test: a path outside every root as written is not touched at all."""
        return any(under(path, root) for root in self.lexical) or any(under(path, root) for root in self.real)

    def holds_really(self, real_path: str) -> bool:
        return any(under(real_path, root) for root in self.real)


@runtime_checkable
class ProbeBackend(Protocol):
    """The machine the agent's actions run on, as far as the gate may look at it (read-only, confined)."""

    key: str  # names the filesystem: caches keep paths of different backends apart

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


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


class LocalBackend:
    """The filesystem of this machine. Never writes, never opens a file for reading unless it is a regular
    file under the roots (devices and FIFOs are stat'ed through an O_PATH handle, never opened)."""

    key = "local"

    # ------------------------------------------------------------------ stat
    def stat_many(self, paths: Sequence[str], within: Roots | None) -> list[PathState]:
        return [self.stat(path, within) for path in paths]

    def stat(self, path: str, within: Roots | None) -> PathState:
        if "\x00" in path:
            return PathState("missing", error="invalid path: embedded NUL byte")
        try:
            path = _normalize(path)
        except (ValueError, TypeError) as exc:
            return PathState("missing", error=f"invalid path: {exc}")
        if within is not None and not within.holds_lexically(path):
            return PathState("outside")
        if not _O_PATH or not _HAS_PROC_FD:
            return self._stat_by_name(path, within)
        try:
            fd = os.open(path, _O_PATH | _O_CLOEXEC)
        except OSError as exc:
            return self._failed(path, exc, within)
        except (ValueError, TypeError) as exc:
            return PathState("missing", error=f"invalid path: {exc}")
        try:
            st = os.fstat(fd)
            real = _fd_path(fd)
        except OSError as exc:
            return PathState("unknown", error=f"{type(exc).__name__}: {exc.strerror}")
        finally:
            os.close(fd)
        if within is not None and (real is None or not within.holds_really(real)):
            return PathState("outside")
        return PathState(_kind(st.st_mode), st.st_mtime_ns, st.st_size, bool(st.st_mode & 0o111))

    def _stat_by_name(self, path: str, within: Roots | None) -> PathState:
        if within is not None and not within.holds_really(os.path.realpath(path)):
            return PathState("outside")
        try:
            st = os.stat(path)
        except OSError as exc:
            return self._failed(path, exc, None)
        return PathState(_kind(st.st_mode), st.st_mtime_ns, st.st_size, bool(st.st_mode & 0o111))

    @staticmethod
    def _failed(path: str, exc: OSError, within: Roots | None) -> PathState:
        # A missing path is reported only when the directory it would be in is itself under the roots.
        if within is not None and exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            try:
                if not within.holds_really(os.path.realpath(path)):
                    return PathState("outside")
            except (OSError, ValueError):
                return PathState("unknown", error="cannot resolve the path")
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
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks: list[bytes] = []
            size = 0
            while size <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)

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
        if within is not None and not (within.holds_lexically(root) and within.holds_really(os.path.realpath(root))):
            return []
        found: list[str] = []
        stack = [(root, 0)]
        seen = 0
        deadline = budget.current()
        while stack and len(found) < limit:
            directory, depth = stack.pop()
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        seen += 1
                        if not seen & 1023 and deadline is not None and deadline.expired():
                            return found
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                if depth < 12 and entry.name not in skip and not entry.name.startswith("."):
                                    stack.append((entry.path, depth + 1))
                            elif entry.is_file(follow_symlinks=False):
                                found.append(os.path.relpath(entry.path, root))
                                if len(found) >= limit:
                                    break
                        except OSError:
                            continue
            except OSError:
                continue
        return found
