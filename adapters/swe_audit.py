"""The offline audit of a recorded trajectory (`guardrail audit-traj`): every action gated against a copy of the
workspace replayed step by step, and whether its own observation confirms what the gate said."""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from adapters.common import safe_decision
from adapters.replay import EditReplayer, WorkspaceCopy
from adapters.trajectory import ACI_COMMANDS, Trajectory, action_from_swe, episode_from_traj
from guardrail.core.events import Action, Decision, Finding, Result, Verdict
from guardrail.core.guard import Guard
from guardrail.core.layer import EpisodeContext
from guardrail.gate.extract_aci import editor_args

# --------------------------------------------------------------------------- offline audit
_SEVERITY_ORDER = [Verdict.ALLOW, Verdict.WARN, Verdict.ALARM, Verdict.REPAIR, Verdict.BLOCK]

# What a failed reference looks like in an observation: the shell, Python, pytest and SWE-agent's own tools.
_MISS = re.compile(
    r"No such file or directory|command not found|ModuleNotFoundError|No module named|ImportError: cannot import name"
    r"|ERROR: (?:file or directory )?not found|no tests ran|The path \S+ does not exist|did not appear verbatim"
    r"|File \S+ not found|File name \S+ not found|is greater than the number of lines|must be less than or equal to"
    r"|Invalid `(?:view_range|insert_line)`|No file open",
    re.IGNORECASE)


def _worst(*verdicts: Verdict) -> Verdict:
    return max(verdicts, key=_SEVERITY_ORDER.index)


def observation_confirms(flagged: bool, observation: str | None) -> bool | None:
    """Whether the action's own recorded observation agrees with the gate.

    A "No such file", "command not found", ``ModuleNotFoundError``, pytest "not found" (or SWE-agent's
    editor saying a path or text is missing) confirms a flagged action and contradicts an allowed one
    (a miss); a clean observation confirms an allowed action and contradicts a flagged one. None when
    nothing was observed (the action never ran or the file kept no output).
    """
    if observation is None or not observation.strip():
        return None
    failed = _MISS.search(observation[:50_000]) is not None
    return failed if flagged else not failed


@dataclass
class AuditRow:
    step: int
    action: str
    cwd: str | None
    decision: Decision  # the worst of what every layer said about the action and its step
    gate: Decision | None = None  # what the guard said before the action ran
    observation_confirms: bool | None = None
    trajectory: str = ""

    @property
    def predicates(self) -> list[dict[str, Any]]:
        """The gate's violated predicates for this action (name, arguments, whether it would block, hint)."""
        findings: list[Finding] = self.gate.findings if self.gate is not None else []
        return [{"predicate": f.predicate or f.check, "args": f.args, "blocking": f.blocking, "message": f.message,
                 **({"hint": f.hint} if f.hint else {})} for f in findings if f.layer == "gate"]

    def as_json(self) -> dict[str, Any]:
        return {"trajectory": self.trajectory, "step": self.step, "action": self.action,
                "verdict": self.decision.verdict.value, "predicates": self.predicates,
                "observation_confirms": self.observation_confirms}


def _map_into(path: str | None, sandbox_root: str, workspace: Path) -> str | None:
    """A sandbox path (``/repo/src``) as the same place in the local copy of the workspace."""
    if path is None:
        return str(workspace)
    normalized = posixpath.normpath(path)
    if normalized == sandbox_root or normalized.startswith(sandbox_root.rstrip("/") + "/"):
        return str(workspace / posixpath.relpath(normalized, sandbox_root))
    return path


def _map_text(command: str, sandbox_root: str, workspace: Path) -> str:
    """The sandbox root replaced by the local copy wherever it starts a path in `command`."""
    if sandbox_root == "/":
        return command
    return re.sub(re.escape(sandbox_root.rstrip("/")) + r"(?=/|\s|['\"]|$)", lambda _: str(workspace), command)


def guess_sandbox_root(trajectory: Trajectory, workspace: str | os.PathLike[str]) -> str:
    """Where the repository sits in the sandbox: the ancestor of the shallowest recorded working directory
    whose remaining path exists in the local `workspace` (``/repo/src`` with a local ``src/`` gives ``/repo``).
    """
    dirs = {posixpath.normpath(d) for step in trajectory.steps for state in (step.state_before, step.state_after)
            if state and isinstance(d := state.get("working_dir"), str) and d.startswith("/")}
    dirs |= {posixpath.normpath(s.cwd_fixed) for s in trajectory.steps if s.cwd_fixed and s.cwd_fixed.startswith("/")}
    if not dirs:
        return "/"
    shallowest = min(dirs, key=lambda d: (d.count("/"), d))
    local = Path(workspace)
    candidate, best = shallowest, shallowest
    while candidate != "/":
        if (local / posixpath.relpath(shallowest, candidate)).is_dir():
            best = candidate
        candidate = posixpath.dirname(candidate)
    return best


def _set_open_file(guard: Guard, ctx: EpisodeContext, open_file: str) -> None:
    for layer in guard.layers:
        setter = getattr(layer, "set_editor_state", None)
        if callable(setter):
            setter(ctx, open_file=open_file)


def _replay(replayer: EditReplayer, command: str, cwd: str, observation: str, open_file: str | None,
            commands: frozenset[str]) -> None:
    first_line, _, body = command.strip().partition("\n")
    name = first_line.split(maxsplit=1)[0] if first_line.strip() else ""
    if name == "str_replace_editor":
        args = editor_args(command.strip())
        if args is not None:
            replayer.apply_editor(args, observation)
    elif name in commands:
        try:
            words = shlex.split(first_line)
        except ValueError:
            words = first_line.split()
        replayer.apply_aci(command, words, body, cwd, observation, open_file)


def _relabel(decision: Decision, copy_root: Path, source: Path) -> Decision:
    old, new = json.dumps(str(copy_root))[1:-1], json.dumps(str(source))[1:-1]
    text = decision.model_dump_json()
    return Decision.model_validate_json(text.replace(old, new)) if old in text else decision


def audit_trajectory(trajectory: Trajectory, guard: Guard, workspace: str | os.PathLike[str] | WorkspaceCopy, *,
                     sandbox_root: str | None = None, commands: frozenset[str] = ACI_COMMANDS) -> list[AuditRow]:
    """Gate every recorded action against the workspace as the agent had it (what the guard would have said).

    Give a `WorkspaceCopy` (whose root the guard's gate must probe) to have the trajectory's own edits
    replayed onto it as the audit goes, so a file the agent created or edited is judged as it was;
    a plain directory is only read. Paths under ``sandbox_root`` (default: `guess_sandbox_root`) are
    mapped into the workspace, in the cwd and in the command text. A SWE-agent step whose state before
    it is unknown (the first step of a 1.x file) starts at the workspace root; every mini-swe-agent
    command starts in its environment's cwd.
    """
    replayer = EditReplayer(workspace) if isinstance(workspace, WorkspaceCopy) else None
    local = (workspace.root if isinstance(workspace, WorkspaceCopy) else Path(workspace)).resolve()
    root = posixpath.normpath(sandbox_root or guess_sandbox_root(trajectory, local))
    ctx = guard.start_episode(task=trajectory.problem, framework=trajectory.framework)
    recorded = episode_from_traj(trajectory)
    mini = trajectory.layout == "mini"
    last_of_turn = {s.turn: s.index for s in trajectory.steps} if mini else {}
    rows = []
    for step in trajectory.steps:
        cwd = _map_into(step.cwd, root, local) if (step.cwd or mini) else None
        command = _map_text(step.action, root, local)
        open_file = _map_into(step.open_file, root, local) if step.open_file else None
        if open_file:
            _set_open_file(guard, ctx, open_file)
        call_id = f"traj-{step.index}"
        action = Action.shell(command, cwd=cwd, call_id=call_id) if mini else \
            action_from_swe(command, cwd=cwd, call_id=call_id, commands=commands)
        decision = safe_decision("before_action", partial(guard.before_action, ctx, action))
        decisions = [decision]
        if step.observation is not None:
            result = Result(output=step.observation, call_id=call_id, latency_s=step.execution_time)
            decisions.append(safe_decision("after_result", partial(guard.after_result, ctx, action, result)))
        if replayer is not None:
            _replay(replayer, command, cwd or str(local), step.observation or "", open_file,
                    frozenset() if mini else commands)
        step_index = step.turn if mini else step.index
        if step_index is not None and step_index < len(recorded.steps) and (
                not mini or last_of_turn.get(step.turn) == step.index):
            recorded_step = recorded.steps[step_index]
            recorded_step.index = ctx.step_index
            decisions.append(safe_decision("on_step", partial(guard.on_step, ctx, recorded_step)))
        merged = Decision(verdict=_worst(*(d.verdict for d in decisions)), hook="before_action",
                          findings=[f for d in decisions for f in d.findings], score=decisions[-1].score)
        flagged = decision.verdict in (Verdict.WARN, Verdict.BLOCK) or any(
            f.layer == "gate" and f.severity.value == "warning" for f in decision.findings)
        if replayer is not None:  # report the workspace the user gave, not the private copy the gate looked at
            merged, decision = (_relabel(d, local, replayer.copy.source) for d in (merged, decision))
            cwd = cwd.replace(str(local), str(replayer.copy.source), 1) if cwd else cwd
        rows.append(AuditRow(step.index, step.action, cwd, merged, gate=decision,
                             observation_confirms=observation_confirms(flagged, step.observation),
                             trajectory=trajectory.path))
    turns = sum(1 for m in trajectory.messages if isinstance(m, dict) and m.get("role") == "assistant")
    if mini and len(recorded.steps) > turns:  # the final step of its own (the exit message after an observed turn)
        final = recorded.steps[-1]
        final.index = ctx.step_index
        safe_decision("on_step", partial(guard.on_step, ctx, final))
    safe_decision("on_finish", partial(guard.on_finish, ctx, answer=trajectory.submission))
    return rows


