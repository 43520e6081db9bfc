"""`Guard.default`: the Guard a user gets from what they have, all five layers in one assembly.

    guard = Guard.default(workspace=".", model="monitor.npz", spec="booking_tools",        # gate, monitor, verifiers
                          n=5, tool_schemas=schemas, sandbox=sandbox_tools,                # self-consistency
                          checkpointer=saver, mode="intervene")                            # repair
    agent = guard.bind(create_agent(model, tools, middleware=guard.langchain_middleware(), checkpointer=saver))

What each option turns on (every layer can also be switched off by name with ``disable=``):

=================  ==================================================================  ===============
layer (name)       turned on by                                                        off
=================  ==================================================================  ===============
gate               always: every call is held to the schema its tool declares (the    ``"gate"``
                   agent's own tools, read by the adapters, and ``tools=``);
                   ``workspace=`` adds the probes of the repository the agent works in
consistency        ``n=`` (samples per step, >= 2) with ``sandbox=`` (tools for dry   ``"consistency"``
                   runs) and ``tool_schemas=`` (which tools are deterministic)
monitor            ``model=`` (a fitted StepMonitor or its model file)                 ``"monitor"``
verifier           ``spec=`` (a verifier spec or its name)                             ``"verifier"``
repair             ``checkpointer=`` (a LangGraph saver) or ``repair=True``             ``"repair"``
=================  ==================================================================  ===============

A model or spec given as a file is watched (``watch=False`` to pin it): at each episode start a
changed file is loaded and swapped in, running episodes keep the version they started with, and a
file that fails to load is refused with a finding while the old one keeps judging
(`guardrail.app.hotswap`). ``shadow_model=`` / ``shadow_spec=`` score a candidate on the same steps
and record what it would have said beside the live decision, never acting (``guardrail runs
--compare``). `Guard.from_config` builds all of this from a ``guardrail.toml`` (`guardrail.app.config`).

``record=`` (a directory, ``sqlite:///runs.db`` or ``postgresql://...``) records every episode into a
run store (`guardrail.core.runstore`): label them (``guard.label``, ``guardrail label``), fit on the
healthy ones (``guardrail fit``, ``guardrail fit-spec`` read a store as they read a corpus).

Repair is not a pipeline layer: it re-runs the agent. The assembled Guard carries its `Repairer`
(``guard.repairer``) and the adapters built by ``guard.langchain_middleware()`` use it inside the
run; AutoGen agents and teams use it through ``adapters.autogen_repair``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from guardrail.core.guard import Guard as PipelineGuard
from guardrail.core.layer import Layer

if TYPE_CHECKING:
    from guardrail.core.guard import Mode

__all__ = ["LAYER_NAMES", "Guard", "LayerUnavailable", "Sampling", "default_guard", "default_layers"]

# The names `disable=` takes, in pipeline order ("repair" is the re-run driver, not a pipeline layer).
LAYER_NAMES = ("gate", "consistency", "monitor", "verifier", "repair")
_ALIASES = {"verifiers": "verifier", "self_consistency": "consistency", "self-consistency": "consistency"}


class LayerUnavailable(ImportError):
    """A layer was asked for (by giving its input) but its package is not installed in this build."""


@dataclass(frozen=True)
class Sampling:
    """The self-consistency wiring: the layer in the pipeline, the dry-run harness and N."""

    layer: Any  # guardrail.consistency.SelfConsistencyLayer
    harness: Any  # guardrail.consistency.DryRunHarness
    n: int


def _gate(workspace: str | os.PathLike[str] | None, *, python: str | None,
          options: Mapping[str, Any] | None = None) -> Layer:
    try:
        from guardrail.gate.layer import GateLayer
    except ImportError as exc:
        raise LayerUnavailable(f"the gate was asked for, but guardrail.gate cannot load: {exc}") from exc
    return GateLayer(workspace, python=python, **dict(options or {}))


def _monitor(model: Any) -> Layer:
    try:
        from monitors.layer import MonitorLayer
    except ImportError as exc:
        raise LayerUnavailable(f"model= asks for the step monitor, but monitors.layer cannot load: {exc}") from exc
    return MonitorLayer(model)  # a fitted StepMonitor or the path of its model file


def _verifiers(spec: Any, contracts: Any) -> Layer:
    try:
        from verifiers.layer import VerifierLayer
    except ImportError as exc:
        raise LayerUnavailable(f"spec= asks for the verifiers, but verifiers.layer cannot load: {exc}") from exc
    return VerifierLayer(spec, contracts=contracts)


def _consistency(n: int, sandbox: Mapping[str, Any] | Sequence[Any] | None, tool_schemas: Sequence[Any],
                 epoch: Any) -> Sampling:
    if n < 2:
        raise ValueError(f"n= is the number of plans sampled per step for self-consistency; it must be >= 2, got {n}")
    if sandbox is None:
        raise ValueError("n= asks for self-consistency, which dry-runs every sampled call: give sandbox= "
                         "(the tools to run them against, a mapping name -> callable or a list of framework tools)")
    try:
        from guardrail.consistency import (
            ConsistencyGate,
            DeterminismRegistry,
            DryRunHarness,
            SelfConsistencyLayer,
        )
    except ImportError as exc:
        raise LayerUnavailable(f"n= asks for self-consistency, but guardrail.consistency cannot load: {exc}") from exc
    tools = _sandbox_tools(sandbox)
    registry = DeterminismRegistry(tool_schemas)
    harness = DryRunHarness(tools, epoch=epoch)
    harness.probe(registry)  # a deterministic: true declaration counts only once probed here
    return Sampling(SelfConsistencyLayer(ConsistencyGate(registry)), harness, n)


def _sandbox_tools(sandbox: Mapping[str, Any] | Sequence[Any]) -> dict[str, Any]:
    if isinstance(sandbox, Mapping) and all(callable(t) and not hasattr(t, "run_json") for t in sandbox.values()):
        return dict(sandbox)
    from adapters.sampling import sandbox_tools  # framework tools (LangChain, AutoGen) as dry-run callables

    return sandbox_tools(sandbox)


def _is_file(value: Any) -> bool:
    return isinstance(value, str | os.PathLike) and os.path.isfile(value)


def _watched_monitor(model: Any, watch: bool) -> Layer:
    if watch and _is_file(model):
        from guardrail.app.hotswap import WatchedLayer

        return WatchedLayer(model, _monitor, sha_key="model_sha256")
    return _monitor(model)


def _watched_verifiers(spec: Any, contracts: Any, watch: bool) -> Layer:
    if watch and _is_file(spec):
        from guardrail.app.hotswap import WatchedLayer

        return WatchedLayer(spec, lambda path: _verifiers(path, contracts), sha_key="spec_sha256")
    return _verifiers(spec, contracts)


def _shadows(shadow_model: Any, shadow_spec: Any, contracts: Any, watch: bool) -> list[Layer]:
    from guardrail.app.hotswap import ShadowLayer

    out: list[Layer] = []
    if shadow_model is not None:
        out.append(ShadowLayer(_watched_monitor(shadow_model, watch)))
    if shadow_spec is not None:
        out.append(ShadowLayer(_watched_verifiers(shadow_spec, contracts, watch)))
    return out


def _recorder(record: Any, options: Mapping[str, Any] | None) -> Any:
    """The run recorder for ``record=``: a recorder as given, or one over the store a path or URL names."""
    from guardrail.core.runstore import RunRecorder

    if isinstance(record, RunRecorder):
        return record
    return RunRecorder(record, **dict(options or {}))


def _disabled(disable: Collection[str]) -> set[str]:
    names = {_ALIASES.get(name, name) for name in disable}
    unknown = sorted(names - set(LAYER_NAMES))
    if unknown:
        raise ValueError(f"disable= names unknown layers {unknown}; the layers are {list(LAYER_NAMES)}")
    return names


def default_layers(
    *,
    workspace: str | os.PathLike[str] | None = None,
    model: Any = None,
    spec: Any = None,
    python: str | None = None,
    contracts: Mapping[str, Any] | None = None,
    extra_layers: Sequence[Layer] = (),
    consistency: Layer | None = None,
    disable: Collection[str] = (),
    shadow_model: Any = None,
    shadow_spec: Any = None,
    watch: bool = True,
    gate_options: Mapping[str, Any] | None = None,
) -> list[Layer]:
    """The layers for what is given, in pipeline order: gate, consistency, monitor, verifiers, `extra_layers`, then
    the shadows (last, so a candidate never sees a step before the live layers judged it)."""
    off = _disabled(disable)
    layers: list[Layer] = []
    if "gate" not in off:
        # With no workspace the gate still holds every call to the schema its tool declares (zero configuration).
        layers.append(_gate(workspace, python=python, options=gate_options))
    if consistency is not None and "consistency" not in off:
        layers.append(consistency)
    if model is not None and "monitor" not in off:
        layers.append(_watched_monitor(model, watch))
    if spec is not None and "verifier" not in off:
        layers.append(_watched_verifiers(spec, contracts, watch))
    layers.extend(extra_layers)
    layers.extend(_shadows(shadow_model if "monitor" not in off else None,
                           shadow_spec if "verifier" not in off else None, contracts, watch))
    return layers


def default_guard(
    cls: Callable[..., PipelineGuard] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    model: Any = None,
    spec: Any = None,
    mode: Mode = "report",
    python: str | None = None,
    tools: Mapping[str, Any] | Sequence[Any] | None = None,
    contracts: Mapping[str, Any] | None = None,
    extra_layers: Sequence[Layer] = (),
    record: Any = None,
    record_options: Mapping[str, Any] | None = None,
    n: int | None = None,
    sandbox: Mapping[str, Any] | Sequence[Any] | None = None,
    tool_schemas: Sequence[Any] = (),
    epoch: Any = "sandbox",
    checkpointer: Any = None,
    repair: bool | None = None,
    repair_options: Mapping[str, Any] | None = None,
    disable: Collection[str] = (),
    shadow_model: Any = None,
    shadow_spec: Any = None,
    watch: bool = True,
    gate_options: Mapping[str, Any] | None = None,
    **guard_options: Any,
) -> PipelineGuard:
    """A Guard with every layer the arguments allow (see the module docstring for the table).

    ``workspace`` adds the pre-execution gate; ``n`` with ``sandbox`` and ``tool_schemas`` the
    self-consistency layer (``epoch`` names the sandbox epoch: a fixed id or a callable read after
    every dry run); ``model`` the step monitor; ``spec`` (a verifier spec, a shipped spec's name, or
    a spec file such as one ``guardrail fit-spec`` wrote) the end-of-run verifiers; ``checkpointer``
    (or ``repair=True``) the repairer (``repair_options`` go to `repair.Repairer`: rung, breaker,
    max_attempts...). ``disable`` switches layers off by name. ``shadow_model`` / ``shadow_spec``
    score candidates beside the live layers without acting; ``watch`` swaps in changed model and
    spec files at episode start; ``gate_options`` go to the gate (``budget_s``...). Asking for a layer whose package
    cannot load raises `LayerUnavailable` saying which; other keyword arguments go to the Guard
    (``on_alarm``: what a monitor alarm does, ``"warn"`` | ``"stop"`` | ``"repair"``, read by every
    adapter; ``fail_closed``, ``capture_content``, ``tracer``, ``offload``).
    """
    off = _disabled(disable)
    make = cls or Guard
    sampling = None
    if n is not None and "consistency" not in off:
        sampling = _consistency(n, sandbox, tool_schemas, epoch)
    layers = default_layers(workspace=workspace, model=model, spec=spec, python=python,
                            contracts=contracts, extra_layers=extra_layers,
                            consistency=sampling.layer if sampling else None, disable=off,
                            shadow_model=shadow_model, shadow_spec=shadow_spec, watch=watch,
                            gate_options=gate_options)
    if tools is not None:
        from adapters.tool_schemas import tool_schemas as declared_schemas

        guard_options.setdefault("tools", declared_schemas(tools))
    if record is not None:
        guard_options.setdefault("recorder", _recorder(record, record_options))
    guard = make(layers, mode=mode, **guard_options)
    if isinstance(guard, Guard):
        guard.sampling = sampling
        # on_alarm="repair" asks for the repairer as a checkpointer does (the adapters' inline repair runs it).
        wants_repair = repair if repair is not None else (checkpointer is not None
                                                          or guard_options.get("on_alarm") == "repair")
        if wants_repair and "repair" not in off:
            try:
                from repair.repairer import Repairer
            except ImportError as exc:
                raise LayerUnavailable(f"repair was asked for, but the repair package cannot load: {exc}") from exc
            guard.repairer = Repairer(guard, **dict(repair_options or {}))
        guard.checkpointer = checkpointer
    return guard


class Guard(PipelineGuard):
    """The Guard pipeline (`guardrail.core.guard.Guard`) plus ``Guard.default``, which assembles all five layers."""

    sampling: Sampling | None = None  # self-consistency wiring, when assembled with n=
    repairer: Any = None  # a repair.Repairer, when assembled with a checkpointer (or repair=True)
    checkpointer: Any = None
    config: Any = None  # the guardrail.app.config.DeployConfig it was built from (Guard.from_config)

    @classmethod
    def default(cls, **options: Any) -> Guard:
        """A Guard with every layer the given options allow (see `default_guard`)."""
        guard = default_guard(cls, **options)
        assert isinstance(guard, Guard)
        return guard

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] = "guardrail.toml", *, environ: Mapping[str, str] | None = None,
                    **options: Any) -> Guard:
        """The Guard a ``guardrail.toml`` describes (`guardrail.app.config`), with ``GUARDRAIL_*`` environment
        overrides (`environ`, default ``os.environ``). `options` are what a file cannot name (``sandbox=``,
        ``checkpointer=``, ``tools=`` as framework tools, ``tracer=``...) and win over the file. A file with
        problems raises `guardrail.app.config.ConfigError` listing every one."""
        from guardrail.app.config import guard_from_config

        guard = guard_from_config(path, cls=cls, environ=environ, **options)
        assert isinstance(guard, Guard)
        return guard

    # ------------------------------------------------------------------ hot swap
    def _watched(self) -> list[Any]:
        found = getattr(self, "_watched_layers", None)
        if found is None:
            from guardrail.app.hotswap import ShadowLayer, WatchedLayer

            found = []
            for layer in self.layers:
                inner = layer.inner if isinstance(layer, ShadowLayer) else layer
                if isinstance(inner, WatchedLayer):
                    found.append(inner)
            self._watched_layers = found
            self._swap_lock = threading.Lock()
        return found

    @property
    def swaps(self) -> list[Any]:
        """Every change of a watched model or spec file so far (`guardrail.app.hotswap.SwapEvent`s, oldest first)."""
        return sorted((e for layer in self._watched() for e in layer.events), key=lambda e: e.at)

    def start_episode(self, *args: Any, **kwargs: Any) -> Any:
        """Open an episode (see the pipeline's `start_episode`); first, swap in any watched file that changed, and
        pin the episode to the versions current now."""
        watched = self._watched()
        if not watched:
            return super().start_episode(*args, **kwargs)
        refused = []
        with self._swap_lock:
            for layer in watched:
                try:
                    event = layer.refresh()
                except Exception:  # noqa: BLE001 - checking a file never fails the agent's episode
                    import logging

                    logging.getLogger("guardrail").exception("guardrail: checking %s failed", layer.path)
                    continue
                if event is not None:
                    self.metrics.swapped(layer.name, event.outcome)
                    if event.outcome == "refused":
                        refused.append(layer.refusal_finding(event))
            ctx = super().start_episode(*args, **kwargs)
            for layer in watched:
                ctx.state(layer)  # pinned: a later swap does not change what judges this episode
        if refused:
            with ctx.lock:
                ctx.findings.extend(refused)
        return ctx

    @property
    def layer_names(self) -> list[str]:
        """The pipeline's layers by name, plus "repair" when the Guard carries a repairer."""
        return [layer.name for layer in self.layers] + (["repair"] if self.repairer is not None else [])

    def langchain_middleware(self, **options: Any) -> list[Any]:
        """The LangChain v1 middleware for every assembled layer: GuardMiddleware (with inline repair when the
        Guard has a repairer), then the self-consistency sampler when assembled with ``n=``. Bind the graph
        with `bind`. `options` go to GuardMiddleware (``stop_on_alarm``, ``on_decision``, ``cwd``...)."""
        from adapters.langchain import GuardMiddleware
        from adapters.sampling import SelfConsistencyMiddleware

        middleware: list[Any] = [GuardMiddleware(self, repair=self.repairer or False, **options)]
        if self.sampling is not None:
            middleware.append(SelfConsistencyMiddleware(self, self.sampling.layer, self.sampling.harness,
                                                        n=self.sampling.n))
        self._middleware = middleware
        return middleware

    def bind(self, graph: Any) -> Any:
        """Tell the middleware `langchain_middleware` made which graph it runs in (for inline repair); returns `graph`."""
        for middleware in getattr(self, "_middleware", []):
            if hasattr(middleware, "bind"):
                middleware.bind(graph)
        return graph
