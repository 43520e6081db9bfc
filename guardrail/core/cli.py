"""The `guardrail` command line: commands registered by the installed distributions, each imported only when it runs.

A distribution adds commands by naming a command table in its entry points::

    [project.entry-points."guardrail.cli"]
    product = "guardrail.app.commands:TABLE"

A table is a plain mapping of `CommandSpec`s (strings only, cheap to import), so ``guardrail --help``
lists every command without importing any of them, and the core never imports what lies above it:
the product's commands and the testbed's benchmarks arrive the same way a third party's would.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Literal

from guardrail.core.cliutil import Command
from guardrail.core.version import version

__all__ = ["ENTRY_POINT_GROUP", "CommandSpec", "load_tables", "main"]

ENTRY_POINT_GROUP = "guardrail.cli"


@dataclass(frozen=True)
class CommandSpec:
    """Where a command lives (``"module:attribute"`` holding a `Command`), its one-line summary, and its group."""

    target: str
    summary: str
    group: Literal["command", "bench"] = "command"
    distribution: str = "guardrail"  # what to install when the target cannot load


def load_tables(entry_points: Iterable[metadata.EntryPoint] | None = None) -> tuple[dict[str, CommandSpec],
                                                                                   dict[str, CommandSpec], list[str]]:
    """Every registered command and benchmark, plus one message per table that could not load."""
    commands: dict[str, CommandSpec] = {}
    benchmarks: dict[str, CommandSpec] = {}
    problems: list[str] = []
    found = entry_points if entry_points is not None else metadata.entry_points(group=ENTRY_POINT_GROUP)
    for entry in sorted(found, key=lambda e: e.name):
        try:
            table = entry.load()
        except Exception as exc:  # noqa: BLE001 - one broken table must not hide the others
            problems.append(f"command table {entry.name!r} ({entry.value}) cannot load: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(table, Mapping):
            problems.append(f"command table {entry.name!r} ({entry.value}) is not a mapping of CommandSpec")
            continue
        for name, spec in table.items():
            if not isinstance(spec, CommandSpec):
                problems.append(f"command {name!r} in table {entry.name!r} is not a CommandSpec")
                continue
            target = benchmarks if spec.group == "bench" else commands
            if name in target:
                problems.append(f"command {name!r} of table {entry.name!r} is registered twice; the first one wins")
                continue
            target[name] = spec
    return commands, benchmarks, problems


def _resolve(spec: CommandSpec) -> Command | str:
    module_name, _, attr = spec.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module_name or module_name.startswith(exc.name + ".")):
            return f"not available in this build ({module_name} is not installed: pip install {spec.distribution})"
        return (f"cannot load {module_name}: missing dependency {exc.name!r} "
                f"(pip install {spec.distribution}, or the extra that brings it)")
    command = getattr(module, attr, None)
    if not isinstance(command, Command):
        return f"{spec.target} is not a guardrail Command"
    return command


def _add(subparsers: argparse._SubParsersAction, name: str, spec: CommandSpec, wanted: str | None,
         resolved: dict[str, Command | str], key: str) -> None:
    if name != wanted:
        subparsers.add_parser(name, help=spec.summary)
        return
    resolved[key] = _resolve(spec)
    command = resolved[key]
    sub = subparsers.add_parser(name, help=command.help if isinstance(command, Command) else command)
    if isinstance(command, Command):
        command.add_arguments(sub)


def _build_parser(argv: Sequence[str], commands: Mapping[str, CommandSpec], benchmarks: Mapping[str, CommandSpec]
                  ) -> tuple[argparse.ArgumentParser, dict[str, Command | str]]:
    parser = argparse.ArgumentParser(
        prog="guardrail",
        description="A runtime guard for LLM agents: gate, monitor, verify, repair.",
    )
    parser.add_argument("--version", action="version", version=f"guardrail {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Import only the command actually asked for (fast startup, no heavy imports for --help).
    wanted = next((a for a in argv if not a.startswith("-")), None)
    resolved: dict[str, Command | str] = {}
    for name, spec in commands.items():
        _add(subparsers, name, spec, wanted, resolved, name)
    bench = subparsers.add_parser("bench", help="benchmarks: " + (", ".join(benchmarks) or "none installed"))
    bench_sub = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    bench_wanted = None
    if wanted == "bench":
        rest = argv[list(argv).index("bench") + 1:]
        bench_wanted = next((a for a in rest if not a.startswith("-")), None)
    for name, spec in benchmarks.items():
        _add(bench_sub, name, spec, bench_wanted, resolved, "bench " + name)
    return parser, resolved


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    commands, benchmarks, problems = load_tables()
    for problem in problems:
        sys.stderr.write(f"guardrail: {problem}\n")
    # `check` takes the action after `--`; keep it out of the subcommand lookup.
    lookup = args_in[: args_in.index("--")] if "--" in args_in else args_in
    parser, resolved = _build_parser(lookup, commands, benchmarks)
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
    # Run as `python -m guardrail.core.cli`, this file is `__main__`: the tables' CommandSpec is the
    # imported module's class, so dispatch through that module, not this copy.
    from guardrail.core.cli import main as _main

    raise SystemExit(_main())
