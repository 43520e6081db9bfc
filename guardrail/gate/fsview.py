"""Bounded, read-only views of the filesystem: stat, capped reads and cached directory listings."""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass

__all__ = ["MAX_READ_BYTES", "PathState", "list_dir", "path_state", "read_text_capped", "unsafe_to_read"]

MAX_READ_BYTES = 2 * 1024 * 1024  # a source file larger than this is not parsed: its predicates are unknown

# Pseudo filesystems whose files report odd sizes or block on read; existence is fine, content is not read.
_PSEUDO_ROOTS = ("/proc/", "/sys/", "/dev/")


@dataclass(frozen=True, slots=True)
class PathState:
    """What a stat says about one path: kind in file|dir|other|missing|loop|unknown, plus the cache key."""

    kind: str
    mtime_ns: int = 0
    size: int = 0
    executable: bool = False
    error: str = ""

    @property
    def exists(self) -> bool:
        return self.kind in ("file", "dir", "other")


def path_state(path: str) -> PathState:
    """Stat `path` without ever raising or blocking (FIFOs are stat'ed, never opened)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return PathState("missing")
    except NotADirectoryError:
        return PathState("missing", error="a parent is a file, not a directory")
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a symlink loop behaves like a missing file for the action too
            return PathState("loop", error="symlink loop")
        return PathState("unknown", error=f"{type(exc).__name__}: {exc.strerror}")
    except (ValueError, TypeError) as exc:  # NUL bytes, unencodable names
        return PathState("missing", error=f"invalid path: {exc}")
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    else:
        kind = "other"
    return PathState(kind, st.st_mtime_ns, st.st_size, bool(st.st_mode & 0o111))


def unsafe_to_read(path: str) -> bool:
    return path.startswith(_PSEUDO_ROOTS)


def read_text_capped(path: str, cap: int = MAX_READ_BYTES) -> str | None:
    """The text of a regular file, or None when it is not a regular file, too big, unreadable or pseudo."""
    if unsafe_to_read(path):
        return None
    try:
        # O_NONBLOCK so a FIFO swapped in after the stat cannot hang the open.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError, TypeError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        data = os.read(fd, cap + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > cap:
        return None
    return data.decode("utf-8", errors="surrogateescape")


_LISTING_LOCK = threading.Lock()
_LISTINGS: dict[str, tuple[int, frozenset[str] | None]] = {}


def list_dir(path: str) -> frozenset[str] | None:
    """Entry names of a directory, cached by its mtime; None when it is missing or unreadable."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except (OSError, ValueError, TypeError):
        return None
    cached = _LISTINGS.get(path)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    try:
        names: frozenset[str] | None = frozenset(os.listdir(path))
    except (OSError, ValueError, TypeError):
        names = None
    with _LISTING_LOCK:
        if len(_LISTINGS) > 50_000:  # bound memory over very long sessions
            _LISTINGS.clear()
        _LISTINGS[path] = (mtime, names)
    return names
