"""Report vs intervene on the same seeds: steps, tool errors, tokens and time per task, and the share of warned actions repaired.

The StateMirror paper's RQ8 (../shared/seeds/000_*.txt) reports 15.8% time, 6.0% steps and
11.8% tokens saved and 95% of warned actions repaired. Here the agent is scripted (its slips
and its recovery rule are in `traces.coding.agent`), so these figures check the mechanism on
a real project; they are not a claim about a real model.

``--agent mini-swe-agent`` runs the same tasks, seeds and slips through mini-swe-agent's real
``DefaultAgent`` loop and ``LocalEnvironment`` (`traces.coding.mini`), guarded by
`adapters.mini_swe_agent`; ``--agent both`` prints the two side by side. Those runs also count
crashes and blocks, and whether each block's warning reached the model in its next observation.

Run: ``python -m traces.coding --n 20 --seed 0`` (downloads the sdist once into the cache).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardrail.core.cliutil import Command, emit_json, print_table, progress
from traces.coding.agent import CodingAgent, CodingRun, make_coding_tasks
from traces.coding.project import DEFAULT_PROJECT, fetch_sdist

if TYPE_CHECKING:
    from traces.models import EndpointSpec

__all__ = ["BENCH", "compare_modes", "real_model_comparison", "summarize"]

MODES = ("report", "intervene")


def compare_modes(agent: CodingAgent, n: int, seed: int, *, show_progress: bool = False,
                  runner: str = "scripted", spec: EndpointSpec | None = None) -> list[CodingRun]:
    """Every task in both modes (same task, same slips), by the scripted agent or through mini-swe-agent's loop.

    `spec` (mini-swe-agent only) drives the loop with a real model instead of the scripted one.
    """
    tasks = make_coding_tasks(agent.index, n, seed)
    jobs = [(task, mode) for task in tasks for mode in MODES]
    if runner == "mini-swe-agent":
        from traces.coding.mini import run_mini_task

        extra: dict[str, Any] = {}
        if spec is not None:
            from traces.coding.real_model import STEP_LIMIT, SYSTEM_TEMPLATE, endpoint_coding_model

            extra = {"model_factory": lambda task, run: endpoint_coding_model(spec, task, run, seed=seed),
                     "system_template": SYSTEM_TEMPLATE, "step_limit": STEP_LIMIT}
        return [run_mini_task(agent.root, agent.index, task, mode, agent._gate,  # type: ignore[arg-type]
                              slip_rate=agent.slip_rate, seed=agent.seed, **extra)
                for task, mode in progress(jobs, desc="mini-swe-agent tasks", total=len(jobs), enabled=show_progress)]
    return [agent.run_task(task, mode)  # type: ignore[arg-type]
            for task, mode in progress(jobs, desc="coding tasks", total=len(jobs), enabled=show_progress)]


def summarize(runs: Sequence[CodingRun]) -> dict[str, Any]:
    """Per-mode medians and totals, the savings of intervene over report, and the repair rate."""
    by_mode: dict[str, list[CodingRun]] = {m: [r for r in runs if r.mode == m] for m in MODES}
    rows: dict[str, dict[str, Any]] = {}
    for mode, mode_runs in by_mode.items():
        rows[mode] = {
            "tasks": len(mode_runs),
            "steps_median": statistics.median(r.steps for r in mode_runs) if mode_runs else None,
            "steps_total": sum(r.steps for r in mode_runs),
            "tool_errors_total": sum(r.tool_errors for r in mode_runs),
            "tokens_median": statistics.median(r.tokens for r in mode_runs) if mode_runs else None,
            "tokens_total": sum(r.tokens for r in mode_runs),
            "seconds_median": statistics.median(r.seconds for r in mode_runs) if mode_runs else None,
            "seconds_total": sum(r.seconds for r in mode_runs),
            "slips": sum(r.slips for r in mode_runs),
            "warned": sum(r.warned for r in mode_runs),
            "false_warnings": sum(r.false_warnings for r in mode_runs),
            "crashes": sum(r.crashes for r in mode_runs),
            "blocked": sum(r.blocked for r in mode_runs),
            "blocks_visible": sum(r.blocks_visible for r in mode_runs),
        }
        if any(r.exit_status for r in mode_runs):  # a real model's runs: how each ended
            rows[mode]["exit_status"] = dict(sorted(Counter(r.exit_status for r in mode_runs).items()))
    report, intervene = rows["report"], rows["intervene"]

    def saved(key: str) -> float | None:
        return None if not report[key] else 1.0 - intervene[key] / report[key]

    warned = intervene["warned"] - intervene["false_warnings"]
    repaired = sum(r.repaired for r in by_mode["intervene"])
    return {"modes": rows,
            "saved": {"steps": saved("steps_total"), "tokens": saved("tokens_total"),
                      "seconds": saved("seconds_total"), "tool_errors": saved("tool_errors_total")},
            "repaired_share": None if warned <= 0 else repaired / warned,
            "repaired": repaired, "warned_slips": warned}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", default="==".join(DEFAULT_PROJECT),
                        help="sdist to work in, NAME==VERSION (default %(default)s; downloaded once with pip)")
    parser.add_argument("--workspace", default=None, help="use this source tree instead of downloading one")
    parser.add_argument("--n", type=int, default=20, help="tasks (each run in both modes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slip-rate", type=float, default=0.3, help="chance an action refers to something missing")
    parser.add_argument("--agent", choices=("scripted", "mini-swe-agent", "both"), default="scripted",
                        help="the scripted agent, the same agent through mini-swe-agent's real loop, or both")
    parser.add_argument("--model", default=None,
                        help="with --agent mini-swe-agent: a real model instead of the scripted one; local:NAME "
                             "starts the project's model server (unless --endpoint names one)")
    parser.add_argument("--endpoint", default=None, help="an OpenAI-compatible base URL for --model")
    parser.add_argument("--temperature", type=float, default=0.2, help="sampling temperature of --model (0.2)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line per agent")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _run(args: argparse.Namespace) -> int:
    if args.workspace:
        root = Path(args.workspace)
    else:
        name, _, version = args.project.partition("==")
        if not version:
            sys.stderr.write("--project must be NAME==VERSION\n")
            return 2
        try:
            root = fetch_sdist(name, version)
        except (RuntimeError, OSError) as exc:
            sys.stderr.write(f"cannot get the project: {exc}\n")
            return 2
    if args.model:
        if args.agent != "mini-swe-agent":
            sys.stderr.write("--model drives mini-swe-agent's loop: use it with --agent mini-swe-agent\n")
            return 2
        return _run_real(args, root)
    agent = CodingAgent(root, slip_rate=args.slip_rate, seed=args.seed)
    runners = ("scripted", "mini-swe-agent") if args.agent == "both" else (args.agent,)
    for runner in runners:
        summary = summarize(compare_modes(agent, args.n, args.seed, show_progress=not args.quiet, runner=runner))
        summary.update({"agent": runner, "project": str(root), "n": args.n, "seed": args.seed,
                        "slip_rate": args.slip_rate})
        if args.json:
            emit_json(summary)
            continue
        print(f"agent: {runner}")
        columns = ["mode", "tasks", "steps_total", "tool_errors_total", "tokens_total", "seconds_total",
                   "slips", "warned", "false_warnings"]
        print_table([{"mode": m, **v} for m, v in summary["modes"].items()],
                    columns + (["crashes", "blocked", "blocks_visible"] if runner == "mini-swe-agent" else []))
        print("saved by intervene: " + ", ".join(f"{k} {v:.1%}" if v is not None else f"{k} -"
                                                 for k, v in summary["saved"].items()))
        share = summary["repaired_share"]
        print(f"warned slips repaired: {summary['repaired']}/{summary['warned_slips']}"
              + (f" ({share:.0%})" if share is not None else "")
              + " (mechanism check: the scripted agent fixes any action whose feedback names the target)")
    return 0


def _tree_digest(root: Path) -> dict[str, str]:
    import hashlib

    caches = {"__pycache__", ".pytest_cache"}  # what running the tests writes, not a change to the project
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
            and not caches & set(p.relative_to(root).parts)}


def real_model_comparison(root: Path, spec: EndpointSpec, *, n: int, seed: int, slip_rate: float = 0.3,
                          show_progress: bool = False) -> dict[str, Any]:
    """mini-swe-agent driven by a real model (`spec`, an `EndpointSpec`): report vs intervene on the same tasks
    and seeds, in a scratch copy of `root` (a real model's commands may write: never in the shared cache; the
    files they changed are counted)."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="guardrail-coding-real-") as scratch:
        work = Path(scratch) / root.name
        shutil.copytree(root, work, symlinks=True)
        before = _tree_digest(work)
        agent = CodingAgent(work, slip_rate=slip_rate, seed=seed)
        runs = compare_modes(agent, n, seed, show_progress=show_progress, runner="mini-swe-agent", spec=spec)
        after = _tree_digest(work)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    summary = summarize(runs)
    summary["files_changed_by_the_model"] = changed
    summary.pop("repaired_share")  # the next command passing the gate is not a repair of what the model meant
    summary["next_command_passed_after_block"] = summary.pop("repaired")
    summary.pop("warned_slips")
    summary.update({"agent": "mini-swe-agent", "model": spec.model, "temperature": spec.temperature,
                    "project": str(root), "n": n, "seed": seed,
                    "submitted": sum(r.exit_status == "Submitted" for r in runs),
                    "transcripts": {f"{r.task_id}/{r.mode}": [c for c, _ in r.transcript] for r in runs}})
    return summary


def _run_real(args: argparse.Namespace, root: Path) -> int:
    """mini-swe-agent driven by a real model: report vs intervene on the same tasks and seeds."""
    from traces.model_server import running_server
    from traces.models import EndpointSpec

    model = args.model if ":" in args.model else f"openai:{args.model}"
    with running_server(args.endpoint) as (base_url, info):
        spec = EndpointSpec(model, base_url, temperature=args.temperature, server=info)
        summary = real_model_comparison(root, spec, n=args.n, seed=args.seed, slip_rate=args.slip_rate,
                                        show_progress=not args.quiet)
    summary["model_sha256"] = info.get("model_sha256")
    if args.json:
        emit_json(summary)
        return 0
    print(f"agent: mini-swe-agent, model {model} (T={args.temperature}, seed {args.seed})")
    print_table([{"mode": m, **{k: v for k, v in row.items() if not isinstance(v, dict)}}
                 for m, row in summary["modes"].items()],
                ["mode", "tasks", "steps_total", "tool_errors_total", "tokens_total", "seconds_total", "warned",
                 "crashes", "blocked", "blocks_visible"])
    print(f"exit status: { {m: row.get('exit_status') for m, row in summary['modes'].items()} }")
    print(f"after a block the next command passed the gate: {summary['next_command_passed_after_block']}; "
          f"submitted: {summary['submitted']} of {2 * args.n} runs")
    return 0


BENCH = Command(help="coding testbed: report vs intervene with the StateMirror gate on a real sdist",
                add_arguments=_add_arguments, run=_run)
