"""The guard's OpenTelemetry metrics: decisions, findings, per-layer latency, episodes and alarms, recorder drops.

Instruments come from the global metrics API (a no-op until the application or
`guardrail.core.otlp.configure_metrics` installs an SDK `MeterProvider`), so a Guard built before
the provider still reports through it, and a process that exports nothing pays almost nothing.

=====================================  =========  ==========================================
instrument                             kind       attributes
=====================================  =========  ==========================================
``guardrail.decisions``                counter    ``guardrail.hook``, ``guardrail.verdict``
``guardrail.findings``                 counter    ``guardrail.layer``, ``guardrail.check``,
                                                  ``guardrail.severity``
``guardrail.layer.duration``           histogram  ``guardrail.layer``, ``guardrail.hook`` (s)
``guardrail.episodes``                 counter    ``guardrail.verdict``, ``guardrail.alarmed``
``guardrail.recorder.dropped``         counter    (observable: steps lost to a full queue)
``guardrail.swaps``                    counter    ``guardrail.layer``, ``guardrail.outcome``
``guardrail.drift.*``                  gauges     ``guardrail.model``, ``guardrail.verdict``
=====================================  =========  ==========================================

The alarm rate is ``guardrail.episodes{guardrail.alarmed=true}`` over ``guardrail.episodes``; the
drift gauges (`guardrail drift --otlp`) carry the same rate on labelled healthy runs, its interval
and the budget.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

__all__ = ["METER_NAME", "GuardMetrics", "drift_gauges", "get_meter"]

METER_NAME = "guardrail"
# Seconds: a layer hook runs from microseconds (the monitor) to a quarter second (the gate's deadline).
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5)


def get_meter(meter_provider: metrics.MeterProvider | None = None) -> metrics.Meter:
    from guardrail.core.version import version

    if meter_provider is not None:
        return meter_provider.get_meter(METER_NAME, version())
    return metrics.get_meter(METER_NAME, version())


_SHARED: dict[int, tuple[Any, GuardMetrics]] = {}  # id(meter) -> (meter, its instruments)
_SHARED_LOCK = threading.Lock()


class GuardMetrics:
    """The instruments Guards report through (every call is cheap and never raises into the agent).

    One set per meter (`for_meter`): every Guard of a process adds to the same counters, as one
    service's instruments should, and OpenTelemetry never sees an instrument created twice.
    """

    @classmethod
    def for_meter(cls, meter: metrics.Meter | None = None) -> GuardMetrics:
        with _SHARED_LOCK:
            key = id(meter)
            found = _SHARED.get(key)
            if found is None:
                found = _SHARED[key] = (meter, cls(meter))
            return found[1]

    def __init__(self, meter: metrics.Meter | None = None) -> None:
        meter = meter or get_meter()
        self._meter = meter
        self._lock = threading.Lock()
        # Counts are kept here and read by observable counters at collection time: on the agent's path a count
        # is a dict update (a synchronous SDK counter costs about 10 us a call, more than most layers).
        self._counts: dict[str, dict[tuple[tuple[str, Any], ...], int]] = {}
        for name, unit, description in (
                ("guardrail.decisions", "{decision}", "Guard decisions by hook and verdict"),
                ("guardrail.findings", "{finding}", "findings by layer, check and severity"),
                ("guardrail.episodes", "{episode}", "finished episodes by end verdict and whether any step alarmed"),
                ("guardrail.swaps", "{swap}", "hot swaps of a model or spec file (swapped or refused)")):
            self._counts[name] = {}
            meter.create_observable_counter(name, callbacks=[self._observer(name)], unit=unit,
                                            description=description)
        try:
            self.latency = meter.create_histogram(
                "guardrail.layer.duration", unit="s", description="time spent in one layer hook",
                explicit_bucket_boundaries_advisory=list(LATENCY_BUCKETS))
        except TypeError:  # an older API without bucket advice
            self.latency = meter.create_histogram("guardrail.layer.duration", unit="s",
                                                  description="time spent in one layer hook")
        self._recorders: weakref.WeakSet[Any] = weakref.WeakSet()
        self._dropped_registered = False

    def _observer(self, name: str) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                items = list(self._counts[name].items())
            return [Observation(count, dict(key)) for key, count in items]

        return observe

    def _count(self, name: str, key: tuple[tuple[str, Any], ...], n: int = 1) -> None:
        with self._lock:
            counts = self._counts[name]
            counts[key] = counts.get(key, 0) + n

    def watch_dropped(self, recorder: Any) -> None:
        """Report a run recorder's count of dropped steps (``recorder.dropped``) in ``guardrail.recorder.dropped``."""
        with self._lock:
            self._recorders.add(recorder)
            if self._dropped_registered:
                return
            self._dropped_registered = True

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            total = 0
            for source in list(self._recorders):
                try:
                    total += int(source.dropped)
                except Exception:  # noqa: BLE001 - a metric callback never raises
                    continue
            return [Observation(total)]

        self._meter.create_observable_counter("guardrail.recorder.dropped", callbacks=[observe], unit="{item}",
                                              description="steps and decisions the run recorder dropped "
                                                          "(its queue was full)")

    def layer_done(self, layer: str, hook: str, seconds: float, findings: Iterable[Any]) -> None:
        self.latency.record(seconds, {"guardrail.layer": layer, "guardrail.hook": hook})
        for finding in findings:
            self._count("guardrail.findings", (("guardrail.layer", finding.layer), ("guardrail.check", finding.check),
                                               ("guardrail.severity", finding.severity.value)))

    def decided(self, hook: str, verdict: str) -> None:
        self._count("guardrail.decisions", (("guardrail.hook", hook), ("guardrail.verdict", verdict)))

    def episode_done(self, verdict: str, alarmed: bool) -> None:
        self._count("guardrail.episodes", (("guardrail.verdict", verdict), ("guardrail.alarmed", alarmed)))

    def swapped(self, layer: str, outcome: str) -> None:
        self._count("guardrail.swaps", (("guardrail.layer", layer), ("guardrail.outcome", outcome)))


def drift_gauges(meter: metrics.Meter, values: Mapping[str, float | None], attributes: Mapping[str, Any]) -> list[str]:
    """Observable gauges ``guardrail.drift.<name>`` reporting `values` (a drift report's numbers); their names."""
    names = []
    for key, value in values.items():
        if value is None:
            continue

        def observe(options: CallbackOptions, value: float = float(value)) -> Iterable[Observation]:
            return [Observation(value, dict(attributes))]

        name = f"guardrail.drift.{key}"
        meter.create_observable_gauge(name, callbacks=[observe], description=f"guardrail drift: {key}")
        names.append(name)
    return names
