"""A real OTLP/HTTP receiver on loopback (traces and metrics), built on the official protobuf messages: what a
collector would have received (the collector itself is not installable here)."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OTLPReceiver", "ReceivedPoint", "ReceivedSpan", "otlp_receiver"]


@dataclass
class ReceivedSpan:
    name: str
    service_name: str
    attributes: dict[str, object]


@dataclass
class ReceivedPoint:
    """One metric data point: the metric's name and kind, its attributes, and its value (sum/gauge) or count."""

    metric: str
    kind: str  # "sum" | "gauge" | "histogram"
    service_name: str
    attributes: dict[str, object]
    value: float
    bucket_counts: list[int] = field(default_factory=list)


@dataclass
class OTLPReceiver:
    """What an OTLP/HTTP collector would have received: decoded spans and metric points, request headers, counts."""

    endpoint: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)
    requests: int = 0
    content_types: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    got_spans: threading.Event = field(default_factory=threading.Event)
    got_metrics: threading.Event = field(default_factory=threading.Event)

    def metric(self, name: str) -> list[ReceivedPoint]:
        with self.lock:
            return [p for p in self.points if p.metric == name]


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _attributes(items) -> dict[str, object]:
    return {a.key: _value(a.value) for a in items}


def _metric_points(request: ExportMetricsServiceRequest) -> list[ReceivedPoint]:
    out = []
    for resource_metrics in request.resource_metrics:
        service = str(_attributes(resource_metrics.resource.attributes).get("service.name"))
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                if kind in ("sum", "gauge"):
                    for point in getattr(metric, kind).data_points:
                        value = point.as_double if point.WhichOneof("value") == "as_double" else point.as_int
                        out.append(ReceivedPoint(metric.name, kind, service, _attributes(point.attributes),
                                                 float(value)))
                elif kind == "histogram":
                    for point in metric.histogram.data_points:
                        out.append(ReceivedPoint(metric.name, kind, service, _attributes(point.attributes),
                                                 float(point.count), list(point.bucket_counts)))
    return out


def _store_spans(receiver: OTLPReceiver, request: ExportTraceServiceRequest) -> None:
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                receiver.spans.append(ReceivedSpan(name=span.name, service_name=str(resource.get("service.name")),
                                                   attributes=_attributes(span.attributes)))
    receiver.got_spans.set()


def _store_metrics(receiver: OTLPReceiver, request: ExportMetricsServiceRequest) -> None:
    receiver.points.extend(_metric_points(request))
    receiver.got_metrics.set()


_SIGNALS = {"/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse, _store_spans),
            "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse, _store_metrics)}


@pytest.fixture
def otlp_receiver() -> Iterator[OTLPReceiver]:
    """An OTLP/HTTP receiver on 127.0.0.1: /v1/traces and /v1/metrics, gzip or deflate bodies."""
    receiver = OTLPReceiver(endpoint="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            signal = _SIGNALS.get(self.path)
            if signal is None:
                self.send_error(404)
                return
            request_type, response_type, store = signal
            request = request_type()
            request.ParseFromString(body)
            with receiver.lock:
                receiver.requests += 1
                receiver.content_types.append(self.headers.get("Content-Type", ""))
                store(receiver, request)
            payload = response_type().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - keep test output clean
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
