"""Bounded, read-only views of the filesystem: what a stat says, and unconfined helpers over the local backend.

The gate itself reads only through `guardrail.gate.view.FsView`, which confines every probe to the
workspace roots and the target's import paths; the helpers here are the unconfined local forms
(for tools and tests that look at a path they chose themselves).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_READ_BYTES", "PathState", "list_dir", "path_state", "read_text_capped", "unsafe_to_read"]

MAX_READ_BYTES = 2 * 1024 * 1024  # a file larger than this is not read: what depends on its text is unknown

# Pseudo filesystems whose files report odd sizes or block on read; existence is fine, content is not read.
_PSEUDO_ROOTS = ("/proc/", "/sys/", "/dev/")

# (backend key, directory) -> (mtime_ns, names): listings cached by the directory's mtime (see view.FsView).
_LISTINGS: dict[tuple[str, str], tuple[int, frozenset[str] | None]] = {}


@dataclass(frozen=True, slots=True)
class PathState:
    """What a stat says about one path, plus the cache key.

    `kind` is file|dir|other|missing|loop|unknown, or ``outside`` for a path the probe was not allowed
    to look at (its real location is not under the roots it is confined to): nothing else is known.
    """

    kind: str
    mtime_ns: int = 0
    size: int = 0
    executable: bool = False
    error: str = ""

    @property
    def exists(self) -> bool:
        return self.kind in ("file", "dir", "other")


def _local():  # type: ignore[no-untyped-def]
    from guardrail.gate.backend import LocalBackend

    return LocalBackend()


def path_state(path: str) -> PathState:
    """Stat `path` without ever raising or blocking (FIFOs are stat'ed, never opened)."""
    return _local().stat(path, None)


def unsafe_to_read(path: str) -> bool:
    return path.startswith(_PSEUDO_ROOTS)


def read_text_capped(path: str, cap: int = MAX_READ_BYTES) -> str | None:
    """The text of a regular file, or None when it is not a regular file, too big, unreadable or pseudo."""
    if unsafe_to_read(path):
        return None
    data = _local().read_prefix(path, None, cap)
    if data is None or len(data) > cap:
        return None
    return data.decode("utf-8", errors="surrogateescape")


def list_dir(path: str) -> frozenset[str] | None:
    """Entry names of a directory; None when it is missing or unreadable."""
    listing = _local().list_dir(path, None, 1 << 30)
    return None if listing is None else listing[1]
