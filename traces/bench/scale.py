"""`guardrail bench scale`: monitor scoring throughput over testbed corpus shards, Dask with 1/2/4 workers vs local.

The corpus (>= 20,000 episodes by default) is collected once by the testbed collector, in shards
of `--shard-size` episodes, and cached outside the repository (``~/.cache/guardrail/scale``). A
monitor is fitted on a separate shard of healthy episodes and saved as a model file; then every
configuration scores every shard with the same top-level function, `score_shard`, through its
engine, and its scores are compared with the local engine's (same episodes in the same order,
same per-step scores to float tolerance, same alarm steps).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from guardrail.core.cliutil import Command, emit_json, print_table, progress
from guardrail.core.corpus import iter_corpus, read_corpus
from guardrail.core.engine import LocalEngine, make_engine

__all__ = ["BENCH", "DEFAULT_CACHE", "ShardScores", "ensure_corpus", "results_equal", "score_shard", "score_tasks"]

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "guardrail" / "scale"
FRAMEWORKS = ("langgraph", "autogen")
FIT_SHARD = "fit"
FIT_EPISODES = 300
# Scores from different processes run the same code on the same data; only BLAS summation order may differ.
SCORE_RTOL = 1e-9
SCORE_ATOL = 1e-12

# One shard's result: `monitors.cli.score_shard`'s rows (episode_id, scores per step, max_score, alarm_step, ...).
ShardScores = list[dict[str, Any]]


def score_shard(shard: dict[str, Any]) -> ShardScores:
    """Score one shard exactly as `guardrail score` does on any engine (the monitor package's own shard function)."""
    from monitors.cli import score_shard as monitor_score_shard

    return monitor_score_shard(shard)


def score_tasks(shard_dirs: Sequence[Path], model: Path) -> list[dict[str, Any]]:
    """One `score_shard` descriptor per corpus directory: the whole directory is the shard, read once by one worker."""
    return [{"corpus": str(d), "ids": [e.episode_id for e in iter_corpus(d)], "model": str(model)}
            for d in shard_dirs]


def warm_worker(model_path: str) -> bool:
    """Import and load what scoring needs, so a timed run measures scoring, not process start-up and imports."""
    import monitors.cli  # noqa: F401 - the import is the point: score_shard's module, loaded before timing
    from monitors.model_file import load_monitor

    load_monitor(model_path)
    return True


def results_equal(expected: Sequence[ShardScores], got: Sequence[ShardScores]) -> bool:
    """Same shards, same episodes in the same order, same alarm steps, per-step scores equal to float tolerance."""
    if len(expected) != len(got):
        return False
    for rows_a, rows_b in zip(expected, got, strict=True):
        if [r["episode_id"] for r in rows_a] != [r["episode_id"] for r in rows_b]:
            return False
        for a, b in zip(rows_a, rows_b, strict=True):
            if a["alarm_step"] != b["alarm_step"] or len(a["scores"]) != len(b["scores"]):
                return False
            if not np.allclose(a["scores"], b["scores"], rtol=SCORE_RTOL, atol=SCORE_ATOL, equal_nan=True):
                return False
            if not np.isclose(a["max_score"], b["max_score"], rtol=SCORE_RTOL, atol=SCORE_ATOL, equal_nan=True):
                return False
    return True


# ----------------------------------------------------------------------------- the corpus
def _collect_shard(job: dict[str, Any]) -> int:
    """Collect one shard with the testbed's real agents (runs on an engine worker); returns the episodes kept."""
    from traces.collect import write_collected

    manifest = write_collected(job["dir"], job["framework"], int(job["n"]), int(job["seed"]), show_progress=False)
    return len(manifest.episodes)


def _kept(shard_dir: Path) -> int:
    return len(json.loads((shard_dir / "manifest.json").read_text(encoding="utf-8"))["episodes"])


def ensure_corpus(cache_dir: Path, *, episodes: int, shard_size: int, seed: int,
                  collect_workers: int = 1) -> tuple[list[Path], Path]:
    """The cached testbed shards holding at least `episodes` kept episodes, collecting what is missing; and the root.

    Shards alternate between the LangGraph and AutoGen agents, each with its own corpus seed, so
    no run repeats. The collector rejects a few requested episodes (an injector that never fired,
    a run too short), so shards are added until enough were kept. Collection is the slow part
    (about 0.1 s of CPU per episode), done once and cached; with `collect_workers` > 1 it runs on
    a local Dask cluster of that many workers.
    """
    root = cache_dir / f"testbed-{shard_size}-s{seed}"

    def job(i: int) -> dict[str, Any]:
        return {"dir": str(root / f"shard-{i:05d}"), "framework": FRAMEWORKS[i % 2], "n": shard_size,
                "seed": seed * 1_000_003 + i}

    # The fit shards: both frameworks, corpus seeds disjoint from every scored shard's.
    jobs: list[dict[str, Any]] = [
        {"dir": str(root / f"{FIT_SHARD}-{fw}"), "framework": fw, "n": FIT_EPISODES, "seed": seed * 1_000_003 - 1 - j}
        for j, fw in enumerate(FRAMEWORKS)]
    n_shards = -(-episodes // shard_size)
    jobs += [job(i) for i in range(n_shards)]
    while True:
        missing = [j for j in jobs if not (Path(j["dir"]) / "manifest.json").is_file()]
        if missing:
            sys.stderr.write(f"collecting {sum(j['n'] for j in missing)} testbed episodes into {root} "
                             f"({len(missing)} shards, cached for later runs)\n")
            engine = make_engine("dask", workers=collect_workers) if collect_workers > 1 else LocalEngine()
            with engine:
                engine.map(_collect_shard, missing)
        shard_dirs = [root / f"shard-{i:05d}" for i in range(n_shards)]
        kept = sum(_kept(d) for d in shard_dirs)
        if kept >= episodes:
            return shard_dirs, root
        extra = -(-(episodes - kept) // shard_size)
        jobs += [job(i) for i in range(n_shards, n_shards + extra)]
        n_shards += extra


def fit_model(root: Path) -> Path:
    """Fit the default monitor on the fit shards' healthy episodes (train/validation halves) and save it once."""
    from monitors.model_file import ModelFileError, load_monitor, save_monitor
    from monitors.monitor import StepMonitor

    model_path = root / "model.npz"
    if model_path.is_file():
        try:
            load_monitor(model_path)
            return model_path
        except ModelFileError as exc:  # written by another guardrail version: refit, the corpus is still good
            sys.stderr.write(f"refitting the cached model: {exc}\n")
    healthy = [e for fw in FRAMEWORKS for e in read_corpus(root / f"{FIT_SHARD}-{fw}").healthy() if e.steps]
    train, val = healthy[0::2], healthy[1::2]
    monitor = StepMonitor().fit(train).calibrate(val)
    save_monitor(monitor, model_path, extra={"fitted_on": [f"{FIT_SHARD}-{fw}" for fw in FRAMEWORKS]})
    return model_path


# ----------------------------------------------------------------------------- timing
def _timed(run: Callable[[], list[ShardScores]], repeats: int) -> tuple[list[ShardScores], float]:
    """The last run's results and the median wall time over `repeats` runs."""
    times, results = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        results = run()
        times.append(time.perf_counter() - start)
    return results, statistics.median(times)


def _row(engine: str, workers: int, episodes: int, seconds: float, equal: bool, **extra: Any) -> dict[str, Any]:
    return {"engine": engine, "workers": workers, "episodes": episodes,
            "episodes_per_s": round(episodes / seconds, 1), "equal_to_local": equal,
            "seconds": round(seconds, 3), **extra}


def run_bench(args: argparse.Namespace) -> int:
    cache = Path(args.cache_dir).expanduser()
    if args.corpus:
        shard_dirs = [Path(c) for c in args.corpus]
        if not args.model:
            sys.stderr.write("guardrail bench scale: --corpus needs --model (a monitor fitted with `guardrail fit`)\n")
            return 2
        model = Path(args.model)
    else:
        shard_dirs, root = ensure_corpus(cache, episodes=args.episodes, shard_size=args.shard_size, seed=args.seed,
                                         collect_workers=args.collect_workers)
        model = Path(args.model) if args.model else fit_model(root)
    # Reading every shard once here also warms the page cache, so every configuration reads the same warm files.
    shards = score_tasks(list(progress(shard_dirs, desc="listing shards", enabled=not args.json)), model)

    rows = []
    local_engine = LocalEngine()
    warm_worker(str(model))
    local, seconds = _timed(partial(local_engine.map, score_shard, shards), args.repeats)
    n_episodes = sum(len(rows) for rows in local)
    rows.append(_row("local", 1, n_episodes, seconds, True, shards=len(shards), startup_s=0.0))
    if args.json:
        emit_json(rows[-1])

    worker_counts = [None] if args.address else args.workers
    for workers in worker_counts:
        started = time.perf_counter()
        with make_engine("dask", address=args.address, workers=workers) as engine:
            startup = time.perf_counter() - started
            engine.run_on_each_worker(warm_worker, str(model))
            remote, seconds = _timed(partial(engine.map, score_shard, shards), args.repeats)
            n_workers = engine.n_workers
        rows.append(_row("dask", n_workers, n_episodes, seconds, results_equal(local, remote),
                         shards=len(shards), startup_s=round(startup, 2)))
        if args.json:
            emit_json(rows[-1])
    if not args.json:
        print_table(rows, ["engine", "workers", "episodes", "episodes_per_s", "equal_to_local", "seconds",
                           "startup_s"])
        sys.stdout.write(f"{n_episodes} episodes in {len(shards)} shards; median of {args.repeats} run(s); "
                         f"{os.cpu_count()} CPU(s) here\n")
    return 0 if all(r["equal_to_local"] for r in rows) else 1


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=int, default=20_000, help="testbed episodes to score (default 20000)")
    parser.add_argument("--shard-size", type=int, default=500, help="episodes per shard (default 500)")
    parser.add_argument("--seed", type=int, default=11, help="collection seed (default 11)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4],
                        help="Dask worker counts for the local clusters (default 1 2 4)")
    parser.add_argument("--address", default=None,
                        help="score on an existing Dask scheduler instead of local clusters")
    parser.add_argument("--collect-workers", type=int, default=os.cpu_count() or 1,
                        help="processes collecting missing shards (default: one per CPU)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per configuration; the median is reported")
    parser.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help=f"where the corpus is kept (default {DEFAULT_CACHE})")
    parser.add_argument("--corpus", nargs="+", default=None, help="score these corpus shards instead of the testbed's")
    parser.add_argument("--model", default=None, help="a model file to score with (default: fit one on the fit shard)")
    parser.add_argument("--json", action="store_true", help="one JSON object per configuration")


BENCH = Command(
    help="scoring throughput (episodes/s) on Dask with 1/2/4 workers vs the local engine, with the equality check",
    add_arguments=_add_arguments,
    run=run_bench,
)
