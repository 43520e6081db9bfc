"""`guardrail bench real`: what the guard's layers do on a real model's runs (SmolLM2-135M), each next to its scripted twin.

One JSON object per measurement: ``{"what", "framework", "n", ...figures..., "model_sha256"}``.

- ``corpus``: what the committed real corpus holds (labels, healthy share of the model's own runs).
- ``monitor``: the step monitor fitted on the real healthy runs (the published 60/20/20 protocol, runs
  from 2 steps kept: the small tasks are short), AUROC / detection / healthy FA on the real test split,
  for the default monitor, the uncertainty channel alone (the model's own token logprobs) and the monitor
  without it; ``scripted_twin`` is the same protocol on the scripted testbed corpus of that framework.
- ``verifiers``: the shipped verifiers with each task's own spec (`traces.specs`) on the real runs:
  the share of each label flagged, healthy flagged.
- ``consistency``: the self-consistency gate on N real samples per plan (the first call of each task, at
  the collection's temperature and a hotter one), each sample run on the real tools in one fixed epoch:
  fabricated-argument rejection, the false-positive share of rejections, fabricated plans accepted.
- ``live``: a few episodes per framework run live now against a freshly started server.
- ``repair``: a small live sample of repair inside the run (`guardrail bench repair --inline --model
  local:smollm2` with fewer episodes): per framework, resample and the adaptive hint ladder on the same
  flagged runs, recovered / broken / original intact / extra model calls, McNemar against resample.
- ``coding``: a small live sample of the gate on a coding agent (`guardrail bench coding --agent
  mini-swe-agent --model local:smollm2` with fewer tasks): mini-swe-agent's own loop on more-itertools
  tasks, report vs intervene, steps, tool errors, blocks the model read.

Every figure comes from the model; the scripted twins say what the same protocol gave on scripts.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table
from guardrail.core.corpus import read_corpus
from guardrail.core.events import HEALTHY, Episode

__all__ = ["BENCH", "consistency_on_samples", "corpus_summary", "fitted_verifier_figures", "monitor_figures",
           "transfer_verifier_figures", "verifier_figures"]

CORPORA = Path(__file__).resolve().parents[1] / "corpora"
REAL = {"langgraph": CORPORA / "real_smollm2_langgraph", "autogen": CORPORA / "real_smollm2_autogen"}
SCRIPTED = {"langgraph": CORPORA / "testbed_langgraph", "autogen": CORPORA / "testbed_autogen"}
MIN_STEPS_REAL = 2
WHAT = ("corpus", "monitor", "verifiers", "verifiers_fitted", "consistency", "live", "repair", "coding")
EPOCH = "booking-seed-v1"  # the booking database is rebuilt from one shipped seed file: it never moves


def _model_sha(episodes: list[Episode]) -> str | None:
    for episode in episodes:
        model = (episode.meta.get("provenance") or {}).get("model") or {}
        if model.get("model_sha256"):
            return str(model["model_sha256"])
    return None


def _record(what: str, framework: str, n: int, sha: str | None, **figures: Any) -> dict[str, Any]:
    return {"what": what, "framework": framework, "n": n, **figures, "model_sha256": sha}


# --------------------------------------------------------------------------- corpus
def corpus_summary(episodes: list[Episode], rejected: int) -> dict[str, Any]:
    """Labels, the model's own runs (no injector, or one that never fired) and how many came out right, by task kind."""
    own = [e for e in episodes if e.meta.get("requested_label") == HEALTHY
           or (e.meta.get("injection") or {}).get("fired") is False]
    right = [e for e in own if e.label == HEALTHY]
    by_kind: dict[str, list[int]] = {}
    for episode in own:
        kind = str(episode.meta.get("task_kind") or (episode.meta.get("provenance") or {}).get("task_kind"))
        by_kind.setdefault(kind, [0, 0])
        by_kind[kind][0] += episode.label == HEALTHY
        by_kind[kind][1] += 1
    return {"labels": dict(sorted(Counter(e.label for e in episodes).items())), "rejected": rejected,
            "own_runs": len(own), "own_runs_healthy": len(right),
            "healthy_share": round(len(right) / len(own), 3) if own else None,
            "healthy_by_task_kind": {k: f"{v[0]}/{v[1]}" for k, v in sorted(by_kind.items())},
            "T_median": sorted(len(e.steps) for e in episodes)[len(episodes) // 2] if episodes else None,
            "steps_with_logprobs": round(sum(bool(s.token_logprobs) for e in episodes for s in e.steps)
                                         / max(1, sum(len(e.steps) for e in episodes)), 3)}


# --------------------------------------------------------------------------- monitor
def _split(episodes: list[Episode], seed: int, min_steps: int) -> Any:
    from traces.bench.monitor import published_split

    return published_split(episodes, seed, min_steps=min_steps)


def monitor_figures(episodes: list[Episode], *, seed: int = 0, min_steps: int = MIN_STEPS_REAL,
                    repeats: int = 5) -> dict[str, Any]:
    """Default monitor, uncertainty channel alone, and no uncertainty channel: mean over `repeats` seeded splits."""
    import numpy as np

    from monitors.features import CHANNELS
    from monitors.monitor import StepMonitor
    from traces.bench.monitor import evaluate_monitor

    variants = {"default": None, "uncertainty_only": ("u",), "without_uncertainty": tuple(c for c in CHANNELS
                                                                                        if c != "u")}
    out: dict[str, Any] = {}
    for name, channels in variants.items():
        runs = []
        for r in range(repeats):
            split = _split(episodes, seed + r, min_steps)
            monitor = StepMonitor.preset("default") if channels is None else _restricted(channels)
            runs.append(evaluate_monitor(monitor, split))
        keys = ("auroc", "detection_rate", "healthy_fa_rate")
        out[name] = {k: (round(float(np.mean([r[k] for r in runs if r[k] is not None])), 3)
                         if any(r[k] is not None for r in runs) else None) for k in keys}
        classes = sorted({c for r in runs for c in r["per_class"]})
        out[name]["per_class"] = {c: round(float(np.mean([r["per_class"][c] for r in runs if c in r["per_class"]])),
                                           3) for c in classes}
        out[name]["channels"] = runs[0]["channels"]
        out[name]["n_train"], out[name]["n_test"] = runs[0]["n_train"], runs[0]["n_test"]
    return out


def _restricted(channels: tuple[str, ...]) -> Any:
    """The default monitor on a subset of the telemetry: a component reading a channel left out is left out too."""
    from monitors.features import Telemetry
    from monitors.monitor import DEFAULT_CONFIG, StepMonitor

    # novelty_cusum reads only the grounding channel 'g' (result-shape and word novelty).
    components = [c for c in DEFAULT_CONFIG["components"] if c != "novelty_cusum" or "g" in channels]
    return StepMonitor.preset("default", components=components, telemetry=Telemetry(channels=channels))


# --------------------------------------------------------------------------- verifiers
def verifier_figures(episodes: list[Episode]) -> dict[str, Any]:
    """Share of each label any shipped verifier flags, with each task's own spec (never its ground truth)."""
    from traces.specs import verifier_spec
    from verifiers import VerifierSpec, verify_episode

    flagged: dict[str, list[bool]] = {}
    for episode in episodes:
        raw = verifier_spec(episode.task or "")
        if raw is None:
            continue
        flags = verify_episode(episode, VerifierSpec.model_validate(raw)).flags
        flagged.setdefault(episode.label, []).append(any(flags.values()))
    return {label: f"{sum(hits)}/{len(hits)}" for label, hits in sorted(flagged.items())}


def fitted_verifier_figures(name: str, episodes: list[Episode], *, seed: int = 0) -> dict[str, Any]:
    """Verifiers with a spec fitted on the real healthy runs (`guardrail fit-spec`), beside each task's own spec.

    The protocol of `guardrail bench verify`'s fitted tables: the fit sees a seeded 60% of the healthy
    runs only; both specs verify the held-out 40% and every failure; a 5-fold cross-fit says how many
    healthy runs a spec fitted without them flags.
    """
    from traces.bench.verify_fit import corpus_rows, testbed_hand
    from verifiers import verify_episode

    result = corpus_rows(name, episodes, testbed_hand, seed)
    flagged: dict[str, dict[str, str]] = {}
    checks: dict[str, dict[str, str]] = {}
    for row in result["rows"]:
        spec = "fitted" if row["spec"] == "fitted" else "task_spec"
        flagged.setdefault(row["label"], {})[spec] = row["any"]
        if row["label"] == HEALTHY:
            checks[spec] = {k: v for k, v in row.items() if k not in ("corpus", "label", "n", "spec", "any")
                            and not v.startswith("0/")}
    # A family is fitted only where the model got some run right: per task kind, what the fitted spec caught.
    by_kind: dict[str, dict[str, list[int]]] = {}
    for episode in result["evaluated"]:
        kind = str(episode.meta.get("task_kind"))
        hits = by_kind.setdefault(episode.label, {}).setdefault(kind, [0, 0])
        hits[0] += any(verify_episode(episode, result["spec"]).flags.values())
        hits[1] += 1
    summary = {k: v for k, v in result["summary"].items() if k != "corpus"}
    return {**summary, "flagged": flagged, "healthy_flagged_by_check": checks,
            "fitted_flagged_by_task_kind": {label: {k: f"{a}/{b}" for k, (a, b) in sorted(kinds.items())}
                                            for label, kinds in sorted(by_kind.items())}}


def transfer_verifier_figures(fit_on: list[Episode], verify: list[Episode]) -> dict[str, str]:
    """Fit on every healthy run of one corpus, verify every run of another: the share of each label flagged."""
    from verifiers import verify_episode
    from verifiers.fit import fit_spec

    spec = fit_spec(e for e in fit_on if e.is_healthy)
    flagged: dict[str, list[bool]] = {}
    for episode in verify:
        flagged.setdefault(episode.label, []).append(any(verify_episode(episode, spec).flags.values()))
    return {label: f"{sum(hits)}/{len(hits)}" for label, hits in sorted(flagged.items())}


# --------------------------------------------------------------------------- self-consistency
def consistency_on_samples(plans: list[dict[str, Any]], *, layer: bool = False) -> dict[str, Any]:
    """Gate each plan's N samples; a plan is fabricated when the call the agent would run (sample 0) is not the task's.

    ``plans``: ``{"samples": [(tool, args) ...], "planned": [(tool, args) ...], "task": text}``. Every sample
    is run on the real tools in the one fixed epoch the booking database has. ``layer=False`` is the
    decision record's rule alone; ``layer=True`` the full layer (per-argument agreement, and provenance
    of identifier-like arguments against the task text the agent was given).
    """
    from guardrail.consistency import ConsistencyGate, DeterminismRegistry, PlanDecision, PlanSample
    from guardrail.consistency.registry import ToolSchema
    from guardrail.core.provenance import ProvenanceContext
    from traces.tools import booking_tools

    box = booking_tools()

    def run(name: str, args: Any) -> tuple[Any, str | None]:
        outcome = box._run(name, dict(args) if isinstance(args, dict) else {"_raw": args})  # noqa: SLF001
        return (None, outcome.text) if outcome.is_error else (outcome.text, None)

    def runner(name: str, args: Any) -> Any:
        result, error = run(name, args)
        if error is not None:
            raise RuntimeError(error)
        return result

    registry = DeterminismRegistry([
        ToolSchema("lookup_flight", True, probe_args={"origin": "Prague", "destination": "Lisbon"}),
        ToolSchema("lookup_hotel", True, probe_args={"city": "Oslo"})])
    registry.probe(runner, epoch=EPOCH)
    gate = ConsistencyGate(registry, per_argument=layer, provenance=layer)
    decisions: list[tuple[bool, str]] = []
    for plan in plans:
        samples = []
        for tool, args in plan["samples"]:
            result, error = run(tool, args)
            samples.append(PlanSample(tool, args, EPOCH, result=result, error=error) if error is None
                           else PlanSample(tool, args, EPOCH, error=error))
        context = ProvenanceContext([plan["task"]]) if layer and plan.get("task") else None
        verdict = gate.evaluate(samples, context)
        first = plan["samples"][0]
        is_fabricated = (first[0], _norm(first[1])) not in {(t, _norm(a)) for t, a in plan["planned"]}
        decisions.append((is_fabricated, verdict.decision.value))
    rejected = [f for f, d in decisions if d == PlanDecision.REJECT.value]
    fabricated = [d for f, d in decisions if f]
    return {"plans": len(decisions), "fabricated_plans": len(fabricated),
            "rejected": len(rejected), "deferred": sum(d == PlanDecision.DEFER.value for _, d in decisions),
            "fabricated_rejected": f"{sum(d == PlanDecision.REJECT.value for d in fabricated)}/{len(fabricated)}",
            "fabricated_accepted_share": round(sum(d == PlanDecision.ACCEPT.value for d in fabricated)
                                               / len(fabricated), 3) if fabricated else None,
            "false_positive_share_of_rejections": round(sum(not f for f in rejected) / len(rejected), 3)
            if rejected else None}


def _norm(args: Any) -> Any:
    if isinstance(args, dict):
        return tuple(sorted((str(k), " ".join(str(v).split()).lower()) for k, v in args.items()))
    return str(args)


def sample_plans(base_url: str, tasks: list[Any], *, n: int, temperature: float, seed: int) -> list[dict[str, Any]]:
    """N first-turn samples per task from the model (the agent's first call: tool_choice required, one call)."""
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from openai import OpenAI

    from traces.agents import SYSTEM_PROMPT
    from traces.tools import booking_tools

    client = OpenAI(base_url=base_url, api_key="local")
    box = booking_tools()
    plans = []
    for index, task in enumerate(tasks):
        tools = [convert_to_openai_tool(t) for t in box.langchain_tools(task.tools)]
        reply = client.chat.completions.create(  # type: ignore[call-overload]
            model="smollm2", messages=[{"role": "system", "content": SYSTEM_PROMPT},
                                       {"role": "user", "content": task.prompt}],
            tools=tools, tool_choice="required", temperature=temperature, n=n, seed=seed + 1000 * index,
            max_tokens=64, extra_body={"parallel_tool_calls": False})
        samples = []
        for choice in reply.choices:
            call = (choice.message.tool_calls or [None])[0]
            if call is None:
                continue
            try:
                args: Any = json.loads(call.function.arguments)
            except json.JSONDecodeError:
                args = call.function.arguments
            samples.append((call.function.name, args))
        if samples:
            plans.append({"samples": samples, "task": task.prompt,
                          "planned": [(c.tool, c.arg_dict) for c in task.goal.calls()]})
    return plans


# --------------------------------------------------------------------------- the command
def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--framework", action="append", choices=sorted(REAL), default=None,
                        help="framework(s) to report (default: both)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first monitor split and of the samples (0)")
    parser.add_argument("--repeats", type=int, default=5, help="seeded monitor splits to average (5)")
    parser.add_argument("--plans", type=int, default=40, help="tasks whose first call is sampled N times (40; 0: skip)")
    parser.add_argument("--samples", type=int, default=5, help="N samples per plan (5)")
    parser.add_argument("--temperature", type=float, action="append", default=None,
                        help="sampling temperature(s) for the plans (default: 0.2, the collection's, and 0.7)")
    parser.add_argument("--live", type=int, default=2, help="episodes per framework run live now (2; 0: skip)")
    parser.add_argument("--repair-episodes", type=int, default=6,
                        help="flagged-run episodes per framework and rung for the repair sample (6; 0: skip)")
    parser.add_argument("--coding-tasks", type=int, default=3,
                        help="mini-swe-agent tasks, each in both modes, for the coding sample (3; 0: skip)")
    parser.add_argument("--endpoint", default=None, help="a running model server (default: start one)")
    parser.add_argument("--what", action="append", choices=WHAT, default=None,
                        help=f"measurement(s) to run (default: all of {', '.join(WHAT)})")
    parser.add_argument("--json", action="store_true", help="one JSON object per measurement")


def _run(args: argparse.Namespace) -> int:
    frameworks = args.framework or sorted(REAL)
    wanted = set(args.what or WHAT)
    rows: list[dict[str, Any]] = []

    def emit(record: dict[str, Any]) -> None:
        rows.append(record)
        if args.json:
            emit_json(record)

    sha: str | None = None
    loaded: dict[str, list[Episode]] = {}
    for framework in frameworks if wanted & {"corpus", "monitor", "verifiers", "verifiers_fitted"} else []:
        if not (REAL[framework] / "manifest.json").is_file():
            emit(_record("corpus", framework, 0, None, error=f"{REAL[framework]} is missing: collect it first "
                         f"(traces/corpora/README.md)"))
            continue
        corpus = read_corpus(REAL[framework])
        episodes = corpus.episodes
        sha = sha or _model_sha(episodes)
        if "corpus" in wanted:
            emit(_record("corpus", framework, len(episodes), sha, **corpus_summary(episodes, len(corpus.rejected)),
                         command=corpus_command(corpus)))
        scripted = read_corpus(SCRIPTED[framework]).episodes if (SCRIPTED[framework] / "manifest.json").is_file() \
            else []
        if "monitor" in wanted:
            emit(_record("monitor", framework, len(episodes), sha, **monitor_figures(episodes, seed=args.seed,
                                                                                   repeats=args.repeats),
                         scripted_twin=monitor_figures(scripted, seed=args.seed, min_steps=4, repeats=args.repeats)
                         if scripted else None))
        if "verifiers" in wanted:
            emit(_record("verifiers", framework, len(episodes), sha, flagged=verifier_figures(episodes),
                         scripted_twin=verifier_figures(scripted) if scripted else None))
        if "verifiers_fitted" in wanted:
            emit(_record("verifiers_fitted", framework, len(episodes), sha,
                         **fitted_verifier_figures(REAL[framework].name, episodes, seed=args.seed)))
        loaded[framework] = episodes
    if "verifiers_fitted" in wanted and len(loaded) == 2:  # fitted on one framework's runs, verifying the other's
        for source, target in (("langgraph", "autogen"), ("autogen", "langgraph")):
            emit(_record("verifiers_fitted_transfer", f"{source} -> {target}", len(loaded[target]), sha,
                         fit_on=f"every healthy run of {REAL[source].name}",
                         flagged=transfer_verifier_figures(loaded[source], loaded[target])))
    plans = args.plans if "consistency" in wanted else 0
    live = args.live if "live" in wanted else 0
    repair = args.repair_episodes if "repair" in wanted else 0
    coding = args.coding_tasks if "coding" in wanted else 0
    if plans or live or repair or coding:
        from traces.model_server import running_server

        with running_server(args.endpoint) as (base_url, info):
            sha = info.get("model_sha256") or sha
            if plans:
                from traces.tasks import SMALL_TASK_KINDS, make_task

                tasks = [make_task(10_000 + args.seed + i, kinds=SMALL_TASK_KINDS) for i in range(plans)]
                for temperature in args.temperature or [0.2, 0.7]:
                    started = time.perf_counter()
                    plans = sample_plans(base_url, tasks, n=args.samples, temperature=temperature, seed=args.seed)
                    seconds = round(time.perf_counter() - started, 1)
                    for rule, layer in (("record", False), ("layer", True)):
                        emit(_record("consistency", "openai-client", len(plans), sha, samples_per_plan=args.samples,
                                     temperature=temperature, rule=rule, **consistency_on_samples(plans, layer=layer),
                                     seconds=seconds))
            for framework in frameworks if live else []:
                emit(_record("live", framework, live, sha, **_live(framework, base_url, info, live, args.seed)))
            for row in _repair_sample(base_url, info, frameworks, repair, args.seed) if repair else []:
                emit(_record("repair", row.pop("framework"), row.pop("n"), sha, **row))
            if coding:
                emit(_record("coding", "mini-swe-agent", coding, sha, **_coding_sample(base_url, info, coding,
                                                                                       args.seed)))
    if not args.json:
        print_table([{k: v for k, v in r.items() if not isinstance(v, dict)} for r in rows])
    return 0


def corpus_command(corpus: Any) -> str | None:
    generator = corpus.generator if hasattr(corpus, "generator") else None
    if not generator:
        manifest = json.loads((Path(corpus.path) / "manifest.json").read_text(encoding="utf-8"))
        generator = manifest.get("generator") or {}
    if not generator:
        return None
    return (f"guardrail collect --framework {generator.get('framework')} --model {generator.get('model')} "
            f"--n {generator.get('n')} --seed {generator.get('seed')} --healthy-share {generator.get('healthy_share')} "
            f"-o traces/corpora/{Path(corpus.path).name}")


def _live(framework: str, base_url: str, info: dict[str, Any], n: int, seed: int) -> dict[str, Any]:
    from traces.collect import _Runner, collect_episode
    from traces.models import EndpointSpec
    from traces.tools import BookingDB

    spec = EndpointSpec("local:smollm2", base_url, server=info)
    runner = _Runner(framework, spec)
    db = BookingDB()
    started = time.perf_counter()
    labels = []
    try:
        for index in range(n):
            outcome = collect_episode(framework, index, HEALTHY, 50_000 + seed, db=db, runner=runner)
            labels.append(outcome.label if isinstance(outcome, Episode) else f"rejected: {outcome.reason}")
    finally:
        runner.close()
    return {"labels": labels, "seconds_per_episode": round((time.perf_counter() - started) / max(1, n), 1)}


def _repair_sample(base_url: str, info: dict[str, Any], frameworks: list[str], episodes: int,
                   seed: int) -> list[dict[str, Any]]:
    """Repair inside the run on the real model: resample vs the adaptive ladder, paired on the same runs."""
    from traces.bench.repair_inline import REAL_CONFIGURATIONS, run_inline
    from traces.models import EndpointSpec

    wanted = {"langgraph": "langgraph", "autogen": "autogen_team"}
    configurations = tuple(c for c in REAL_CONFIGURATIONS if c[0] in {wanted[f] for f in frameworks})
    temperature = 0.7  # the repair bench's own: at 0.2 a resampled fork mostly repeats the original
    spec = EndpointSpec("local:smollm2", base_url, temperature=temperature, server=info)
    rows = run_inline(episodes=episodes, seed=seed, configurations=configurations, rungs=("resample", "adaptive"),
                      spec=spec)
    for row in rows:
        row["temperature"] = temperature
        row.pop("model_sha256", None)
    return rows


def _coding_sample(base_url: str, info: dict[str, Any], tasks: int, seed: int) -> dict[str, Any]:
    """mini-swe-agent's loop driven by the real model on the coding testbed's project, report vs intervene."""
    from traces.bench.coding import real_model_comparison
    from traces.coding.project import DEFAULT_PROJECT, fetch_sdist
    from traces.models import EndpointSpec

    try:
        root = fetch_sdist(*DEFAULT_PROJECT)
    except (RuntimeError, OSError) as exc:
        return {"error": f"cannot get {'=='.join(DEFAULT_PROJECT)}: {exc}"}
    spec = EndpointSpec("local:smollm2", base_url, temperature=0.2, server=info)
    summary = real_model_comparison(root, spec, n=tasks, seed=seed)
    summary.pop("transcripts", None)
    summary.pop("n", None)
    return summary


BENCH = Command(help="the layers on a real model's runs (SmolLM2-135M) next to their scripted twins",
                add_arguments=_add_arguments, run=_run)
