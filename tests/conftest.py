"""Shared test fixtures: real OpenTelemetry spans in memory, and the shared sentinel corpora (skipped when absent)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.otlp_receiver import otlp_receiver  # noqa: F401 - the OTLP receiver fixture, for every test module

REPO = Path(__file__).resolve().parents[1]
# GUARDRAIL_SENTINEL points a checkout that does not sit beside shared/ (a worktree) at the corpora.
SENTINEL = Path(os.environ.get("GUARDRAIL_SENTINEL") or REPO.parent / "shared" / "corpora" / "sentinel")
POSTGRES_SCRIPT = REPO / "scripts" / "postgres.sh"

# The gate keeps warm symbol tables in the user's cache directory: the tests keep theirs in a throwaway one.
os.environ.setdefault("GUARDRAIL_CACHE_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                         f"guardrail-test-cache-{os.getpid()}"))

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
def postgres_dsn() -> Iterator[str]:
    """A real PostgreSQL server on 127.0.0.1 for this session (scripts/postgres.sh), or a skip saying why not.

    `GUARDRAIL_POSTGRES_DSN` points the tests at a server you already run instead.
    """
    pytest.importorskip("langgraph.checkpoint.postgres", reason="langgraph-checkpoint-postgres is not installed "
                        "(pip install 'guardrail[scale]')")
    given = os.environ.get("GUARDRAIL_POSTGRES_DSN")
    if given:
        yield given
        return
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to run scripts/postgres.sh")
    started = subprocess.run(["bash", str(POSTGRES_SCRIPT), "start"], capture_output=True, text=True, timeout=90)
    if started.returncode != 0:
        pytest.skip("cannot start a throwaway PostgreSQL server on loopback (install it with "
                    f"`sudo scripts/postgres.sh install`): {started.stderr.strip()[-400:]}")
    dsn, data_dir = started.stdout.strip().splitlines()[-2:]
    try:
        yield dsn
    finally:
        subprocess.run(["bash", str(POSTGRES_SCRIPT), "stop", data_dir], capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def local_model():
    """(base URL, /health answer) of `guardrail model serve` on a free loopback port, once per session.

    Skips, naming the install command, only where llama-cpp-python or the model wheel is not installed; an
    installed model whose server does not come up is a failure.
    """
    from traces.model_server import LocalModelServer, ModelNotInstalled, ModelUnavailable, shipped_model_path

    try:
        import llama_cpp  # noqa: F401

        shipped_model_path()
    except ImportError:
        from traces.model_server import INSTALL_HINT

        pytest.skip(f"llama-cpp-python is not installed: {INSTALL_HINT}")
    except ModelNotInstalled as exc:
        pytest.skip(str(exc))
    try:
        server = LocalModelServer().start()
    except ModelUnavailable as exc:
        pytest.fail(f"the model is installed but its server did not start: {exc}")
    yield server.base_url, server.info
    server.stop()
