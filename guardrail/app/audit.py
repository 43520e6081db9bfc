"""`guardrail audit-traj`: gate every action of a recorded SWE-agent trajectory with the default gate."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adapters.swe_agent import TrajError, audit_trajectory, read_traj
from guardrail.app.assemble import Guard
from guardrail.core.cliutil import Command, emit_json, print_table
from guardrail.core.events import Verdict

__all__ = ["AUDIT_TRAJ"]


def _audit_add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a SWE-agent .traj file (v0 or v1 layout)")
    parser.add_argument("--workspace", required=True, help="a local copy of the repository the agent worked on")
    parser.add_argument("--sandbox-root", default=None,
                        help="the repository's path inside the agent's sandbox (default: the first working_dir)")
    parser.add_argument("--json", action="store_true", help="one JSON object per action")
    parser.add_argument("--all", action="store_true", help="list allowed actions too")


def _audit_run(args: argparse.Namespace) -> int:
    try:
        trajectory = read_traj(args.file)
    except TrajError as exc:
        sys.stderr.write(f"guardrail audit-traj: {exc}\n")
        return 2
    if not Path(args.workspace).is_dir():
        sys.stderr.write(f"guardrail audit-traj: {args.workspace}: not a directory\n")
        return 2
    guard = Guard.default(workspace=args.workspace, mode="intervene")
    rows = audit_trajectory(trajectory, guard, args.workspace, sandbox_root=args.sandbox_root)
    flagged = [r for r in rows if r.decision.verdict is not Verdict.ALLOW]
    if args.json:
        for row in rows if args.all else flagged:
            emit_json({"step": row.step, "action": row.action, "cwd": row.cwd,
                       "verdict": row.decision.verdict.value,
                       "findings": [f.model_dump(mode="json", exclude_defaults=True) for f in row.decision.findings]})
    else:
        print_table([{"step": r.step, "verdict": r.decision.verdict.value,
                      "action": r.action.splitlines()[0][:60] if r.action else "",
                      "finding": r.decision.message().replace("\n", " | ")[:120]}
                     for r in (rows if args.all else flagged)])
        sys.stdout.write(f"{len(rows)} action(s), {len(flagged)} flagged ({trajectory.layout} layout)\n")
    return 1 if any(r.decision.verdict is Verdict.BLOCK for r in rows) else 0


AUDIT_TRAJ = Command(help="gate every action of a recorded SWE-agent trajectory against a workspace",
                     add_arguments=_audit_add_arguments, run=_audit_run)
