"""What a corpus gives the monitor to fit on: episodes and steps read and rejected, and the top reasons why.

`guardrail fit` and `guardrail bench monitor` use it to say, when a corpus has too few usable
healthy episodes, which corpus, how much was read and left out, and why, instead of failing
deep inside a detector.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from guardrail.core.corpus import CorpusIssue, iter_corpus, manifest_entries

__all__ = ["MIN_EPISODE_STEPS", "HealthyInventory", "take_inventory"]

MIN_EPISODE_STEPS = 2  # a healthy episode teaches the monitor something only with at least one step-to-step change


@dataclass
class HealthyInventory:
    """Counts from one pass over a corpus, and the ids of its usable healthy episodes (in manifest order)."""

    corpus: str
    listed: int = 0
    episodes: int = 0
    healthy: int = 0
    steps: int = 0
    usable: list[str] = field(default_factory=list)
    issues: list[CorpusIssue] = field(default_factory=list)

    @property
    def rejected_episodes(self) -> int:
        return max(0, self.listed - self.episodes)

    @property
    def rejected_lines(self) -> int:
        return sum(1 for issue in self.issues if issue.line is not None and issue.severity == "error")

    def top_reasons(self, n: int = 3) -> list[tuple[str, int]]:
        """The most frequent problems, worded without their file, line and values, with counts."""
        counts = Counter(_reason(issue.message) for issue in self.issues if issue.severity == "error")
        return counts.most_common(n)

    def explain(self) -> str:
        parts = [f"{self.corpus}: {self.listed} episode(s) listed, {self.episodes} read ({self.healthy} healthy, "
                 f"{len(self.usable)} usable with >= {MIN_EPISODE_STEPS} steps), {self.rejected_episodes} "
                 f"rejected; {self.steps} step(s) read, {self.rejected_lines} step line(s) rejected"]
        reasons = self.top_reasons()
        if reasons:
            parts.append("top reasons: " + "; ".join(f"{count} x {reason}" for reason, count in reasons))
        warnings = [str(issue) for issue in self.issues if issue.severity == "warning"]
        if warnings:
            parts.append(warnings[0])
        return ". ".join(parts)


def _reason(message: str) -> str:
    """A problem's kind: numbers and quoted values replaced, so the same kind of problem counts once."""
    text = message.splitlines()[0] if message else "unknown problem"
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", text)
    return re.sub(r"\b\d+(?:\.\d+)?\b", "N", text)[:160]


def take_inventory(path: str | os.PathLike[str], min_steps: int = MIN_EPISODE_STEPS) -> HealthyInventory:
    """Stream a corpus once (constant memory) and count what the monitor can use."""
    inventory = HealthyInventory(corpus=Path(path).name, listed=manifest_entries(path))
    for episode in iter_corpus(path, issues=inventory.issues):
        inventory.episodes += 1
        inventory.steps += len(episode.steps)
        if episode.is_healthy:
            inventory.healthy += 1
            if len(episode.steps) >= min_steps:
                inventory.usable.append(episode.episode_id)
    return inventory
