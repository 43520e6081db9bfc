"""The SWE-agent sample fixture: the recorded trajectories shipped with the package, the repository they worked on,
and the config fragment that shows the model the guard's message when it blocks."""

from __future__ import annotations

import json
import os
import tempfile
from importlib import resources
from pathlib import Path

# SWE-agent's ``agent.tools.filter.blocklist_error_template``: what the model reads when the hook blocks. SWE-agent
# renders it with Jinja2 and passes the blocked-action error's message as ``exception_message``; its default
# template ("Operation '{{action}}' is not supported by this environment.") drops the guard's warning and hint.
# Shipped as YAML to merge into a run's config: `swe_agent_config_path()`.
BLOCKLIST_ERROR_TEMPLATE = (
    "guardrail blocked this action before it ran (nothing was executed):\n"
    "{{exception_message}}\n"
    "Fix the action and try again."
)


def sample_path(name: str = "") -> Path:
    """A sample trajectory shipped with the package (``adapters/samples/``), or the folder itself."""
    folder = Path(str(resources.files("adapters") / "samples"))
    return folder / name if name else folder


def write_sample_workspace(directory: str | os.PathLike[str] | None = None) -> Path:
    """Write the repository the sample trajectories worked on (at ``/testbed`` in their sandbox) into `directory`
    (default: a new temporary directory) and return it."""
    spec = json.loads(sample_path("workspace.json").read_text(encoding="utf-8"))
    root = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="guardrail-sample-"))
    for relative, text in spec["files"].items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root


def swe_agent_config_path() -> Path:
    """The shipped SWE-agent config fragment that sets `BLOCKLIST_ERROR_TEMPLATE` (``--config`` it after yours)."""
    return sample_path("swe_agent_guardrail.yaml")


