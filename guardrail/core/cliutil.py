"""Shared pieces for CLI commands: the Command record, JSON/table output and progress bars."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Command", "emit_json", "print_table", "progress"]

T = TypeVar("T")


@dataclass(frozen=True)
class Command:
    """One CLI subcommand: its help line, how it adds its arguments, and what it runs (returns an exit code)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def emit_json(obj: Any, *, stream: Any = None) -> None:
    """One JSON object on one line (what scripts read)."""
    out = stream or sys.stdout
    out.write(json.dumps(obj, sort_keys=False, default=_default) + "\n")
    out.flush()


def _default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value)
    return str(value)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, *, stream: Any = None) -> None:
    """A plain aligned text table for people (floats to 3 decimals)."""
    out = stream or sys.stdout
    if not rows:
        out.write("(no rows)\n")
        return
    cols = list(columns or rows[0].keys())

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3f}"
        if value is None:
            return "-"
        return str(value)

    cells = [[cell(row.get(c)) for c in cols] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    out.write("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + "\n")
    out.flush()


def progress(items: Iterable[T], *, desc: str, total: int | None = None, enabled: bool = True) -> Iterator[T]:
    """A progress bar on stderr (stdout stays clean for --json); silent when stderr is not a terminal or disabled."""
    if not enabled:
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, desc=desc, total=total, file=sys.stderr, leave=False,
                    disable=None if sys.stderr.isatty() else True, dynamic_ncols=True)
