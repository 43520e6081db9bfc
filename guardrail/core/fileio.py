"""Atomic, checksummed file writes and bounded reads of untrusted files, shared by corpora, model files and reports."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

__all__ = ["UnsafeFile", "atomic_write_bytes", "atomic_write_text", "json_nesting_exceeds", "read_regular",
           "sha256_bytes", "sha256_file"]


class UnsafeFile(ValueError):
    """A file the guard will not read (not a regular file, too large, unreadable); the message says why in one line."""


def read_regular(path: str | os.PathLike[str], max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes`; devices, FIFOs, sockets and directories are refused.

    Opened non-blocking (a FIFO never waits for a writer) and without following a last symlink, then
    checked on the open descriptor, so a file swapped after a path check is still read only if it
    is a regular file; the size is checked before any byte is read and the read is capped.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UnsafeFile(f"cannot read {what}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{what} is not a regular file")
        if info.st_size > max_bytes:
            raise UnsafeFile(f"{what} is larger than {max_bytes} bytes ({info.st_size})")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:  # it grew while we read
            raise UnsafeFile(f"{what} is larger than {max_bytes} bytes")
        return data
    finally:
        os.close(fd)


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def json_nesting_exceeds(data: bytes, limit: int) -> bool:
    """True when the JSON text `data` nests arrays/objects deeper than `limit` (brackets inside strings ignored).

    Checked before parsing, so a line nested 100k deep costs a scan, not a RecursionError.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False  # cannot be that deep: the common case costs two counts
    import numpy as np  # a core dependency; only reached for suspicious input

    codes = np.frombuffer(_JSON_STRING.sub(b"", data), dtype=np.uint8)
    steps = np.isin(codes, (ord("["), ord("{"))).astype(np.int64) - np.isin(codes, (ord("]"), ord("}")))
    return bool(steps.size) and int(np.cumsum(steps).max()) > limit


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the whole new one, never half of it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
