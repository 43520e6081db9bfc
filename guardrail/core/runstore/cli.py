"""`guardrail runs STORE` (what was recorded) and `guardrail label STORE` (what the user says it was)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from guardrail.core.cliutil import Command, emit_json, print_table
from guardrail.core.corpus import CorpusIssue
from guardrail.core.events import HEALTHY, Episode, Severity
from guardrail.core.runstore.base import StoreError, label_counts, open_store
from guardrail.core.runstore.records import UNLABELLED, RunSummary

__all__ = ["LABEL", "RUNS", "clean_episodes", "shadow_comparison"]

_ORDER = {s.value: n for n, s in enumerate(Severity)}  # info < warning < alarm < error
_WARN = _ORDER[Severity.WARNING.value]


def _store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="a run store: a directory, sqlite:///PATH or postgresql://...")


def _open(location: str, command: str) -> object | None:
    try:
        return open_store(location, create=False)
    except StoreError as exc:
        sys.stderr.write(f"guardrail {command}: {exc}\n")
        return None


def clean_episodes(summaries: Sequence[RunSummary], *, include_imported: bool = False) -> list[RunSummary]:
    """Unlabelled episodes a guard watched that finished with no finding at warning or above. Repair attempts are
    left out, and imported traces unless `include_imported`: no guard judged an imported run while it ran, so its
    having no finding says nothing by itself."""
    return [s for s in summaries if s.label == UNLABELLED and s.status == "complete" and s.repair_of is None
            and (include_imported or s.imported_from is None)
            and not any(_ORDER.get(f.severity, _WARN) >= _WARN for f in s.findings)]


def _report(problems: list[CorpusIssue]) -> None:
    for problem in problems[:20]:
        sys.stderr.write(f"  problem: {problem}\n")
    if len(problems) > 20:
        sys.stderr.write(f"  ... and {len(problems) - 20} more\n")


# --------------------------------------------------------------------------- runs
def _runs_arguments(parser: argparse.ArgumentParser) -> None:
    _store_argument(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per recorded episode")
    parser.add_argument("--label", default=None, help="only episodes with this label")
    parser.add_argument("--status", default=None, choices=("running", "complete", "incomplete"),
                        help="only episodes in this state (running: not finished, or the recorder was killed)")
    parser.add_argument("--compare", action="store_true",
                        help="live vs shadow: the episodes where a shadow model or spec would have decided otherwise")


def shadow_comparison(episode: Episode) -> list[dict[str, object]]:
    """Per shadow layer of a recorded episode: what the live layer and its shadow said, and whether they agree."""
    run = episode.meta.get("run")
    if not isinstance(run, dict) or not isinstance(run.get("shadow"), dict):
        return []
    shadow = run["shadow"]
    findings = run.get("findings") or []
    rows = []
    for name, record in sorted(shadow.items()):
        if not isinstance(record, dict):
            continue
        live_layer = name[len("shadow_"):] if name.startswith("shadow_") else name
        live = [f for f in findings if isinstance(f, dict) and f.get("layer") == live_layer
                and f.get("check") != "swap_refused"]
        live_alarm = next((f.get("step") for f in live if f.get("severity") == "alarm"), None)
        shadow_findings = [f for f in record.get("findings") or [] if isinstance(f, dict)]
        live_checks = sorted({str(f.get("check")) for f in live})
        shadow_checks = sorted({str(f.get("check")) for f in shadow_findings})
        shadow_alarm = record.get("alarm_step")
        agree = live_checks == shadow_checks and (live_alarm is None) == (shadow_alarm is None)
        rows.append({"episode_id": episode.episode_id, "label": episode.label, "layer": live_layer,
                     "live": ", ".join(live_checks) or "-", "live_alarm_step": live_alarm,
                     "shadow": ", ".join(shadow_checks) or "-", "shadow_alarm_step": shadow_alarm,
                     "shadow_max_score": record.get("max_score"), "agree": agree})
    return rows


def _run_compare(args: argparse.Namespace, store: object) -> int:
    problems: list[CorpusIssue] = []
    with store:  # type: ignore[attr-defined]
        episodes = list(store.episodes(problems=problems))  # type: ignore[attr-defined]
    rows = [row for e in episodes if (args.label is None or e.label == args.label) for row in shadow_comparison(e)]
    if args.json:
        for row in rows:
            emit_json(row)
    else:
        disagree = [row for row in rows if not row["agree"]]
        print_table(disagree, ["episode_id", "label", "layer", "live", "live_alarm_step", "shadow",
                               "shadow_alarm_step", "shadow_max_score"])
        shadowed = len({row["episode_id"] for row in rows})
        print(f"{shadowed} episode(s) with a shadow; live and shadow disagree on "
              f"{len({row['episode_id'] for row in disagree})}")
    _report(problems)
    return 1 if any(p.severity == "error" for p in problems) else 0


def _run_runs(args: argparse.Namespace) -> int:
    store = _open(args.store, "runs")
    if store is None:
        return 2
    if args.compare:
        return _run_compare(args, store)
    problems: list[CorpusIssue] = []
    with store:  # type: ignore[attr-defined]
        summaries = store.summaries(problems)  # type: ignore[attr-defined]
    shown = [s for s in summaries if (args.label is None or s.label == args.label)
             and (args.status is None or s.status == args.status)]
    if args.json:
        for summary in shown:
            emit_json(summary.brief())
    else:
        print_table([{"episode_id": s.episode_id, "label": s.label, "status": s.status, "verdict": s.verdict,
                      "framework": s.framework, "steps": s.n_steps,
                      "findings": ", ".join(sorted({f"{f.layer}/{f.check}" for f in s.findings})) or None,
                      "started": (s.started_at or "")[:19]} for s in shown])
        counts = label_counts(summaries)
        print(f"{len(summaries)} episode(s): " + ", ".join(f"{k}={v}" for k, v in counts.items()))
    _report(problems)
    return 1 if any(p.severity == "error" for p in problems) else 0


RUNS = Command(help="list the episodes a run store recorded: label, verdict, findings, versions",
               add_arguments=_runs_arguments, run=_run_runs)


# --------------------------------------------------------------------------- label
def _label_arguments(parser: argparse.ArgumentParser) -> None:
    _store_argument(parser)
    parser.add_argument("--episode", action="append", default=[], metavar="ID",
                        help="the episode to label (repeat for several)")
    parser.add_argument("--as", dest="label", metavar="LABEL",
                        help=f"the label: {HEALTHY!r}, 'failed' or any label of yours")
    parser.add_argument("--clean-as", dest="clean_as", metavar="LABEL",
                        help="label every unlabelled episode that finished with no finding at warning or above")
    parser.add_argument("--include-imported", action="store_true",
                        help="with --clean-as: imported traces too (no guard judged them; verify them first)")
    parser.add_argument("--json", action="store_true", help="print what was labelled as one JSON object")


def _valid_label(label: str) -> bool:
    return bool(label.strip()) and len(label) <= 200 and label.strip() != UNLABELLED


def _run_label(args: argparse.Namespace) -> int:
    if bool(args.episode) == bool(args.clean_as) or (args.episode and not args.label):
        sys.stderr.write("guardrail label: give --episode ID --as LABEL, or --clean-as LABEL\n")
        return 2
    label = (args.label if args.episode else args.clean_as).strip()
    if not _valid_label(label):
        sys.stderr.write(f"guardrail label: {label!r} is not a label (a non-empty string of at most 200 characters, "
                         f"not {UNLABELLED!r})\n")
        return 2
    store = _open(args.store, "label")
    if store is None:
        return 2
    problems: list[CorpusIssue] = []
    with store:  # type: ignore[attr-defined]
        if args.episode:
            wanted = {episode_id: label for episode_id in args.episode}
            missing = store.set_labels(wanted)  # type: ignore[attr-defined]
        else:
            summaries = store.summaries(problems)  # type: ignore[attr-defined]
            wanted = {s.episode_id: label for s in clean_episodes(summaries, include_imported=args.include_imported)}
            missing = store.set_labels(wanted) if wanted else []  # type: ignore[attr-defined]
            imported = sum(1 for s in summaries if s.label == UNLABELLED and s.imported_from is not None)
            if imported and not args.include_imported:
                sys.stderr.write(f"guardrail label: {imported} imported episode(s) left unlabelled: no guard judged "
                                 "them; run `guardrail verify` on the store, then label them by id or with "
                                 "--include-imported\n")
    labelled = [e for e in wanted if e not in missing]
    for episode_id in missing:
        sys.stderr.write(f"guardrail label: no episode {episode_id!r} in {args.store}\n")
    if args.json:
        emit_json({"label": label, "labelled": len(labelled), "episodes": labelled, "missing": missing})
    else:
        what = "clean unlabelled episode(s)" if args.clean_as else "episode(s)"
        print(f"labelled {len(labelled)} {what} {label!r} in {args.store}")
    _report(problems)
    return 1 if missing else 0


LABEL = Command(help="label recorded episodes (by id, or every clean unlabelled one)", add_arguments=_label_arguments,
                run=_run_label)
