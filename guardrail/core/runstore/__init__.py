"""Run stores: where a guarded agent's episodes are recorded, labelled and read back for fitting.

    guard = Guard.default(record="sqlite:///runs.db")      # or "runs/", or "postgresql://..."
    ...                                                    # every guarded episode is recorded
    guard.label(episode_id, "failed")                      # labels are the user's
    store = open_store("sqlite:///runs.db"); store.summaries()

Every command that reads a corpus directory reads a store the same way (`guardrail fit runs/`,
``guardrail fit-spec sqlite:///runs.db``...).
"""

from collections.abc import Iterable, Mapping
from typing import Any

from guardrail.core.events import Episode
from guardrail.core.runstore.base import (
    Begin,
    DecisionOp,
    Finish,
    Label,
    RunStore,
    StepLine,
    StoreError,
    StoreOp,
    absolute_location,
    is_store_dir,
    is_store_url,
    label_counts,
    open_store,
)
from guardrail.core.runstore.recorder import RunRecorder, episode_ops, redact_content, step_record
from guardrail.core.runstore.records import (
    STORE_FORMAT,
    STORE_VERSION,
    UNLABELLED,
    FindingRecord,
    RunHeader,
    RunOutcome,
    RunSummary,
)


def write_episodes(store: RunStore | str, episodes: Iterable[Episode], *, redact: bool = True,
                   meta: Mapping[str, Any] | None = None, batch: int = 64) -> int:
    """Add finished episodes (imported traces) to a store, unlabelled and redacted like recorded ones; how many."""
    target = open_store(store)
    count = 0
    ops: list[StoreOp] = []
    try:
        for episode in episodes:
            ops += episode_ops(episode, redact=redact, meta=meta)
            count += 1
            if count % batch == 0:
                target.write(ops)
                ops = []
        if ops:
            target.write(ops)
    finally:
        if target is not store:
            target.close()
    return count


__all__ = [
    "STORE_FORMAT",
    "STORE_VERSION",
    "UNLABELLED",
    "Begin",
    "absolute_location",
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
    "episode_ops",
    "open_store",
    "redact_content",
    "step_record",
    "write_episodes",
]
