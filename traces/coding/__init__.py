"""The coding-agent testbed: a scripted SWE-agent-style agent in a real sdist, gated by StateMirror (report vs intervene)."""

from traces.coding.agent import CodingAgent, CodingRun, CodingTask, make_coding_tasks
from traces.coding.project import ProjectIndex, fetch_sdist

__all__ = ["CodingAgent", "CodingRun", "CodingTask", "ProjectIndex", "fetch_sdist", "make_coding_tasks"]
