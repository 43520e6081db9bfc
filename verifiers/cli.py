"""`guardrail verify CORPUS_DIR [--spec SPEC] --json`: run the deterministic checks over a recorded corpus."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table
from guardrail.core.corpus import CorpusError, read_corpus, read_episodes
from guardrail.core.engine import add_engine_arguments, engine_from_args
from guardrail.core.events import Episode
from guardrail.core.runstore import absolute_location
from verifiers.offline import verify_episode
from verifiers.spec import CHECKS, SpecError, VerifierSpec, load_spec, pick_spec

__all__ = ["VERIFY", "corpus_spec", "shards_for", "verify_shard"]

SHARD_SIZE = 32  # episodes per unit of batch work (small enough to spread, large enough to amortise the read)


def corpus_spec(episodes: Iterable[Episode]) -> VerifierSpec:
    """The shipped spec for a corpus, picked from every tool its episodes used and their task texts."""
    tools: set[str] = set()
    tasks: list[str] = []
    for episode in episodes:
        tools.update(episode.tools)
        tools.update(event.name for step in episode.steps for event in step.tool_events)
        if episode.task:
            tasks.append(episode.task)
    return pick_spec(tools, tasks)


def shards_for(corpus: str, episode_ids: list[str], spec: str, size: int = SHARD_SIZE) -> list[dict[str, Any]]:
    """JSON-able shard descriptors: which corpus, which episodes, which spec (a file path or shipped name)."""
    return [{"corpus": corpus, "episode_ids": episode_ids[i:i + size], "spec": spec}
            for i in range(0, len(episode_ids), size)]


def verify_shard(shard: dict[str, Any]) -> list[dict[str, Any]]:
    """Verify one shard's episodes (top-level and JSON in, JSON out, so any engine can run it)."""
    spec = load_spec(shard["spec"])
    return [verify_episode(episode, spec).to_json() for episode in read_episodes(shard["corpus"], shard["episode_ids"])]


def _add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", help="corpus directory (guardrail or sentinel format)")
    parser.add_argument("--spec", default=None,
                        help="spec file (.json/.toml) or shipped spec name; default: picked from the corpus's tools")
    parser.add_argument("--json", action="store_true", help="one JSON object per episode")
    add_engine_arguments(parser)


def _run(args: argparse.Namespace) -> int:
    try:
        corpus = read_corpus(args.corpus)
        spec = load_spec(args.spec) if args.spec else corpus_spec(corpus.episodes)
    except (CorpusError, SpecError) as exc:
        sys.stderr.write(f"guardrail verify: {exc}\n")
        return 2
    for issue in corpus.issues:
        sys.stderr.write(f"guardrail verify: problem reading the corpus: {issue}\n")
    spec_ref = args.spec if args.spec else spec.name
    shards = shards_for(absolute_location(args.corpus), [e.episode_id for e in corpus.episodes], spec_ref)
    with engine_from_args(args) as engine:
        results = engine.map(verify_shard, shards)
    records = [record for shard in results for record in shard]
    if args.json:
        for record in records:
            emit_json(record)
    else:
        print(f"{corpus.name}: {len(records)} episode(s), spec {spec.name!r}")
        print_table([{"check": check, "flagged": sum(r["flags"][check] for r in records),
                      "episodes": len(records)} for check in CHECKS])
    return 1 if corpus.issues else 0


VERIFY = Command(help="run the deterministic verifiers (totals, coverage, contracts, grounding, completion) "
                      "over a corpus", add_arguments=_add, run=_run)
