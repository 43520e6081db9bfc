"""`guardrail bench load`: steps per second through one Guard with every layer on, at 1, 8 and 64 concurrent episodes.

Each concurrency level runs in a fresh subprocess so its peak RSS is its own. Episodes are the
testbed's (real LangGraph runs of the booking tasks, collected once at start-up); the Guard holds
the gate (over a real temporary workspace), the step monitor (fitted on the healthy half of those
episodes) and the verifiers (the spec picked from the episodes' tools), with spans going through
a real SDK span processor that keeps per-layer durations (where the time goes) and no span
objects (so memory measures the guard, not a growing exporter buffer). Every step the guard is
given goes through all four hooks: ``before_action`` and ``after_result`` per tool call,
``on_step`` per step, ``on_finish`` per episode. ``--record`` adds a run recorder writing every episode
to SQLite, reads the store back and counts what was lost.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor

from guardrail.core.cliutil import Command, emit_json, print_table

__all__ = ["BENCH", "run_level"]


def _rss_mb() -> float:
    """Current resident set size from /proc (Linux), in MB."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        return float("nan")


class _DurationSink(SpanProcessor):
    """A real SpanProcessor that sums span durations by name and keeps no spans."""

    def __init__(self) -> None:
        self.total_ns: dict[str, int] = defaultdict(int)
        self.count: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        return None

    def on_end(self, span: Any) -> None:
        with self._lock:
            self.total_ns[span.name] += (span.end_time or 0) - (span.start_time or 0)
            self.count[span.name] += 1

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _episodes(n: int, seed: int) -> list[Any]:
    from traces.collect import collect

    episodes, _ = collect("langgraph", n, seed, show_progress=False)
    return episodes


def _build_guard(episodes: Sequence[Any], workspace: str, tracer: Any, recorder: Any = None) -> Any:
    from guardrail.core.guard import Guard
    from guardrail.gate.layer import GateLayer
    from monitors.layer import MonitorLayer
    from monitors.monitor import StepMonitor
    from verifiers.layer import VerifierLayer
    from verifiers.spec import pick_spec

    healthy = [e for e in episodes if e.is_healthy]
    monitor = StepMonitor().fit(healthy)  # the cross-fit conformal threshold over every healthy run
    tools = sorted({t for e in episodes for t in e.tools})
    spec = pick_spec(tools, [e.task or "" for e in episodes[:5]])
    layers = [GateLayer(workspace), MonitorLayer(monitor), VerifierLayer(spec)]
    return Guard(layers, mode="report", tracer=tracer, recorder=recorder)


def _drive(guard: Any, episode: Any, copy: int) -> int:
    from guardrail.core.events import Action, Result

    ctx = guard.start_episode(f"{episode.episode_id}#{copy}", task=episode.task, tools=episode.tools)
    for step in episode.steps:
        if step.is_final:
            continue
        for event in step.tool_events:
            args = event.args if isinstance(event.args, dict) else {"raw": str(event.args)}
            action = Action.tool_call(event.name, args, call_id=event.id or None)
            ctx.before_action(action)
            ctx.after_result(action, Result(output=event.result or "", is_error=event.is_error))
        ctx.on_step(step)
    ctx.finish(answer=episode.answer)
    return len(episode.steps)


def run_level(concurrency: int, steps_target: int, seed: int, record: bool = False) -> dict[str, Any]:
    """One concurrency level in this process: returns steps/s, peak RSS and the per-layer time split; with
    `record`, every episode is also recorded to a SQLite run store and read back to count what was lost."""
    from opentelemetry.sdk.trace import TracerProvider

    episodes = _episodes(48, seed)
    sink = _DurationSink()
    provider = TracerProvider()
    provider.add_span_processor(sink)
    tracer = provider.get_tracer("guardrail")
    with tempfile.TemporaryDirectory() as workspace:
        Path(workspace, "README.md").write_text("booking workspace\n")
        recorder = None
        if record:
            from guardrail.core.runstore import RunRecorder

            recorder = RunRecorder(f"sqlite:///{workspace}/runs.db")
        guard = _build_guard(episodes, workspace, tracer, recorder)
        # Warm up (first-action index build, caches), then reset the time split.
        _drive(guard, episodes[0], -1)
        sink.total_ns.clear()
        sink.count.clear()
        per_round = sum(len(e.steps) for e in episodes)
        rounds = max(1, -(-steps_target // per_round))
        jobs = [(e, r) for r in range(rounds) for e in episodes]
        rss_samples: list[tuple[int, float]] = []
        done = 0
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for chunk_start in range(0, len(jobs), max(concurrency * 4, 64)):
                chunk = jobs[chunk_start: chunk_start + max(concurrency * 4, 64)]
                done += sum(pool.map(lambda job: _drive(guard, job[0], job[1]), chunk))
                rss_samples.append((done, _rss_mb()))
        elapsed = time.perf_counter() - start
        recorded: dict[str, Any] = {}
        if recorder is not None:
            from guardrail.core.runstore import open_store

            recorder.close()
            summaries = open_store(f"sqlite:///{workspace}/runs.db", create=False).summaries()
            driven = len(jobs) + 1  # and the warm-up episode
            complete = [s for s in summaries if s.status == "complete"]
            recorded = {"episodes_driven": driven, "episodes_recorded": len(complete),
                        "steps_recorded": sum(s.n_steps for s in complete), "recorder_dropped": recorder.dropped,
                        "recorder_errors": recorder.errors, "lost_episodes": driven - len(complete)}
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    layer_s = {name.removeprefix("guardrail."): ns / 1e9 for name, ns in sink.total_ns.items()}
    first = next((mb for n, mb in rss_samples if n >= done * 0.1), rss_samples[0][1])
    return {
        "concurrency": concurrency,
        "steps": done,
        "steps_per_s": done / elapsed,
        "peak_rss_mb": peak_kb / 1024,
        "rss_growth_mb_after_10pct": rss_samples[-1][1] - first,
        "elapsed_s": elapsed,
        "layer_time_share": {k: v / elapsed for k, v in sorted(layer_s.items())},
        "us_per_step_by_layer": {k: 1e6 * v / done for k, v in sorted(layer_s.items())},
        "record": record,
        **recorded,
    }


def _add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per concurrency level")
    parser.add_argument("--levels", default="1,8,64", help="comma-separated concurrency levels")
    parser.add_argument("--steps", type=int, default=100_000, help="steps per level (default 100000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--record", action="store_true",
                        help="also record every episode to a SQLite run store and count what was lost")
    parser.add_argument("--_worker", type=int, default=None, help=argparse.SUPPRESS)


def _run(args: argparse.Namespace) -> int:
    if args._worker is not None:
        emit_json(run_level(args._worker, args.steps, args.seed, record=args.record))
        return 0
    rows = []
    for level in (int(x) for x in args.levels.split(",")):
        done = subprocess.run(
            [sys.executable, "-m", "guardrail.core.cli", "bench", "load", "--_worker", str(level),
             "--steps", str(args.steps), "--seed", str(args.seed), *(["--record"] if args.record else [])],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            return done.returncode or 1
        record = json.loads(done.stdout.strip().splitlines()[-1])
        if args.json:
            emit_json(record)
        rows.append(record)
    if not args.json:
        columns = ["concurrency", "steps", "steps_per_s", "peak_rss_mb", "rss_growth_mb_after_10pct"]
        columns += ["episodes_recorded", "lost_episodes", "recorder_dropped"] if args.record else []
        print_table([{k: r.get(k) for k in columns} for r in rows])
        for r in rows:
            split = ", ".join(f"{k} {v:.0f} us" for k, v in r["us_per_step_by_layer"].items())
            print(f"  c={r['concurrency']}: per step {split}")
    return 0


BENCH = Command(help="steps/s and peak memory through a Guard with all layers, at 1/8/64 concurrent episodes",
                add_arguments=_add, run=_run)
