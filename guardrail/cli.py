"""The `guardrail` command line: a registry of subcommands, each imported only when it runs."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from guardrail import __version__
from guardrail.cliutil import Command

__all__ = ["main", "COMMANDS", "BENCHMARKS"]

# name -> "module:attribute" holding a Command. Adding a command is one line here plus its module.
COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("guardrail.corpus_cli:INSPECT", "list a corpus's episodes, labels and corrupt lines"),
    "demo": ("guardrail.demo:DEMO", "run the whole guard on scripted LangGraph and AutoGen agents"),
    "check": ("guardrail.statemirror.cli:CHECK", "gate one proposed action (or a batch) against a workspace"),
    "collect": ("traces.cli:COLLECT", "collect a testbed corpus from real framework agents"),
    "fit": ("monitors.cli:FIT", "fit the step monitor on healthy episodes"),
    "score": ("monitors.cli:SCORE", "score episodes with a fitted monitor"),
    "verify": ("verifiers.cli:VERIFY", "run the deterministic verifiers over a corpus"),
    "report": ("guardrail.report:REPORT", "HTML report with score plots, findings and a summary"),
    "audit-traj": ("adapters.swe_agent:AUDIT_TRAJ", "gate every action of a recorded SWE-agent .traj"),
}

# `guardrail bench NAME`: the benchmarks, each a Command as well.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "gate": ("guardrail.statemirror.bench:BENCH", "gate precision/recall/latency on real projects"),
    "monitor": ("monitors.bench:BENCH", "monitor AUROC/detection/FA on corpora, vs published"),
    "verify": ("verifiers.bench:BENCH", "verifier catch rates and healthy false positives"),
    "consistency": ("guardrail.consistency_bench:BENCH", "naive vs separated self-consistency gate"),
    "repair": ("repair.bench:BENCH", "repair rungs vs the resample control"),
    "overhead": ("adapters.bench:BENCH", "added time per step, guarded vs unguarded"),
    "load": ("guardrail.load_bench:BENCH", "steps/s and memory at 1/8/64 concurrent episodes"),
    "scale": ("guardrail.scale_bench:BENCH", "scoring throughput on 1/2/4 Dask workers vs local"),
    "coding": ("traces.coding.bench:BENCH", "coding testbed: report vs intervene with the gate on a real sdist"),
}


def _resolve(target: str) -> Command | str:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module_name or module_name.startswith(exc.name + ".")):
            return f"not available in this build ({module_name} is not installed)"
        return f"cannot load {module_name}: missing dependency {exc.name!r} (pip install it, or the project's extras)"
    command = getattr(module, attr, None)
    if not isinstance(command, Command):
        return f"{target} is not a guardrail Command"
    return command


def _build_parser(argv: Sequence[str]) -> tuple[argparse.ArgumentParser, dict[str, Command | str]]:
    parser = argparse.ArgumentParser(
        prog="guardrail",
        description="A runtime guard for LLM agents: gate, monitor, verify, repair.",
    )
    parser.add_argument("--version", action="version", version=f"guardrail {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Import only the command actually asked for (fast startup, no heavy imports for --help).
    wanted = next((a for a in argv if not a.startswith("-")), None)
    resolved: dict[str, Command | str] = {}
    for name, (target, summary) in COMMANDS.items():
        if name == wanted:
            resolved[name] = _resolve(target)
            cmd = resolved[name]
            sub = subparsers.add_parser(name, help=cmd.help if isinstance(cmd, Command) else cmd)
            if isinstance(cmd, Command):
                cmd.add_arguments(sub)
        else:
            subparsers.add_parser(name, help=summary)
    bench = subparsers.add_parser("bench", help="benchmarks: " + ", ".join(BENCHMARKS))
    bench_sub = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    bench_wanted = None
    if wanted == "bench":
        rest = argv[list(argv).index("bench") + 1:]
        bench_wanted = next((a for a in rest if not a.startswith("-")), None)
    for name, (target, summary) in BENCHMARKS.items():
        if name == bench_wanted:
            resolved["bench " + name] = _resolve(target)
            cmd = resolved["bench " + name]
            sub = bench_sub.add_parser(name, help=cmd.help if isinstance(cmd, Command) else cmd)
            if isinstance(cmd, Command):
                cmd.add_arguments(sub)
        else:
            bench_sub.add_parser(name, help=summary)
    return parser, resolved


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    # `check` takes the action after `--`; keep it out of the subcommand lookup.
    lookup = args_in[: args_in.index("--")] if "--" in args_in else args_in
    parser, resolved = _build_parser(lookup)
    args = parser.parse_args(args_in)
    if not args.command:
        parser.print_help()
        return 2
    key = args.command if args.command != "bench" else f"bench {getattr(args, 'benchmark', None)}"
    if args.command == "bench" and not getattr(args, "benchmark", None):
        parser.parse_args(["bench", "--help"])
        return 2
    command = resolved.get(key)
    if not isinstance(command, Command):
        sys.stderr.write(f"guardrail {key}: {command}\n")
        return 2
    try:
        return int(command.run(args) or 0)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
