"""`guardrail bench drift`: how often `guardrail drift` says refit on fresh healthy runs (false drift) and on healthy
runs whose tools changed their result shape (detection), over seeded splits of a corpus's healthy episodes.

Per seed: the corpus's healthy episodes are shuffled and split in two; the default monitor is fitted
(cross-fit conformal threshold, budget 5%) on the first half, as ``guardrail fit`` does, and
`guardrail.app.drift.drift_report` (what ``guardrail drift`` computes) is run on (a) the second half
as recorded and (b) the second half with every tool result re-shaped the way a new API version
would (each JSON result nested under ``{"api": "v2", "data": ..., "paging": ...}``, text results
wrapped in JSON): the same healthy behaviour, another result shape. The false drift rate is (a)'s
refit share, with its Clopper-Pearson interval; detection is (b)'s. The runs are the testbed's
scripted agents: a mechanism check of the procedure, not a field estimate.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import warnings
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table, progress
from guardrail.core.events import Episode

__all__ = ["BENCH", "measure_drift", "reshape"]

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "corpora" / "testbed_langgraph"


def _reshape_result(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        value: Any = json.loads(text)
    except (TypeError, ValueError):
        value = {"text": text}
    return json.dumps({"api": "v2", "data": {"items": value if isinstance(value, list) else [value]},
                       "paging": {"cursor": None, "page": 1}})


def reshape(episode: Episode) -> Episode:
    """`episode` as if its tools had answered in a new result shape (same content, nested and wrapped)."""
    steps = []
    for step in episode.steps:
        events = [e.model_copy(update={"result": _reshape_result(e.result),
                                       "result_chars": None if e.result is None else len(_reshape_result(e.result) or "")})
                  for e in step.tool_events]
        steps.append(step.model_copy(update={"tool_events": events}))
    return episode.model_copy(update={"steps": steps, "episode_id": episode.episode_id + "-v2"})


def measure_drift(corpus: str | Path = DEFAULT_CORPUS, *, seeds: int = 20, show_progress: bool = True
                  ) -> dict[str, Any]:
    from guardrail.app.drift import drift_report
    from guardrail.core.corpus import read_corpus
    from monitors import StepMonitor
    from monitors.calibration import binomial_ci

    healthy = [e for e in read_corpus(corpus).episodes if e.is_healthy and e.steps]
    if len(healthy) < 40:
        raise ValueError(f"{corpus}: {len(healthy)} healthy episodes; the benchmark needs at least 40")
    rows = []
    for seed in progress(range(seeds), desc="drift seeds", total=seeds, enabled=show_progress):
        order = list(healthy)
        random.Random(seed).shuffle(order)
        half = len(order) // 2
        fit, fresh = order[:half], order[half:]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = StepMonitor(random_state=seed).fit(fit)
        same = drift_report(model, fresh)
        shifted = drift_report(model, [reshape(e) for e in fresh])
        rows.append({"seed": seed, "fit": len(fit), "runs": same.runs, "fresh_alarms": same.alarms,
                     "fresh_verdict": same.verdict, "fresh_alarm_p": same.alarm_p, "fresh_ks_p": same.pvalue_ks,
                     "shifted_alarms": shifted.alarms, "shifted_verdict": shifted.verdict,
                     "shifted_channels": ",".join(c.channel for c in shifted.channels if c.moved) or "-",
                     "fresh_channels": ",".join(c.channel for c in same.channels if c.moved) or "-"})
    false_drift = sum(r["fresh_verdict"] == "refit" for r in rows)
    detected = sum(r["shifted_verdict"] == "refit" for r in rows)
    return {"corpus": str(corpus), "seeds": seeds, "healthy": len(healthy), "rows": rows,
            "false_drift": false_drift, "false_drift_rate": false_drift / seeds,
            "false_drift_ci": binomial_ci(false_drift, seeds), "detected": detected,
            "detection_rate": detected / seeds, "detection_ci": binomial_ci(detected, seeds),
            "fresh_channel_flags": sum(r["fresh_channels"] != "-" for r in rows)}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="a corpus with healthy episodes (default: the "
                                                                     "testbed's LangGraph corpus)")
    parser.add_argument("--seeds", type=int, default=20, help="seeded splits (default 20)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _run(args: argparse.Namespace) -> int:
    try:
        result = measure_drift(args.corpus, seeds=args.seeds)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"guardrail bench drift: {exc}\n")
        return 2
    if args.json:
        emit_json(result)
        return 0
    print_table(result["rows"], ["seed", "fit", "runs", "fresh_alarms", "fresh_verdict", "fresh_channels",
                                 "shifted_alarms", "shifted_verdict", "shifted_channels"])
    low, high = result["false_drift_ci"]
    dlow, dhigh = result["detection_ci"]
    print(f"false drift: {result['false_drift']} of {result['seeds']} seeds said refit on fresh healthy runs "
          f"({result['false_drift_rate']:.2f}, 95% CI {low:.2f}-{high:.2f}); detection: {result['detected']} of "
          f"{result['seeds']} on re-shaped results ({result['detection_rate']:.2f}, 95% CI {dlow:.2f}-{dhigh:.2f}); "
          f"a channel flagged on fresh runs in {result['fresh_channel_flags']} seed(s)")
    return 0


BENCH = Command(help="false drift rate on fresh healthy runs and detection of a new tool result shape, over seeds",
                add_arguments=_add_arguments, run=_run)
