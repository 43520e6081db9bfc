"""OTLP export: a real Guard's spans reach a real OTLP/HTTP receiver on loopback through the standard exporter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry import trace

from guardrail import Action, Finding, Guard, Layer, Result, Severity, Step, StepKind
from guardrail.core.otlp import configure_tracing, otlp_configured
from tests.otlp_receiver import OTLPReceiver

REPO = Path(__file__).resolve().parents[1]
SECRET_ARGUMENT = "launch-codes-0000"


class ForbiddenCommand(Layer):
    """Flags `rm -rf /` before it runs and scores every step, so spans carry findings and scores."""

    name = "forbidden"

    def before_action(self, ctx, action):
        if action.command and "rm -rf /" in action.command:
            return [Finding(layer=self.name, check="forbidden_command", message="refusing rm -rf /",
                            blocking=True, severity=Severity.WARNING)]
        return None

    def on_step(self, ctx, step):
        ctx.record_score(self, 0.25)
        return None


def run_guarded_episode(guard: Guard) -> None:
    """One short episode through every hook, with a tool argument that must not leave the process."""
    ctx = guard.start_episode(task="look up a flight", tools=["search_flights"])
    action = Action.tool_call("search_flights", {"code": SECRET_ARGUMENT})
    guard.before_action(ctx, action)
    guard.after_result(ctx, action, Result(output=f"no flight {SECRET_ARGUMENT}"))
    guard.on_step(ctx, Step(index=0, kind=StepKind.TOOL_CALL, text="searched"))
    guard.before_action(ctx, Action.shell("rm -rf /"))
    guard.on_finish(ctx, answer="done")


def _no_secret_anywhere(receiver: OTLPReceiver) -> bool:
    return all(SECRET_ARGUMENT not in json.dumps(span.attributes, default=str) for span in receiver.spans)


def test_guard_spans_reach_the_receiver_through_the_env_configured_exporter(otlp_receiver, tmp_path):
    # A subprocess, so the global provider is the one configure_tracing installs (conftest owns ours).
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from guardrail import Guard
        from guardrail.core.otlp import configure_tracing
        from test_scale_otlp import ForbiddenCommand, run_guarded_episode

        provider = configure_tracing("scale-test-agent")
        assert provider is not None
        run_guarded_episode(Guard([ForbiddenCommand()], mode="intervene"))
        provider.shutdown()  # flushes the batch processor
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_receiver.endpoint
    completed = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                               timeout=60, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    names = [span.name for span in otlp_receiver.spans]
    assert names.count("guardrail.forbidden") == 3  # the hooks it implements: 2 before_action, 1 on_step
    assert {span.service_name for span in otlp_receiver.spans} == {"scale-test-agent"}
    assert all(ct == "application/x-protobuf" for ct in otlp_receiver.content_types)
    blocked = [s for s in otlp_receiver.spans if s.attributes.get("guardrail.decision") == "block"]
    assert len(blocked) == 1 and "forbidden_command" in str(blocked[0].attributes["guardrail.findings"])
    scored = [s for s in otlp_receiver.spans if "guardrail.score" in s.attributes]
    assert [s.attributes["guardrail.score"] for s in scored] == [0.25]
    assert _no_secret_anywhere(otlp_receiver)
    assert otlp_receiver.endpoint not in completed.stdout + completed.stderr  # nothing from the env is echoed


def test_explicit_endpoint_with_a_local_provider_leaves_the_global_provider_alone(otlp_receiver):
    global_provider = trace.get_tracer_provider()
    provider = configure_tracing("scale-test-local", endpoint=otlp_receiver.endpoint, set_global=False)
    assert provider is not None and provider is not global_provider
    try:
        run_guarded_episode(Guard([ForbiddenCommand()], tracer=provider.get_tracer("guardrail")))
        assert provider.force_flush(timeout_millis=10_000)
    finally:
        provider.shutdown()
    assert trace.get_tracer_provider() is global_provider
    assert {s.name for s in otlp_receiver.spans} == {"guardrail.forbidden"}
    assert len(otlp_receiver.spans) == 3
    assert _no_secret_anywhere(otlp_receiver)


def test_tool_arguments_are_exported_only_when_content_capture_is_opted_in(otlp_receiver):
    provider = configure_tracing("scale-test-content", endpoint=otlp_receiver.endpoint + "/v1/traces",
                                 set_global=False)
    assert provider is not None
    try:
        guard = Guard([ForbiddenCommand()], capture_content=True, tracer=provider.get_tracer("guardrail"))
        run_guarded_episode(guard)
        provider.force_flush(timeout_millis=10_000)
    finally:
        provider.shutdown()
    arguments = [s.attributes.get("gen_ai.tool.call.arguments") for s in otlp_receiver.spans]
    assert any(SECRET_ARGUMENT in str(a) for a in arguments)


def test_without_an_endpoint_nothing_is_configured(monkeypatch):
    for var in [v for v in os.environ if v.startswith("OTEL_")]:
        monkeypatch.delenv(var)
    global_provider = trace.get_tracer_provider()
    assert not otlp_configured()
    assert configure_tracing("nothing") is None
    assert trace.get_tracer_provider() is global_provider


def test_disabled_sdk_wins_over_an_endpoint(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert configure_tracing() is None


def test_bad_env_endpoint_is_named_but_its_value_is_not_echoed(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector-with-token-s3cr3t:4318")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_ENDPOINT must be an http") as excinfo:
        configure_tracing(set_global=False)
    assert "s3cr3t" not in str(excinfo.value)


def test_unsupported_protocol_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ValueError, match="not supported"):
        configure_tracing(endpoint="http://127.0.0.1:4318", set_global=False)


def test_setting_global_adds_the_exporter_to_an_existing_sdk_provider(otlp_receiver, spans):
    # conftest installed an SDK provider: configure_tracing must add to it, not silently fail to replace it.
    provider = configure_tracing("ignored", endpoint=otlp_receiver.endpoint)
    assert provider is trace.get_tracer_provider()
    processors = provider._active_span_processor._span_processors  # the SDK keeps them here
    exporting = processors[-1]
    try:
        run_guarded_episode(Guard([ForbiddenCommand()]))
        exporting.force_flush(10_000)
        assert len(otlp_receiver.spans) == 3
        assert len([s for s in spans.get_finished_spans() if s.name == "guardrail.forbidden"]) == 3
    finally:
        # Detach our exporter again so later tests do not export to a receiver that is gone.
        exporting.shutdown()
        provider._active_span_processor._span_processors = processors[:-1]
