"""Collect a labelled corpus from the testbed: tasks, policy, injector, a real agent run, then the labeller.

Everything is derived from the corpus seed and the episode's position, so the same command
gives the same corpus (apart from timestamps and measured latencies). The requested label of
each episode is fixed up front (a share of healthy runs, the rest round-robin over the
failure classes); what is recorded is what happened:

- an injected class is kept with ``tau`` = the step where the first altered result appeared;
  if the injector never fired (the run ended first) the episode is rejected with that reason;
- healthy and organic requests are labelled by `traces.labeller` against ground truth; an
  organic request whose slip left the answer right is rejected, not relabelled healthy.

With a real model (an `EndpointSpec`) the tasks are the small ones (`SMALL_TASK_KINDS`), each agent
gets only its task's tools, each episode's client carries the episode seed, a "healthy" request is
whatever the model then does (labelled by `traces.labeller.classify_real`: healthy or the organic
class of its first slip), injected classes start at a call the run makes (a run that never reached
that call saw only real results and is labelled as the model's own run), and runs from 1 step are kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrail.core.corpus import Manifest, RejectedEntry, write_corpus
from guardrail.core.events import HEALTHY, Episode
from guardrail.core.version import version
from traces.agents import arun_autogen_episode, match_tool_log, run_langgraph_episode
from traces.injectors import INJECTED_CLASSES, Injector, make_injector
from traces.labeller import ORGANIC_CLASSES, classify_real, grade_episode
from traces.models import EndpointSpec
from traces.policy import Policy
from traces.tasks import SMALL_TASK_KINDS, Task, make_task
from traces.tools import BookingDB, ToolBox, booking_tools

__all__ = ["ALL_CLASSES", "FRAMEWORKS", "collect", "collect_episode", "episode_seed", "label_run",
           "requested_labels", "write_collected"]

ALL_CLASSES = (HEALTHY, *INJECTED_CLASSES, *ORGANIC_CLASSES)
FRAMEWORKS = ("langgraph", "autogen")
MIN_T = 4
MIN_T_REAL = 1  # a real run can end at its first reply (a call it never closed): that is an outcome too
_SLIP_RATE = {"arithmetic_error": "arithmetic_rate", "incomplete": "skip_rate", "hallucinated": "hallucinate_rate"}


def episode_seed(seed: int, index: int) -> int:
    """A stable per-episode seed (independent of Python's hash randomization)."""
    return int(hashlib.sha256(f"guardrail-collect:{seed}:{index}".encode()).hexdigest()[:8], 16)


def requested_labels(n: int, seed: int, classes: Sequence[str] = ALL_CLASSES, healthy_share: float = 0.4) -> list[str]:
    """The label asked of each of `n` episodes: `healthy_share` healthy, the rest round-robin, in seeded order."""
    unknown = [c for c in classes if c not in ALL_CLASSES]
    if unknown:
        raise ValueError(f"unknown class(es) {unknown}; choose from {list(ALL_CLASSES)}")
    failures = [c for c in classes if c != HEALTHY]
    n_healthy = n if not failures else round(n * healthy_share) if HEALTHY in classes else 0
    labels = [HEALTHY] * n_healthy + [failures[i % len(failures)] for i in range(n - n_healthy)]
    random.Random(f"labels:{seed}").shuffle(labels)
    return labels


@dataclass
class _Runner:
    """Runs episodes on one framework; AutoGen episodes share one event loop (asyncio.Runner closes it cleanly).

    `model` is None (the scripted policy), a chat model / AutoGen client used as is, or an `EndpointSpec`
    from which each episode gets its own client seeded with the episode seed.
    """

    framework: str
    model: Any = None
    loop: asyncio.Runner | None = None

    @property
    def spec(self) -> EndpointSpec | None:
        return self.model if isinstance(self.model, EndpointSpec) else None

    def run(self, task: Any, policy: Policy, toolbox: Any, episode_id: str) -> Episode:
        spec = self.spec
        model = spec.build(self.framework, seed=policy.seed) if spec else self.model
        real = {"tools": task.tools, "max_steps": spec.max_steps} if spec else {}
        if self.framework == "langgraph":
            from traces.agents import real_model_middleware

            middleware = [real_model_middleware(spec.first_turn_tool_choice)] if spec else []
            return run_langgraph_episode(task, policy, toolbox=toolbox, thread_id=episode_id, episode_id=episode_id,
                                         model=model, middleware=middleware, **real)
        if self.loop is None:
            self.loop = asyncio.Runner()
        try:
            return self.loop.run(arun_autogen_episode(task, policy, toolbox=toolbox, episode_id=episode_id,
                                                      client=model, **real))
        finally:
            if spec is not None:
                self.loop.run(model.close())

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()
            self.loop = None


def collect_episode(framework: str, index: int, requested: str, seed: int, *, db: BookingDB,
                    runner: _Runner | None = None) -> Episode | RejectedEntry:
    """Run one episode and label it, or say why it was rejected."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; choose from {FRAMEWORKS}")
    own_runner = runner is None
    runner = runner or _Runner(framework)
    ep_seed = episode_seed(seed, index)
    episode_id = f"{framework}-{requested}-{index:04d}"
    spec = runner.spec
    task = make_task(ep_seed, db=db, kinds=SMALL_TASK_KINDS) if spec else make_task(ep_seed, db=db)
    policy = Policy(seed=ep_seed)
    if requested in _SLIP_RATE:  # an organic request: the policy slips that way for sure, the labeller grades it
        rates: dict[str, Any] = {_SLIP_RATE[requested]: 1.0}
        policy = dataclasses.replace(policy, **rates)
    injector = None
    if requested in INJECTED_CLASSES:
        n_calls = sum(task.required_counts.values())
        # A real model's small task makes one or two calls: the fault starts at one of them.
        onset = random.Random(f"onset:{ep_seed}").randrange(0, n_calls) if spec else \
            random.Random(f"onset:{ep_seed}").randrange(1, max(2, n_calls))
        injector = make_injector(requested, onset=onset, seed=ep_seed, db=db)
    toolbox = booking_tools(db, fault=injector)
    try:
        episode = runner.run(task, policy, toolbox, episode_id)
    finally:
        if own_runner:
            runner.close()
    provenance = {"collector": "guardrail collect", "framework": framework, "corpus_seed": seed, "index": index,
                  "episode_seed": ep_seed, "task_kind": task.kind}
    if spec is not None:
        provenance["model"] = spec.describe(seed=policy.seed)
    return label_run(episode, task, requested, injector=injector, toolbox=toolbox, provenance=provenance,
                     real=spec is not None)


def label_run(episode: Episode, task: Task, requested: str, *, injector: Injector | None, toolbox: ToolBox,
              provenance: dict[str, Any] | None = None, real: bool = False) -> Episode | RejectedEntry:
    """Label a finished run (see the module docstring), or reject it with the reason.

    ``real=True``: a real model's run, labelled by `classify_real` and kept from `MIN_T_REAL` steps.
    """
    episode_id = episode.episode_id
    meta_common = {"requested_label": requested, "task_id": task.task_id}
    min_t = MIN_T_REAL if real else MIN_T
    if episode.T < min_t:
        return RejectedEntry(episode_id=episode_id, reason=f"run too short: T={episode.T} < {min_t}",
                             requested_label=requested, meta=meta_common)
    grade = grade_episode(episode, task)
    if injector is not None and not injector.applied and real:
        # Every result the model saw was real: this is a run of the model like any other (an expensive one).
        injector_note = {"injection": {**injector.describe(), "fired": False}}
        injector = None
    else:
        injector_note = {}
    if injector is not None:
        if not injector.applied:
            return RejectedEntry(
                episode_id=episode_id, requested_label=requested, meta={**meta_common, **injector.describe()},
                reason=f"injector never fired: the run made {len(toolbox.log)} tool call(s) and the onset was "
                       f"call {injector.onset}")
        first = min(injector.applied)
        tau: int | None = next(step for step, record in match_tool_log(episode, toolbox.log) if record.ordinal == first)
        label = requested
        extra = {"injection": {**injector.describe(), "first_applied_step": tau}, "outcome": grade.label,
                 "outcome_reason": grade.reason}
    elif real:
        label, tau, findings = classify_real(episode, task, grade)
        extra = {"outcome": grade.label, "outcome_reason": grade.reason, "organic": findings, **injector_note}
    else:
        if requested in ORGANIC_CLASSES and grade.label == HEALTHY:
            return RejectedEntry(episode_id=episode_id, requested_label=requested, meta=meta_common,
                                 reason=f"the {requested} slip left the answer correct ({grade.reason})")
        label, tau = grade.label, grade.tau
        extra = {"outcome": grade.label, "outcome_reason": grade.reason}
    episode.label = label
    episode.tau = tau
    episode.meta.update({**meta_common, **extra, "provenance": provenance or {}})
    return episode


def collect(framework: str, n: int, seed: int, *, classes: Sequence[str] = ALL_CLASSES, healthy_share: float = 0.4,
            db: BookingDB | None = None, show_progress: bool = True, model: Any = None,
            on_batch: Callable[[list[Episode], list[RejectedEntry]], None] | None = None,
            batch: int = 10, done: tuple[list[Episode], list[RejectedEntry]] | None = None,
            ) -> tuple[list[Episode], list[RejectedEntry]]:
    """Collect `n` requested episodes on `framework`; returns (kept episodes, rejected entries).

    `model` replaces the scripted policy with a real model: an `EndpointSpec` (see the module
    docstring), or a chat model / AutoGen client used as is. Its slips cannot be ordered, so the
    scripted organic classes are not requested; what it does is labelled afterwards. `on_batch`
    sees the results so far every `batch` episodes (a long real collection saves as it goes). `done`
    holds episodes (and rejections) of an earlier, interrupted run of the same command: their
    positions are not run again (each position's episode depends only on the seed and the position).
    """
    from guardrail.core.cliutil import progress

    if model is not None:
        classes = [c for c in classes if c not in ORGANIC_CLASSES]
    database = db or BookingDB()
    labels = requested_labels(n, seed, classes, healthy_share)
    runner = _Runner(framework, model)
    kept: list[Episode] = list(done[0]) if done else []
    rejected: list[RejectedEntry] = list(done[1]) if done else []
    finished = {e.episode_id for e in kept} | {r.episode_id for r in rejected}
    try:
        items: Iterator[tuple[int, str]] = progress(enumerate(labels), desc=f"collect {framework}", total=n,
                                                     enabled=show_progress)
        for index, requested in items:
            if f"{framework}-{requested}-{index:04d}" in finished:
                continue
            try:
                outcome = collect_episode(framework, index, requested, seed, db=database, runner=runner)
            except Exception as exc:  # noqa: BLE001 - a real model or its server failing one run ends only that run
                if runner.spec is None:
                    raise
                outcome = RejectedEntry(episode_id=f"{framework}-{requested}-{index:04d}", requested_label=requested,
                                        reason=f"the run failed: {type(exc).__name__}: {str(exc)[:300]}")
            (kept if isinstance(outcome, Episode) else rejected).append(outcome)  # type: ignore[arg-type]
            if on_batch is not None and (index + 1) % batch == 0 and index + 1 < n:
                on_batch(kept, rejected)
    finally:
        runner.close()
    return kept, rejected


def write_collected(out: str | Path, framework: str, n: int, seed: int, *, classes: Sequence[str] = ALL_CLASSES,
                    healthy_share: float = 0.4, name: str | None = None, show_progress: bool = True,
                    model: Any = None, model_name: str = "scripted-policy", resume: bool = False) -> Manifest:
    """Collect and write a corpus to `out` (see `guardrail.core.corpus.write_corpus`).

    A real model's corpus is also written every 10 episodes (``generator.partial`` true until the end),
    so a long collection can be read, and kept, while it runs; ``resume=True`` continues one whose
    manifest at `out` came from the same command (framework, n, seed, classes, share, model).
    """
    generator: dict[str, Any] = {"tool": "guardrail collect", "guardrail_version": version(), "framework": framework,
                                 "n": n, "seed": seed, "classes": list(classes), "healthy_share": healthy_share,
                                 "model": model_name}
    if isinstance(model, EndpointSpec):
        generator["model_provenance"] = model.describe()
        generator["task_kinds"] = list(SMALL_TASK_KINDS)
    corpus_name = name or Path(out).name
    done = _earlier_run(Path(out), generator) if resume else None

    def save(episodes: list[Episode], rejected: list[RejectedEntry], partial: bool) -> Manifest:
        return write_corpus(out, episodes, name=corpus_name, rejected=rejected,
                            generator={**generator, **({"partial": True} if partial else {})})

    def save_partial(episodes: list[Episode], rejected: list[RejectedEntry]) -> None:
        save(episodes, rejected, True)

    episodes, rejected = collect(framework, n, seed, classes=classes, healthy_share=healthy_share,
                                 show_progress=show_progress, model=model,
                                 on_batch=save_partial if isinstance(model, EndpointSpec) else None, done=done)
    return save(episodes, rejected, False)


_SAME_RUN = ("framework", "n", "seed", "classes", "healthy_share", "model")
_TOO_SHORT = re.compile(r"run too short: T=(\d+) < \d+")


def _earlier_run(out: Path, generator: dict[str, Any]) -> tuple[list[Episode], list[RejectedEntry]] | None:
    """The episodes of an interrupted run of the same command at `out`, or None when there is none."""
    from guardrail.core.corpus import read_corpus

    if not (out / "manifest.json").is_file():
        return None
    corpus = read_corpus(out)
    earlier = json.loads((out / "manifest.json").read_text(encoding="utf-8")).get("generator") or {}
    differs = [k for k in _SAME_RUN if earlier.get(k) != generator.get(k)]
    if differs:
        raise ValueError(f"{out} holds a corpus from another command ({', '.join(differs)} differ); "
                         "choose another directory or drop --resume")
    # A position rejected under a rule that no longer rejects it is run again: too short under a higher
    # floor than today's, or (a real model) an injector that never fired, now kept as the model's own run.
    real = "model_provenance" in generator
    min_t = MIN_T_REAL if real else MIN_T

    def still_rejected(entry: RejectedEntry) -> bool:
        short = _TOO_SHORT.match(entry.reason)
        if short and int(short.group(1)) >= min_t:
            return False
        return not (real and entry.reason.startswith("injector never fired"))

    return corpus.episodes, [r for r in corpus.rejected if still_rejected(r)]
