"""Run stores: where a guarded agent's episodes are recorded, labelled and read back for fitting.

    guard = Guard.default(record="sqlite:///runs.db")      # or "runs/", or "postgresql://..."
    ...                                                    # every guarded episode is recorded
    guard.label(episode_id, "failed")                      # labels are the user's
    store = open_store("sqlite:///runs.db"); store.summaries()

Every command that reads a corpus directory reads a store the same way (`guardrail fit runs/`,
``guardrail fit-spec sqlite:///runs.db``...).
"""

from guardrail.core.runstore.base import (
    Begin,
    DecisionOp,
    Finish,
    Label,
    RunStore,
    StepLine,
    StoreError,
    StoreOp,
    is_store_dir,
    is_store_url,
    label_counts,
    open_store,
)
from guardrail.core.runstore.recorder import RunRecorder, redact_content
from guardrail.core.runstore.records import (
    STORE_FORMAT,
    STORE_VERSION,
    UNLABELLED,
    FindingRecord,
    RunHeader,
    RunOutcome,
    RunSummary,
)

__all__ = [
    "STORE_FORMAT",
    "STORE_VERSION",
    "UNLABELLED",
    "Begin",
    "DecisionOp",
    "FindingRecord",
    "Finish",
    "Label",
    "RunHeader",
    "RunOutcome",
    "RunRecorder",
    "RunStore",
    "RunSummary",
    "StepLine",
    "StoreError",
    "StoreOp",
    "is_store_dir",
    "is_store_url",
    "label_counts",
    "open_store",
    "redact_content",
]
