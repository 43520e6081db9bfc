"""`guardrail import SOURCE ... -o STORE`: LangGraph checkpoints, OpenTelemetry span files and agent trajectories into a run store."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator

from guardrail.app.importers.store import Imported, ImportReport, import_into, safe_url
from guardrail.core.cliutil import Command, emit_json
from guardrail.core.runstore import StoreError

__all__ = ["IMPORT"]

_SHOWN = 100  # problems printed one per line (--json lists every one)


def _store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", required=True, metavar="STORE",
                        help="the run store to import into: a directory, sqlite:///PATH or postgresql://...")
    parser.add_argument("--json", action="store_true", help="print the outcome as one JSON object")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    sources = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)
    langgraph = sources.add_parser("langgraph", help="every thread a LangGraph checkpointer persisted")
    langgraph.add_argument("--checkpointer", required=True, metavar="URL",
                           help="the app's checkpointer: sqlite:///PATH or postgresql://... (opened read-only)")
    _store_option(langgraph)
    otlp = sources.add_parser("otlp", help="OpenTelemetry GenAI spans (OTLP JSON lines, SDK console output, records)")
    otlp.add_argument("file", nargs="+", help="span files (e.g. what a collector's file exporter wrote)")
    otlp.add_argument("--framework", default=None,
                      help="the framework to record (default: the spans' gen_ai.system / gen_ai.provider.name)")
    _store_option(otlp)
    for name, what in (("traj", "SWE-agent (v0, 1.x) or mini-swe-agent trajectories, told apart per file"),
                       ("swe-agent", "SWE-agent .traj files (v0 and 1.x)"),
                       ("mini-swe-agent", "mini-swe-agent trajectory files")):
        sub = sources.add_parser(name, help=what)
        sub.add_argument("file", nargs="+", help="trajectory files, or directories searched for *.traj / *.traj.json")
        _store_option(sub)


def _items(args: argparse.Namespace) -> tuple[Callable[[], Iterator[Imported]], str, dict[str, str]]:
    """What to read, what the episodes say they were imported from, and the source to stamp on them."""
    if args.source == "langgraph":
        from guardrail.app.importers.langgraph import langgraph_episodes

        return (lambda: langgraph_episodes(args.checkpointer)), "langgraph", {"source": safe_url(args.checkpointer)}
    if args.source == "otlp":
        from guardrail.app.importers.otlp import otlp_episodes

        return (lambda: otlp_episodes(args.file, framework=args.framework)), "otlp", {}
    from guardrail.app.importers.traj import trajectory_episodes

    framework = None if args.source == "traj" else args.source
    return (lambda: trajectory_episodes(args.file, framework=framework)), framework or "trajectory", {}


def _print(report: ImportReport, args: argparse.Namespace) -> None:
    if args.json:
        emit_json({"store": report.store, "imported": report.imported, "episodes": report.episode_ids,
                   "problems": [str(p) for p in report.problems], "skipped": len(report.problems)})
        return
    print(f"imported {report.imported} episode(s) into {report.store}"
          + (f"; {len(report.problems)} item(s) skipped" if report.problems else ""))
    for item in report.problems[:_SHOWN]:
        sys.stderr.write(f"  problem: {item}\n")
    if len(report.problems) > _SHOWN:
        sys.stderr.write(f"  ... and {len(report.problems) - _SHOWN} more (--json lists every one)\n")


def _run(args: argparse.Namespace) -> int:
    from guardrail.app.importers.langgraph import CheckpointerError
    from guardrail.core.runstore.sql import sqlite_path

    try:
        read, imported_from, meta = _items(args)
        if args.output.startswith("sqlite://"):
            sqlite_path(args.output)  # a malformed URL is refused before anything is read
        report = import_into(args.output, read(), imported_from=imported_from, meta=meta)
    except (CheckpointerError, StoreError) as exc:
        sys.stderr.write(f"guardrail import {args.source}: {exc}\n")
        return 2
    except ImportError as exc:  # a framework extra that is not installed
        sys.stderr.write(f"guardrail import {args.source}: {exc}\n")
        return 2
    except Exception as exc:  # noqa: BLE001 - the store refused a write: say so, no traceback
        sys.stderr.write(f"guardrail import {args.source}: writing to {safe_url(args.output)} failed: "
                         f"{type(exc).__name__}: {str(exc)[:300]}\n")
        return 2
    _print(report, args)
    return 0 if report.ok else 1


IMPORT = Command(help="import what a deployment already has (LangGraph checkpoints, OTLP span files, SWE-agent and "
                      "mini-swe-agent trajectories) into a run store, unlabelled", add_arguments=_add_arguments, run=_run)
