"""Import what a deployment already has into a run store: LangGraph checkpoints, OpenTelemetry span files, trajectories.

    guardrail import langgraph --checkpointer sqlite:///app.db -o sqlite:///runs.db
    guardrail import otlp spans.jsonl -o runs/
    guardrail import traj trajectories/ -o runs/

From code, each reader yields episodes and one problem per item it left out, and `import_into`
writes the episodes (unlabelled, redacted like recorded runs)::

    from guardrail.app.importers import import_into, langgraph_episodes
    report = import_into("sqlite:///runs.db", langgraph_episodes("sqlite:///app.db"), imported_from="langgraph")

The readers import their framework only when called (a missing extra names its pip install line).
"""

from guardrail.app.importers.langgraph import CheckpointerError, langgraph_episodes
from guardrail.app.importers.otlp import otlp_episodes
from guardrail.app.importers.store import Imported, ImportReport, import_into
from guardrail.app.importers.traj import trajectory_episodes

__all__ = ["CheckpointerError", "ImportReport", "Imported", "import_into", "langgraph_episodes", "otlp_episodes",
           "trajectory_episodes"]
