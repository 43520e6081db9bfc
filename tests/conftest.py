"""Shared test fixtures: real OpenTelemetry spans in memory, and the shared sentinel corpora (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

REPO = Path(__file__).resolve().parents[1]
SENTINEL = REPO.parent / "shared" / "corpora" / "sentinel"

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))
trace.set_tracer_provider(_PROVIDER)


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """The in-memory exporter behind the global tracer provider, emptied for this test."""
    _EXPORTER.clear()
    return _EXPORTER


@pytest.fixture(scope="session")
def sentinel_dir() -> Path:
    """../shared/corpora/sentinel, or a skip saying why the test cannot run here."""
    if not (SENTINEL / "langgraph7b" / "manifest.json").is_file():
        pytest.skip(f"sentinel corpora not found at {SENTINEL} (they live in ../shared/corpora, outside the repo)")
    return SENTINEL


@pytest.fixture(scope="session")
def local_model():
    """(base URL, /health answer) of `guardrail model serve` on a free loopback port, once per session.

    Skips, naming the install command, where llama-cpp-python or the model wheel is not installed.
    """
    from traces.model_server import INSTALL_HINT, LocalModelServer, ModelUnavailable

    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pytest.skip(f"llama-cpp-python is not installed: {INSTALL_HINT}")
    try:
        server = LocalModelServer().start()
    except ModelUnavailable as exc:
        pytest.skip(str(exc))
    yield server.base_url, server.info
    server.stop()
