"""Shared test fixtures: real OpenTelemetry spans in memory, and the shared sentinel corpora (skipped when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

REPO = Path(__file__).resolve().parents[1]
# GUARDRAIL_SENTINEL points a checkout that does not sit beside shared/ (a worktree) at the corpora.
SENTINEL = Path(os.environ.get("GUARDRAIL_SENTINEL") or REPO.parent / "shared" / "corpora" / "sentinel")

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
