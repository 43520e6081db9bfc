"""`guardrail fit` and `guardrail score`: per-shard featurization and scoring on a batch engine, closed-form fit here.

Shards are JSON-able descriptors ``{"corpus": path, "ids": [episode ids], ...}``; the per-shard
functions are top-level so a distributed engine can ship them to its workers.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from guardrail.core.cliutil import Command, emit_json, print_table, progress
from guardrail.core.corpus import CorpusError, iter_corpus, read_episodes
from guardrail.core.engine import add_engine_arguments, engine_from_args
from guardrail.core.events import Episode
from guardrail.core.runstore import absolute_location
from monitors.calibration import CALIBRATION_METHODS, conformal_threshold
from monitors.features import Telemetry
from monitors.inventory import HealthyInventory, take_inventory
from monitors.model_file import ModelFileError, load_monitor, save_monitor
from monitors.monitor import PRESETS, StepMonitor
from monitors.novelty import EpisodeKeys
from monitors.perturb import perturb

__all__ = ["FIT", "SCORE", "featurize_shard", "healthy_stats_shard", "score_shard"]

SHARD_SIZE = 32
_STATE_DTYPES = {"shape_keys": np.uint64, "tool_keys": np.uint32, "word_keys": np.uint32, "latency_floor": np.float64}


def _episodes(corpus: str, ids: Sequence[str]) -> list[Episode]:
    return read_episodes(corpus, ids)


def healthy_stats_shard(shard: dict[str, Any]) -> dict[str, Any]:
    """What a shard contributes to the telemetry fit: step counts for the channel decision (how many steps
    carry logprobs) and each episode's healthy-lexicon keys (JSON-able lists of integers)."""
    episodes = _episodes(shard["corpus"], shard["ids"])
    steps = [s for e in episodes for s in e.steps]
    telemetry = Telemetry(**shard["telemetry"])
    keys = [telemetry.episode_keys(e) for e in episodes]
    timed, fast = telemetry.latency_counts(steps)
    return {"steps": len(steps), "with_logprobs": sum(1 for s in steps if s.token_logprobs),
            "timed": timed, "fast": fast,
            "keys": [[sorted(k.shapes), sorted(k.tools), sorted(k.words)] for k in keys]}


def featurize_shard(shard: dict[str, Any]) -> dict[str, Any]:
    """The (T, dim) telemetry of each training episode in the shard as nested lists (JSON-able), novelty
    left-one-out, plus, when ``shard["perturb"]`` is set, the telemetry of synthetic perturbations of them
    (for a logistic fusion). ``shard["state"]`` is the fitted telemetry state as JSON lists (it travels with the
    shard, so a remote worker needs no shared filesystem)."""
    telemetry = Telemetry(**shard["telemetry"])
    telemetry.set_channels(shard["channels"])
    telemetry.set_state({key: np.asarray(value, dtype=_STATE_DTYPES.get(key.rsplit(".", 1)[-1], np.int64))
                         for key, value in shard["state"].items()})
    episodes = _episodes(shard["corpus"], shard["ids"])
    perturbed = perturb(episodes, random_state=int(shard.get("seed", 0))) if shard.get("perturb") else []
    return {"features": [telemetry.transform(e, leave_out=True).tolist() for e in episodes],
            "perturbed": [[i, telemetry.transform(e, leave_out=True).tolist()] for i, e in perturbed]}


def score_shard(shard: dict[str, Any]) -> list[dict[str, Any]]:
    """Score each episode in the shard with the model file at shard["model"]."""
    monitor = load_monitor(shard["model"])
    out = []
    for episode in _episodes(shard["corpus"], shard["ids"]):
        scored = monitor.score_episode(episode)
        row = scored.to_json()
        row["label"] = episode.label
        row["tau"] = episode.tau
        row["alarm"] = scored.alarm_step is not None
        out.append(row)
    return out


def _shards(corpus: str, ids: Sequence[str], **extra: Any) -> list[dict[str, Any]]:
    where = absolute_location(corpus)  # the same corpus or store from a worker's working directory
    return [{"corpus": where, "ids": list(ids[i:i + SHARD_SIZE]), **extra} for i in range(0, len(ids), SHARD_SIZE)]


def _mapped(engine: Any, fn: Callable[[dict[str, Any]], Any], shards: list[dict[str, Any]], desc: str,
            show: bool) -> Iterator[Any]:
    """engine.map in batches so the progress bar moves; results stay in shard order."""
    batch = max(1, int(getattr(engine, "workers", 1) or 1)) * 2
    for start in progress(range(0, len(shards), batch), desc=desc, total=math.ceil(len(shards) / batch),
                          enabled=show):
        yield from engine.map(fn, shards[start:start + batch])


# --------------------------------------------------------------------------- fit
def _fit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", nargs="+", help="corpus directories; only their healthy episodes are used")
    parser.add_argument("-o", "--output", required=True, help="model file to write (.npz)")
    parser.add_argument("--monitor", default="default", choices=sorted(PRESETS),
                        help="monitor configuration (default: the one the benchmark stands behind)")
    parser.add_argument("--beta", type=float, default=0.05, help="false-alarm budget for the threshold (default 0.05)")
    parser.add_argument("--calibration", default="crossfit", choices=CALIBRATION_METHODS,
                        help="crossfit (default): fit on every healthy episode and set the threshold from their "
                             "out-of-fold scores; split: hold out --val-fraction of them for the threshold")
    parser.add_argument("--val-fraction", type=float, default=0.25,
                        help="with --calibration split: share of healthy episodes held out (default 0.25)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")
    parser.add_argument("--no-budget-check", action="store_true",
                        help="skip the out-of-fold check that the false-alarm budget holds on later and longer runs "
                             "(it refits on earlier runs: about 2.5 fits more)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_engine_arguments(parser)


MIN_FIT_EPISODES = 5


def _not_enough(inventories: Sequence[HealthyInventory], found: int, detail: str = "") -> int:
    sys.stderr.write(f"guardrail fit: not enough usable healthy episodes to fit a monitor (found {found}, need "
                     f"{MIN_FIT_EPISODES}){detail}:\n" + "".join(f"  {inv.explain()}\n" for inv in inventories))
    return 2


def _run_fit(args: argparse.Namespace) -> int:
    if not 0.0 < args.val_fraction < 1.0:
        sys.stderr.write("guardrail fit: --val-fraction must be in (0, 1)\n")
        return 2
    inventories: list[HealthyInventory] = []
    for corpus in args.corpus:
        try:
            inventories.append(take_inventory(corpus))
        except CorpusError as exc:
            sys.stderr.write(f"guardrail fit: {exc}\n")
            return 2
    found = sum(len(inv.usable) for inv in inventories)
    if found < MIN_FIT_EPISODES:
        return _not_enough(inventories, found)
    split = args.calibration == "split"
    train_ids: list[tuple[str, str]] = []
    val_ids: list[tuple[str, str]] = []
    rng = np.random.default_rng(args.seed)
    for corpus, inventory in zip(args.corpus, inventories, strict=True):
        healthy = inventory.usable
        order = rng.permutation(len(healthy))
        n_val = max(1, round(args.val_fraction * len(healthy))) if split and healthy else 0
        val_ids += [(corpus, healthy[i]) for i in order[:n_val]]
        # Training runs keep the corpus's order (as recorded): the budget check reads time from it.
        train_ids += [(corpus, healthy[i]) for i in sorted(order[n_val:].tolist())]
    show = not args.quiet
    monitor = StepMonitor.preset(args.monitor, beta=args.beta, calibration=args.calibration)
    settings = (monitor.telemetry or Telemetry()).get_params()
    with engine_from_args(args) as engine, tempfile.TemporaryDirectory() as tmp:
        train_shards = [s for corpus in args.corpus
                        for s in _shards(corpus, [i for c, i in train_ids if c == corpus], telemetry=settings)]
        counts = list(_mapped(engine, healthy_stats_shard, train_shards, "channels", show))
        steps = sum(c["steps"] for c in counts)
        coverage = sum(c["with_logprobs"] for c in counts) / steps if steps else 0.0
        telemetry = Telemetry(**settings)
        telemetry.set_channels([c for c in telemetry.channels
                                if c != "u" or coverage >= telemetry.min_logprob_coverage])
        telemetry.set_latency_floor(telemetry.latency_floor_for(sum(c["timed"] for c in counts),
                                                                sum(c["fast"] for c in counts)))
        telemetry.fit_lexicon([EpisodeKeys(frozenset(a), frozenset(b), frozenset(c))
                               for shard_counts in counts for a, b, c in shard_counts["keys"]])
        state = {key: value.tolist() for key, value in telemetry.get_state().items()}
        channel_info = {"channels": list(telemetry.channels_), "state": state}
        features: list[np.ndarray] = []
        perturbed: list[tuple[int, np.ndarray]] = []
        featurize = [{**s, **channel_info, "perturb": monitor.fusion == "logistic", "seed": n}
                     for n, s in enumerate(train_shards)]
        for shard_out in _mapped(engine, featurize_shard, featurize, "featurize", show):
            offset = len(features)
            features += [np.asarray(f, dtype=float).reshape(-1, telemetry.dim_) for f in shard_out["features"]]
            perturbed += [(offset + i, np.asarray(f, dtype=float).reshape(-1, telemetry.dim_))
                          for i, f in shard_out["perturbed"]]
        monitor.telemetry_ = telemetry
        try:
            monitor.fit_features(features, perturbed)
        except ValueError as exc:  # e.g. every episode read back shorter than its inventory said
            return _not_enough(inventories, len(features), f" ({exc})")
        if split:
            # Threshold: score the held-out healthy episodes with the saved model on the same engine.
            draft = str(Path(tmp) / "draft.npz")
            save_monitor(monitor, draft)
            val_shards = [s for corpus in args.corpus
                          for s in _shards(corpus, [i for c, i in val_ids if c == corpus], model=draft)]
            scored = list(_mapped(engine, score_shard, val_shards, "calibrate", show))
            maxima = [row["max_score"] for rows in scored for row in rows]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # said below, from the calibration record, for both methods
                monitor.set_calibration(conformal_threshold(maxima, args.beta, "split"))
    extra: dict[str, Any] = {"corpora": [str(c) for c in args.corpus], "monitor": args.monitor}
    if not args.no_budget_check:
        budget = _check_budget(monitor, args.corpus, train_ids)
        if budget is not None:
            extra["budget_check"] = budget.to_json()
            sys.stderr.write(f"guardrail fit: {budget.describe()}\n")
            for warning in budget.warnings:
                sys.stderr.write(f"guardrail fit: warning: {warning}\n")
    save_monitor(monitor, args.output, extra=extra)
    calibration = monitor.calibration_
    if calibration is not None and calibration.fa_bound > args.beta + 1e-12:
        sys.stderr.write(f"guardrail fit: warning: only {calibration.n} healthy calibration episodes: the threshold "
                         f"is their maximum and bounds the false-alarm rate by {calibration.fa_bound:.3f}, not "
                         f"{args.beta}; fit on more healthy episodes\n")
    described = calibration.describe() if calibration is not None else "no threshold"
    sys.stderr.write(f"wrote {args.output}: {args.monitor} on {len(features)} healthy episodes, channels "
                     f"{','.join(telemetry.channels_)}; {described}\n")
    return 0


def _check_budget(monitor: StepMonitor, corpora: Sequence[str], train_ids: Sequence[tuple[str, str]]) -> Any:
    """The fitted monitor's budget check on its training runs, in corpus order (`StepMonitor.check_budget`);
    None, with a note, when those runs cannot be read back as fitted."""
    episodes = [e for corpus in corpora for e in _episodes(corpus, [i for c, i in train_ids if c == corpus])]
    try:
        return monitor.check_budget(episodes)
    except ValueError as exc:  # the runs read back differently from the fitted ones (a corpus changed meanwhile)
        sys.stderr.write(f"guardrail fit: the budget check was skipped: {exc}\n")
        return None


# --------------------------------------------------------------------------- score
def _score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", help="corpus directory to score")
    parser.add_argument("--model", required=True, help="model file written by `guardrail fit`")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per episode: max score, alarm step, per-channel scores")
    add_engine_arguments(parser)


def _run_score(args: argparse.Namespace) -> int:
    try:
        load_monitor(args.model)  # fail here, once, with the model file's own message
        ids = [e.episode_id for e in iter_corpus(args.corpus)]
    except (ModelFileError, CorpusError, FileNotFoundError) as exc:
        sys.stderr.write(f"guardrail score: {exc}\n")
        return 2
    shards = _shards(args.corpus, ids, model=str(Path(args.model).resolve()))
    rows: list[dict[str, Any]] = []
    with engine_from_args(args) as engine:
        for batch in _mapped(engine, score_shard, shards, "score", not args.json):
            rows.extend(batch)
            if args.json:
                for row in batch:
                    emit_json(row)
    if not args.json:
        print_table([{"episode_id": r["episode_id"], "label": r["label"], "max_score": r["max_score"],
                      "alarm_step": r["alarm_step"]} for r in rows])
    return 0


FIT = Command(help="fit a step monitor on healthy episodes and write a model file", add_arguments=_fit_arguments,
              run=_run_fit)
SCORE = Command(help="score every episode of a corpus with a fitted model", add_arguments=_score_arguments,
                run=_run_score)
