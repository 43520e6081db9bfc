"""`guardrail bench consistency`: the naive combined-agreement scorer, the record's separated rule, the full layer.

The record's situation (seed 001) with real mechanisms: 12 sandbox tools
(`traces.bench.consistency_sandbox`), three of them declared deterministic but not; a plan
sampler that fabricates arguments in a known fraction of plans and, in another fraction,
legitimately varies them (paraphrased queries, one of several fitting files); the episode each
plan is proposed in (`traces.bench.consistency_context`: the task and earlier tool results);
N candidates per plan executed in one sandbox epoch; the start-up determinism probes; then every
plan scored by the three scorers in the same run. Scripted sandbox, scripted plans: the figures
are mechanism checks, not a model's behaviour.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from guardrail.consistency import (
    ConsistencyGate,
    DeterminismRegistry,
    DeterminismStatus,
    GateThresholds,
    PlanDecision,
    PlanSample,
    PlanVerdict,
    SelfConsistencyLayer,
    canonical_args,
    canonical_result,
    canonicalize,
    modal_index,
    pairwise_agreement,
)
from guardrail.consistency.harness import DryRunHarness, ProposedCall
from guardrail.core.cliutil import Command, emit_json, print_table, progress
from guardrail.core.events import Action
from guardrail.core.guard import Guard
from guardrail.core.provenance import ProvenanceContext, check_arguments
from traces.bench.consistency_context import ContextMaker, PlanContext
from traces.bench.consistency_sandbox import MISDECLARED, TRENDING, Sandbox
from traces.bench.consistency_slips import STYLES, slips

__all__ = ["BENCH", "NaiveCombinedScorer", "PlanSampler", "SampledPlan", "run_benchmark"]

HEALTHY, FABRICATED, AMBIGUOUS = "healthy", "fabricated", "ambiguous"


class NaiveCombinedScorer:
    """The baseline the record replaced: one agreement over (tool, arguments, result) per sample.

    Rejects a plan when that combined agreement is below `threshold` (the record's 0.80) with at
    least `min_samples` samples. It canonicalizes exactly as the separated gate does, and skips
    tools declared nondeterministic, so the comparison isolates the one design choice: one
    combined signal instead of two separate ones checked against a probed registry.
    """

    def __init__(self, registry: DeterminismRegistry, threshold: float = 0.80, min_samples: int = 5) -> None:
        self.registry = registry
        self.threshold = threshold
        self.min_samples = min_samples

    def agreement(self, samples: Sequence[PlanSample]) -> float:
        keys = []
        for sample in samples:
            schema = self.registry.schema(sample.tool)
            args = canonical_args(sample.args, unordered=schema.unordered_args if schema else frozenset())
            result = canonical_result(sample.observed(), unordered=schema.unordered_result if schema else frozenset())
            keys.append((sample.tool, args, result))
        return pairwise_agreement(Counter(keys).values())

    def rejects(self, samples: Sequence[PlanSample]) -> tuple[bool, float]:
        agreement = self.agreement(samples)
        return len(samples) >= self.min_samples and agreement < self.threshold, agreement


@dataclass(frozen=True)
class SampledPlan:
    """N candidate calls for one step, and what the sampler did to produce them (the ground truth)."""

    index: int
    tool: str
    kind: str  # healthy | fabricated | ambiguous
    calls: list[ProposedCall]
    truth: list[dict[str, Any]] = field(default_factory=list)  # the real call (healthy) or candidates (ambiguous)


class PlanSampler:
    """Stands in for the model: proposes N candidate calls per step against the sandbox's real entities.

    A healthy plan repeats one true call in varied surface forms (key order, 1 vs 1.0, JSON text
    vs object, shuffled order-insensitive lists); with `paraphrase_rate` a candidate also respells
    its values as a real model does (numbers as text in other formats, path spellings, padded or
    doubled spaces, decomposed Unicode, indented JSON). A fabricated plan invents the identifier in
    each candidate from a skewed pool of made-up values, so fabrications sometimes coincide as a
    model's do; with `coincident_rate` a candidate repeats the plan's first invention outright (a
    model that fabricates consistently). An ambiguous plan picks among several legitimate calls (a
    paraphrased query, one of several fitting files): low argument agreement that is not hallucination.
    """

    def __init__(self, sandbox: Sandbox, *, n_samples: int, fabricated_fraction: float,
                 ambiguous_fraction: float, seed: int, paraphrase_rate: float = 0.0,
                 coincident_rate: float = 0.0) -> None:
        self.sandbox = sandbox
        self.n_samples = n_samples
        self.fabricated_fraction = fabricated_fraction
        self.ambiguous_fraction = ambiguous_fraction
        self.paraphrase_rate = paraphrase_rate
        self.coincident_rate = coincident_rate
        self.rng = random.Random(seed)
        self.tools = list(sandbox.tools)
        self.unordered = {schema.name: schema.unordered_args for schema in sandbox.schemas()}
        invent = random.Random(seed + 1)
        # Per tool, the made-up values a model tends to produce, most likely first.
        self._invented: dict[str, list[dict[str, Any]]] = {
            tool: [self._fabricate(tool, invent, k) for k in range(100)] for tool in self.tools}
        self._invented_weights = [1.0 / (k + 1) for k in range(100)]  # Zipf: a few inventions are favourites

    def plans(self, n_plans: int) -> Iterator[SampledPlan]:
        for index in range(n_plans):
            tool = self.rng.choice(self.tools)
            draw = self.rng.random()
            ambiguous = self._ambiguous(tool)
            truth: list[dict[str, Any]] = []
            if draw < self.fabricated_fraction:
                kind = FABRICATED
                arg_sets = self.rng.choices(self._invented[tool], weights=self._invented_weights, k=self.n_samples)
                if self.coincident_rate > 0:  # no extra draws at 0: the figures match the sampler without it
                    arg_sets = [arg_sets[0] if i and self.rng.random() < self.coincident_rate else args
                                for i, args in enumerate(arg_sets)]
            elif draw < self.fabricated_fraction + self.ambiguous_fraction and ambiguous:
                kind = AMBIGUOUS
                arg_sets = [self.rng.choice(ambiguous) for _ in range(self.n_samples)]
                truth = ambiguous
            else:
                kind = HEALTHY
                arg_sets = [self._valid(tool)] * self.n_samples
                truth = arg_sets[:1]
            yield SampledPlan(index, tool, kind, self.calls(index, tool, arg_sets), truth)

    def calls(self, index: int, tool: str, arg_sets: Sequence[dict[str, Any]]) -> list[ProposedCall]:
        """The N candidate calls for `arg_sets`, each spelled as a model might."""
        return [ProposedCall(tool, self._surface(args, self.unordered.get(tool, frozenset())), call_id=f"p{index}s{i}")
                for i, args in enumerate(arg_sets)]

    # ------------------------------------------------------------------ argument makers
    def _valid(self, tool: str) -> dict[str, Any]:
        sb, rng = self.sandbox, self.rng
        makers: dict[str, Callable[[], dict[str, Any]]] = {
            "search_index": lambda: {"query": " ".join(rng.sample(TRENDING, rng.choice([1, 1, 2]))), "limit": 5},
            "read_config": lambda: {"key": rng.choice(["db.pool_size", "db.timeout_s", "region", "features",
                                                        "release"])},
            "resolve_user": lambda: {"handle": rng.choice(sb.hot_handles if rng.random() < 0.8 else sb.handles)},
            "get_order": lambda: {"order_id": rng.choice(sb.order_ids),
                                  "fields": rng.sample(["status", "total", "sku", "customer"], 2)},
            "lookup_product": lambda: {"sku": rng.choice(sb.skus)},
            "read_file": lambda: {"path": rng.choice(sb.files)},
            "list_directory": lambda: {"path": rng.choice(["docs", "src", "notes"])},
            "file_checksum": lambda: {"path": rng.choice(sb.files)},
            "count_lines": lambda: {"path": rng.choice(sb.files)},
            "convert_currency": lambda: {"amount": rng.choice([5, 10, 12.5, 99, 250]), "from_currency": "EUR",
                                         "to_currency": rng.choice(["USD", "GBP"])},
            "get_current_time": lambda: {"timezone": "UTC"},
            "random_sample": lambda: {"population": list(range(10)), "k": 3},
        }
        return makers[tool]()

    def _ambiguous(self, tool: str) -> list[dict[str, Any]] | None:
        files = self.sandbox.files
        if tool == "search_index":
            return [{"query": q, "limit": 5} for q in ("deploy rollback", "rollback deploy", "rollback",
                                                       "canary rollback", "deploy")]
        if tool in ("read_file", "count_lines", "file_checksum"):
            docs = [f for f in files if f.startswith("docs/")]
            return [{"path": p} for p in docs[:5]]
        if tool == "list_directory":
            return [{"path": p} for p in ("docs", "notes", "src", ".")]
        return None

    @staticmethod
    def _fabricate(tool: str, rng: random.Random, k: int) -> dict[str, Any]:
        token = f"{rng.randrange(16**6):06x}"
        made_up: dict[str, dict[str, Any]] = {
            "search_index": {"query": f"INC-{token}", "limit": 5},
            "read_config": {"key": f"db.{token}_override"},
            "resolve_user": {"handle": f"user_{token}"},
            "get_order": {"order_id": f"ORD-{rng.randrange(5000, 99999)}", "fields": ["status", "total"]},
            "lookup_product": {"sku": f"SKU-{token}"},
            "read_file": {"path": f"docs/{token}_guide.md"},
            "list_directory": {"path": f"archive_{token}"},
            "file_checksum": {"path": f"src/{token}.py"},
            "count_lines": {"path": f"notes/{token}.md"},
            "convert_currency": {"amount": 10, "from_currency": token[:3].upper(), "to_currency": "USD"},
            "get_current_time": {"timezone": f"Region/{token}"},
            "random_sample": {"population": [token], "k": 1},
        }
        return made_up[tool]

    def _surface(self, args: dict[str, Any], unordered: frozenset[str]) -> Any:
        """The same call as a model might spell it this time."""
        rng = self.rng
        keys = list(args)
        rng.shuffle(keys)
        spelled: dict[str, Any] = {}
        paraphrase = self.paraphrase_rate > 0 and rng.random() < self.paraphrase_rate
        for key in keys:
            value = args[key]
            if isinstance(value, int) and not isinstance(value, bool) and rng.random() < 0.3:
                value = float(value)
            if isinstance(value, list) and key in unordered:
                value = rng.sample(value, len(value))
            spelled[key] = self._respell(value) if paraphrase else value
        if rng.random() < 0.2:
            return json.dumps(spelled, indent=2 if paraphrase else None)  # models often emit JSON text
        return spelled

    def _respell(self, value: Any) -> Any:
        """The same value as a model might write it another time (the meaning never changes)."""
        rng = self.rng
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            number = float(value)
            forms = [f"{number:,.1f}", f"{number:e}", repr(number), f" {value} "]
            if number.is_integer():
                forms += [str(int(number)), f"{int(number):,}"]
            return rng.choice(forms)
        if isinstance(value, list):
            return [self._respell(item) for item in value]
        if not isinstance(value, str):
            return value
        text = unicodedata.normalize("NFD", value)  # decomposed accents: the same text to a reader
        if "/" in text and " " not in text:
            head, _, tail = text.rpartition("/")
            return rng.choice([f"./{text}", f"{head}/x/../{tail}", f"{head}//{tail}", f"{text} "])
        if " " in text:
            return rng.choice([f"  {text}", text.replace(" ", "  "), f"{text}\t"])
        return rng.choice([f" {text}", f"{text} ", text])


def _share(numerator: int, denominator: int) -> float | None:
    return None if denominator == 0 else numerator / denominator


def _quantiles(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(values), "median": statistics.median(ordered), "p10": pick(0.10), "p90": pick(0.90)}


def typed_tools(tools: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """The sandbox tools behind a typed layer, as framework tools are (pydantic coerces what a model sends).

    Each call's arguments are read for their meaning (`canonicalize(..., spelled=True)`: numbers
    written as text, path spellings, whitespace, Unicode form) before the tool sees them, so a
    respelled call returns what the plain one does and the result signal stays about the tool.
    """
    def typed(tool: Callable[..., Any]) -> Callable[..., Any]:
        def call(**kwargs: Any) -> Any:
            return tool(**canonicalize(kwargs, spelled=True))

        return call

    return {name: typed(tool) for name, tool in tools.items()}


class Tally:
    """One scorer's decisions over the plans: what it rejected, deferred and let run, and by which rule."""

    def __init__(self) -> None:
        self.rejected: Counter[str] = Counter()  # by plan kind
        self.fp_cause: Counter[str] = Counter()
        self.missed: Counter[str] = Counter()  # fabricated plans it let run, by the rule that let them
        self.deferrals: Counter[str] = Counter()
        self.fabricated_accepted = 0  # fabricated plans that would run (accepted or deferred)
        self.signals: dict[str, Counter[str]] = {}  # plan kind -> decision/rule -> plans
        self.us: list[float] = []

    def add(self, kind: str, cause: str, decision: PlanDecision, reason: str, misdeclared: bool) -> None:
        self.signals.setdefault(kind, Counter())[f"{decision.value}/{reason}"] += 1
        if decision is PlanDecision.REJECT:
            self.rejected[kind] += 1
            if kind != FABRICATED:
                self.fp_cause[cause] += 1
        elif kind == FABRICATED:
            self.missed[reason] += 1
            self.fabricated_accepted += 1
        if decision is PlanDecision.DEFER:
            self.deferrals["misdeclared_tool" if misdeclared else "other"] += 1

    def figures(self, kinds: Counter[str]) -> dict[str, Any]:
        total = sum(self.rejected.values())
        return {"fp_share": _share(total - self.rejected[FABRICATED], total),
                "fabricated_recall": _share(self.rejected[FABRICATED], kinds[FABRICATED]),
                "fabricated_accepted_share": _share(self.fabricated_accepted, kinds[FABRICATED]),
                "rejections": total, "rejected_by_kind": dict(self.rejected), "fp_by_cause": dict(self.fp_cause),
                "missed_fabricated_by_reason": dict(self.missed), "deferrals": dict(self.deferrals),
                "us_per_sample": statistics.median(self.us) if self.us else None,
                "signals": {kind: dict(sorted(counts.items())) for kind, counts in sorted(self.signals.items())}}


def _probe(harness: DryRunHarness, sandbox: Sandbox, **options: Any) -> tuple[DeterminismRegistry, dict[str, Any]]:
    registry = DeterminismRegistry(sandbox.schemas())
    started = time.perf_counter()
    harness.probe(registry, **options)
    return registry, {"misdeclared": registry.misdeclared, "ms": (time.perf_counter() - started) * 1e3}


def _probe_trials(harness: DryRunHarness, sandbox: Sandbox, variants: dict[str, dict[str, Any]],
                  trials: int) -> dict[str, Any]:
    """Each probe variant `trials` times on fresh registries: how often it flags each tool, and what it costs."""
    out: dict[str, Any] = {}
    for name, options in variants.items():
        flagged: Counter[str] = Counter()
        ms = []
        for _ in range(trials):
            _, outcome = _probe(harness, sandbox, **options)
            flagged.update(outcome["misdeclared"])
            ms.append(outcome["ms"])
        out[name] = {"trials": trials, "flagged": {tool: flagged[tool] for tool in MISDECLARED},
                     "honest_flagged": sum(n for tool, n in flagged.items() if tool not in MISDECLARED),
                     "median_ms": statistics.median(ms)}
    return out


def run_benchmark(*, n_plans: int = 4000, n_samples: int = 5, seed: int = 0, fabricated_fraction: float = 0.10,
                  ambiguous_fraction: float = 0.05, naive_threshold: float = 0.80, model_latency_s: float = 2.5,
                  write_interval_s: float | None = 0.0005, reload_interval_s: float = 0.001,
                  paraphrase_rate: float = 0.0, coincident_rate: float = 0.0, gap_rate: float = 0.0,
                  recombined_rate: float = 0.0, probe_rounds: int = 3, probe_interval_s: float = 0.02,
                  probe_trials: int = 0, show_progress: bool = False,
                  slip_styles: Sequence[str] = ()) -> dict[str, Any]:
    """Run the three scorers over the same sampled plans in one sandbox; return the figures.

    - naive: one combined (tool, arguments, result) agreement (`NaiveCombinedScorer`);
    - record: the decision record's rule alone (`ConsistencyGate(per_argument=False, provenance=False)`)
      on a registry probed the record's way (two back-to-back calls); the keys the benchmark had
      before (``separated_*``, ``fabricated_accepted_share``) keep meaning this scorer;
    - layer: `SelfConsistencyLayer` in a Guard, fed each plan's episode (`ContextMaker`), with
      per-argument agreement and provenance, on a registry probed in `probe_rounds` rounds
      `probe_interval_s` apart with the sandbox's clock advanced between rounds.

    ``write_interval_s=None`` stops the search index's writer: the index is then honest, verified by
    every probe, and its free-text queries are judged (the plans' labels still call it mis-declared).

    With `slip_styles`, each fabricated plan slips the way models do instead (`consistency_slips`:
    the style is the plan index's turn through the styles) and the figures gain ``by_style``: per
    style, the layer's and the single-shot provenance check's catches (the call that would run,
    checked against the episode alone, no samples and no dry run: what the verifiers can do).
    """
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="guardrail-consistency-") as root, Sandbox(
            root, seed=seed, write_interval_s=write_interval_s, reload_interval_s=reload_interval_s) as sandbox:
        harness = DryRunHarness(typed_tools(sandbox.tools), epoch=sandbox.epoch)
        ttl = sandbox.user_cache.ttl_s
        variants: dict[str, dict[str, Any]] = {
            "record_two_calls": {"rounds": 2, "interval_s": 0.0},
            f"rounds_{probe_rounds}_interval_{probe_interval_s * 1e3:g}ms": {"rounds": probe_rounds,
                                                                             "interval_s": probe_interval_s},
            "same_with_sandbox_clock_advanced": {"rounds": probe_rounds, "interval_s": probe_interval_s,
                                                 "advance": lambda: sandbox.tick(ttl + 1.0)}}
        trials = _probe_trials(harness, sandbox, variants, probe_trials) if probe_trials else {}
        probes = {}
        for name, options in variants.items():
            probed, probes[name] = _probe(harness, sandbox, **options)
            if name == "record_two_calls":
                registry, record_probe = probed, probes[name]
            layer_registry = probed  # the last: the layer's
        by_probe = registry.misdeclared
        gate = ConsistencyGate(registry, GateThresholds(min_samples=min(5, n_samples)), per_argument=False,
                               provenance=False)
        layer = SelfConsistencyLayer(ConsistencyGate(layer_registry, GateThresholds(min_samples=min(5, n_samples))))
        guard = Guard([layer], mode="intervene")
        naive = NaiveCombinedScorer(registry, naive_threshold, min_samples=min(5, n_samples))
        sampler = PlanSampler(sandbox, n_samples=n_samples, fabricated_fraction=fabricated_fraction,
                              ambiguous_fraction=ambiguous_fraction, seed=seed, paraphrase_rate=paraphrase_rate,
                              coincident_rate=coincident_rate)
        maker = ContextMaker(sandbox, harness.call, seed=seed, gap_rate=gap_rate, recombined_rate=recombined_rate)

        kinds: Counter[str] = Counter()
        tallies = {"naive": Tally(), "record": Tally(), "layer": Tally()}
        routes: dict[str, Counter[str]] = {}
        grounding: dict[str, Counter[str]] = {}
        layer_fp_by_route: Counter[str] = Counter()
        recombined = 0
        by_style: dict[str, Counter[str]] = {}
        out_of_scope = 0
        misdeclared_agreement: list[float] = []
        tool_us: list[float] = []
        for plan in progress(sampler.plans(n_plans), desc="plans", total=n_plans, enabled=show_progress):
            in_scope = registry.status(plan.tool) is not DeterminismStatus.BY_CONTRACT
            context = maker.for_plan(plan.tool, plan.kind, plan.truth) if in_scope else None
            if context is not None and plan.kind == FABRICATED and recombined_rate > 0 \
                    and maker.rng.random() < recombined_rate:
                made = maker.recombine(plan.tool, context)
                if made:
                    recombined += 1
                    picks = [maker.rng.choice(made) for _ in plan.calls]
                    picks = [picks[0] if i and maker.rng.random() < coincident_rate else p for i, p in enumerate(picks)]
                    plan = SampledPlan(plan.index, plan.tool, plan.kind, sampler.calls(plan.index, plan.tool, picks))
            style = "random"
            if context is not None and plan.kind == FABRICATED and slip_styles:
                wanted = slip_styles[plan.index % len(slip_styles)]
                made = slips(maker, plan.tool, context, wanted, len(plan.calls), coincident_rate)
                if made:
                    style = wanted
                    plan = SampledPlan(plan.index, plan.tool, plan.kind, sampler.calls(plan.index, plan.tool, made))
            samples: list[PlanSample] = []
            for call in plan.calls:
                t0 = time.perf_counter_ns()
                samples.extend(harness.run([call]))
                tool_us.append((time.perf_counter_ns() - t0) / 1e3)
                sandbox.tick(model_latency_s)  # each candidate is one model call, seconds apart
            if context is None:
                out_of_scope += 1  # outside every scorer's scope: divergence there carries no signal
                continue
            kinds[plan.kind] += 1
            routes.setdefault(plan.kind, Counter())[context.route] += 1
            misdeclared = plan.tool in MISDECLARED
            cause = "ambiguous_arguments" if plan.kind == AMBIGUOUS else (
                "misdeclared_tool" if misdeclared else "other")

            t0 = time.perf_counter_ns()
            naive_rejects, combined = naive.rejects(samples)
            t1 = time.perf_counter_ns()
            verdict = gate.evaluate(samples)
            t2 = time.perf_counter_ns()
            layer_verdict, layer_ns = _layer_verdict(guard, layer, context, plan, samples)
            for name, elapsed in (("naive", t1 - t0), ("record", t2 - t1), ("layer", layer_ns)):
                tallies[name].us.append(elapsed / 1e3 / len(samples))
            if plan.kind == HEALTHY and misdeclared and combined < 1.0:
                misdeclared_agreement.append(combined)
            tallies["naive"].add(plan.kind, cause, PlanDecision.REJECT if naive_rejects else PlanDecision.ACCEPT,
                                 "combined_agreement_low" if naive_rejects else "combined_agreement_ok", misdeclared)
            tallies["record"].add(plan.kind, cause, verdict.decision, verdict.reason, misdeclared)
            tallies["layer"].add(plan.kind, cause, layer_verdict.decision, layer_verdict.reason, misdeclared)
            if layer_verdict.decision is PlanDecision.REJECT and plan.kind != FABRICATED:
                layer_fp_by_route[f"{context.route}/{layer_verdict.reason}"] += 1
            if slip_styles:
                single = single_shot_grounding(layer_registry, context, samples[modal_index(samples, registry)])
                counts = by_style.setdefault(style if plan.kind == FABRICATED else plan.kind, Counter())
                counts["n"] += 1
                counts["layer_rejected"] += layer_verdict.decision is PlanDecision.REJECT
                counts["record_rejected"] += verdict.decision is PlanDecision.REJECT
                counts["single_shot_ungrounded"] += single == "ungrounded"
                counts["single_shot_partial"] += single == "partial"
            if layer_verdict.provenance is not None:
                counts = grounding.setdefault(plan.kind, Counter())
                for checked in layer_verdict.provenance.checked:
                    counts[checked.grounded_by or "ungrounded"] += 1

        naive_fig, record_fig, layer_fig = (tallies[name].figures(kinds) for name in ("naive", "record", "layer"))
        found = registry.misdeclared
        return {
            "naive_fp_share": naive_fig["fp_share"],
            "separated_fp_share": record_fig["fp_share"],
            "fabricated_recall_naive": naive_fig["fabricated_recall"],
            "fabricated_recall_separated": record_fig["fabricated_recall"],
            "fabricated_accepted_share": record_fig["fabricated_accepted_share"],
            "layer_fp_share": layer_fig["fp_share"],
            "fabricated_recall_layer": layer_fig["fabricated_recall"],
            "layer_fabricated_accepted_share": layer_fig["fabricated_accepted_share"],
            "misdeclared_found": found,
            "n_plans": n_plans,
            "added_us_per_sample": record_fig["us_per_sample"],
            "naive_us_per_sample": naive_fig["us_per_sample"],
            "layer_us_per_sample": layer_fig["us_per_sample"],
            "tool_us_per_sample": statistics.median(tool_us) if tool_us else None,
            "probe_ms": record_probe["ms"],
            "misdeclared_truth": list(MISDECLARED),
            "misdeclared_by_probe": by_probe,
            "misdeclared_by_quarantine": [t for t in found if t not in by_probe],
            "probes": probes,
            "probe_trials": trials,
            "layer_misdeclared_found": layer_registry.misdeclared,
            "n_samples_per_plan": n_samples,
            "n_in_scope": sum(kinds.values()),
            "n_out_of_scope": out_of_scope,
            "n_by_kind": dict(kinds),
            "naive_rejections": naive_fig["rejections"],
            "separated_rejections": record_fig["rejections"],
            "layer_rejections": layer_fig["rejections"],
            "separated_deferrals": record_fig["deferrals"],
            "naive_fp_by_cause": naive_fig["fp_by_cause"],
            "separated_fp_by_cause": record_fig["fp_by_cause"],
            "separated_missed_fabricated_by_reason": record_fig["missed_fabricated_by_reason"],
            "layer_fp_by_route": dict(layer_fp_by_route),
            "scorers": {"naive": naive_fig, "record": record_fig, "layer": layer_fig},
            "layer_grounding": {kind: dict(counts) for kind, counts in sorted(grounding.items())},
            "context_routes": {kind: dict(counts) for kind, counts in sorted(routes.items())},
            "n_recombined": recombined,
            "by_style": {style: dict(counts) for style, counts in sorted(by_style.items())},
            "misdeclared_combined_agreement": _quantiles(misdeclared_agreement),
            "tool_status": registry.statuses(),
            "layer_tool_status": layer_registry.statuses(),
            "background_changes": {"index_writes": sandbox.writer.changes, "config_reloads": sandbox.reloader.changes,
                                   "directory_syncs": sandbox.directory_sync.changes},
            "params": {"seed": seed, "fabricated_fraction": fabricated_fraction, "paraphrase_rate": paraphrase_rate,
                       "coincident_rate": coincident_rate, "gap_rate": gap_rate, "recombined_rate": recombined_rate,
                       "ambiguous_fraction": ambiguous_fraction, "naive_threshold": naive_threshold,
                       "model_latency_s": model_latency_s, "write_interval_s": write_interval_s,
                       "reload_interval_s": reload_interval_s, "thresholds": vars(gate.thresholds),
                       "probe_rounds": probe_rounds, "probe_interval_s": probe_interval_s},
            "wall_s": time.perf_counter() - started,
        }


def single_shot_grounding(registry: DeterminismRegistry, context: PlanContext, sample: PlanSample) -> str:
    """What provenance alone says of the call that would run: ``grounded``, ``partial`` (only part by part) or
    ``ungrounded``, against the episode's task and earlier results (no samples, no dry run)."""
    schema = registry.schema(sample.tool)
    seen = ProvenanceContext([context.task])
    seen.add_steps(context.steps())
    args = sample.args
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    docs = ProvenanceContext([schema.documentation]) if schema is not None and schema.documentation else None
    report = check_arguments(canonicalize(args, spelled=True), schema.arguments if schema else {}, seen, docs)
    if not report.grounded:
        return "ungrounded"
    return "grounded" if report.whole else "partial"


def _layer_verdict(guard: Guard, layer: SelfConsistencyLayer, context: PlanContext, plan: SampledPlan,
                   samples: list[PlanSample]) -> tuple[PlanVerdict, int]:
    """The full layer's verdict on one plan, through a Guard episode that holds the plan's task and earlier calls,
    and the nanoseconds the Guard's `before_action` took (the episode's own start, steps and finish not counted)."""
    ctx = guard.start_episode(task=context.task)
    try:
        for step in context.steps():
            guard.on_step(ctx, step)
        chosen = modal_index(samples, layer.gate.registry)
        call_id = f"plan-{plan.index}"
        layer.stage(ctx, samples, call_id=call_id)
        action = Action.tool_call(plan.tool, samples[chosen].args, call_id=call_id)
        started = time.perf_counter_ns()
        guard.before_action(ctx, action)
        return layer.verdicts(ctx)[-1], time.perf_counter_ns() - started
    finally:
        guard.on_finish(ctx)


SWEEP_PARAPHRASE = (0.0, 0.25, 0.5, 0.75)
SWEEP_COINCIDENT = (0.0, 0.25, 0.5)
SWEEP_GAP = (0.0, 0.05, 0.1, 0.2)
SWEEP_RECOMBINED = (0.5, 1.0)


def _point(figures: dict[str, Any], **where: float) -> dict[str, Any]:
    scorers = figures["scorers"]
    return {**where,
            "separated_fp_share": figures["separated_fp_share"],
            "fabricated_accepted_share": figures["fabricated_accepted_share"],
            "separated_rejections": figures["separated_rejections"],
            "separated_fp_by_cause": figures["separated_fp_by_cause"],
            "naive_fp_share": figures["naive_fp_share"],
            "naive_fabricated_accepted_share": scorers["naive"]["fabricated_accepted_share"],
            "layer_fp_share": figures["layer_fp_share"],
            "layer_fabricated_accepted_share": figures["layer_fabricated_accepted_share"],
            "layer_rejections": figures["layer_rejections"],
            "layer_fp_by_cause": scorers["layer"]["fp_by_cause"],
            "layer_fp_by_route": figures["layer_fp_by_route"],
            "layer_missed_fabricated_by_reason": scorers["layer"]["missed_fabricated_by_reason"],
            "n_by_kind": figures["n_by_kind"]}


def run_sweep(*, paraphrase_rates: Sequence[float] = SWEEP_PARAPHRASE,
              coincident_rates: Sequence[float] = SWEEP_COINCIDENT, n_plans: int = 1000,
              show_progress: bool = False, **options: Any) -> list[dict[str, Any]]:
    """Every scorer's figures at each (paraphrase rate, coincident-fabrication rate), same seed and sandbox."""
    points = []
    grid = [(p, c) for p in paraphrase_rates for c in coincident_rates]
    for paraphrase, coincident in progress(grid, desc="sweep", enabled=show_progress):
        figures = run_benchmark(n_plans=n_plans, paraphrase_rate=paraphrase, coincident_rate=coincident, **options)
        points.append(_point(figures, paraphrase_rate=paraphrase, coincident_rate=coincident))
    return points


def run_stress(*, name: str, rates: Sequence[float], paraphrase_rate: float, coincident_rate: float,
               n_plans: int = 1000, show_progress: bool = False, **options: Any) -> list[dict[str, Any]]:
    """One more knob swept at a fixed (paraphrase, coincident) point: `name` is ``gap_rate`` or ``recombined_rate``."""
    points = []
    for rate in progress(rates, desc=name, enabled=show_progress):
        knob: dict[str, Any] = {name: rate}
        figures = run_benchmark(n_plans=n_plans, paraphrase_rate=paraphrase_rate, coincident_rate=coincident_rate,
                                **knob, **options)
        point = _point(figures, paraphrase_rate=paraphrase_rate, coincident_rate=coincident_rate, **{name: rate})
        point["n_recombined"] = figures["n_recombined"]
        points.append(point)
    return points


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plans", type=int, default=4000, help="sampled plans (default 4000, as in the record)")
    parser.add_argument("--samples", type=int, default=5, help="candidates per plan, N (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fabricated", type=float, default=0.10, help="fraction of plans with fabricated arguments")
    parser.add_argument("--ambiguous", type=float, default=0.05,
                        help="fraction of plans whose arguments legitimately vary")
    parser.add_argument("--naive-threshold", type=float, default=0.80, help="combined agreement the naive scorer needs")
    parser.add_argument("--model-latency-s", type=float, default=2.5,
                        help="seconds one candidate takes to sample, on the user cache's clock (TTL 60 s)")
    parser.add_argument("--write-interval-ms", type=float, default=0.5, help="search index writer period")
    parser.add_argument("--reload-interval-ms", type=float, default=1.0, help="config reloader period")
    parser.add_argument("--paraphrase", type=float, default=0.0,
                        help="share of candidates that respell their values (number formats, paths, spaces)")
    parser.add_argument("--coincident", type=float, default=0.0,
                        help="chance a fabricated candidate repeats the plan's first invention")
    parser.add_argument("--gap", type=float, default=0.0,
                        help="share of real plans whose value appears nowhere in the episode the guard sees")
    parser.add_argument("--recombined", type=float, default=0.0,
                        help="share of fabricated plans built from parts of the episode (file names, numbers)")
    parser.add_argument("--probe-rounds", type=int, default=3, help="determinism probe rounds for the layer")
    parser.add_argument("--probe-interval-ms", type=float, default=20.0, help="time between probe rounds")
    parser.add_argument("--probe-trials", type=int, default=10,
                        help="repeat each probe variant this often on fresh registries (flag rates, median ms)")
    parser.add_argument("--sweep-paraphrase", type=float, nargs="*", default=list(SWEEP_PARAPHRASE),
                        help="paraphrase rates of the sweep (none: no sweep)")
    parser.add_argument("--sweep-coincident", type=float, nargs="*", default=list(SWEEP_COINCIDENT),
                        help="coincident-fabrication rates of the sweep")
    parser.add_argument("--sweep-gap", type=float, nargs="*", default=list(SWEEP_GAP),
                        help="context-gap rates swept at paraphrase 0.5, coincident 0.5 (none: skip)")
    parser.add_argument("--sweep-recombined", type=float, nargs="*", default=list(SWEEP_RECOMBINED),
                        help="recombined-fabrication rates swept at paraphrase 0.5, coincident 0.5 (none: skip)")
    parser.add_argument("--sweep-plans", type=int, default=1000, help="plans per sweep point (default 1000)")
    parser.add_argument("--slip-plans", type=int, default=1000,
                        help="plans of the slip point: 40%% fabricated, drawn the way models slip (same format, another "
                             "entity's value, recombined parts, a near miss), coincident 0.5 (default 1000; 0: skip)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")


def _run(args: argparse.Namespace) -> int:
    if min(args.model_latency_s, args.write_interval_ms, args.reload_interval_ms) <= 0:
        sys.stderr.write("guardrail bench consistency: latencies and intervals must be positive\n")
        return 2
    if args.plans < 1 or args.samples < 2:
        sys.stderr.write("guardrail bench consistency: --plans must be >= 1 and --samples >= 2\n")
        return 2
    if not (0.0 <= args.fabricated <= 1.0 and 0.0 <= args.ambiguous <= 1.0 - args.fabricated):
        sys.stderr.write("guardrail bench consistency: --fabricated and --ambiguous must be fractions summing to <= 1\n")
        return 2
    rates = [args.paraphrase, args.coincident, args.gap, args.recombined, *args.sweep_paraphrase,
             *args.sweep_coincident, *args.sweep_gap, *args.sweep_recombined]
    if not all(0.0 <= rate <= 1.0 for rate in rates) or args.sweep_plans < 1:
        sys.stderr.write("guardrail bench consistency: paraphrase, coincident, gap and recombined rates must be in "
                         "[0, 1], --sweep-plans >= 1\n")
        return 2
    if args.probe_rounds < 2 or args.probe_interval_ms < 0:
        sys.stderr.write("guardrail bench consistency: --probe-rounds must be >= 2 and --probe-interval-ms >= 0\n")
        return 2
    options = {"n_samples": args.samples, "seed": args.seed, "fabricated_fraction": args.fabricated,
               "ambiguous_fraction": args.ambiguous, "naive_threshold": args.naive_threshold,
               "model_latency_s": args.model_latency_s, "write_interval_s": args.write_interval_ms / 1e3,
               "reload_interval_s": args.reload_interval_ms / 1e3, "probe_rounds": args.probe_rounds,
               "probe_interval_s": args.probe_interval_ms / 1e3}
    figures = run_benchmark(n_plans=args.plans, paraphrase_rate=args.paraphrase, coincident_rate=args.coincident,
                            gap_rate=args.gap, recombined_rate=args.recombined, probe_trials=args.probe_trials,
                            show_progress=not args.json, **options)
    figures["sweep"] = run_sweep(paraphrase_rates=args.sweep_paraphrase,
                                 coincident_rates=args.sweep_coincident if args.sweep_paraphrase else [],
                                 n_plans=args.sweep_plans, show_progress=not args.json, **options)
    figures["gap_sweep"] = run_stress(name="gap_rate", rates=args.sweep_gap, paraphrase_rate=0.5, coincident_rate=0.5,
                                      n_plans=args.sweep_plans, show_progress=not args.json, **options)
    # The search index honest (writer stopped) and ambiguous plans six times as common: paraphrased queries judged.
    quiet = {**options, "write_interval_s": None, "ambiguous_fraction": min(0.30, 1.0 - args.fabricated)}
    figures["free_text_point"] = _point(run_benchmark(n_plans=args.sweep_plans, paraphrase_rate=0.5,
                                                      coincident_rate=0.5, **quiet),
                                        paraphrase_rate=0.5, coincident_rate=0.5)
    figures["free_text_point"].update(search_index_writer="stopped", ambiguous_fraction=quiet["ambiguous_fraction"])
    figures["recombined_sweep"] = run_stress(name="recombined_rate", rates=args.sweep_recombined, paraphrase_rate=0.5,
                                             coincident_rate=0.5, n_plans=args.sweep_plans,
                                             show_progress=not args.json, **options)
    if args.slip_plans > 0:
        slip = run_benchmark(n_plans=args.slip_plans, coincident_rate=0.5, slip_styles=STYLES,
                             **{**options, "fabricated_fraction": 0.4}, show_progress=not args.json)
        figures["slip_point"] = {**_point(slip, paraphrase_rate=0.0, coincident_rate=0.5), "fabricated_fraction": 0.4,
                                 "by_style": slip["by_style"]}
    if args.json:
        emit_json(figures)
        return 0
    scorers = figures["scorers"]
    print_table([{"scorer": label, "rejections": scorers[name]["rejections"], "fp_share": scorers[name]["fp_share"],
                  "fabricated_recall": scorers[name]["fabricated_recall"],
                  "fabricated_accepted": scorers[name]["fabricated_accepted_share"],
                  "us_per_sample": scorers[name]["us_per_sample"]}
                 for name, label in (("naive", "naive (combined)"), ("record", "record rule (separated)"),
                                     ("layer", "layer (per-argument + provenance)"))])
    print(f"\nmis-declared tools found: {figures['misdeclared_found']} "
          f"(probe: {figures['misdeclared_by_probe']}, quarantine: {figures['misdeclared_by_quarantine']}; "
          f"truth: {figures['misdeclared_truth']})")
    print("probes: " + "; ".join(f"{name}: {p['misdeclared']} in {p['ms']:.1f} ms"
                                 for name, p in figures["probes"].items()))
    for name, trial in figures["probe_trials"].items():
        print(f"  {name}: flagged {trial['flagged']} of {trial['trials']} trials "
              f"(honest tools flagged {trial['honest_flagged']}), median {trial['median_ms']:.1f} ms")
    print(f"plans: {figures['n_plans']} ({figures['n_by_kind']}, {figures['n_out_of_scope']} out of scope), "
          f"wall {figures['wall_s']:.1f} s")
    columns = ("paraphrase_rate", "coincident_rate", "separated_fp_share", "fabricated_accepted_share",
               "layer_fp_share", "layer_fabricated_accepted_share")
    tables = (("sweep", figures["sweep"], ()), ("gap_sweep", figures["gap_sweep"], ("gap_rate",)),
              ("recombined_sweep", figures["recombined_sweep"], ("recombined_rate",)),
              ("free_text_point (search index writer stopped)", [figures["free_text_point"]], ()))
    for title, points, extra in tables:
        if points:
            print(f"\n{title} (record rule: separated_*, fabricated_accepted_share; full layer: layer_*):")
            print_table([{k: point[k] for k in (*extra, *columns)} for point in points])
    if "slip_point" in figures:
        print("\nslip_point (fabrications drawn the way models slip; per style: plans, rejected by the layer and by the "
              "record rule, ungrounded / only partly grounded for single-shot provenance):")
        print_table([{"style": style, **counts} for style, counts in figures["slip_point"]["by_style"].items()])
    return 0


BENCH = Command(
    help="self-consistency gate: naive combined agreement vs the record's rule vs the full layer (provenance)",
    add_arguments=_add_arguments,
    run=_run,
)
