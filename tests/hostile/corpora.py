"""Hostile trace corpora: paths out of the corpus, devices, FIFOs, huge and deeply nested lines, wrong field types."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["GOOD_STEP", "deep_line", "guardrail_corpus", "plant_outside", "sentinel_corpus"]

GOOD_STEP = {"index": 0, "kind": "final", "text": "done"}
SENTINEL_STEP = {"action": "synthesis", "text": "done"}
OUTSIDE_SECRET = "OUTSIDE-THE-CORPUS-7f3a"


def deep_line(depth: int) -> str:
    """One JSON line nested `depth` deep inside a step (RecursionError at 100k for a naive reader)."""
    return json.dumps({"index": 0, "kind": "final", "text": "x", "meta": {"deep": "__DEEP__"}}).replace(
        '"__DEEP__"', "[" * depth + "]" * depth)


def plant_outside(base: Path) -> Path:
    """A file outside any corpus that a traversal would read (its text must never show up in a corpus)."""
    outside = base / "outside"
    outside.mkdir(exist_ok=True)
    target = outside / "secret.jsonl"
    target.write_text(json.dumps({**GOOD_STEP, "text": OUTSIDE_SECRET}) + "\n")
    return target


def _write(root: Path, manifest: Any, files: dict[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = root / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def guardrail_corpus(root: Path, entries: list[dict[str, Any]], files: dict[str, str | bytes]) -> Path:
    """A corpus in the project's own format: `entries` are manifest episodes (T and sha256 filled when missing)."""
    episodes = [{"T": 1, "sha256": "", **entry} for entry in entries]
    manifest = {"format": "guardrail-corpus", "version": 1, "name": root.name, "created_at": "2026-01-01",
                "episodes": episodes}
    return _write(root, manifest, files)


def sentinel_corpus(root: Path, entries: list[dict[str, Any]], files: dict[str, str | bytes]) -> Path:
    """A corpus in the sentinel format (a list-shaped manifest)."""
    return _write(root, entries, files)


def good_sentinel_lines() -> str:
    return json.dumps(SENTINEL_STEP) + "\n"


def good_lines() -> str:
    return json.dumps(GOOD_STEP) + "\n"


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def make_sparse(path: Path, size: int) -> Path:
    """A file that claims `size` bytes and occupies none (a reader that slurps it would allocate them all)."""
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path
