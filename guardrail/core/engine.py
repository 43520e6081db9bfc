"""Batch engines for offline work over many episodes: the local default and, optionally, a distributed one.

Offline commands (`fit`, `score`, `verify`) express their per-shard work as a top-level function
over JSON-able shard descriptors and call ``engine.map(fn, shards)``; the local engine runs it
in-process, a distributed engine runs the same function on a cluster. Results come back in
shard order, so every engine gives the same answer.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

__all__ = ["Engine", "LocalEngine", "ENGINES", "add_engine_arguments", "engine_from_args", "make_engine"]

T = TypeVar("T")
R = TypeVar("R")


class Engine(Protocol):
    name: str

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """Apply `fn` to every item; results in item order."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Engine: ...

    def __exit__(self, *exc: object) -> None: ...


class LocalEngine:
    """Runs everything in this process; the default, with no extra install."""

    name = "local"

    def __init__(self, workers: int = 1) -> None:
        self.workers = workers

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        return [fn(item) for item in items]

    def close(self) -> None:
        return None

    def __enter__(self) -> LocalEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# name -> "module:factory"; the factory takes (address: str | None, workers: int | None).
ENGINES: dict[str, str] = {
    "local": "guardrail.core.engine:_local_factory",
    "dask": "guardrail.core.engine_dask:DaskEngine",
}


def _local_factory(address: str | None = None, workers: int | None = None) -> LocalEngine:
    return LocalEngine(workers or 1)


def make_engine(name: str = "local", *, address: str | None = None, workers: int | None = None) -> Any:
    """Build an engine by name; a distributed engine without an address starts a local cluster."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose one of {sorted(ENGINES)}")
    module_name, _, attr = ENGINES[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            f"engine {name!r} needs {exc.name!r}: pip install 'guardrail[scale]'"
        ) from exc
    return getattr(module, attr)(address=address, workers=workers)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", default="local", choices=sorted(ENGINES),
                        help="where batch work runs (default: local, in this process)")
    parser.add_argument("--address", default=None,
                        help="scheduler address of an existing cluster (default: start a local one)")
    parser.add_argument("--workers", type=int, default=None, help="workers for a cluster started here")


def engine_from_args(args: argparse.Namespace) -> Any:
    return make_engine(getattr(args, "engine", "local") or "local", address=getattr(args, "address", None),
                       workers=getattr(args, "workers", None))
