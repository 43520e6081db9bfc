"""New model and spec files without a restart (`WatchedLayer`), and candidates scored beside the live ones (`ShadowLayer`).

A `WatchedLayer` holds the layer built from a file (the monitor from ``monitor.npz``, the verifiers
from ``spec.json``). At every episode start the Guard asks it to `refresh`: when the file's mtime,
size or inode moved and its sha256 differs from the one in use, the new file is loaded in full and
swapped in atomically. Each episode is pinned to the layer that was current when it started, so a
swap never changes the version judging a running episode. A file that fails to load is refused:
the old layer keeps judging, the refusal is a finding on the episode that noticed it, and the same
bytes are not tried again until the file changes once more.

A `ShadowLayer` runs a candidate layer on the same hooks as the live pipeline and records what it
would have said (per step in ``step.meta["shadow"]``, per run in ``ctx.shadow``, which the run
recorder stores in the finish record) but returns nothing to the pipeline: it never acts.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from guardrail.core.events import Action, Episode, Finding, Result, Severity, Step
from guardrail.core.fileio import sha256_file
from guardrail.core.layer import EpisodeContext, Layer

__all__ = ["ShadowLayer", "SwapEvent", "WatchedLayer"]

_log = logging.getLogger("guardrail")
_HOOKS = ("before_action", "after_result", "on_step", "on_finish")
_SHADOW_FINDINGS = 200  # per shadow layer and run: what is kept of a candidate's findings


@dataclass(frozen=True)
class SwapEvent:
    """One change of a watched file: swapped in, or refused (the old version stays)."""

    layer: str
    path: str
    outcome: str  # "swapped" | "refused"
    old_sha256: str
    new_sha256: str | None
    at: float
    error: str | None = None


def _stat_key(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


class WatchedLayer(Layer):
    """The layer `build(path)` makes from the file at `path`, rebuilt when the file changes (see the module docstring).

    `sha_key` names the digest in the layer's `versions()` (``model_sha256``, ``spec_sha256``).
    """

    def __init__(self, path: str | os.PathLike[str], build: Callable[[str], Layer], *, sha_key: str) -> None:
        self.path = os.fspath(path)
        self._build = build
        self.sha_key = sha_key
        self._lock = threading.Lock()
        self._stat = _stat_key(self.path)
        self.current: Layer = build(self.path)
        self.sha256: str = self.current.versions().get(sha_key) or sha256_file(self.path)
        self._refused: tuple[tuple[int, int, int] | None, str] | None = None
        self.events: list[SwapEvent] = []

    @property
    def name(self) -> str:  # type: ignore[override]  # the watched layer's own name ("monitor", "verifier")
        return self.current.name

    def implements(self, hook: str) -> bool:
        return self.current.implements(hook)

    def has_async_hook(self, hook: str) -> bool:
        return False  # delegates to the pinned layer's sync hook (the Guard runs it off the event loop)

    def versions(self) -> dict[str, str]:
        return self.current.versions()

    # ------------------------------------------------------------------ swapping
    def refresh(self) -> SwapEvent | None:
        """Swap in the file if it changed and loads; the event (swapped or refused), or None when nothing changed."""
        key = _stat_key(self.path)
        if key == self._stat or key is None:  # unchanged, or gone for now (a writer replacing it): keep the old
            return None
        if self._refused is not None and self._refused[0] == key:
            return None  # the same refused bytes: said once already
        try:
            new_sha = sha256_file(self.path)
        except OSError as exc:
            return self._refuse(key, None, f"cannot read it: {exc.strerror or exc}")
        if new_sha == self.sha256:
            self._stat = key  # touched, not changed
            return None
        if self._refused is not None and self._refused[1] == new_sha:
            self._refused = (key, new_sha)  # the same refused bytes touched again
            return None
        try:
            layer = self._build(self.path)
        except Exception as exc:  # noqa: BLE001 - any refusal of the new file keeps the old layer
            return self._refuse(key, new_sha, f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}")
        loaded_sha = layer.versions().get(self.sha_key) or new_sha
        event = SwapEvent(self.name, self.path, "swapped", self.sha256, loaded_sha, time.time())
        with self._lock:
            self.current, self.sha256, self._stat, self._refused = layer, loaded_sha, key, None
            self.events.append(event)
        _log.info("guardrail: %s swapped to %s (%s)", self.name, self.path, loaded_sha[:12])
        return event

    def _refuse(self, key: tuple[int, int, int] | None, new_sha: str | None, error: str) -> SwapEvent:
        event = SwapEvent(self.name, self.path, "refused", self.sha256, new_sha, time.time(), error)
        with self._lock:
            self._refused = (key, new_sha or "")
            self.events.append(event)
        _log.warning("guardrail: %s refused the new %s (%s); still judging with %s", self.name, self.path, error,
                     self.sha256[:12])
        return event

    def refusal_finding(self, event: SwapEvent) -> Finding:
        return Finding(layer=self.name, check="swap_refused", severity=Severity.WARNING,
                       message=(f"{os.path.basename(self.path)} changed but was refused ({event.error}); "
                                f"still judging with the previous file (sha256 {event.old_sha256[:12]})"),
                       evidence={"path": self.path, "old_sha256": event.old_sha256, "new_sha256": event.new_sha256})

    # ------------------------------------------------------------------ the pinned layer's hooks
    def new_state(self, ctx: EpisodeContext) -> Layer:
        return self.current  # the episode keeps the layer current when it started

    def before_action(self, ctx: EpisodeContext, action: Action) -> Iterable[Finding] | None:
        return ctx.state(self).before_action(ctx, action)

    def after_result(self, ctx: EpisodeContext, action: Action, result: Result) -> Iterable[Finding] | None:
        return ctx.state(self).after_result(ctx, action, result)

    def on_step(self, ctx: EpisodeContext, step: Step) -> Iterable[Finding] | None:
        return ctx.state(self).on_step(ctx, step)

    def on_finish(self, ctx: EpisodeContext, episode: Episode) -> Iterable[Finding] | None:
        return ctx.state(self).on_finish(ctx, episode)


def _finding_brief(finding: Finding) -> dict[str, Any]:
    return {"layer": finding.layer, "check": finding.check, "severity": finding.severity.value,
            "step": finding.step, "blocking": finding.blocking, "message": finding.message[:500]}


class ShadowLayer(Layer):
    """`inner` scored on every hook, recorded, never acting (see the module docstring); named ``shadow_<inner>``."""

    def __init__(self, inner: Layer) -> None:
        self.inner = inner
        self._name = f"shadow_{inner.name}"

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._name

    def implements(self, hook: str) -> bool:
        return self.inner.implements(hook)

    def has_async_hook(self, hook: str) -> bool:
        return False

    def versions(self) -> dict[str, str]:
        return {f"shadow_{key}": value for key, value in self.inner.versions().items()}

    def _record(self, ctx: EpisodeContext, step_index: int | None, findings: list[Finding],
                score: float | None, failed: str | None = None) -> dict[str, Any]:
        with ctx.lock:
            run = ctx.shadow.get(self._name)
            if run is None:
                run = ctx.shadow[self._name] = {"versions": self.inner.versions(), "findings": [], "alarm_step": None,
                                                "max_score": None, "errors": 0, "threshold": self._threshold(ctx)}
            for finding in findings:
                if len(run["findings"]) < _SHADOW_FINDINGS:
                    run["findings"].append(_finding_brief(finding))
                if finding.severity is Severity.ALARM and run["alarm_step"] is None:
                    run["alarm_step"] = finding.step if finding.step is not None else step_index
            if score is not None and (run["max_score"] is None or score > run["max_score"]):
                run["max_score"] = score
            if failed is not None:
                run["errors"] += 1
                run["last_error"] = failed
            return run

    def _threshold(self, ctx: EpisodeContext) -> float | None:
        """The candidate monitor's alarm threshold (its scores are on its own scale), when it has one."""
        layer = ctx.state(self.inner) if isinstance(self.inner, WatchedLayer) else self.inner
        value = getattr(getattr(layer, "model", None), "threshold_", None)
        return float(value) if isinstance(value, int | float) and value == value and abs(value) != float("inf") \
            else None

    def _run(self, ctx: EpisodeContext, hook: str, *args: Any) -> tuple[list[Finding], float | None, str | None]:
        try:
            findings = list(getattr(self.inner, hook)(ctx, *args) or [])
            error = None
        except Exception as exc:  # noqa: BLE001 - a failing candidate is recorded, never raised into the agent
            findings, error = [], f"{type(exc).__name__}: {str(exc)[:300]}"
        score = ctx.pop_score(self.inner)  # the candidate's score must not become the live decision's
        return [f for f in findings if isinstance(f, Finding)], score, error

    def before_action(self, ctx: EpisodeContext, action: Action) -> None:
        findings, score, error = self._run(ctx, "before_action", action)
        self._record(ctx, ctx.step_index, findings, score, error)

    def after_result(self, ctx: EpisodeContext, action: Action, result: Result) -> None:
        findings, score, error = self._run(ctx, "after_result", action, result)
        self._record(ctx, ctx.step_index, findings, score, error)

    def on_step(self, ctx: EpisodeContext, step: Step) -> None:
        findings, score, error = self._run(ctx, "on_step", step)
        run = self._record(ctx, step.index, findings, score, error)
        # Beside the live decision the recorder writes into the stored step (meta["guard"]).
        entry: dict[str, Any] = {"score": score, "alarm": run["alarm_step"] is not None,
                                 "checks": sorted({f.check for f in findings})}
        if error is not None:
            entry["error"] = error
        with ctx.lock:
            step.meta.setdefault("shadow", {})[self._name] = entry

    def on_finish(self, ctx: EpisodeContext, episode: Episode) -> None:
        findings, score, error = self._run(ctx, "on_finish", episode)
        run = self._record(ctx, None, findings, score, error)
        with ctx.lock:
            run["end_checks"] = sorted({f.check for f in findings})
