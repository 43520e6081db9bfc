"""`guardrail fit-spec CORPUS... -o SPEC`: infer a verifier spec from the corpora's healthy episodes and write it."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from guardrail.core.cliutil import Command, emit_json, print_table
from guardrail.core.corpus import CorpusError, read_corpus, read_episodes
from guardrail.core.engine import add_engine_arguments, engine_from_args
from guardrail.core.events import HEALTHY, Episode
from guardrail.core.runstore import StoreError, absolute_location, is_store_url, open_store
from verifiers.fit import DEFAULT_MAX_CHANCE, DEFAULT_MIN_SUPPORT, DEFAULT_SUPPORT, FitResult, fit_spec_report
from verifiers.spec import dump_spec

__all__ = ["FIT_SPEC", "read_labels", "read_shard"]

SHARD_SIZE = 64  # episodes a worker reads from a store per unit of work


def read_labels(path: Path) -> dict[str, str]:
    """episode_id -> label from a CSV with those two columns (the sentinel organic label files have them)."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or not {"episode_id", "label"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: needs columns episode_id and label (has {reader.fieldnames})")
        return {row["episode_id"]: row["label"] for row in reader}


def _add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", nargs="+", help="corpus directories (guardrail or sentinel format)")
    parser.add_argument("-o", "--output", required=True, type=Path, help="where to write the fitted spec (JSON)")
    parser.add_argument("--labels", type=Path, default=None,
                        help="CSV of episode_id,label overriding the corpora's own labels (only 'healthy' is fitted on)")
    parser.add_argument("--min-support", type=int, default=DEFAULT_MIN_SUPPORT,
                        help=f"runs (or results) a rule must hold on; smaller families get generic (default "
                             f"{DEFAULT_MIN_SUPPORT})")
    parser.add_argument("--holdout", type=float, default=0.2,
                        help="share of each family's healthy runs kept out of the fit and checked, held out by entity: "
                             "runs about cities, SKUs, contacts no fitting run saw (default 0.2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    parser.add_argument("--max-chance", type=float, default=DEFAULT_MAX_CHANCE,
                        help="highest share of shuffled runs a totals relation may hold on (default "
                             f"{DEFAULT_MAX_CHANCE})")
    parser.add_argument("--support", type=float, default=DEFAULT_SUPPORT,
                        help="least share of a family's healthy runs a rule must hold on; the runs it fails on are "
                             f"listed by id (default {DEFAULT_SUPPORT})")
    parser.add_argument("--name", default="fitted", help="the spec's name (variants are named after it)")
    parser.add_argument("--json", action="store_true", help="print the per-family report as one JSON object")
    add_engine_arguments(parser)


def _report(result: FitResult, output: Path, as_json: bool) -> None:
    if as_json:
        emit_json({"spec": str(output), "messages": result.messages,
                   "families": [vars(family) for family in result.families]})
        return
    for message in result.messages:
        print(message)
    print_table([{"family": f.name, "healthy_fit": f.healthy_fit, "held_out": f.held_out,
                  "held_out_flagged": f"{f.held_out_flagged.get('any', 0)}/{f.held_out}" if f.held_out else "-",
                  "checks": ",".join(f.checks)} for f in result.families])
    for family in result.families:
        print(f"\n{family.name}: {family.template}")
        for message in family.messages:
            print(f"  - {message}")
        rates = {rule: rate for rule, rate in family.held_out_rates.items() if rule != "any"}
        if rates:
            print("  held-out healthy runs flagged, per rule (held out by entity): "
                  + ", ".join(f"{rule} {rate:.1%}" for rule, rate in sorted(rates.items())))
        for rule, ids in family.exceptions.items():
            print(f"  ! {len(ids)} healthy run(s) break {rule}: {', '.join(ids)}; relabel them or keep the rule off")
    print(f"\nwrote {output}")


def read_shard(shard: dict[str, object]) -> list[dict[str, object]]:
    """One shard of a store's episodes as JSON (top-level and JSON in, JSON out, so any engine can run it)."""
    return [e.model_dump(mode="json") for e in read_episodes(str(shard["corpus"]), list(shard["ids"]))]  # type: ignore[call-overload]


def _store_episodes(path: str, engine: object, labelled: bool) -> list[Episode]:
    """A store's episodes read by the engine's workers: only the healthy ones unless a labels file decides."""
    with open_store(path, create=False) as store:
        ids = [s.episode_id for s in store.summaries() if labelled or s.label == HEALTHY]
    where = absolute_location(path)
    shards = [{"corpus": where, "ids": ids[i:i + SHARD_SIZE]} for i in range(0, len(ids), SHARD_SIZE)]
    return [Episode.model_validate(e) for rows in engine.map(read_shard, shards) for e in rows]  # type: ignore[attr-defined]


def _run(args: argparse.Namespace) -> int:
    try:
        labels = read_labels(args.labels) if args.labels else None
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"guardrail fit-spec: cannot read labels: {exc}\n")
        return 2
    episodes: list[Episode] = []
    problems = 0
    distributed = (getattr(args, "engine", "local") or "local") != "local"
    engine = engine_from_args(args) if distributed else None
    for path in args.corpus:
        try:
            if engine is not None and is_store_url(path):  # a fleet's store, read on the cluster
                corpus_episodes = _store_episodes(path, engine, labelled=labels is not None)
            else:
                corpus = read_corpus(path)
                corpus_episodes = corpus.episodes
                for issue in corpus.issues:
                    problems += 1
                    sys.stderr.write(f"guardrail fit-spec: problem reading the corpus: {issue}\n")
        except (CorpusError, StoreError) as exc:
            sys.stderr.write(f"guardrail fit-spec: {exc}\n")
            if engine is not None:
                engine.close()
            return 2
        for episode in corpus_episodes:
            if labels is not None:
                if episode.episode_id not in labels:
                    continue  # an unlabelled episode is not known to be healthy
                episode = episode.model_copy(update={"label": labels[episode.episode_id]})
            episodes.append(episode)
    if engine is not None:
        engine.close()
    if not 0.5 <= args.support <= 1.0:
        sys.stderr.write(f"guardrail fit-spec: --support must be between 0.5 and 1, got {args.support}\n")
        return 2
    result = fit_spec_report(episodes, name=args.name, min_support=args.min_support, holdout=args.holdout,
                             seed=args.seed, max_chance=args.max_chance, support=args.support)
    try:
        args.output.write_text(dump_spec(result.spec), encoding="utf-8")
    except OSError as exc:
        sys.stderr.write(f"guardrail fit-spec: cannot write {args.output}: {exc.strerror or exc}\n")
        return 2
    _report(result, args.output, args.json)
    return 1 if problems else 0


FIT_SPEC = Command(help="infer a verifier spec (contracts, coverage, totals, grounding) from healthy episodes, "
                        "per task family, and write it", add_arguments=_add, run=_run)
