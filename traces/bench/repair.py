"""`guardrail bench repair`: re-run flagged testbed episodes from their checkpoints under each rung, against resample.

For each testbed episode the real `create_agent` graph runs once into a SQLite checkpointer
and is graded by the testbed's labeller (the study oracle, which no hint ever sees). Every
episode the shipped checks flag, or the oracle grades wrong, is then forked from the same
checkpoint under each rung, `--repeats` times. A rung is compared with the resample control
on the same (episode, repeat) pairs by an exact McNemar test (two-sided binomial on the
discordant pairs), read against a Bonferroni level of 0.05 / (number of rungs tested).

With the scripted testbed model the *mechanism* is what is measured: forks start at the chosen
checkpoint, re-run live, and leave the original branch untouched (checked on every episode).
The *effect sizes* are the scripted policy's: it slips with a seeded draw (repeat r re-draws
with seed + r, standing in for sampling temperature) and, run with ``hint_response="relevant"``,
turns careful only when a hint names its slip's kind (a generic hint helps less, by construction).
Episodes are flagged by the shipped verifiers with each task's own spec (built from its prompt);
the oracle only adds the wrong answers the checks miss. Effects need a real
model: ``--endpoint URL --model NAME`` runs the same benchmark against an OpenAI-compatible
server (needs ``pip install langchain-openai``; the key is read from ``OPENAI_API_KEY``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adapters.langgraph_repair import LangGraphCheckpoints, repair_langgraph, sqlite_checkpointer
from guardrail.core.cliutil import Command, emit_json, print_table, progress
from guardrail.core.events import Finding, Severity
from guardrail.core.guard import Guard
from repair.breaker import CircuitBreaker
from repair.repairer import Repairer, is_flag
from repair.rungs import RUNGS, Rung
from traces.bench.repair_inline import add_inline_arguments

__all__ = ["BENCH", "RungRow", "mcnemar_exact", "run_bench"]

SLIPS = ("arithmetic_rate", "skip_rate", "hallucinate_rate")
JSON_KEYS = ("rung", "n", "recovered", "broken", "unchanged", "recovery_rate", "p_vs_resample",
             "extra_model_calls", "net_success_before", "net_success_after")
MECHANISM_NOTE = (
    "mechanism checks (hold for any model): every fork starts at the chosen checkpoint, re-runs live "
    "(fresh model and tool calls) and leaves the original branch unchanged (checked on every repaired episode: original_branch_untouched)."
)
SCRIPTED_NOTE = (
    "model-dependent figures (recovered, broken, recovery_rate, p_vs_resample) come from the scripted testbed "
    "policy, which turns careful when a hint names its slip's kind (and less often for a generic hint), by "
    "construction: they check the plumbing, not whether a hint helps a real model. Run with --endpoint for that."
)


@dataclasses.dataclass
class RungRow:
    """One rung's outcome over every (episode, repeat) pair."""

    rung: str
    n: int
    recovered: int
    broken: int
    unchanged: int
    recovery_rate: float | None
    p_vs_resample: float | None
    extra_model_calls: float
    net_success_before: float
    net_success_after: float

    def as_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in JSON_KEYS}


def mcnemar_exact(rung_success: Sequence[bool], control_success: Sequence[bool]) -> float:
    """Two-sided exact McNemar p-value for paired successes (1.0 when no pair disagrees)."""
    from scipy.stats import binomtest

    only_rung = sum(r and not c for r, c in zip(rung_success, control_success, strict=True))
    only_control = sum(c and not r for r, c in zip(rung_success, control_success, strict=True))
    if only_rung + only_control == 0:
        return 1.0
    return float(binomtest(only_rung, only_rung + only_control, 0.5).pvalue)


@dataclasses.dataclass
class _Episode:
    index: int
    task: Any
    policy: Any
    graph: Any
    model: Any
    config: dict[str, Any]
    head_config: dict[str, Any]  # the original run's head checkpoint (pins the original branch)
    correct: bool
    findings: list[Finding]
    selected_by: str  # "checks" | "oracle" | ""
    fingerprint: list[tuple[str, str]]


def _fingerprint(graph: Any, head_config: dict[str, Any]) -> list[tuple[str, str]]:
    branch = LangGraphCheckpoints(graph, head_config).original_branch()
    return [(s.config["configurable"]["checkpoint_id"],
             json.dumps([[type(m).__name__, str(m.content)] for m in s.values.get("messages", [])]))
            for s in branch]


def _make_model(args: argparse.Namespace, policy: Any) -> Any:
    spec = getattr(args, "spec", None)
    if spec is not None:  # --model local:NAME: the project's own model server, the testbed's small-model agent
        return spec.build("langgraph", seed=policy.seed)
    if args.endpoint:
        try:
            from langchain_openai import ChatOpenAI  # type: ignore[import-not-found]
            from pydantic import SecretStr
        except ModuleNotFoundError as exc:
            raise SystemExit("--endpoint needs langchain-openai: pip install langchain-openai") from exc
        return ChatOpenAI(base_url=args.endpoint, model=args.model, temperature=args.temperature,
                          api_key=SecretStr(os.environ.get("OPENAI_API_KEY", "not-needed")))
    from traces.models import ScriptedChatModel

    return ScriptedChatModel(policy=policy)


def _grade(graph: Any, config: dict[str, Any], task: Any, policy: Any) -> bool:
    from traces.agents import episode_from_langchain
    from traces.labeller import grade_episode

    messages = graph.get_state(config).values.get("messages", [])
    return grade_episode(episode_from_langchain(messages, task, policy), task).label == "healthy"


def _run_original(index: int, args: argparse.Namespace, db: Any, checkpointer: Any) -> _Episode:
    from langchain_core.messages import HumanMessage
    from langgraph.errors import GraphRecursionError

    from traces.agents import build_langgraph_agent, episode_from_langchain, real_model_middleware
    from traces.labeller import grade_episode
    from traces.policy import Policy
    from traces.tasks import SMALL_TASK_KINDS, make_task
    from traces.tools import BOOKING_TOOLS, booking_tools
    from verifiers import verify_episode

    spec = getattr(args, "spec", None)
    seed = args.seed * 100_003 + index
    task = make_task(seed, db=db, kinds=SMALL_TASK_KINDS) if spec else make_task(seed, db=db)
    slip = SLIPS[index % 4] if index % 4 < 3 else None  # three of four episodes may slip, one is left alone
    # "relevant": only a hint that names the slip's kind makes the scripted policy careful, so the rungs can differ.
    policy = Policy(seed=seed, hint_response="relevant", **({slip: args.slip_rate} if slip else {}))
    model = _make_model(args, policy)
    graph = build_langgraph_agent(task, policy, toolbox=booking_tools(db), checkpointer=checkpointer, model=model,
                                  tools=task.tools if spec else BOOKING_TOOLS,
                                  middleware=[real_model_middleware(spec.first_turn_tool_choice)] if spec else ())
    limit = 2 * spec.max_steps + 1 if spec else 4 * policy.max_steps + 10
    config = {"configurable": {"thread_id": f"repair-bench-{index}"}, "recursion_limit": limit}
    try:
        graph.invoke({"messages": [HumanMessage(task.prompt)]}, config)
    except GraphRecursionError:
        pass  # a real model that never stops calling: the run so far is in the checkpointer, graded as it is
    episode = episode_from_langchain(graph.get_state(config).values.get("messages", []), task, policy)
    grade = grade_episode(episode, task)
    correct = grade.label == "healthy"
    flags = [f for f in verify_episode(episode, task_spec(task)).findings if is_flag(f)]
    selected_by = "checks" if flags else ""
    if not flags and not correct:
        # The shipped checks do not cover every testbed task: the oracle picks the run, and the finding it
        # leaves names only that the answer failed, never the expected value.
        flags = [Finding(layer="oracle", check="answer_graded_wrong", message="the final answer was graded wrong",
                         blocking=True, severity=Severity.WARNING, step=len(episode.steps) - 1)]
        selected_by = "oracle"
    head = graph.get_state(config).config
    return _Episode(index, task, policy, graph, model, config, head, correct, flags, selected_by,
                    _fingerprint(graph, head))


def task_spec(task: Any) -> Any:
    """The verifier spec a testbed task admits, built from its prompt alone (never its ground truth)."""
    from traces.specs import verifier_spec
    from verifiers.spec import VerifierSpec

    return VerifierSpec.model_validate(verifier_spec(task.prompt))


def _reseed(episode: _Episode, repeat: int | None) -> None:
    # Repeat r re-draws the scripted policy with seed + r; repeat 0 replays the original draw exactly.
    # A seeded real client samples repeat r with seed + 1 + r: with the original's seed, a fork's first call
    # (the same messages under resample) would replay the original's tokens, as no unseeded provider does.
    # None restores the original seed.
    if hasattr(episode.model, "policy"):
        episode.model.policy = dataclasses.replace(episode.policy, seed=episode.policy.seed + (repeat or 0))
    elif getattr(episode.model, "seed", None) is not None:
        episode.model.seed = episode.policy.seed + (0 if repeat is None else 1 + repeat)


def _repair_once(episode: _Episode, rung: Rung, guard: Guard) -> tuple[bool, int]:
    """Fork the original branch under `rung`; (graded correct after, extra model calls)."""
    attempts = 2 if rung == "adaptive" else 1
    repairer = Repairer(guard, rung=rung, max_attempts=attempts, breaker=CircuitBreaker(max_attempts=attempts),
                        on_escalate=lambda event: None)
    outcome = repair_langgraph(repairer, episode.graph, episode.head_config, episode.findings,
                                        tools=episode.task.tools, task=episode.task.prompt)
    tried = [a for a in outcome.attempts if a.outcome != "not_applicable"]
    if not tried:
        return episode.correct, 0  # the rung cannot apply (recompute without a calculator): the run is unchanged
    last = tried[-1]
    if last.fork_config is None:  # the fork failed before it was written: nothing changed
        return episode.correct, outcome.extra_model_calls
    return _grade(episode.graph, last.fork_config, episode.task, episode.policy), outcome.extra_model_calls


def run_bench(args: argparse.Namespace) -> tuple[list[RungRow], dict[str, Any]]:
    """Run the benchmark; the rows (one per rung, resample first) and a summary of the population."""
    from traces.tools import BookingDB
    from verifiers import VerifierLayer

    rungs: list[Rung] = ["resample", *[r for r in args.rungs or RUNGS if r != "resample"]]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="guardrail-repair-bench-"))
    checkpointer = sqlite_checkpointer(workdir / "repair_bench.db")
    db = BookingDB()
    episodes = [_run_original(i, args, db, checkpointer)
                for i in progress(range(args.episodes), desc="original runs", enabled=not args.quiet)]
    selected = [e for e in episodes if e.selected_by]
    outcomes: dict[str, list[tuple[bool, bool, int]]] = {r: [] for r in rungs}  # (before, after, extra calls)
    jobs = [(e, r, k) for e in selected for r in rungs for k in range(args.repeats)]
    for episode, rung, repeat in progress(jobs, desc="repairs", enabled=not args.quiet):
        _reseed(episode, repeat)
        guard = Guard([VerifierLayer(task_spec(episode.task))], mode="intervene")
        after, calls = _repair_once(episode, rung, guard)
        outcomes[rung].append((episode.correct, after, calls))
        _reseed(episode, None)
    untouched = sum(_fingerprint(e.graph, e.head_config) == e.fingerprint for e in selected)
    total = len(episodes)
    correct_before = sum(e.correct for e in episodes)
    control = [after for _, after, _ in outcomes["resample"]]
    rows = []
    for rung in rungs:
        runs = outcomes[rung]
        recovered = sum((not before) and after for before, after, _ in runs)
        broken = sum(before and not after for before, after, _ in runs)
        wrong_runs = sum(not before for before, _, _ in runs)
        net_change = (recovered - broken) / args.repeats  # per repeat: one repeat is one pass over the episodes
        rows.append(RungRow(
            rung=rung,
            n=len(runs),
            recovered=recovered,
            broken=broken,
            unchanged=len(runs) - recovered - broken,
            recovery_rate=round(recovered / wrong_runs, 4) if wrong_runs else None,
            # A p-value on a scripted policy would test the script's constants; only a real model gets one.
            p_vs_resample=None if rung == "resample" or not args.endpoint
            else mcnemar_exact([a for _, a, _ in runs], control),
            extra_model_calls=round(sum(c for _, _, c in runs) / len(runs), 3) if runs else 0.0,
            net_success_before=round(correct_before / total, 4) if total else 0.0,
            net_success_after=round((correct_before + net_change) / total, 4) if total else 0.0,
        ))
    summary = {
        "episodes": total,
        "correct_before": correct_before,
        "selected": len(selected),
        "selected_by_checks": sum(e.selected_by == "checks" for e in selected),
        "selected_by_oracle": sum(e.selected_by == "oracle" for e in selected),
        "flagged_correct": sum(e.correct for e in selected),
        "original_branch_untouched": f"{untouched}/{len(selected)}",
        "repeats": args.repeats,
        "bonferroni_alpha": round(0.05 / max(1, len(rungs) - 1), 4) if args.endpoint else None,
        "figures": "measured on a real model" if args.endpoint else "mechanism check (scripted policy): no p-values",
        "model": args.model if args.endpoint else "scripted testbed policy",
        "checkpointer": str(workdir / "repair_bench.db"),
    }
    return rows, summary


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=int, default=40, help="testbed episodes to run (default 40)")
    parser.add_argument("--repeats", type=int, default=3, help="independent repeats per rung (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (tasks and policy seeds derive from it)")
    parser.add_argument("--slip-rate", type=float, default=0.6,
                        help="per-episode slip probability of the scripted policy (default 0.6)")
    parser.add_argument("--rungs", nargs="+", default=None, choices=list(RUNGS),
                        help="rungs to test against the resample control (default: all; with --inline: adaptive, "
                             "and with --inline --model local:NAME: resample and adaptive)")
    parser.add_argument("--workdir", help="where the SQLite checkpointer goes (default: a new temp dir)")
    parser.add_argument("--endpoint", help="an OpenAI-compatible base URL: run a real model instead of the script")
    parser.add_argument("--model", default="gpt-4o-mini",
                        help="model name at --endpoint; local:smollm2 starts the project's model server (unless "
                             "--endpoint names one) and runs the small tasks with the testbed's small-model agent")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature at --endpoint")
    parser.add_argument("--json", action="store_true", help="one JSON object per rung on stdout")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    add_inline_arguments(parser)


def _run_inline(args: argparse.Namespace) -> int:
    from traces.bench.repair_inline import CONFIGURATIONS, REAL_CONFIGURATIONS, run_inline

    chosen = tuple(tuple(c.split("/", 1)) for c in args.configuration) if args.configuration else None
    columns = ["framework", "checkpointer", "rung", "n", "recovered", "broken", "original_intact",
               "extra_model_calls"]
    if not args.model.startswith("local:") and not args.endpoint:
        rows = run_inline(episodes=args.episodes, seed=args.seed, slip_rate=args.slip_rate,
                          configurations=chosen or CONFIGURATIONS, rungs=tuple(args.rungs or ["adaptive"]))
        note = ("inline repair (GuardMiddleware(repair=True), arun_autogen_team) on the scripted testbed policy: "
                "recovered/broken are mechanism checks of the plumbing, not model behaviour (no p-values)")
    else:
        from traces.model_server import running_server
        from traces.models import EndpointSpec

        model = args.model if ":" in args.model else f"openai:{args.model}"
        with running_server(args.endpoint) as (base_url, info):
            spec = EndpointSpec(model, base_url, temperature=args.temperature, server=info)
            rows = run_inline(episodes=args.episodes, seed=args.seed, configurations=chosen or REAL_CONFIGURATIONS,
                              rungs=tuple(args.rungs or ["resample", "adaptive"]), spec=spec)
        for row in rows:
            row.update(model=model, model_sha256=info.get("model_sha256"), temperature=args.temperature,
                       seed=args.seed)
        columns += ["episodes", "right_after", "pairs", "p_vs_resample"]
        note = (f"inline repair on a real model ({model}, T={args.temperature}, seed {args.seed}): {args.episodes} "
                "episodes per configuration and rung; p_vs_resample is the exact McNemar test on the episodes "
                "flagged under both rungs")
    if args.json:
        for row in rows:
            emit_json(row)
        sys.stderr.write(note + "\n")
        return 0
    print_table(rows, columns)
    sys.stdout.write("\n" + note + "\n")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.episodes < 1 or args.repeats < 1:
        sys.stderr.write("guardrail bench repair: --episodes and --repeats must be at least 1\n")
        return 2
    if args.inline:
        return _run_inline(args)
    args.spec = None
    if args.model.startswith("local:"):
        from traces.model_server import running_server
        from traces.models import EndpointSpec

        with running_server(args.endpoint) as (base_url, info):
            args.spec = EndpointSpec(args.model, base_url, temperature=args.temperature, server=info)
            args.endpoint = base_url
            rows, summary = run_bench(args)
        summary["model_sha256"] = info.get("model_sha256")
        summary["agent"] = args.spec.describe()["sampling"]
    else:
        rows, summary = run_bench(args)
    notes = [MECHANISM_NOTE] + ([] if args.endpoint else [SCRIPTED_NOTE])
    if args.json:
        for row in rows:
            emit_json(row.as_json())
        sys.stderr.write(json.dumps(summary) + "\n" + "\n".join(notes) + "\n")
        return 0
    table = [row.as_json() for row in rows]
    for line in table:  # exact p-values can be tiny: show them in scientific form, not as 0.000
        p_value = line["p_vs_resample"]
        line["p_vs_resample"] = None if p_value is None else f"{p_value:.2g}"
    print_table(table, JSON_KEYS)
    sys.stdout.write("\n" + "\n".join(f"{k}: {v}" for k, v in summary.items()) + "\n")
    if args.endpoint:
        sys.stdout.write(f"significant at Bonferroni alpha {summary['bonferroni_alpha']}: "
                         + (", ".join(r.rung for r in rows if r.p_vs_resample is not None
                                      and r.p_vs_resample < summary["bonferroni_alpha"]) or "none") + "\n")
    sys.stdout.write("\n".join(notes) + "\n")
    return 0


BENCH = Command(
    help="re-run flagged testbed episodes from their checkpoints under each repair rung vs resample",
    add_arguments=_add_arguments,
    run=_run,
)
