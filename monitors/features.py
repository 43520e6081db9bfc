"""Per-step telemetry: the feature vector x_t (channels e, u, m, g) computed once per step and shared by all monitors.

Channels (see ../shared/seeds/002 §3-4, §8):
- ``e``: a deterministic signed feature hash of the step text's character 3-grams (no model, no network);
- ``u``: token-uncertainty aggregates from the step's logprobs (dropped when the deployment has none);
- ``m``: action metadata (tool vs final, error flag, lengths, latency, tool-event structure);
- ``g``: content grounding (lexical relevance of a tool result to its call and of the text to the
  episode's context, repeated identical calls, error-shaped and JSON-shaped results) and novelty
  against healthy runs (`monitors.novelty`: a result shape its tool never returned, words no
  healthy run and not the episode itself used).

The hot path (`TelemetryStream.update`) serves the monitor's per-step budget (featurize + score
<= 60 us median): it touches each character once through C-backed primitives (bytes, numpy,
`re`), keeps per-episode state in small Python sets, and writes into one preallocated vector.
"""

from __future__ import annotations

import bisect
import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from guardrail.core.events import Episode, Step, StepKind
from monitors.novelty import (
    NO_KEYS,
    EpisodeKeys,
    HealthyLexicon,
    args_text,
    argument_words,
    episode_keys,
    shape_key,
    text_key,
)
from monitors.novelty import step_words as _words

__all__ = ["CHANNELS", "G_SHAPE_SURPRISAL", "G_WORD_NOVELTY", "Telemetry", "TelemetryStream", "channel_dims"]

CHANNELS = ("e", "u", "m", "g")
U_DIM = 4
M_DIM = 8
G_DIM = 9
G_SHAPE_SURPRISAL = 7  # index within the g channel: surprisal of the step's result shapes (monitors.novelty)
G_WORD_NOVELTY = 8  # index within the g channel: share of the step's words new to healthy runs and the episode
_CONTEXT_CAP = 20000  # words an episode's novelty context keeps (bounded memory on endless episodes)
# Host jitter, in seconds: a garbage collection, another tenant, the guard's own warm-up. A deployment whose
# healthy steps nearly all answer faster than this (a cached or scripted model) fits a latency null with no
# spread, so one 0.4 s stall would alarm for the rest of the run: its latencies are read with this floor.
LATENCY_FLOOR_S = 0.5
_FAST_SHARE = 0.99  # "nearly all": the share of timed healthy steps under the floor that makes a deployment fast
MAX_LATENCY_FLOOR_S = 3600.0

# Words that make a result read as a failed call, whatever the tool's own error flag says.
_ERROR_WORDS = frozenset({"error", "exception", "traceback", "unavailable", "timed", "timeout",
                          "retry", "failed", "denied"})
_UNSURE = -2.3  # log(0.1)
_LOGPROB_FLOOR = 30.0  # a token logprob below -30 carries no more information; bound what a model can emit
_ERRORISH = re.compile(r"(?i)\b(error|exception|traceback|unavailable|timed out|timeout|too many requests|"
                       r"rate limit|retry|failed|denied|not found)\b|\b(4\d\d|5\d\d)\b")
# An HTTP-like 4xx/5xx status as a whole word: `\b[45]\d\d\b`, written to start with its character class so the
# regex engine skips ahead to a 4 or a 5 instead of testing a word boundary at every position (about half the
# time on real results); `_status_in` first asks whether the text holds a 4 or a 5 at all (a C scan).
_STATUS = re.compile(r"[45](?<!\w[45])\d\d(?!\w)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_KNUTH = np.uint32(2654435761)  # multiplicative hash constant (Knuth): spreads adjacent 3-gram codes
_LOW3 = np.uint32(0xFFFFFF)
_UINT32 = tuple(np.uint32(k) for k in range(32))  # shift amounts as numpy scalars
_U4 = np.dtype("<u4")
_BYTE_STRIDE = (1,)


def channel_dims(e_dim: int) -> dict[str, int]:
    return {"e": e_dim, "u": U_DIM, "m": M_DIM, "g": G_DIM}


def _hash_trigrams(text: str, e_dim: int, shift: int, cap: int, out: np.ndarray | None = None) -> np.ndarray:
    """Signed, L2-normalised bag of hashed character 3-grams over the UTF-8 bytes (written into `out` if given).

    Hot path: about eight numpy calls whatever the text length. The 3-gram codes come from one
    strided little-endian uint32 view of the bytes (each window's fourth byte masked off), so no
    Python loop touches a character; the bucket and sign are the top bits of one multiplicative hash
    (`shift` is 32 - log2(e_dim)). A text over `cap` bytes is hashed on its first 3/4 cap bytes and
    its last 1/4 cap bytes, and only those characters are encoded (a tool step's text can hold a
    20,000-character result).
    """
    head, tail = cap - cap // 4, cap // 4
    if len(text) > cap:  # more characters than cap: more bytes too; encode only the ends that are kept
        raw = text[:head].encode("utf-8", "replace")[:head] + text[-tail:].encode("utf-8", "replace")[-tail:]
    else:
        raw = text.encode("utf-8", "replace")
        if len(raw) > cap:
            # Keep head and tail: a tool step's call is at the head, its result's ending at the tail.
            raw = raw[:head] + raw[-tail:]
    n = len(raw) - 2
    if n < 1:
        if out is None:
            return np.zeros(e_dim)
        out[:] = 0.0
        return out
    # Positional arguments and numpy scalar operands: numpy parses keywords and converts Python ints per call.
    hashed = np.ndarray((n,), _U4, raw + b"\0", 0, _BYTE_STRIDE) & _LOW3
    hashed *= _KNUTH  # uint32 arithmetic wraps: a cheap multiplicative hash (in place: no temporaries)
    hashed >>= _UINT32[shift - 1]
    counts = np.bincount(hashed, None, 2 * e_dim)  # the bucket's top bit is the sign
    vec = counts[:e_dim] - counts[e_dim:]
    norm = math.sqrt(vec.dot(vec))
    if out is None:
        return vec / norm if norm > 0 else vec.astype(float)
    return np.divide(vec, norm if norm > 0 else 1.0, out=out)  # a zero vector stays zero


def _status_in(text: str) -> bool:
    return ("4" in text or "5" in text) and _STATUS.search(text) is not None


def _bounded(value: float | int | None, cap: float = 1e9) -> float:
    """A non-negative finite count or duration (None, NaN, negatives -> 0; huge -> cap)."""
    if value is None or not value > 0:
        return 0.0
    return float(min(value, cap))


@dataclass
class Telemetry:
    """The featurizer. `fit` decides which channels a deployment has; `start` gives a per-episode stream.

    Hyperparameters: `e_dim` (hash buckets, a power of two), `text_cap` (bytes of text hashed per
    step: bounds the work on untrusted output), `channels` (which channels to use when present),
    `novelty` (learn healthy result shapes and vocabulary for the g channel; off: those features are 0),
    `latency_floor_s` (host jitter: when at least 99% of the timed healthy steps are faster, `fit` sets
    `latency_floor_` to it and latencies below it read as equal to it; otherwise the null's own spread
    covers jitter and `latency_floor_` is 0; model files written before it existed read as 0).
    """

    e_dim: int = 32
    text_cap: int = 1024
    channels: tuple[str, ...] = CHANNELS
    min_logprob_coverage: float = 0.5
    novelty: bool = True
    latency_floor_s: float = LATENCY_FLOOR_S
    channels_: tuple[str, ...] = field(default=(), init=False)
    latency_floor_: float = field(default=0.0, init=False)
    slices_: dict[str, slice] = field(default_factory=dict, init=False)
    lexicon_: HealthyLexicon | None = field(default=None, init=False)
    _train_keys: list[EpisodeKeys] = field(default_factory=list, init=False, repr=False)

    def get_params(self) -> dict[str, Any]:
        return {"e_dim": self.e_dim, "text_cap": self.text_cap, "channels": list(self.channels),
                "min_logprob_coverage": self.min_logprob_coverage, "novelty": self.novelty,
                "latency_floor_s": self.latency_floor_s}

    def fit(self, healthy: Sequence[Episode]) -> Telemetry:
        """Keep the channels the deployment has (`u` only when most healthy steps carry logprobs); learn the
        healthy lexicon (result shapes, vocabulary) when `novelty` is on."""
        if self.e_dim < 4 or self.e_dim & (self.e_dim - 1):
            raise ValueError(f"e_dim must be a power of two >= 4, got {self.e_dim}")
        unknown = set(self.channels) - set(CHANNELS)
        if unknown:
            raise ValueError(f"unknown channel(s) {sorted(unknown)}; choose from {CHANNELS}")
        if not 0.0 <= self.latency_floor_s <= MAX_LATENCY_FLOOR_S:
            raise ValueError(f"latency_floor_s must be in [0, {MAX_LATENCY_FLOOR_S:g}] seconds, got {self.latency_floor_s}")
        steps = [s for e in healthy for s in e.steps]
        with_logprobs = sum(1 for s in steps if s.token_logprobs)
        has_u = bool(steps) and with_logprobs / len(steps) >= self.min_logprob_coverage
        self.set_channels(tuple(c for c in CHANNELS if c in self.channels and (c != "u" or has_u)))
        self.set_latency_floor(self.latency_floor_for(*self.latency_counts(steps)))
        self._train_keys = [self.episode_keys(e) for e in healthy]
        self.fit_lexicon(self._train_keys)
        return self

    def fit_transform(self, healthy: Sequence[Episode]) -> list[np.ndarray]:
        """`fit`, then each training episode's features with itself left out of the lexicon (see `transform`)."""
        self.fit(healthy)
        keys, self._train_keys = self._train_keys, []
        return [self._features(e, own) for e, own in zip(healthy, keys, strict=True)]

    def latency_counts(self, steps: Sequence[Step]) -> tuple[int, int]:
        """(steps with a latency, those of them under `latency_floor_s`): what `latency_floor_for` decides on (the
        per-shard half of a distributed fit)."""
        timed = [s.latency_s for s in steps if s.latency_s is not None]
        return len(timed), sum(1 for v in timed if v < self.latency_floor_s)

    def latency_floor_for(self, timed_steps: int, fast_steps: int) -> float:
        """`latency_floor_s` when at least 99% of `timed_steps` healthy steps (`fast_steps` of them) ran under it."""
        return self.latency_floor_s if timed_steps and fast_steps >= _FAST_SHARE * timed_steps else 0.0

    def set_latency_floor(self, floor: float) -> None:
        if not (math.isfinite(floor) and 0.0 <= floor <= MAX_LATENCY_FLOOR_S):
            raise ValueError(f"a latency floor must be a number of seconds in [0, {MAX_LATENCY_FLOOR_S:g}], got {floor}")
        self.latency_floor_ = float(floor)

    def episode_keys(self, episode: Episode) -> EpisodeKeys:
        """What `episode` adds to the healthy lexicon (the per-shard half of a distributed fit)."""
        return episode_keys(episode, self.text_cap) if self.novelty else NO_KEYS

    def fit_lexicon(self, keys: Sequence[EpisodeKeys]) -> None:
        self.lexicon_ = HealthyLexicon().fit(keys) if self.novelty and "g" in self.channels_ else None

    def get_state(self) -> dict[str, np.ndarray]:
        state = {"latency_floor": np.array(self.latency_floor_)}
        if self.lexicon_ is not None:
            state.update({f"lexicon.{k}": v for k, v in self.lexicon_.get_state().items()})
        return state

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        # A state from before the latency floor existed was fitted on latencies as measured: it reads them so.
        floor = state.get("latency_floor")
        self.set_latency_floor(0.0 if floor is None else float(np.asarray(floor, dtype=float).reshape(())))
        lexicon = {k[len("lexicon."):]: v for k, v in state.items() if k.startswith("lexicon.")}
        self.lexicon_ = HealthyLexicon().set_state(lexicon) if lexicon else None
        if self.lexicon_ is None and self.novelty and "g" in self.channels_:
            raise ValueError("the telemetry has novelty features but no healthy lexicon")

    def set_channels(self, channels: Sequence[str]) -> None:
        dims = channel_dims(self.e_dim)
        self.channels_ = tuple(channels)
        self.slices_ = {}
        start = 0
        for name in self.channels_:
            self.slices_[name] = slice(start, start + dims[name])
            start += dims[name]

    @property
    def dim_(self) -> int:
        return sum(s.stop - s.start for s in self.slices_.values())

    def start(self, task: str | None = None, own: EpisodeKeys = NO_KEYS) -> TelemetryStream:
        """A per-episode stream; `task` seeds the grounding context when the steps do not carry it.

        `own` (a training episode's `episode_keys`) is left out of the healthy lexicon: leave-one-out.
        """
        if not self.slices_:
            raise RuntimeError("Telemetry is not fitted: call fit(healthy_episodes) first")
        stream = TelemetryStream(self, own)
        if task:
            stream.set_task(task)
        return stream

    def transform(self, episode: Episode, *, leave_out: bool = False) -> np.ndarray:
        """The (T, dim) feature matrix of one episode (the same code path the stream uses).

        ``leave_out=True`` for an episode the lexicon was fitted on: its novelty features are then
        computed as if it had not been (as new as a test episode), so training and out-of-fold
        calibration see the distribution deployment will.
        """
        return self._features(episode, self.episode_keys(episode) if leave_out else NO_KEYS)

    def _features(self, episode: Episode, own: EpisodeKeys) -> np.ndarray:
        stream = self.start(episode.task, own)
        out = np.empty((len(episode.steps), self.dim_))
        for t, step in enumerate(episode.steps):
            out[t] = stream.update(step)
        return out


class TelemetryStream:
    """One episode's featurizer: `update(step)` returns x_t; per-episode state is the calls and words seen."""

    __slots__ = ("_tel", "_shift", "_seen_calls", "_context", "_last_tool", "_index", "_dim", "_own",
                 "_lexicon", "_seen_words", "_cap", "_e_dim", "_e", "_tail", "_u", "_m", "_g", "_order", "_latency_floor")

    def __init__(self, telemetry: Telemetry, own: EpisodeKeys = NO_KEYS) -> None:
        self._tel = telemetry
        self._shift = 32 - int(math.log2(telemetry.e_dim))
        self._seen_calls: set[str] = set()
        self._context: set[str] = set()
        self._seen_words: set[str] = set()  # the episode's own words so far: not novel when they recur
        self._last_tool: str | None = None
        self._index = 0
        self._dim = telemetry.dim_
        self._own = own
        self._lexicon = telemetry.lexicon_
        self._cap = telemetry.text_cap
        self._e_dim = telemetry.e_dim
        self._latency_floor = telemetry.latency_floor_
        # Channels come in CHANNELS order: e (an array) first when present, then u, m, g gathered as floats and
        # written from `_tail` on with one assignment (each numpy conversion costs about a microsecond).
        slices = telemetry.slices_
        self._e = slices.get("e")
        self._tail = self._e.stop if self._e is not None else 0
        self._u, self._m, self._g = ("u" in slices), ("m" in slices), ("g" in slices)
        # `set_channels` keeps the order it is given (a model file's, a distributed fit's): any other than
        # CHANNELS order is gathered channel by channel, as the slices say.
        self._order = () if list(slices) == [c for c in CHANNELS if c in slices] else tuple(slices.items())

    def set_task(self, task: str) -> None:
        self._context = _words(task, self._cap)
        self._seen_words |= self._context

    def update(self, step: Step) -> np.ndarray:
        cap = self._cap
        text = step.text or ""
        if step.task and not self._context:
            self.set_task(step.task)
        x = np.empty(self._dim)
        events = step.tool_events
        # Results are capped before any work on them (untrusted, possibly megabytes); lengths use the full size.
        if not events:
            result = ""
        elif len(events) == 1:
            result = (events[0].result or "")[:cap]
        else:
            result = "".join((ev.result or "")[:cap] for ev in events)
        if self._order:
            self._gather_in_order(step, text, result, x)
        else:
            if self._e is not None:
                _hash_trigrams(text, self._e_dim, self._shift, cap, out=x[self._e])
            tail: tuple[float, ...] = self._uncertainty(step.token_logprobs) if self._u else ()
            if self._m:
                tail += self._metadata(step, text)
            if self._g:
                tail += self._grounding(step, text, result, cap)
            x[self._tail:] = tail
        self._index += 1
        return x

    def _gather_in_order(self, step: Step, text: str, result: str, x: np.ndarray) -> None:
        cap = self._cap
        for name, sl in self._order:
            if name == "e":
                _hash_trigrams(text, self._e_dim, self._shift, cap, out=x[sl])
            elif name == "u":
                x[sl] = self._uncertainty(step.token_logprobs)
            elif name == "m":
                x[sl] = self._metadata(step, text)
            else:
                x[sl] = self._grounding(step, text, result, cap)

    @staticmethod
    def _uncertainty(logprobs: list[float]) -> tuple[float, float, float, float]:
        n = len(logprobs)
        if n == 0:
            return (0.0, 0.0, 0.0, 0.0)
        # C-level calls only (per-step budget): one sort gives the lowest, the highest and, by bisection, the
        # count under log(0.1); map() keeps the sum of squares out of the interpreter.
        mean = sum(logprobs) / n
        if not math.isfinite(mean):  # a NaN or an infinity among them (a finite mean means none)
            return TelemetryStream._cleaned_uncertainty(logprobs)
        ordered = sorted(logprobs)
        low = ordered[0]
        if not (low > -1e6 and ordered[-1] <= 0.0):
            return TelemetryStream._cleaned_uncertainty(logprobs)
        var = max(sum(map(operator.mul, logprobs, logprobs)) / n - mean * mean, 0.0)
        unsure = bisect.bisect_left(ordered, _UNSURE) / n  # tokens with p < 0.1
        return (max(mean, -_LOGPROB_FLOOR), max(low, -_LOGPROB_FLOOR), min(math.sqrt(var), _LOGPROB_FLOOR), unsure)

    @staticmethod
    def _cleaned_uncertainty(logprobs: list[float]) -> tuple[float, float, float, float]:
        # Untrusted input: keep only real log-probabilities, bounded, rather than poison every score.
        kept = [max(v, -_LOGPROB_FLOOR) for v in logprobs if math.isfinite(v) and v <= 0.0]
        return TelemetryStream._uncertainty(kept) if kept else (0.0, 0.0, 0.0, 0.0)

    def _metadata(self, step: Step, text: str) -> tuple[float, ...]:
        events = step.tool_events
        error = step.error or any(ev.is_error for ev in events)
        return (
            1.0 if step.kind is StepKind.TOOL_CALL else 0.0,
            1.0 if step.kind is StepKind.FINAL else 0.0,
            1.0 if error else 0.0,
            math.log1p(len(text)),
            math.log1p(max(_bounded(step.latency_s), self._latency_floor)),
            math.log1p(_bounded(step.output_tokens)),
            float(len(events)),
            math.log1p(sum(len(ev.result or "") for ev in events)),
        )

    def _grounding(self, step: Step, text: str, result: str, cap: int) -> tuple[float, ...]:
        events = step.tool_events
        lexicon = self._lexicon
        context = self._context
        if not events:
            text_words = _words(text, cap)
            # On-topic: the share of this step's words the episode's task and calls already used.
            context_relevance = len(text_words & context) / len(text_words) if text_words and context else 1.0
            shape_surprisal, word_novelty = self._novelty(step, text_words) if lexicon is not None else (0.0, 0.0)
            return (1.0, context_relevance, 0.0, 0.0, 0.0, 0.0, 0.0, shape_surprisal, word_novelty)
        repeated = 0.0
        same_tool = 0.0
        call_words: set[str] = set()
        novelty_args: set[str] = set()  # the call's words for novelty: entity-like tokens as their class
        seen_calls = self._seen_calls
        for ev in events:
            args = args_text(ev.args)
            key = ev.name + "\x00" + args
            if key in seen_calls:
                repeated += 1.0
            seen_calls.add(key)
            if ev.name == self._last_tool:
                same_tool = 1.0
            self._last_tool = ev.name
            said = _words(args, cap)
            call_words |= said
            if lexicon is not None:
                plain, entities = argument_words(args, cap, said)
                novelty_args |= plain
                if len(self._seen_words) < _CONTEXT_CAP:
                    self._seen_words |= entities  # an answer or a later result that names them is not new
        result_words = _words(result, cap)
        # Lexical relevance: does the result mention what was asked for (wrong documents do not)?
        arg_relevance = len(call_words & result_words) / len(call_words) if call_words else 1.0
        context |= call_words
        context_relevance = len(result_words & context) / len(result_words) if result_words and context else 1.0
        shape_surprisal, word_novelty = (0.0, 0.0)
        if lexicon is not None:
            # The same words `monitors.novelty.step_vocabulary` gives the lexicon: what was asked and read.
            shape_surprisal, word_novelty = self._novelty(step, novelty_args | result_words)
        head = result[:cap]
        first = result[:1]
        if first.isspace():
            first = result.lstrip()[:1]
        return (
            arg_relevance,
            context_relevance,
            repeated,
            same_tool,
            0.0 if _ERROR_WORDS.isdisjoint(result_words) and not _status_in(head) else 1.0,
            1.0 if first in ("{", "[") else 0.0,
            math.log1p(len(_NUMBER.findall(head))),
            shape_surprisal,
            word_novelty,
        )

    def _novelty(self, step: Step, words: set[str]) -> tuple[float, float]:
        """Surprisal of the step's result shapes, and the share of its words (the step text's) new to healthy
        runs and to the episode so far."""
        lexicon, own = self._lexicon, self._own
        assert lexicon is not None
        surprisal = 0.0
        for ev in step.tool_events:
            tool = text_key(ev.name)
            surprisal += lexicon.shape_surprisal(tool, shape_key(tool, ev.result or ""), own)
        if not words:
            return surprisal, 0.0
        seen = self._seen_words
        fresh = words - seen
        novel = lexicon.novel_words(fresh, own) if fresh else 0
        if len(seen) < _CONTEXT_CAP:
            seen |= fresh
        return surprisal, novel / len(words)
