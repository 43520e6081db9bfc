"""`guardrail collect`: collect a labelled corpus from the testbed's real agents into a directory."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from guardrail.core.cliutil import Command, emit_json, print_table

__all__ = ["COLLECT"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    from traces.collect import ALL_CLASSES, FRAMEWORKS

    parser.add_argument("--framework", choices=FRAMEWORKS, required=True, help="which real agent runs the tasks")
    parser.add_argument("--n", type=int, required=True, help="episodes to request (rejected ones are listed, not kept)")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed: the same seed gives the same corpus")
    parser.add_argument("-o", "--out", required=True, help="corpus directory to write (manifest.json + JSONL)")
    parser.add_argument("--classes", nargs="+", default=list(ALL_CLASSES), metavar="CLASS",
                        help=f"labels to request (default: all of {', '.join(ALL_CLASSES)})")
    parser.add_argument("--healthy-share", type=float, default=0.4, help="share of healthy requests (default 0.4)")
    parser.add_argument("--name", default=None, help="corpus name in the manifest (default: the directory name)")
    parser.add_argument("--model", default="scripted",
                        help="scripted (default), openai:NAME (any OpenAI-compatible endpoint) or ollama:NAME")
    parser.add_argument("--endpoint", default=None, help="base URL of the model server (with --model)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _run(args: argparse.Namespace) -> int:
    from traces.collect import write_collected

    if args.n < 1:
        sys.stderr.write("guardrail collect: --n must be at least 1\n")
        return 2
    if not 0.0 <= args.healthy_share <= 1.0:
        sys.stderr.write("guardrail collect: --healthy-share must be between 0 and 1\n")
        return 2
    model = None
    if args.model != "scripted":
        from traces.models import endpoint_model

        try:
            model = endpoint_model(args.framework, args.model, args.endpoint)
        except (ValueError, RuntimeError) as exc:
            sys.stderr.write(f"guardrail collect: {exc}\n")
            return 2
    started = time.perf_counter()
    try:
        manifest = write_collected(args.out, args.framework, args.n, args.seed, classes=args.classes,
                                   healthy_share=args.healthy_share, name=args.name, show_progress=not args.quiet,
                                   model=model, model_name="scripted-policy" if model is None else args.model)
    except ValueError as exc:
        sys.stderr.write(f"guardrail collect: {exc}\n")
        return 2
    elapsed = time.perf_counter() - started
    labels = Counter(e.label for e in manifest.episodes)
    summary = {"out": args.out, "framework": args.framework, "seed": args.seed, "requested": args.n,
               "kept": len(manifest.episodes), "rejected": len(manifest.rejected), "labels": dict(sorted(labels.items())),
               "seconds": round(elapsed, 2)}
    if args.json:
        emit_json(summary)
    else:
        print_table([{"label": k, "episodes": v} for k, v in sorted(labels.items())])
        print(f"{len(manifest.episodes)} kept, {len(manifest.rejected)} rejected (reasons in manifest.json), "
              f"written to {args.out} in {elapsed:.1f} s")
    return 0


COLLECT = Command(help="collect a labelled corpus from the testbed's LangGraph or AutoGen agent",
                  add_arguments=_add_arguments, run=_run)
