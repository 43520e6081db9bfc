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
COMMANDS: dict[str, str] = {
    "inspect": "guardrail.corpus_cli:INSPECT",
    "demo": "guardrail.demo:DEMO",
    "check": "guardrail.statemirror.cli:CHECK",
    "collect": "traces.cli:COLLECT",
    "fit": "monitors.cli:FIT",
    "score": "monitors.cli:SCORE",
    "verify": "verifiers.cli:VERIFY",
    "report": "guardrail.report:REPORT",
    "audit-traj": "adapters.swe_agent:AUDIT_TRAJ",
}

# `guardrail bench NAME`: the benchmarks, each a Command as well.
BENCHMARKS: dict[str, str] = {
    "gate": "guardrail.statemirror.bench:BENCH",
    "monitor": "monitors.bench:BENCH",
    "verify": "verifiers.bench:BENCH",
    "consistency": "guardrail.consistency_bench:BENCH",
    "repair": "repair.bench:BENCH",
    "overhead": "adapters.bench:BENCH",
    "load": "guardrail.load_bench:BENCH",
    "scale": "guardrail.scale_bench:BENCH",
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
    for name, target in COMMANDS.items():
        if name == wanted:
            resolved[name] = _resolve(target)
            cmd = resolved[name]
            sub = subparsers.add_parser(name, help=cmd.help if isinstance(cmd, Command) else cmd)
            if isinstance(cmd, Command):
                cmd.add_arguments(sub)
        else:
            subparsers.add_parser(name, help=f"(see guardrail {name} --help)")
    bench = subparsers.add_parser("bench", help="benchmarks: " + ", ".join(BENCHMARKS))
    bench_sub = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    bench_wanted = None
    if wanted == "bench":
        rest = argv[list(argv).index("bench") + 1:]
        bench_wanted = next((a for a in rest if not a.startswith("-")), None)
    for name, target in BENCHMARKS.items():
        if name == bench_wanted:
            resolved["bench " + name] = _resolve(target)
            cmd = resolved["bench " + name]
            sub = bench_sub.add_parser(name, help=cmd.help if isinstance(cmd, Command) else cmd)
            if isinstance(cmd, Command):
                cmd.add_arguments(sub)
        else:
            bench_sub.add_parser(name, help=f"(see guardrail bench {name} --help)")
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
