"""`RunRecorder`: the Guard's link to a run store, off the agent's hot path.

The Guard hands the recorder each episode's start, steps, non-allow decisions and end. On the
agent's thread that is one append to a bounded deque (a full one drops the step and counts it,
never blocks); a writer thread wakes every `_LINGER_S`, or at once for an episode's end or a
flush, and serializes, redacts and writes everything waiting in one transaction. Starts, ends and
labels are never dropped; an episode that ends while the writer is behind waits for it, at most
`_CATCH_UP_S`. An episode is in the store within `_LINGER_S` of its end (`flush()`
waits for it; ``finish_timeout_s`` makes every end wait). Nothing the recorder does raises into
the agent: a store that fails is logged once per kind of error and counted.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import math
import os
import re
import socket
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from guardrail.core.events import Action, Decision, Episode, Finding, Step, Verdict
from guardrail.core.redaction import SECRET_KEY_WORDS, redact_value
from guardrail.core.redaction import is_secret_key as secret_key
from guardrail.core.runstore.base import (
    DEFAULT_MAX_STEPS,
    MAX_STEP_BYTES,
    Begin,
    DecisionOp,
    Finish,
    RunStore,
    StepLine,
    StoreOp,
    now,
    open_store,
)
from guardrail.core.runstore.records import FindingRecord, RunHeader, RunOutcome
from guardrail.core.version import version

if TYPE_CHECKING:
    from guardrail.core.layer import EpisodeContext

__all__ = ["RunRecorder", "episode_ops", "finding_record", "may_hold_secret", "redact_content", "step_record"]

_log = logging.getLogger("guardrail.runstore")

_MESSAGE_CAP = 1_000  # a finding's message and hint as stored
_CONTENT_CAP = 20_000  # one stored string (a step text, a tool result): the step path caps results at this too
_BATCH = 512  # operations per store write
# How long the writer sleeps between drains, so one commit carries many steps (many episodes at load). It sleeps
# rather than waiting on a queue: a queue's consumer is woken for every item, and each wake-up costs the agent's
# thread a GIL hand-over. An episode's end with a waiter, a flush and a close wake it at once.
_LINGER_S = 0.05
# The longest an episode's end waits for a writer that is behind. Each statement the store's driver runs lets go
# of the GIL and must win it back; in a process whose agent threads never wait (a benchmark, a batch replay) that
# took 25-35 ms a statement here, so the writer fell behind and the queue overflowed (bench load, one thread:
# 14,874 of 20,000 steps dropped). Waiting at an episode's end, only then, gives the writer the GIL.
_CATCH_UP_S = 1.0
_CONTENT_KEYS = ("text", "task")
_HOST = socket.gethostname()


def _stamp(seconds: float) -> str:
    """A `time.time()` reading as the store's timestamps are written (ISO 8601, UTC, milliseconds)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


# The recorder redacts every string it stores, on the writer thread, for every step of every agent: the full
# rules cost ~120 us a string (several ms on a long one), the recording budget is 30 us a step. A string the
# rules cannot change is kept as it is, decided in a few microseconds: no token prefix or key block, no
# secret-named word next to an assignment, a flag or a header, no run of token characters that mixes letters
# and digits over 16 or more (keys, tokens, high-entropy strings) and no hex run of 9 or more. Everything else
# gets the full rules. tests/test_runstore_redaction.py holds this equal to redacting everything, on the
# hostile secret suite and on every real corpus.
_STRONG = ("-----begin", "bearer", "eyj", "xox", "sk-", "sk_", "pk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
           "github_pat", "glpat-", "gocspx-", "ya29.", "npm_", "aiza", "hf_", "sg.", "sq0", "akia", "asia", "mysql",
           "mariadb", "basic ", "digest ", "sshpass", "redis-cli")
# The full rules' secret-naming words (one source) and a few more of ours.
_NAMED = tuple(sorted({*SECRET_KEY_WORDS, "credential", "session", "private"}))
_FLAG_WORDS = frozenset({*SECRET_KEY_WORDS, "credential", "session"})
# After a named word, what any rule keying on it needs: more key characters, an optional (escaped) closing quote
# or ``[]``, then an assignment or comparison (``:``, ``=``, ``:=``, ``=>``, ``==``, ``!=``), an element's ``>``
# or ``<``, or an XML ``value=`` pair. A looser test than the rules' own: never a miss, sometimes the full rules
# for nothing.
_NAMED_THEN_ASSIGNMENT_PATTERN = rf"(?:{'|'.join(_NAMED)})[\w.-]*(?:\\*[\"'`])?(?:\[\])?(?:[ \t]*[:=!<>]|\s+value\s*=)"
_NAMED_IN_CONTEXT = re.compile(rf"{_NAMED_THEN_ASSIGNMENT_PATTERN}|--?[\w-]*(?:{'|'.join(sorted(_FLAG_WORDS))})",
                               re.IGNORECASE)
# Commands whose rules take a password after a short option (`redaction._SHORT_PASSWORD`: ``docker login -p``).
_LOGIN_WITH_OPTION = re.compile(r"login\b[^\n;|&]*\s-[pa]\b")
_URL_CREDENTIALS = re.compile(r"://[^\s/@]+@|(?<!\S)-u[ \t]|--user")
_DIGIT = re.compile(r"[0-9]")
_LETTER = re.compile(r"[A-Za-z]")


# The strong prefixes are searched for on their own (one pass over the lowered text); the named words are found in
# a second pass and their context matched where they stand, not searched for through the whole text (that search
# took ~180 us on a 1 kB tool result, the anchored matches ~1). One pass for both lists would not do: its
# matches do not overlap, so a named word could hide a strong prefix that starts inside it ("authf_...").
_STRONG_WORD = re.compile("|".join(map(re.escape, _STRONG)))
_NAMED_WORD = re.compile("|".join(map(re.escape, _NAMED)))
_NAMED_THEN_ASSIGNMENT = re.compile(_NAMED_THEN_ASSIGNMENT_PATTERN, re.IGNORECASE)
_LONG_MIXED_CASE = 20  # a letters-only run this long with both cases may be a base64 secret (the entropy rule)
# Runs of token characters, found with bytes.translate (C, ~1 ns a byte) instead of a regex trying every position:
# a hex run of 9 lies inside a token run of 9 or more (hex characters are token characters), and only texts with a
# token run of 16 or more need the mixed-run scan. Bytes from 0x80 are no token character, as in the regexes.
_TOKEN_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_~.:-"
_HEX_CHARS = b"0123456789abcdefABCDEF"
_AS_TOKEN = bytes(ord("t") if byte in _TOKEN_CHARS else ord(" ") for byte in range(256))
_AS_HEX = bytes(ord("h") if byte in _HEX_CHARS else ord(" ") for byte in range(256))
_LONG_RUN = re.compile(r"[A-Za-z0-9+/=_~.:-]{16,}")


def _named_in_context(text: str, lowered: str, starts: list[int]) -> bool:
    """`_NAMED_IN_CONTEXT.search(text)` or more, tried only at the named words' `starts` (found in `lowered`): a
    word followed by an assignment, or preceded by a flag's dash with only word characters and dashes between
    (for every named word, not only the flag words: never a miss, sometimes the full rules for nothing).
    Checking the non-overlapping matches suffices: an overlapping later word is covered by the earlier one."""
    if len(lowered) != len(text):  # lowering moved the offsets (a few non-ASCII letters): search it all
        return _NAMED_IN_CONTEXT.search(text) is not None
    for start in starts:
        if _NAMED_THEN_ASSIGNMENT.match(text, start):
            return True
        before = start
        while before > 0 and (text[before - 1] in "_-" or text[before - 1].isalnum()):  # `[\w-]`, backwards
            before -= 1
            if text[before] == "-":
                return True
    return False


def may_hold_secret(text: str) -> bool:
    """False only for a string the redaction rules would leave unchanged (see the comment above)."""
    lowered = text.lower()
    if _STRONG_WORD.search(lowered) is not None:
        return True
    first = _NAMED_WORD.search(lowered)  # most texts have none: one search, no list
    if first is not None and _named_in_context(
            text, lowered, [first.start(), *(found.start() for found in _NAMED_WORD.finditer(lowered, first.end()))]):
        return True
    if ("@" in text or "-u" in text) and _URL_CREDENTIALS.search(text):
        return True
    if "login" in lowered and _LOGIN_WITH_OPTION.search(lowered):
        return True
    data = text.encode("utf-8", "surrogatepass")
    if b"hhhhhhhhh" in data.translate(_AS_HEX):
        return True
    if b"tttttttttttttttt" in data.translate(_AS_TOKEN):
        for run in _LONG_RUN.finditer(text):
            found_run = run.group()
            if _LETTER.search(found_run) and (_DIGIT.search(found_run) or (
                    len(found_run) >= _LONG_MIXED_CASE and not found_run.islower() and not found_run.isupper())):
                return True
    return False


# An episode's task rides on its start, its end and its steps: decided once per task, not each time (tasks up to
# `_CACHED_TASK_CHARS` are remembered, so the cache holds at most 64 of those).
_CACHED_TASK_CHARS = 8_192
_cached_may_hold_secret = functools.lru_cache(maxsize=64)(may_hold_secret)


def _task_may_hold_secret(task: str) -> bool:
    return _cached_may_hold_secret(task) if len(task) <= _CACHED_TASK_CHARS else may_hold_secret(task)


def _redact_task(task: Any) -> Any:
    """An episode's task, redacted (it is stored at the start, at the end and on steps: decided once)."""
    if isinstance(task, str) and not _task_may_hold_secret(task):
        return task
    return redact_value(task)


def redact_content(value: Any) -> Any:
    """`value` (JSON-able) with secrets masked in every string, under the span redaction rules, same shape."""
    if isinstance(value, str) and not may_hold_secret(value):
        return value  # the fast path: nothing the rules could change
    return redact_value(value)


def _cap(text: str | None, cap: int) -> str | None:
    if text is None or len(text) <= cap:
        return text
    return text[:cap] + f"...[{len(text) - cap} chars cut]"


def finding_record(finding: Finding, redact: Callable[[Any], Any] | None = None) -> FindingRecord:
    """A finding as the store keeps it: what fired, where, and its message and hint redacted and capped."""
    message, hint = finding.message, finding.hint
    if redact is not None:
        message = redact(message)
        hint = None if hint is None else redact(hint)
    return FindingRecord(layer=finding.layer, check=finding.check, severity=finding.severity.value,
                         step=finding.step, predicate=finding.predicate, blocking=finding.blocking,
                         message=_cap(message, _MESSAGE_CAP) or "", hint=_cap(hint, _MESSAGE_CAP))


def _close_at_exit(reference: weakref.ref[RunRecorder]) -> None:
    recorder = reference()
    if recorder is not None:
        recorder.close(timeout_s=5.0)


class _Waiter:
    """Set when the writer has handled everything put before it (a flush, an episode's end, a label)."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = threading.Event()


class RunRecorder:
    """Records every episode a Guard runs into `store` (a `RunStore` or where one opens: a directory,
    ``sqlite:///...``, ``postgresql://...``).

    ``redact`` masks secrets in every stored string with the span redaction rules (on by default: a
    store keeps content far longer than a span). ``max_queue`` bounds what waits for the writer;
    ``max_steps`` what one episode may store. ``finish_timeout_s`` is the longest an episode's end
    waits for the store (0, the default: it never waits, and is in the store within `_LINGER_S`;
    `flush()` and `label()` wait for what came before them).
    """

    def __init__(self, store: RunStore | str, *, redact: bool = True, max_queue: int = 10_000,
                 max_steps: int = DEFAULT_MAX_STEPS, finish_timeout_s: float = 0.0) -> None:
        self.store = open_store(store)
        self.redact = redact
        self.max_steps = max_steps
        self.finish_timeout_s = finish_timeout_s
        self.dropped = 0  # steps and decisions lost to a full queue
        self.written = 0  # operations the store accepted
        self.errors = 0  # batches the store refused
        self.writer_cpu_s = 0.0  # CPU time the writer thread spent serializing and writing (benchmarks read it)
        self.max_queue = max_queue
        # A deque, not a queue.Queue: an append is atomic under the GIL and takes no lock (the agent's whole
        # cost per step); the writer drains it with popleft. The bound is checked before appending, so two
        # agent threads racing may overshoot it by one item each.
        self._items: deque[Any] = deque()
        self._half_full = max_queue // 2
        self._catch_up_at = min(_BATCH, max_queue // 4)
        self._wake = threading.Event()
        self._dropped_by_episode: dict[str, int] = {}
        self._open: dict[str, int] = {}  # running episode -> steps recorded so far (writer's count)
        self._errors_seen: set[str] = set()
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="guardrail-recorder", daemon=True)
        self._thread.start()
        # A program that never closes its Guard still gets its queued events written at exit (the writer is a
        # daemon thread, alive while atexit handlers run); a weak reference so the hook keeps nothing alive.
        reference = weakref.ref(self)
        atexit.register(_close_at_exit, reference)

    # ------------------------------------------------------------------ the Guard's calls (agent thread)
    def _put(self, item: tuple[Any, ...], *, control: bool = False, wake: bool = False) -> bool:
        if self._closed:
            return False
        waiting = len(self._items)
        if control or waiting < self.max_queue:
            self._items.append(item)
            if wake or waiting == self._half_full:  # a burst: drain before the bound is reached
                self._wake.set()
            return True
        with self._lock:
            self.dropped += 1
            self._dropped_by_episode[item[1]] = self._dropped_by_episode.get(item[1], 0) + 1
        return False

    def begin(self, ctx: EpisodeContext, *, mode: str, layers: list[str], versions: Mapping[str, str]) -> None:
        # The header is built on the writer thread: here only what may change later is copied.
        episode = ctx.episode
        self._put(("begin", episode.episode_id, time.time(), episode.task, episode.framework, episode.model,
                   list(episode.tools), mode, layers, dict(versions), dict(episode.meta)), control=True)

    def step(self, ctx: EpisodeContext, step: Step, decision: Decision | None = None) -> None:
        self._put(("step", ctx.episode_id, step, decision))

    def decision(self, ctx: EpisodeContext, hook: str, decision: Decision, action: Action | None) -> None:
        self._put(("decision", ctx.episode_id, hook, decision, action, ctx.step_index))

    def finish(self, ctx: EpisodeContext, decision: Decision, *, status: str = "complete",
               reason: str | None = None) -> None:
        episode = ctx.episode
        with ctx.lock:
            findings = list(ctx.findings)
            shadow = dict(ctx.shadow)
        # The writer is behind when the agent's own threads leave it no time (the GIL: see `_CATCH_UP_S`): the
        # episode's end then waits for it, so a busy process records everything instead of dropping.
        behind = len(self._items) > self._catch_up_at
        waiter = _Waiter() if self.finish_timeout_s > 0 or behind else None
        self._put(("finish", episode.episode_id, decision.verdict.value, findings, episode.task,
                   list(episode.tools), len(episode.steps), status, reason, time.time(), shadow, waiter), control=True,
                  wake=waiter is not None)
        if waiter is not None and not self._closed:
            waiter.event.wait(max(self.finish_timeout_s, _CATCH_UP_S if behind else 0.0))

    def label(self, episode_id: str, label: str) -> None:
        """Label a recorded episode (after everything recorded so far is in the store)."""
        self.flush()
        missing = self.store.set_labels({episode_id: label})
        if missing:
            raise KeyError(f"no recorded episode {episode_id!r} in {self.store.url}")

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything recorded so far is in the store; False when `timeout_s` ran out first."""
        if self._closed:
            return True
        waiter = _Waiter()
        self._put(("flush", "", waiter), control=True, wake=True)
        return waiter.event.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued, mark still-running episodes incomplete, close the store."""
        if self._closed:
            return
        self.flush(timeout_s)
        self._closed = True
        self._items.append(("stop", ""))
        self._wake.set()
        self._thread.join(timeout_s)
        try:
            self.store.close()
        except Exception as exc:  # noqa: BLE001 - closing never raises into the caller's shutdown
            _log.warning("guardrail: closing the run store failed: %s: %s", type(exc).__name__, exc)

    # ------------------------------------------------------------------ the writer thread
    def _next_batch(self) -> list[Any]:
        """What to write next: everything waiting (up to `_BATCH` items), after a sleep of `_LINGER_S` or a
        wake-up (an episode's end someone waits on, a flush, a close)."""
        if len(self._items) < _BATCH:  # a full batch waiting is written at once
            self._wake.wait(_LINGER_S)
            self._wake.clear()  # before draining: an item whose wake-up this clears is drained below
        items: list[Any] = []
        popleft = self._items.popleft
        try:
            while len(items) < _BATCH:
                items.append(popleft())
        except IndexError:
            pass
        return items

    def _run(self) -> None:
        stopping = False
        while not stopping:
            items = self._next_batch()
            if not items:
                continue
            started = time.thread_time()
            ops: list[StoreOp] = []
            waiters: list[_Waiter] = []
            for item in items:
                kind = item[0]
                if kind == "stop":
                    stopping = True
                    continue
                if kind == "flush":
                    waiters.append(item[2])
                    continue
                try:
                    op = self._op(item)
                except Exception as exc:  # noqa: BLE001 - one unserializable item costs that item only
                    self._report("serialize", exc)
                    op = None
                if op is not None:
                    ops.append(op)
                if kind == "finish" and item[-1] is not None:
                    waiters.append(item[-1])
            if stopping:
                ops.extend(self._abandoned())
            if ops:
                try:
                    self.store.write(ops)
                    self.written += len(ops)
                except Exception as exc:  # noqa: BLE001 - the store failing never reaches the agent
                    self.errors += 1
                    self._report("write", exc)
            self.writer_cpu_s += time.thread_time() - started
            for waiter in waiters:
                waiter.event.set()

    def _abandoned(self) -> list[StoreOp]:
        """Episodes still running when the recorder closes: recorded as incomplete."""
        stamp = now()
        return [Finish(episode_id, RunOutcome(finished_at=stamp, status="incomplete", n_steps=steps,
                                              steps_dropped=self._dropped_by_episode.pop(episode_id, 0),
                                              reason="the recorder closed before the episode finished"))
                for episode_id, steps in self._open.items()]

    def _report(self, what: str, exc: BaseException) -> None:
        key = f"{what}:{type(exc).__name__}"
        if key not in self._errors_seen:
            self._errors_seen.add(key)
            _log.warning("guardrail: the run store could not %s (%s: %s); recording goes on, errors are counted",
                         what, type(exc).__name__, str(exc)[:300])

    def _op(self, item: tuple[Any, ...]) -> StoreOp | None:
        kind, episode_id = item[0], item[1]
        if kind == "begin":
            _, _, started_at, task, framework, model, tools, mode, layers, versions, meta = item
            header = RunHeader(episode_id=episode_id, started_at=_stamp(started_at),
                               task=_redact_task(task) if self.redact else task, framework=framework, model=model,
                               tools=tools, mode=mode, layers=layers, versions=versions,
                               guardrail_version=version(), writer={"host": _HOST, "pid": os.getpid()}, meta=meta)
            self._open[episode_id] = 0
            return Begin(header)
        if kind == "step":
            count = self._open.get(episode_id)
            if count is None:
                return None
            if count >= self.max_steps:
                self._dropped_by_episode[episode_id] = self._dropped_by_episode.get(episode_id, 0) + 1
                return None
            self._open[episode_id] = count + 1
            step: Step = item[2]
            return StepLine(episode_id, step.index, self._step_body(step, item[3]))
        if kind == "decision":
            _, _, hook, decision, action, step_index = item
            if episode_id not in self._open:
                return None
            return DecisionOp(episode_id, self._decision_body(hook, decision, action, step_index))
        if kind == "finish":
            _, _, verdict, findings, task, tools, n_steps, status, reason, finished_at, shadow, _ = item
            self._open.pop(episode_id, None)
            redact = redact_content if self.redact else None
            outcome = RunOutcome(finished_at=_stamp(finished_at), status=status, verdict=verdict,
                                 task=_redact_task(task) if redact and task else task, tools=tools, n_steps=n_steps,
                                 findings=[finding_record(f, redact) for f in findings],
                                 steps_dropped=self._dropped_by_episode.pop(episode_id, 0), reason=reason,
                                 shadow=redact(shadow) if redact and shadow else shadow)
            return Finish(episode_id, outcome)
        raise ValueError(f"unknown recorder item {kind!r}")

    def _step_body(self, step: Step, decision: Decision | None) -> str:
        return step_record(step, decision, redact=self.redact)

    def _decision_body(self, hook: str, decision: Decision, action: Action | None, step_index: int) -> dict[str, Any]:
        redact = redact_content if self.redact else None
        return {"hook": hook, "step": step_index, "verdict": decision.verdict.value,
                "tool": None if action is None else (action.tool or action.kind.value),
                "call_id": None if action is None else action.call_id, "score": decision.score,
                "at": now(), "findings": [finding_record(f, redact).model_dump(mode="json") for f in decision.findings]}

    # ------------------------------------------------------------------ for tests and benchmarks
    @property
    def backlog(self) -> int:
        return len(self._items)

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.backlog and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.flush(max(0.0, deadline - time.monotonic()))


def _clean(step: Step) -> bool:
    """True when redaction cannot change `step` (the writer's fast path). A step's text holds its calls'
    arguments and results verbatim (`format_tool_text`), so a clean text clears the parts it contains."""
    text = step.text
    if may_hold_secret(text) or (step.task is not None and _task_may_hold_secret(step.task)):
        return False

    for event in step.tool_events:
        if event.guard_message is not None and may_hold_secret(event.guard_message):
            return False
        if event.result and event.result not in text and may_hold_secret(event.result):
            return False
        args = event.args
        if isinstance(args, str):
            if args not in text and may_hold_secret(args):
                return False
            continue
        if not isinstance(args, dict):
            return False
        for key, value in args.items():
            if not isinstance(key, str) or secret_key(key):
                return False
            if isinstance(value, str):
                if value not in text and may_hold_secret(value):
                    return False
            elif not isinstance(value, int | float | bool | None):
                return False  # nested values: the full walk decides
    return True


_STEP_JSON = Step.__pydantic_serializer__


def step_record(step: Step, decision: Decision | None = None, *, redact: bool = True) -> str:
    """One step as the store keeps it: JSON, secrets masked, long strings capped, the guard's verdict and score
    of that step in ``meta["guard"]``; never larger than the store's per-step cap."""
    judged = decision is not None and (decision.score is not None or decision.verdict is not Verdict.ALLOW)
    if not redact or _clean(step):
        # The common case, all in pydantic-core: nothing to mask; the guard's note spliced in as the last key
        # (pydantic writes compact JSON ending in the object's brace, and `meta` is absent when empty).
        text = _STEP_JSON.to_json(step, exclude_defaults=True).decode()  # model_dump_json less its wrapper: -1 us
        if judged and not step.meta:
            score = decision.score  # type: ignore[union-attr]
            shown = "null" if score is None else repr(float(score)) if math.isfinite(score) else json.dumps(str(score))
            text = f'{text[:-1]},"meta":{{"guard":{{"verdict":"{decision.verdict.value}","score":{shown}}}}}}}'  # type: ignore[union-attr]
        elif judged:
            text = step.model_copy(update={"meta": {**step.meta, "guard": {
                "verdict": decision.verdict.value, "score": decision.score}}}).model_dump_json(exclude_defaults=True)  # type: ignore[union-attr]
        if len(text) <= MAX_STEP_BYTES:
            return text
    body = step.model_dump(mode="json", exclude_defaults=True)
    if redact:
        for key in _CONTENT_KEYS:
            if isinstance(body.get(key), str):
                body[key] = redact_content(_cap(body[key], _CONTENT_CAP))
        for event in body.get("tool_events") or []:
            for key in ("args", "result", "guard_message"):
                if key in event:
                    event[key] = redact_content(event[key])
    if judged:
        meta = body.setdefault("meta", {})
        meta["guard"] = {"verdict": decision.verdict.value, "score": decision.score}  # type: ignore[union-attr]
    text = json.dumps(body, ensure_ascii=False, default=str)
    if len(text) > MAX_STEP_BYTES:
        # An oversized step keeps its shape: the long strings are cut, the structure stays valid JSON.
        body["text"] = _cap(body.get("text"), MAX_STEP_BYTES // 4)
        for event in body.get("tool_events") or []:
            for key in ("result", "guard_message"):
                if isinstance(event.get(key), str):
                    event[key] = _cap(event[key], MAX_STEP_BYTES // 8)
            args_text = json.dumps(event.get("args"), default=str)
            if len(args_text) > MAX_STEP_BYTES // 8:
                event["args"] = _cap(args_text, MAX_STEP_BYTES // 8)
        text = json.dumps(body, ensure_ascii=False, default=str)
    return text


def episode_ops(episode: Episode, *, redact: bool = True, meta: Mapping[str, Any] | None = None) -> list[StoreOp]:
    """A whole finished episode (an imported trace) as store operations: begun, its steps, finished, unlabelled."""
    stamp = now()
    task = redact_content(episode.task) if redact and episode.task else episode.task
    header = RunHeader(episode_id=episode.episode_id, started_at=stamp, task=task, framework=episode.framework,
                       model=episode.model, tools=list(episode.tools), guardrail_version=version(),
                       meta={**episode.meta, **dict(meta or {})})
    ops: list[StoreOp] = [Begin(header)]
    ops += [StepLine(episode.episode_id, step.index, step_record(step, redact=redact)) for step in episode.steps]
    ops.append(Finish(episode.episode_id, RunOutcome(finished_at=stamp, task=task, tools=list(episode.tools),
                                                     n_steps=len(episode.steps))))
    return ops
