"""The layer protocol: a Guard layer implements the hooks it needs; per-episode state lives in the context."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from guardrail.core.events import Action, Episode, Finding, Result, Step

if TYPE_CHECKING:
    from guardrail.core.guard import Guard

__all__ = ["EpisodeContext", "Layer", "HOOKS"]

HOOKS = ("before_action", "after_result", "on_step", "on_finish")


class Layer:
    """Base class for a Guard layer.

    Override any of the four hooks; each returns the findings it has (an empty list or None
    for none). A layer keeps no per-episode state on itself: `new_state` creates it and the
    hooks read it with ``ctx.state(self)``, so one layer instance serves many concurrent
    episodes. Async twins default to the sync hook; override them when a layer awaits I/O (an
    overridden twin must not block: the Guard awaits it on the event loop, and runs every
    layer without one in a worker thread instead).
    """

    name: ClassVar[str] = "layer"
    # On the Guard's async path a layer's sync hooks run in a worker thread, so one that waits on I/O (a
    # filesystem probe, a sandbox, a server) never holds the event loop. A layer whose hooks are only short,
    # bounded CPU work sets this False: they then run on the loop, since the thread hop costs more than the
    # work and, under the GIL, CPU-bound Python holds the loop either way.
    offload: ClassVar[bool] = True

    def runs_inline(self, hook: str, ctx: EpisodeContext, *args: Any) -> bool:
        """True when this call of the sync `hook` (with the hook's own arguments) is only short, bounded CPU
        work: the Guard's async path then runs it on the event loop instead of paying a worker-thread hop
        (about 0.1-0.3 ms, more than such work costs). Asked before every call of a layer that offloads; say
        True only for calls that cannot wait on I/O or a lock held across I/O. Default: ``not offload``."""
        return not self.offload

    def new_state(self, ctx: EpisodeContext) -> Any:
        """Per-episode state for this layer (None when the layer keeps none)."""
        return None

    def before_action(self, ctx: EpisodeContext, action: Action) -> Iterable[Finding] | None:
        return None

    def after_result(self, ctx: EpisodeContext, action: Action, result: Result) -> Iterable[Finding] | None:
        return None

    def on_step(self, ctx: EpisodeContext, step: Step) -> Iterable[Finding] | None:
        return None

    def on_finish(self, ctx: EpisodeContext, episode: Episode) -> Iterable[Finding] | None:
        return None

    async def abefore_action(self, ctx: EpisodeContext, action: Action) -> Iterable[Finding] | None:
        return self.before_action(ctx, action)

    async def aafter_result(
        self, ctx: EpisodeContext, action: Action, result: Result
    ) -> Iterable[Finding] | None:
        return self.after_result(ctx, action, result)

    async def aon_step(self, ctx: EpisodeContext, step: Step) -> Iterable[Finding] | None:
        return self.on_step(ctx, step)

    async def aon_finish(self, ctx: EpisodeContext, episode: Episode) -> Iterable[Finding] | None:
        return self.on_finish(ctx, episode)

    def versions(self) -> dict[str, str]:
        """The fitted artifacts this layer judges with, by name and sha256 (e.g. ``{"model_sha256": ...}``):
        recorded with every episode, so a run says which model and spec judged it."""
        return {}

    def has_async_hook(self, hook: str) -> bool:
        """True when this layer overrides the async twin of `hook`: the Guard awaits it on the event loop.

        A layer without one is run in a worker thread by the Guard's async path, never on the loop.
        """
        return getattr(type(self), "a" + hook, None) is not getattr(Layer, "a" + hook)

    def implements(self, hook: str) -> bool:
        """True when this layer overrides `hook` (so the Guard spends no span on no-op hooks)."""
        mine = getattr(type(self), hook, None)
        base = getattr(Layer, hook)
        if mine is not base:
            return True
        return getattr(type(self), "a" + hook, None) is not getattr(Layer, "a" + hook)


class EpisodeContext:
    """Everything the Guard knows about one running episode.

    The steps the Guard was given, the findings so far, and each layer's own state. All
    mutation goes through the context's lock, so two threads feeding one episode stay
    consistent and different episodes never share mutable state.
    """

    def __init__(self, guard: Guard, episode: Episode) -> None:
        self.guard = guard
        self.episode = episode
        self.findings: list[Finding] = []
        self.actions: list[Action] = []
        self.results: list[tuple[Action, Result]] = []
        self.finished = False
        self.recorded = False  # the Guard records this episode into its run store
        self.lock = threading.RLock()
        self._layer_state: dict[int, Any] = {}
        self._scores: dict[str, float] = {}
        # The JSON schemas of the tools the agent declared for this run (name -> schema of its arguments);
        # adapters fill it from the framework's own tools, `Guard.start_episode(tool_schemas=...)` from the user.
        self.tool_schemas: dict[str, dict[str, Any]] = {}
        # What shadow layers (a candidate model or spec scored beside the live one, never acting) made of this
        # run, by shadow layer name: the run recorder stores it beside the live outcome.
        self.shadow: dict[str, Any] = {}

    @property
    def episode_id(self) -> str:
        return self.episode.episode_id

    @property
    def task(self) -> str | None:
        return self.episode.task

    @property
    def step_index(self) -> int:
        """Index the next step will get."""
        return len(self.episode.steps)

    def declare_tools(self, schemas: dict[str, dict[str, Any]]) -> None:
        """Add tools the agent declared for this run (name -> JSON schema of its arguments); their names join
        ``episode.tools``. A tool already declared keeps its first schema."""
        with self.lock:
            for name, schema in schemas.items():
                if name not in self.tool_schemas:
                    self.tool_schemas[name] = schema
                    if name not in self.episode.tools:
                        self.episode.tools.append(name)

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        """The declared schema of tool `name` for this run (the run's own, else the Guard's), or None."""
        schema = self.tool_schemas.get(name)
        if schema is None:
            schema = self.guard.tools.get(name)
        return schema

    def state(self, layer: Layer) -> Any:
        """This layer's per-episode state, created on first use."""
        key = id(layer)
        with self.lock:
            if key not in self._layer_state:
                self._layer_state[key] = layer.new_state(self)
            return self._layer_state[key]

    def record_score(self, layer: Layer, score: float) -> None:
        """A streaming layer reports its score for the current hook call (goes on the span and Decision)."""
        self._scores[layer.name] = float(score)

    def pop_score(self, layer: Layer) -> float | None:
        return self._scores.pop(layer.name, None)

    # Convenience: drive the Guard through the context.
    def before_action(self, action: Action):  # noqa: ANN201 - Decision, typed in guard.py
        return self.guard.before_action(self, action)

    def after_result(self, action: Action, result: Result):  # noqa: ANN201
        return self.guard.after_result(self, action, result)

    def on_step(self, step: Step):  # noqa: ANN201
        return self.guard.on_step(self, step)

    def finish(self, answer: str | None = None):  # noqa: ANN201
        return self.guard.on_finish(self, answer=answer)

    async def abefore_action(self, action: Action):  # noqa: ANN201
        return await self.guard.abefore_action(self, action)

    async def aafter_result(self, action: Action, result: Result):  # noqa: ANN201
        return await self.guard.aafter_result(self, action, result)

    async def aon_step(self, step: Step):  # noqa: ANN201
        return await self.guard.aon_step(self, step)

    async def afinish(self, answer: str | None = None):  # noqa: ANN201
        return await self.guard.aon_finish(self, answer=answer)
