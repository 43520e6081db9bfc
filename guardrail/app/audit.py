"""`guardrail audit-traj`: gate every action of recorded SWE-agent / mini-swe-agent trajectories with the default gate.

Each trajectory is audited on its own private copy of the workspace, onto which the agent's own
edits are replayed as the audit goes (the workspace given is never written). Packages and commands
are judged against the agent's environment when it is given (``--python`` or ``--environment``),
else against this interpreter's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adapters.replay import CopyTooLarge, WorkspaceCopy
from adapters.swe_agent import ACI_COMMANDS, AuditRow, TrajError, audit_trajectory, read_traj
from guardrail.app.agent_env import (
    AgentEnvironment,
    EnvironmentError_,
    read_environment,
    temporary_environment_dir,
)
from guardrail.app.assemble import Guard
from guardrail.core.cliutil import Command, emit_json, print_table
from guardrail.core.events import Verdict
from guardrail.gate.bundles import BundleError, bundle_tools, load_bundle

__all__ = ["AUDIT_TRAJ", "audit_files"]


def _audit_add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="+", help="trajectory files (SWE-agent .traj v0 or 1.x, mini-swe-agent .traj.json)")
    parser.add_argument("--workspace", required=True,
                        help="a local copy of the repository the agent worked on (copied per trajectory, never written)")
    parser.add_argument("--sandbox-root", default=None,
                        help="the repository's path inside the agent's sandbox (default: guessed from the working dirs)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--python", default=None, help="the agent's interpreter: packages are judged against its paths")
    where.add_argument("--environment", default=None,
                       help="the agent's environment as a SWE-bench environment.yml or a JSON/YAML object with "
                            "'python', 'distributions' and 'console_scripts'")
    parser.add_argument("--bundle", action="append", default=[],
                        help="a SWE-agent tool bundle (directory or config.yaml) the harness loaded; repeatable")
    parser.add_argument("--json", action="store_true", help="one JSON object per action")
    parser.add_argument("--flagged", action="store_true", help="list only actions the guard did not allow")


def audit_files(files: list[str], workspace: str, *, python: str | None = None,
                environment: AgentEnvironment | None = None, tools: dict | None = None,
                sandbox_root: str | None = None) -> tuple[list[AuditRow], list[str]]:
    """Audit each file on its own copy of `workspace`; the rows, and one message per file that could not be read."""
    rows: list[AuditRow] = []
    problems: list[str] = []
    commands = ACI_COMMANDS | frozenset(tools or ())
    for file in files:
        try:
            trajectory = read_traj(file)
        except TrajError as exc:
            problems.append(str(exc))
            continue
        try:
            with WorkspaceCopy(workspace) as copy, temporary_environment_dir() as env_dir:
                guard = Guard.default(workspace=copy.root, mode="intervene", python=python, tools=tools)
                if environment is not None:
                    environment.apply(guard, copy.root, env_dir)
                rows += audit_trajectory(trajectory, guard, copy, sandbox_root=sandbox_root, commands=commands)
        except (CopyTooLarge, OSError) as exc:
            problems.append(f"{file}: cannot copy the workspace: {exc}")
    return rows, problems


def _audit_run(args: argparse.Namespace) -> int:
    if not Path(args.workspace).is_dir():
        sys.stderr.write(f"guardrail audit-traj: {args.workspace}: not a directory\n")
        return 2
    environment = None
    if args.environment:
        try:
            environment = read_environment(args.environment)
        except EnvironmentError_ as exc:
            sys.stderr.write(f"guardrail audit-traj: {exc}\n")
            return 2
    tools: dict = {}
    for bundle in args.bundle:
        try:
            _, skipped = load_bundle(bundle)
            tools.update(bundle_tools(bundle))
        except (BundleError, ImportError) as exc:
            sys.stderr.write(f"guardrail audit-traj: {exc}\n")
            return 2
        for message in skipped:
            sys.stderr.write(f"guardrail audit-traj: {message}\n")
    rows, problems = audit_files(args.file, args.workspace, python=args.python, environment=environment,
                                 tools=tools or None, sandbox_root=args.sandbox_root)
    for problem in problems:
        sys.stderr.write(f"guardrail audit-traj: {problem}\n")
    shown = [r for r in rows if r.decision.verdict is not Verdict.ALLOW] if args.flagged else rows
    if args.json:
        for row in shown:
            emit_json(row.as_json())
    else:
        print_table([{"trajectory": Path(r.trajectory).name, "step": r.step, "verdict": r.decision.verdict.value,
                      "confirms": {True: "yes", False: "no", None: "-"}[r.observation_confirms],
                      "action": r.action.splitlines()[0][:50] if r.action else "",
                      "finding": r.decision.message().replace("\n", " | ")[:110]} for r in shown])
        flagged = sum(r.decision.verdict is not Verdict.ALLOW for r in rows)
        sys.stdout.write(f"{len(rows)} action(s) in {len(args.file) - len(problems)} trajectory file(s), "
                         f"{flagged} flagged\n")
    if problems and not rows:
        return 2
    return 1 if any(r.decision.verdict is Verdict.BLOCK for r in rows) else 0


AUDIT_TRAJ = Command(help="gate every action of recorded SWE-agent / mini-swe-agent trajectories against a workspace",
                     add_arguments=_audit_add_arguments, run=_audit_run)
