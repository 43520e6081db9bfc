"""Novelty against healthy runs: the result shapes each tool returned and the words the agent used, counted by episode.

Two content-level signals for the grounding channel (../shared/seeds/002 §8), learned from healthy
episodes only: a tool result whose *shape* (numbers -> 9, runs of words -> a) that tool never
returned in a healthy run (a corrupted or substituted result, an injected instruction), scored
as its surprisal under a Good-Turing estimate of how often the tool returns new shapes at all
(so a tool with free-form results is not surprising); and the share of a step's words that
neither the episode's own context nor any healthy run used (a drifted goal, a wrong document).

Counts are per episode, so a training episode can be featurized leave-one-out (its own
contributions removed): it then looks exactly as new to the model as a test episode does, which
the out-of-fold calibration depends on. Keys are CRC-32s of the text: the fitted state is three
small integer tables, stored in the model file (no raw text).
"""

from __future__ import annotations

import math
import re
import string
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from guardrail.core.events import Episode, Step

__all__ = ["EpisodeKeys", "HealthyLexicon", "argument_words", "episode_keys", "result_shape", "text_key"]

SHAPE_INPUT_CAP = 256  # characters of a result whose shape is taken (its head: the form, not the payload)
SHAPE_CAP = 64
# ASCII digits -> 9 and letters -> a in one C-level pass, then runs collapse: "Davis, 2303.14295v1" -> "a, 9a9".
_SHAPE_CLASSES = str.maketrans({**dict.fromkeys(string.digits, "9"), **dict.fromkeys(string.ascii_letters, "a")})
_NUMBER_RUN = re.compile(r"9[9.,]*9")
_WORD_RUN = re.compile(r"a[a ,]*a")
_WORD = re.compile(r"[a-z][a-z0-9]{2,}")
# A token as written (case kept): letters and digits, joined by - _ . inside ("SKU-1003", "Dakar", "12kg", "v2.1").
_TOKEN = r"[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?"
# The tokens that can be entities: those starting with a capital, or holding a digit (the rest are plain words).
_ENTITY_TOKEN = re.compile(rf"(?<![\w.-])(?=[A-Z]|[\w.-]*\d){_TOKEN}")
_DIGIT_RUN = re.compile(r"9+")
_LETTER_RUN = re.compile(r"a+")
ENTITY_MARK = "\x01"  # entity classes start with a byte no word has, so a class never meets a word


def result_shape(result: str) -> str:
    """The form of a tool result: numbers become 9, runs of (ASCII) words with their spaces and commas become a."""
    classes = result[:SHAPE_INPUT_CAP].translate(_SHAPE_CLASSES)
    return _WORD_RUN.sub("a", _NUMBER_RUN.sub("9", classes))[:SHAPE_CAP]


_KEY_CACHE: dict[str, int] = {}
_KEY_CACHE_SIZE = 50_000  # short strings (words, tool names) recur: hashing each once keeps the per-step budget
_KEY_CACHE_LENGTH = 40
_WORD_CACHE_SIZE = 100_000


def text_key(text: str) -> int:
    """CRC-32 of the UTF-8 text: stable across processes (unlike hash()), so it can be stored in a model file."""
    key = _KEY_CACHE.get(text)
    if key is None:
        key = zlib.crc32(text.encode("utf-8", "replace"))
        if len(text) <= _KEY_CACHE_LENGTH and len(_KEY_CACHE) < _KEY_CACHE_SIZE:
            _KEY_CACHE[text] = key
    return key


def shape_key(tool: int, result: str) -> int:
    """A (tool, result shape) key: the tool's key in the high 32 bits, so the tool is recoverable from it."""
    return (tool << 32) | text_key(result_shape(result))


def step_words(text: str, cap: int) -> set[str]:
    return set(_WORD.findall(text[:cap].lower()))


def entity_class(token: str) -> str | None:
    """The class of an entity-like token, or None for an ordinary word.

    Names (capitalised: ``Dakar``, ``Jane``, ``USD``) are ``Aa`` / ``A``; identifiers and numbers with units
    (a letter and a digit: ``SKU-1003``, ``item-3``, ``12kg``, ``v2``) their shape, as result shapes
    generalize digits (``a-9``, ``9a``, ``a9``). A deployment's next city, customer or SKU is then one more
    member of a class its healthy runs already used, not a new word.

    Hot path (a tool call's arguments hold a few of these per step): an ASCII token is classified by
    C-level string methods on its `_SHAPE_CLASSES` translation, which maps exactly its digits to 9 and
    its letters to a; any other token takes the character-by-character tests (`_unicode_entity_class`),
    whose Unicode digits, letters and cases the translation does not cover.
    """
    if not token.isascii():
        return _unicode_entity_class(token)
    classes = token.translate(_SHAPE_CLASSES)
    if "9" in classes:
        if "a" not in classes:
            return None  # a bare number: never a word (the word pattern starts with a letter)
        return ENTITY_MARK + _LETTER_RUN.sub("a", _DIGIT_RUN.sub("9", classes))[:SHAPE_CAP]
    if token[0].isupper():
        # ASCII: a cased token that is not all upper case holds a lower-case letter.
        return ENTITY_MARK + ("A" if token.isupper() else "Aa")
    return None


def _unicode_entity_class(token: str) -> str | None:
    """`entity_class` of a token with a non-ASCII character (the reference definition, character by character)."""
    has_digit = any(c.isdigit() for c in token)
    if has_digit:
        if not any(c.isalpha() for c in token):
            return None
        shape = _LETTER_RUN.sub("a", _DIGIT_RUN.sub("9", token.translate(_SHAPE_CLASSES)))
        return ENTITY_MARK + shape[:SHAPE_CAP]
    if token[0].isupper():
        return ENTITY_MARK + ("Aa" if any(c.islower() for c in token) else "A")
    return None


def argument_words(text: str, cap: int, words: set[str] | None = None) -> tuple[set[str], set[str]]:
    """A tool call's arguments for the novelty channel: (its words with every entity-like token replaced by its
    `entity_class`, the entity tokens' own lowercase words). `words` are `step_words` of the same text, when
    the caller has them.

    Arguments are where a task's entities enter a run (the city to look up, the SKU to price, the
    customer to fetch). Their classes are what the novelty score compares with healthy runs; their own
    words join the episode's context, so a result or an answer that repeats them is not new either.
    Hot path: one C-level scan finds the candidate tokens; Python touches only those.
    """
    head = text[:cap]
    if words is None:
        words = set(_WORD.findall(head.lower()))
    kinds: set[str] = set()
    named = []
    for token in _ENTITY_TOKEN.findall(head):
        kind = entity_class(token)
        if kind is not None:
            kinds.add(kind)
            named.append(token)
    if not named:
        return set(words), set()
    # One scan for every entity token's own words: a space matches no word, so none spans two tokens.
    entities = set(_WORD.findall(" ".join(named).lower()))
    return (words | kinds) - entities, entities


def args_text(args: Any) -> str:
    if isinstance(args, dict):
        return " ".join(map(str, args.values()))
    return str(args)


def step_vocabulary(step: Step, cap: int) -> set[str]:
    """The words a step brings: a tool step's call arguments (entity-like tokens as their class, and their own
    words; `argument_words`) and results (what it asked for and read; the telemetry computes the same sets),
    any other step's text."""
    events = step.tool_events
    if not events:
        return step_words(step.text or "", cap)
    words: set[str] = set()
    for event in events:
        plain, entities = argument_words(args_text(event.args), cap)
        words |= plain | entities
    return words | step_words("".join((event.result or "")[:cap] for event in events), cap)


@dataclass(frozen=True)
class EpisodeKeys:
    """What one episode contributes: its (tool, shape) keys (see `shape_key`), tool keys and word keys."""

    shapes: frozenset[int]
    tools: frozenset[int]
    words: frozenset[int]


NO_KEYS = EpisodeKeys(frozenset(), frozenset(), frozenset())


def episode_keys(episode: Episode, cap: int) -> EpisodeKeys:
    shapes: set[int] = set()
    tools: set[int] = set()
    words: set[str] = set()
    for step in episode.steps:
        for event in step.tool_events:
            tool = text_key(event.name)
            tools.add(tool)
            shapes.add(shape_key(tool, event.result or ""))
        words |= step_vocabulary(step, cap)
    return EpisodeKeys(frozenset(shapes), frozenset(tools), frozenset(text_key(w) for w in words))


class HealthyLexicon:
    """Episode counts of result shapes (per tool), tools and words over healthy training episodes."""

    def fit(self, keys: Iterable[EpisodeKeys]) -> HealthyLexicon:
        shapes: Counter[int] = Counter()
        tools: Counter[int] = Counter()
        words: Counter[int] = Counter()
        n = 0
        for k in keys:
            n += 1
            shapes.update(k.shapes)
            tools.update(k.tools)
            words.update(k.words)
        self.n_episodes_ = n
        self.shape_counts_ = dict(shapes)
        self.tool_counts_ = dict(tools)
        self.word_counts_ = dict(words)
        self._derive()
        return self

    def _derive(self) -> None:
        self._known: set[str] = set()  # words found in the table (and so not novel), remembered
        self._novel: set[str] = set()  # words not in it
        # Good-Turing: the chance a tool returns a never-seen shape is about the share of its shapes seen once.
        singletons: Counter[int] = Counter(s >> 32 for s, c in self.shape_counts_.items() if c == 1)
        self.new_shape_surprisal_ = {t: -math.log((singletons[t] + 1) / (c + 2)) for t, c in self.tool_counts_.items()}
        new_tools = sum(1 for c in self.tool_counts_.values() if c == 1)
        self.new_tool_surprisal_ = -math.log((new_tools + 1) / (self.n_episodes_ + 2))

    def shape_surprisal(self, tool: int, shape: int, own: EpisodeKeys) -> float:
        """0 for a shape this tool returned in a healthy run (other than `own`), else its surprisal in nats."""
        if self.shape_counts_.get(shape, 0) - (shape in own.shapes) > 0:
            return 0.0
        if self.tool_counts_.get(tool, 0) - (tool in own.tools) > 0:
            return self.new_shape_surprisal_[tool]
        return self.new_tool_surprisal_

    def word_seen(self, word: int, own: EpisodeKeys) -> bool:
        return self.word_counts_.get(word, 0) - (word in own.words) > 0

    def novel_words(self, words: set[str], own: EpisodeKeys) -> int:
        """How many of `words` no healthy episode (other than `own`) used.

        The hot path: words already looked up are remembered as strings (bounded sets), so a step
        costs two C-level set differences and a hash only for words never met before.
        """
        counts, mine = self.word_counts_, own.words
        if mine:  # leave-one-out (fitting only): no cache, the answer depends on the episode
            return sum(1 for key in map(text_key, words) if counts.get(key, 0) - (key in mine) <= 0)
        unsure = words - self._known
        if not unsure:
            return 0
        novel = unsure & self._novel
        for word in unsure - novel:
            if text_key(word) in counts:
                if len(self._known) < _WORD_CACHE_SIZE:
                    self._known.add(word)
            else:
                novel.add(word)
                if len(self._novel) < _WORD_CACHE_SIZE:
                    self._novel.add(word)
        return len(novel)

    # ------------------------------------------------------------------ model files
    def get_state(self) -> dict[str, np.ndarray]:
        shape_keys = np.array(sorted(self.shape_counts_), dtype=np.uint64)
        tool_keys = np.array(sorted(self.tool_counts_), dtype=np.uint32)
        word_keys = np.array(sorted(self.word_counts_), dtype=np.uint32)
        return {
            "n_episodes": np.array([self.n_episodes_], dtype=np.int64),
            "shape_keys": shape_keys,
            "shape_counts": np.array([self.shape_counts_[int(k)] for k in shape_keys], dtype=np.int64),
            "tool_keys": tool_keys,
            "tool_counts": np.array([self.tool_counts_[int(k)] for k in tool_keys], dtype=np.int64),
            "word_keys": word_keys,
            "word_counts": np.array([self.word_counts_[int(k)] for k in word_keys], dtype=np.int64),
        }

    def set_state(self, state: dict[str, np.ndarray]) -> HealthyLexicon:
        def table(keys: str, values: str) -> dict[int, int]:
            k, v = np.asarray(state[keys]), np.asarray(state[values])
            if k.ndim != 1 or k.shape != v.shape:
                raise ValueError(f"{keys} and {values} must be equal-length vectors")
            return dict(zip(k.astype(np.uint64).tolist(), v.astype(np.int64).tolist(), strict=True))

        self.n_episodes_ = int(np.asarray(state["n_episodes"]).reshape(-1)[0])
        self.shape_counts_ = table("shape_keys", "shape_counts")
        self.tool_counts_ = table("tool_keys", "tool_counts")
        self.word_counts_ = table("word_keys", "word_counts")
        if {s >> 32 for s in self.shape_counts_} - set(self.tool_counts_):
            raise ValueError("a shape names a tool the table does not count")
        self._derive()
        return self
