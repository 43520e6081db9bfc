"""Send the guard's spans and metrics to any OTLP endpoint with the standard OpenTelemetry exporters, when one is configured."""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider

__all__ = ["METRICS_PATH", "TRACES_PATH", "configure_metrics", "configure_tracing", "otlp_configured"]

TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_METRICS_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_METRICS_PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def otlp_configured(endpoint: str | None = None, *, signal: str = "traces") -> bool:
    """True when spans (``signal="metrics"``: metrics) would be exported: an endpoint is given or set in the
    environment, and the SDK is not disabled."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter_var = "OTEL_METRICS_EXPORTER" if signal == "metrics" else "OTEL_TRACES_EXPORTER"
    if os.environ.get(exporter_var, "").strip().lower() == "none":
        return False
    variables = _METRICS_ENDPOINT_VARS if signal == "metrics" else _ENDPOINT_VARS
    return bool(endpoint or any(os.environ.get(var, "").strip() for var in variables))


def configure_tracing(service_name: str = "guardrail", *, endpoint: str | None = None,
                      set_global: bool = True) -> TracerProvider | None:
    """Export spans over OTLP/HTTP when `endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set; otherwise do nothing.

    `endpoint` is a base URL like ``http://collector:4318`` (the same meaning as
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``/v1/traces`` is appended unless already there). Everything
    else (headers, TLS, compression, timeout) is read by the standard exporter from the usual
    ``OTEL_EXPORTER_OTLP_*`` variables. Nothing read from the environment is logged or echoed:
    headers and URLs there may carry credentials.

    With `set_global` (the default) the spans of every `Guard` in the process are exported: a new
    SDK provider is installed, or, when the application already installed one, the exporter is
    added to it (OpenTelemetry allows one global provider, and replacing the user's would lose
    their spans). Returns the provider that exports (call its `shutdown()` to flush at exit; the
    SDK also does that on interpreter exit), or None when nothing is configured.

    The spans carry tool arguments and results only when the `Guard` was built with
    ``capture_content=True``; exporting does not change that.
    """
    if not otlp_configured(endpoint):
        return None
    traces_url = _prepare(endpoint, TRACES_PATH, _PROTOCOL_VARS, _ENDPOINT_VARS, "configure_tracing")
    span_exporter = _exporter("trace_exporter", "OTLPSpanExporter")
    exporter = span_exporter(endpoint=traces_url)  # None: the exporter resolves the env variables itself
    processor = BatchSpanProcessor(exporter)
    if set_global:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            current.add_span_processor(processor)
            return current
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    provider.add_span_processor(processor)
    if set_global:
        trace.set_tracer_provider(provider)
    return provider


def configure_metrics(service_name: str = "guardrail", *, endpoint: str | None = None, set_global: bool = True,
                      export_interval_ms: int = 10_000) -> MeterProvider | None:
    """Export the guard's metrics (`guardrail.core.metrics`) over OTLP/HTTP, as `configure_tracing` does spans.

    `endpoint` is the collector's base URL (``/v1/metrics`` is appended); without it the standard
    ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` variables are read by the
    exporter. Metrics are pushed every `export_interval_ms` and on ``provider.shutdown()`` (or
    ``force_flush()``). OpenTelemetry allows one global meter provider and none can be added to
    later, so with `set_global` a provider the application installed first is left alone (None is
    returned: export through it); without, the caller passes the provider to
    ``Guard(meter=provider.get_meter("guardrail"))``. Returns the provider, or None when nothing is
    configured.
    """
    from opentelemetry import metrics as metrics_api

    if not otlp_configured(endpoint, signal="metrics"):
        return None
    metrics_url = _prepare(endpoint, METRICS_PATH, _METRICS_PROTOCOL_VARS, _METRICS_ENDPOINT_VARS,
                           "configure_metrics")
    metric_exporter = _exporter("metric_exporter", "OTLPMetricExporter")
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if set_global and isinstance(metrics_api.get_meter_provider(), SdkMeterProvider):
        return None  # the application's own provider exports; a second global one cannot be set
    reader = PeriodicExportingMetricReader(metric_exporter(endpoint=metrics_url),
                                           export_interval_millis=export_interval_ms)
    provider = SdkMeterProvider(metric_readers=[reader], resource=Resource.create({SERVICE_NAME: service_name}))
    if set_global:
        metrics_api.set_meter_provider(provider)
    return provider


def _prepare(endpoint: str | None, path: str, protocol_vars: tuple[str, ...], endpoint_vars: tuple[str, ...],
             what: str) -> str | None:
    """The signal's URL from `endpoint` (None: the exporter reads the checked environment), protocol checked."""
    _check_protocol(protocol_vars, what)
    url = _signal_url(endpoint, path) if endpoint else None
    if url is None:
        _check_env_endpoint(endpoint_vars)
    return url


def _exporter(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(f"opentelemetry.exporter.otlp.proto.http.{module}"), name)
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            "OTLP export needs 'opentelemetry-exporter-otlp-proto-http': pip install 'guardrail[scale]'"
        ) from exc


def _check_protocol(variables: tuple[str, ...], what: str) -> None:
    protocol = next((os.environ[v].strip().lower() for v in variables if os.environ.get(v, "").strip()),
                    "http/protobuf")
    if protocol != "http/protobuf":
        raise ValueError(
            f"OTLP protocol {protocol!r} is not supported by {what} (it uses OTLP over HTTP with "
            "protobuf); unset OTEL_EXPORTER_OTLP_PROTOCOL, or install the gRPC exporter and configure it yourself"
        )


def _signal_url(endpoint: str, path: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"OTLP endpoint must be an http(s) URL like http://collector:4318, got {endpoint!r}")
    base = endpoint.rstrip("/")
    for known in (TRACES_PATH, METRICS_PATH):  # a signal's own URL given as the base: keep the collector part
        if base.endswith(known):
            base = base[: -len(known)]
    return base + path


def _check_env_endpoint(variables: tuple[str, ...]) -> None:
    # Name the variable, never its value: it may embed credentials.
    for var in variables:
        value = os.environ.get(var, "").strip()
        if value:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"{var} must be an http(s) URL like http://collector:4318")
            return
