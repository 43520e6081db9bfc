"""Send the guard's spans to any OTLP endpoint with the standard OpenTelemetry exporter, when one is configured."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["TRACES_PATH", "configure_tracing", "otlp_configured"]

TRACES_PATH = "/v1/traces"
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def otlp_configured(endpoint: str | None = None) -> bool:
    """True when spans would be exported: an endpoint is given or set in the environment, and the SDK is not disabled."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(endpoint or any(os.environ.get(var, "").strip() for var in _ENDPOINT_VARS))


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
    protocol = next((os.environ[v].strip().lower() for v in _PROTOCOL_VARS if os.environ.get(v, "").strip()),
                    "http/protobuf")
    if protocol != "http/protobuf":
        raise ValueError(
            f"OTLP protocol {protocol!r} is not supported by configure_tracing (it uses OTLP over HTTP with "
            "protobuf); unset OTEL_EXPORTER_OTLP_PROTOCOL, or install the gRPC exporter and configure it yourself"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ModuleNotFoundError as exc:
        raise RuntimeError(
            "OTLP export needs 'opentelemetry-exporter-otlp-proto-http': pip install 'guardrail[scale]'"
        ) from exc
    traces_url = _traces_url(endpoint) if endpoint else None
    if traces_url is None:
        _check_env_endpoint()
    exporter = OTLPSpanExporter(endpoint=traces_url)  # None: the exporter resolves the env variables itself
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


def _traces_url(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"OTLP endpoint must be an http(s) URL like http://collector:4318, got {endpoint!r}")
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def _check_env_endpoint() -> None:
    # Name the variable, never its value: it may embed credentials.
    for var in _ENDPOINT_VARS:
        value = os.environ.get(var, "").strip()
        if value:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"{var} must be an http(s) URL like http://collector:4318")
            return
