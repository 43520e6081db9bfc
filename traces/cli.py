"""`guardrail collect`: collect a labelled corpus from the testbed's real agents into a directory."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table

__all__ = ["COLLECT", "MODEL"]


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
                        help="scripted (default), local:smollm2 (the project's own model server, started for the run "
                             "unless --endpoint names a running one), openai:NAME (any OpenAI-compatible endpoint) "
                             "or ollama:NAME")
    parser.add_argument("--endpoint", default=None, help="base URL of the model server (with --model)")
    parser.add_argument("--temperature", type=float, default=0.2, help="sampling temperature of a real model (0.2)")
    parser.add_argument("--max-steps", type=int, default=4, help="model calls per episode at most, real model (4)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads of a started local server (1)")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted collection of the same command in -o (done episodes are kept)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


@contextmanager
def _model(args: argparse.Namespace) -> Iterator[Any]:
    """None (scripted), or an `EndpointSpec`; ``local:`` without --endpoint starts the model server for the run."""
    if args.model == "scripted":
        yield None
        return
    from traces.model_server import running_server
    from traces.models import EndpointSpec

    EndpointSpec(args.model)  # a bad name fails here, before a server starts
    if args.model.startswith("local:") or args.endpoint:
        with running_server(args.endpoint, threads=args.threads) as (base_url, info):
            yield EndpointSpec(args.model, base_url, temperature=args.temperature, max_steps=args.max_steps,
                               server=info)
        return
    yield EndpointSpec(args.model, None, temperature=args.temperature, max_steps=args.max_steps)


def _run(args: argparse.Namespace) -> int:
    from traces.collect import write_collected

    if args.n < 1:
        sys.stderr.write("guardrail collect: --n must be at least 1\n")
        return 2
    if not 0.0 <= args.healthy_share <= 1.0:
        sys.stderr.write("guardrail collect: --healthy-share must be between 0 and 1\n")
        return 2
    started = time.perf_counter()
    try:
        with _model(args) as model:
            manifest = write_collected(args.out, args.framework, args.n, args.seed, classes=args.classes,
                                       healthy_share=args.healthy_share, name=args.name, show_progress=not args.quiet,
                                       model=model, model_name="scripted-policy" if model is None else args.model,
                                       resume=args.resume)
    except (ValueError, RuntimeError) as exc:
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


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    from traces.model_server import add_serve_arguments

    actions = parser.add_subparsers(dest="model_action", metavar="ACTION", required=True)
    add_serve_arguments(actions.add_parser("serve", help="serve the local model (OpenAI API) on loopback"))
    actions.add_parser("info", help="where the model file is, its sha256, and whether llama-cpp-python loads")


def _run_model(args: argparse.Namespace) -> int:
    from traces.model_server import INSTALL_HINT, ModelUnavailable, file_sha256, run_serve, shipped_model_path

    if args.model_action == "serve":
        return run_serve(args)
    try:
        path = shipped_model_path()
        import llama_cpp  # noqa: F401 - only whether it loads
    except (ModelUnavailable, ImportError) as exc:
        sys.stderr.write(f"guardrail model: {exc}\n" if isinstance(exc, ModelUnavailable)
                         else f"guardrail model: llama-cpp-python is not installed: {INSTALL_HINT}\n")
        return 2
    emit_json({"model_file": str(path), "model_sha256": file_sha256(path), "bytes": path.stat().st_size})
    return 0


MODEL = Command(help="the local model: `guardrail model serve` (OpenAI API on loopback), `guardrail model info`",
                add_arguments=_add_model_arguments, run=_run_model)
