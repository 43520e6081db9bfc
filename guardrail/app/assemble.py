"""`Guard.default`: the Guard a user gets from what they have (workspace -> gate, model -> monitor, spec -> verifiers)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from guardrail.core.guard import Guard as PipelineGuard
from guardrail.core.layer import Layer

if TYPE_CHECKING:
    from guardrail.core.guard import Mode

__all__ = ["Guard", "default_guard", "default_layers", "LayerUnavailable"]


class LayerUnavailable(ImportError):
    """A layer was asked for (by giving its input) but its package is not installed in this build."""


def _gate(workspace: str | os.PathLike[str], *, python: str | None, tools: Any) -> Layer:
    try:
        from guardrail.gate.layer import GateLayer
    except ImportError as exc:
        raise LayerUnavailable(f"workspace= asks for the gate, but guardrail.gate cannot load: {exc}") from exc
    return GateLayer(workspace, python=python, tools=tools)


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


def default_layers(
    *,
    workspace: str | os.PathLike[str] | None = None,
    model: Any = None,
    spec: Any = None,
    python: str | None = None,
    tools: Mapping[str, Any] | None = None,
    contracts: Mapping[str, Any] | None = None,
    extra_layers: Sequence[Layer] = (),
) -> list[Layer]:
    """The layers for what is given, in pipeline order: gate, monitor, verifiers, then `extra_layers`."""
    layers: list[Layer] = []
    if workspace is not None:
        layers.append(_gate(workspace, python=python, tools=tools))
    if model is not None:
        layers.append(_monitor(model))
    if spec is not None:
        layers.append(_verifiers(spec, contracts))
    layers.extend(extra_layers)
    return layers


def default_guard(
    cls: Callable[..., PipelineGuard] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    model: Any = None,
    spec: Any = None,
    mode: Mode = "report",
    python: str | None = None,
    tools: Mapping[str, Any] | None = None,
    contracts: Mapping[str, Any] | None = None,
    extra_layers: Sequence[Layer] = (),
    **guard_options: Any,
) -> PipelineGuard:
    """A Guard with every layer the arguments allow.

    ``workspace`` (the repository the agent works in) adds the pre-execution gate; ``model`` (a
    fitted monitor or its model file) the step monitor; ``spec`` (a verifier spec, a shipped spec's
    name, or a spec file such as one ``guardrail fit-spec`` wrote) the verifiers. Asking for a layer whose package cannot load raises `LayerUnavailable`
    saying which; other keyword arguments go to `Guard` (``fail_closed``, ``capture_content``, ``tracer``).
    """
    make = cls or Guard
    layers = default_layers(workspace=workspace, model=model, spec=spec, python=python, tools=tools,
                            contracts=contracts, extra_layers=extra_layers)
    return make(layers, mode=mode, **guard_options)


class Guard(PipelineGuard):
    """The Guard pipeline (`guardrail.core.guard.Guard`) plus ``Guard.default``, which assembles the layers."""

    @classmethod
    def default(cls, **options: Any) -> Guard:
        """A Guard with every layer the given options allow (workspace -> gate, model -> monitor, spec -> verifiers)."""
        guard = default_guard(cls, **options)
        assert isinstance(guard, Guard)
        return guard
