"""Synthetic perturbations of healthy training episodes: the positives the logistic fusion learns its weights from.

Only healthy *training* episodes are perturbed (never validation, test or injected ones), so the
fusion weights are learned on a cross-fit over training data, as ../shared/seeds/002 §7 asks.
Each perturbation changes the run from a random onset on, in one generic way an agent run goes
wrong: it repeats itself, its tools fail, its results belong to another task, or its results
are scrambled.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from guardrail.core.events import Episode, Step, StepKind, ToolEvent

__all__ = ["PERTURBATIONS", "perturb"]

PERTURBATIONS = ("repeat", "tool_error", "foreign_result", "scrambled_result")


def _render(event: ToolEvent) -> str:
    return f"[{event.name}({event.args}) -> {event.result}]"


def _with_results(step: Step, results: Sequence[str], *, error: bool = False) -> Step:
    events = [ev.model_copy(update={"result": r, "result_chars": len(r), "is_error": error or ev.is_error})
              for ev, r in zip(step.tool_events, results, strict=False)]
    text = " ".join(_render(ev) for ev in events) if events else step.text
    return step.model_copy(update={"tool_events": events, "text": text, "error": error or step.error})


def perturb(healthy: Sequence[Episode], n_per_episode: int = 2, random_state: int = 0) -> list[tuple[int, Episode]]:
    """(source index, perturbed episode) pairs; each source gets `n_per_episode` different perturbation kinds."""
    rng = np.random.default_rng(random_state)
    out: list[tuple[int, Episode]] = []
    results_pool = [ev.result for e in healthy for s in e.steps for ev in s.tool_events if ev.result]
    for index, episode in enumerate(healthy):
        steps = episode.steps
        if len(steps) < 3:
            continue
        for kind in rng.permutation(PERTURBATIONS)[:n_per_episode]:
            onset = int(rng.integers(1, len(steps) - 1))
            changed: list[Step] = list(steps[:onset])
            for t in range(onset, len(steps)):
                step = steps[t]
                if kind == "repeat" and step.kind is not StepKind.FINAL:
                    step = steps[onset - 1]
                elif kind == "tool_error" and step.tool_events:
                    step = _with_results(step, ["Error: the tool call failed."] * len(step.tool_events), error=True)
                elif kind == "foreign_result" and step.tool_events and results_pool:
                    picks = [results_pool[int(rng.integers(len(results_pool)))] for _ in step.tool_events]
                    step = _with_results(step, [str(p) for p in picks])
                elif kind == "scrambled_result" and step.tool_events:
                    scrambled = []
                    for ev in step.tool_events:
                        words = (ev.result or "").split()
                        scrambled.append(" ".join(words[i] for i in rng.permutation(len(words))))
                    step = _with_results(step, scrambled)
                changed.append(step.model_copy(update={"index": t}))
            out.append((index, episode.model_copy(update={"steps": changed, "episode_id": f"{episode.episode_id}~{kind}",
                                                          "label": str(kind)})))
    return out
