"""`parse_python` survives CPython 3.11's race between threads parsing at once (the gate and the verifiers parse
from several threads: a warm-up thread, each decision)."""

from __future__ import annotations

import threading

from guardrail.core.pysyntax import parse_python

SOURCE = "\n".join(f"def f{i}(a, b=[1, 2, {{'k': (3, 4)}}]):\n    return [x for x in range(a) if x % 2] + list(b)\n"
                   for i in range(120))


class _Cycle:
    """Garbage only the collector frees, whose finalizer runs Python: the GIL can change hands inside a parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(50))


def test_threads_parsing_at_once_all_get_their_tree():
    # Plain ast.parse here: 18-42 "AST constructor recursion depth mismatch" SystemErrors in 320 parses (this test's 80: some).
    errors: list[str] = []
    trees: list[int] = []

    def work() -> None:
        for _ in range(20):
            for _ in range(100):
                _Cycle()
            try:
                trees.append(len(parse_python(SOURCE).body))
            except SystemError as exc:
                errors.append(str(exc))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and trees == [120] * 80


def test_it_is_ast_parse_otherwise():
    assert parse_python("x + 1", mode="eval").body.op.__class__.__name__ == "Add"
    assert parse_python("match x:\n    case 1: pass", feature_version=(3, 10)).body
