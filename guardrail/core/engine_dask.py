"""The Dask engine: run a batch command's per-shard work on a Dask cluster (a local one, or the user's)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["DaskEngine"]

T = TypeVar("T")
R = TypeVar("R")


class DaskEngine:
    """Runs `map(fn, items)` as one Dask task per item; results come back in item order.

    Without `address` it starts a `distributed.LocalCluster` of `workers` single-threaded worker
    processes on this machine (one process per worker because the per-shard work is pure Python and
    holds the GIL); with `address` it connects to the user's scheduler and uses whatever workers it
    has (`workers` then only records how many it had when we connected, for callers that size batches
    by it). Items should be small shard descriptors (paths, id lists):
    each worker reads its own shard, so the scheduler never ships traces around.
    """

    name = "dask"

    def __init__(self, address: str | None = None, workers: int | None = None, *,
                 processes: bool = True, connect_timeout_s: float = 30.0) -> None:
        try:
            from distributed import Client, LocalCluster
        except ModuleNotFoundError as exc:  # the scale extra is optional
            raise RuntimeError("the dask engine needs 'distributed': pip install 'guardrail[scale]'") from exc
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.address = address
        self.workers = workers
        self._cluster: Any = None
        if address is None:
            n_workers = workers or os.cpu_count() or 1
            self.workers = n_workers
            # No dashboard (batch commands have nobody to look at it), and the scheduler's small HTTP
            # server on a free loopback port rather than 8787, which another cluster may hold.
            self._cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=processes,
                                         host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                         scheduler_kwargs={"dashboard": False}, silence_logs=logging.ERROR)
            self._client: Any = Client(self._cluster, set_as_default=False)
        else:
            try:
                self._client = Client(address, timeout=connect_timeout_s, set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise RuntimeError(
                    f"cannot reach the Dask scheduler at {address!r} within {connect_timeout_s:g} s "
                    f"({type(exc).__name__}); is `dask scheduler` running there, and is the port open?"
                ) from exc
            self.workers = self.n_workers

    @property
    def n_workers(self) -> int:
        """Workers the scheduler knows about right now."""
        return len(self._client.scheduler_info(n_workers=-1).get("workers", {}))

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """Apply `fn` to every item on the cluster; results in item order; the first task error is raised here."""
        if not items:
            return []
        # pure=False: the same shard descriptor may legitimately be run twice (e.g. a re-score after a refit).
        futures = self._client.map(fn, list(items), pure=False)
        try:
            return list(self._client.gather(futures, errors="raise"))
        finally:
            for future in futures:
                future.release()

    def run_on_each_worker(self, fn: Callable[..., R], *args: Any) -> list[R]:
        """Run `fn(*args)` once in every worker (e.g. load a model before timed work); results in worker order."""
        by_worker = self._client.run(fn, *args)
        return [by_worker[address] for address in sorted(by_worker)]

    def close(self) -> None:
        """Disconnect; a cluster this engine started is shut down, a user's cluster is left running."""
        client, self._client = self._client, None
        if client is not None:
            client.close()
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            cluster.close()

    def __enter__(self) -> DaskEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.address or "local cluster"
        return f"DaskEngine({where!r}, workers={self.workers})"
