"""SWE-agent and mini-swe-agent trajectories, and SWE-agent's live hook (duck-typed: SWE-agent is not on the package index).

    agent.add_hook(SweAgentGuardHook(guard))          # gates every action before it runs
    trajectory = read_traj("run.traj")                # SWE-agent v0 / 1.x, mini-swe-agent messages
    audit_trajectory(trajectory, guard, copy)          # gate every recorded action offline (guardrail audit-traj)

Nothing here imports SWE-agent: the hook has `AbstractAgentHook`'s method names and is driven in
SWE-agent's order (``on_actions_generated`` sees ``step.state == {}``: SWE-agent fills the state only
after the action ran, so the working directory and the open file come from the previous step's state,
and before the first one from the gate's own tracking of ``cd``). When the agent's environment runs a
SWE-ReX runtime (SWE-agent's ``SWEEnv.deployment.runtime``), the hook makes the gate probe that
sandbox (`adapters.swerex_backend`): the guard's workspace is then the repository's path in the sandbox.
`SweRexProber` is the same backend answering single questions, confined to the workspace.

The code lives in one module per job, all re-exported here: `adapters.swe_samples` (the sample fixture),
`adapters.trajectory` with `adapters.traj_swe` and `adapters.traj_mini` (the two trajectory parsers),
`adapters.swe_audit` (the offline audit), `adapters.swe_hook` (the live hook) and
`adapters.swerex_backend` (the prober).
"""

from __future__ import annotations

from adapters.swe_audit import AuditRow, audit_trajectory, guess_sandbox_root, observation_confirms
from adapters.swe_hook import GuardBlockedAction, SweAgentGuardHook, _run_sync
from adapters.swe_samples import (
    BLOCKLIST_ERROR_TEMPLATE,
    sample_path,
    swe_agent_config_path,
    write_sample_workspace,
)
from adapters.swerex_backend import SweRexProber
from adapters.traj_mini import read_mini
from adapters.traj_swe import read_swe
from adapters.trajectory import (
    ACI_COMMANDS,
    MAX_TRAJ_BYTES,
    Trajectory,
    TrajError,
    TrajStep,
    action_from_swe,
    episode_from_traj,
    read_traj,
)

__all__ = [
    "ACI_COMMANDS",
    "BLOCKLIST_ERROR_TEMPLATE",
    "MAX_TRAJ_BYTES",
    "AuditRow",
    "GuardBlockedAction",
    "SweAgentGuardHook",
    "SweRexProber",
    "TrajError",
    "TrajStep",
    "Trajectory",
    "action_from_swe",
    "audit_trajectory",
    "episode_from_traj",
    "guess_sandbox_root",
    "observation_confirms",
    "read_mini",
    "read_swe",
    "read_traj",
    "sample_path",
    "swe_agent_config_path",
    "write_sample_workspace",
]
_ = _run_sync  # kept importable from here (adapters.mini_swe_agent used to take it from this module)
