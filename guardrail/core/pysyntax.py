"""`parse_python`: `ast.parse` that is safe to call from several threads at once in CPython 3.11.

CPython 3.11 keeps the AST converter's recursion counter in per-interpreter state. When a garbage
collection during one thread's conversion runs a finalizer and the GIL passes to another thread that
parses too, the first conversion ends with ``SystemError: AST constructor recursion depth mismatch``
(reproduced here: 4 threads, 80 parses each, 33 errors). The gate parses in its warm-up thread and
in each decision; the verifiers parse expressions. Every parse of ours goes through one lock, and a
parse that still meets the error (a thread of the host program parsing at the same moment) is done
again, up to four times: the counter is reset at the start of every parse.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

__all__ = ["parse_python"]

_LOCK = threading.Lock()
_RACE = "recursion depth mismatch"
_WAIT_S = 1.0
_ATTEMPTS = 4


def parse_python(source: str | bytes, mode: str = "exec", **options: Any) -> Any:
    """`ast.parse(source, mode=mode, **options)`, one at a time in this process (see the module docstring).

    A caller waits at most `_WAIT_S` for another thread's parse (a large file): then it parses beside it and
    relies on the second try, so a decision's time stays bounded."""
    locked = _LOCK.acquire(timeout=_WAIT_S)
    try:
        for attempt in range(_ATTEMPTS):
            try:
                return ast.parse(source, mode=mode, **options)
            except SystemError as exc:
                if _RACE not in str(exc) or attempt == _ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")
    finally:
        if locked:
            _LOCK.release()
