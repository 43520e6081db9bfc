"""`RunRecorder`: the Guard's link to a run store, off the agent's hot path.

The Guard hands the recorder each episode's start, steps, non-allow decisions and end. On the
agent's thread that is one ``put_nowait`` on a bounded queue (a full queue drops the step and
counts it, never blocks); a writer thread serializes, redacts and writes in batches. Starts, ends
and labels are never dropped (they go on a small side list when the queue is full), and an
episode's end waits, at most ``finish_timeout_s``, until it is in the store, so a run that
returned is a run the user can label. Nothing the recorder does raises into the agent: a store
that fails is logged once per kind of error and counted.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from guardrail.core.events import Action, Decision, Finding, Step, Verdict
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

__all__ = ["RunRecorder", "finding_record", "redact_content"]

_log = logging.getLogger("guardrail.runstore")

_MESSAGE_CAP = 1_000  # a finding's message and hint as stored
_CONTENT_CAP = 20_000  # one stored string (a step text, a tool result): the step path caps results at this too
_BATCH = 512  # operations per store write
_CONTENT_KEYS = ("text", "task")


def redact_content(value: Any) -> Any:
    """`value` (JSON-able) with secrets masked in every string, under the span redaction rules, same shape."""
    from guardrail.core import spans

    deep = getattr(spans, "redact_value", None)
    if deep is not None:
        return deep(value)
    masked = spans._mask_structure(value)  # noqa: SLF001 - the span module's own key-name rules
    return _map_strings(masked, spans.redact_text)


def _map_strings(value: Any, fn: Callable[[str], str], depth: int = 0) -> Any:
    if isinstance(value, str):
        return fn(value) if value else value
    if depth > 64:
        return "[nested too deep]"
    if isinstance(value, dict):
        return {k: _map_strings(v, fn, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn, depth + 1) for v in value]
    return value


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
    waits for the store (0: never wait).
    """

    def __init__(self, store: RunStore | str, *, redact: bool = True, max_queue: int = 10_000,
                 max_steps: int = DEFAULT_MAX_STEPS, finish_timeout_s: float = 2.0) -> None:
        self.store = open_store(store)
        self.redact = redact
        self.max_steps = max_steps
        self.finish_timeout_s = finish_timeout_s
        self.dropped = 0  # steps and decisions lost to a full queue
        self.written = 0  # operations the store accepted
        self.errors = 0  # batches the store refused
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self._side: deque[Any] = deque()  # starts, ends and labels that found the queue full
        self._dropped_by_episode: dict[str, int] = {}
        self._open: dict[str, int] = {}  # running episode -> steps recorded so far (writer's count)
        self._errors_seen: set[str] = set()
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="guardrail-recorder", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the Guard's calls (agent thread)
    def _put(self, item: tuple[Any, ...], *, control: bool = False) -> bool:
        if self._closed:
            return False
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            if control:
                self._side.append(item)
                return True
            with self._lock:
                self.dropped += 1
                self._dropped_by_episode[item[1]] = self._dropped_by_episode.get(item[1], 0) + 1
            return False

    def begin(self, ctx: EpisodeContext, *, mode: str, layers: list[str], versions: Mapping[str, str]) -> None:
        episode = ctx.episode
        header = RunHeader(episode_id=episode.episode_id, started_at=now(), task=episode.task,
                           framework=episode.framework, model=episode.model, tools=list(episode.tools), mode=mode,
                           layers=layers, versions=dict(versions), guardrail_version=version(),
                           meta=dict(episode.meta))
        self._put(("begin", episode.episode_id, header), control=True)

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
        waiter = _Waiter()
        self._put(("finish", episode.episode_id, decision.verdict.value, findings, episode.task,
                   list(episode.tools), len(episode.steps), status, reason, now(), shadow, waiter), control=True)
        if self.finish_timeout_s > 0 and not self._closed:
            waiter.event.wait(self.finish_timeout_s)

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
        self._put(("flush", "", waiter), control=True)
        return waiter.event.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued, mark still-running episodes incomplete, close the store."""
        if self._closed:
            return
        self.flush(timeout_s)
        self._closed = True
        self._queue.put(("stop", ""))
        self._thread.join(timeout_s)
        try:
            self.store.close()
        except Exception as exc:  # noqa: BLE001 - closing never raises into the caller's shutdown
            _log.warning("guardrail: closing the run store failed: %s: %s", type(exc).__name__, exc)

    # ------------------------------------------------------------------ the writer thread
    def _next_batch(self) -> list[Any]:
        items: list[Any] = []
        while self._side:
            items.append(self._side.popleft())
        if not items:
            try:
                items.append(self._queue.get(timeout=0.5))
            except queue.Empty:
                return []
        while len(items) < _BATCH:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        while self._side and len(items) < 2 * _BATCH:
            items.append(self._side.popleft())
        return items

    def _run(self) -> None:
        stopping = False
        while not stopping:
            items = self._next_batch()
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
                if kind == "finish":
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
            header: RunHeader = item[2]
            if self.redact:
                header.task = redact_content(header.task)
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
            outcome = RunOutcome(finished_at=finished_at, status=status, verdict=verdict,
                                 task=redact(task) if redact and task else task, tools=tools, n_steps=n_steps,
                                 findings=[finding_record(f, redact) for f in findings],
                                 steps_dropped=self._dropped_by_episode.pop(episode_id, 0), reason=reason,
                                 shadow=redact(shadow) if redact and shadow else shadow)
            return Finish(episode_id, outcome)
        raise ValueError(f"unknown recorder item {kind!r}")

    def _step_body(self, step: Step, decision: Decision | None) -> str:
        body = step.model_dump(mode="json", exclude_defaults=True)
        if self.redact:
            for key in _CONTENT_KEYS:
                if isinstance(body.get(key), str):
                    body[key] = redact_content(_cap(body[key], _CONTENT_CAP))
            for event in body.get("tool_events") or []:
                for key in ("args", "result", "guard_message"):
                    if key in event:
                        event[key] = redact_content(event[key])
        if decision is not None and (decision.score is not None or decision.verdict is not Verdict.ALLOW):
            meta = body.setdefault("meta", {})
            meta["guard"] = {"verdict": decision.verdict.value, "score": decision.score}
        text = json.dumps(body, ensure_ascii=False, default=str)
        if len(text) > MAX_STEP_BYTES:
            # An oversized step keeps its shape: the long strings are cut, the structure stays valid JSON.
            body["text"] = _cap(body.get("text"), MAX_STEP_BYTES // 4)
            for event in body.get("tool_events") or []:
                for key in ("result", "guard_message"):
                    if isinstance(event.get(key), str):
                        event[key] = _cap(event[key], MAX_STEP_BYTES // 8)
                if not isinstance(event.get("args"), dict | str) or len(json.dumps(event.get("args"))) > MAX_STEP_BYTES // 8:
                    event["args"] = _cap(json.dumps(event.get("args"), default=str), MAX_STEP_BYTES // 8)
            text = json.dumps(body, ensure_ascii=False, default=str)
        return text

    def _decision_body(self, hook: str, decision: Decision, action: Action | None, step_index: int) -> dict[str, Any]:
        redact = redact_content if self.redact else None
        return {"hook": hook, "step": step_index, "verdict": decision.verdict.value,
                "tool": None if action is None else (action.tool or action.kind.value),
                "call_id": None if action is None else action.call_id, "score": decision.score,
                "at": now(), "findings": [finding_record(f, redact).model_dump(mode="json") for f in decision.findings]}

    # ------------------------------------------------------------------ for tests and benchmarks
    @property
    def backlog(self) -> int:
        return self._queue.qsize() + len(self._side)

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.backlog and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.flush(max(0.0, deadline - time.monotonic()))
