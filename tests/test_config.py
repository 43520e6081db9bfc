"""guardrail.toml: `guardrail init`, `guardrail config check`, GUARDRAIL_* overrides, the shipped JSON Schema, hostile
files, and the hot swap of a spec file; through the documented API and commands only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from guardrail import Guard, Step, StepKind
from guardrail.app.config import SCHEMA_FILE, ConfigError, check_config, config_schema, load_config
from guardrail.core.cli import main

REPO = Path(__file__).resolve().parents[1]


def _toml_as_json(path: Path) -> dict:
    import tomllib

    return tomllib.loads(path.read_text())


def test_init_writes_a_commented_file_for_the_framework_it_finds_and_it_checks_clean(tmp_path, capsys, monkeypatch):
    (tmp_path / "agent.py").write_text("from autogen_agentchat.agents import AssistantAgent\n")
    monkeypatch.chdir(tmp_path)

    assert main(["init"]) == 0
    text = (tmp_path / "guardrail.toml").read_text()
    assert "(autogen)" in capsys.readouterr().out and "AutoGenGuard(Guard.from_config" in text
    assert text.count("\n#") > 20  # commented for the person who deploys it
    assert main(["init"]) == 2  # never overwrites without --force
    assert main(["config", "check", "guardrail.toml"]) == 0
    assert capsys.readouterr().out.endswith("guardrail.toml: ok\n")
    jsonschema.validate(_toml_as_json(tmp_path / "guardrail.toml"), config_schema())
    assert main(["init", "--framework", "langgraph", "--force"]) == 0
    assert "langchain_middleware()" in (tmp_path / "guardrail.toml").read_text()


def test_the_shipped_json_schema_is_the_one_the_code_checks_with(capsys):
    assert json.loads(SCHEMA_FILE.read_text()) == config_schema()
    assert main(["config", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == config_schema()


def test_config_check_gives_one_message_per_problem(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(textwrap.dedent("""
        mode = "intervne"
        fial = "closed"
        [monitor]
        modle = "m.npz"
        [gate]
        budget_ms = -5
    """))

    assert main(["config", "check", str(bad)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "4 problem(s)" and len(lines) == 5
    assert any("mode: Input should be 'report' or 'intervene'" in line for line in lines)
    assert any("fial: unknown key in the top level (did you mean 'fail'?)" in line for line in lines)
    assert any("monitor.modle: unknown key in [monitor] (did you mean 'model'?)" in line for line in lines)
    assert any("gate.budget_ms: Input should be greater than 0" in line for line in lines)


def test_files_the_config_names_are_checked_and_loaded(tmp_path):
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 not a model")
    (tmp_path / "tools.json").write_text('{"lookup": "not a schema"}')
    (tmp_path / "g.toml").write_text(textwrap.dedent("""
        [gate]
        workspace = "no-such-dir"
        [monitor]
        model = "broken.npz"
        shadow_model = "missing.npz"
        [verifier]
        spec = "no_such_shipped_spec"
        [tools]
        schemas = "tools.json"
        [record]
        store = "ftp://runs"
        [telemetry]
        otlp_endpoint = "collector:4318"
    """))

    problems = check_config(tmp_path / "g.toml")

    assert [p.split(":")[0] for p in problems] == ["gate.workspace", "monitor.shadow_model", "monitor.model",
                                                   "verifier.spec", "tools.schemas", "record.store",
                                                   "telemetry.otlp_endpoint"]
    assert "not a guardrail monitor file" in problems[2] and "no spec file" in problems[3]
    with pytest.raises(ConfigError) as caught:
        Guard.from_config(tmp_path / "g.toml")
    assert len(caught.value.problems) == 4  # the files that are missing or misnamed; loading is the build's


@pytest.mark.parametrize("content, expected", [
    (b"\xff\xfe not utf-8", "not UTF-8"),
    (b"a = [" * 5000, "not valid TOML"),
    (b"x = 1\n" * 400_000, "larger than"),
    (b"[gate\nworkspace=1", "not valid TOML"),
])
def test_hostile_deployment_files_are_one_clear_problem(tmp_path, content, expected):
    path = tmp_path / "hostile.toml"
    path.write_bytes(content)

    problems = check_config(path)

    assert len(problems) == 1 and expected in problems[0]


def test_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "dir.toml").mkdir()

    assert "cannot read it" in check_config(tmp_path / "fifo.toml")[0]
    assert "cannot read it" in check_config(tmp_path / "dir.toml")[0]
    assert check_config(tmp_path / "absent.toml") == ["no such file"]


def test_environment_overrides_win_over_the_file_and_name_themselves_when_wrong(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "d.toml").write_text('mode = "report"\n[gate]\nworkspace = "."\n[record]\nstore = "sqlite:///runs.db"\n')
    env = {"GUARDRAIL_MODE": "intervene", "GUARDRAIL_FAIL": "closed", "GUARDRAIL_GATE_BUDGET_MS": "120",
           "GUARDRAIL_RECORD_STORE": str(tmp_path / "runs"), "GUARDRAIL_FUZZ_EXAMPLES": "5"}

    config = load_config(tmp_path / "d.toml", environ=env)
    guard = Guard.from_config(tmp_path / "d.toml", environ=env)

    assert (config.mode, config.fail, config.gate.budget_ms) == ("intervene", "closed", 120)
    assert guard.mode == "intervene" and guard.fail_closed and guard.layers[0].gate.budget_s == 0.12
    assert guard.recorder.store.url == str(tmp_path / "runs")
    guard.close()
    problems = check_config(tmp_path / "d.toml", environ={"GUARDRAIL_CAPTURE_CONTENT": "maybe"})
    assert problems == ['capture.content: Input should be a valid boolean, unable to interpret input, got "maybe" '
                        "(set by GUARDRAIL_CAPTURE_CONTENT)"]


def test_the_alarm_policy_key_is_passed_through_or_reported(tmp_path):
    (tmp_path / "a.toml").write_text('[alarm]\non_alarm = "stop"\n')
    assert check_config(tmp_path / "a.toml") == []
    guard = Guard.from_config(tmp_path / "a.toml")
    assert guard.on_alarm == "stop" and guard.stops_on_alarm
    (tmp_path / "b.toml").write_text('[alarm]\non_alarm = "halt"\n')
    (problem,) = check_config(tmp_path / "b.toml")
    assert problem.startswith("alarm.on_alarm:") and "'warn', 'stop' or 'repair'" in problem


def test_self_consistency_in_a_file_asks_for_its_sandbox_in_code(tmp_path):
    (tmp_path / "n.toml").write_text("[consistency]\nn = 3\n")

    with pytest.raises(ConfigError, match="sandbox"):
        Guard.from_config(tmp_path / "n.toml")


def test_a_changed_spec_file_is_swapped_at_the_next_episode_and_a_broken_one_refused(tmp_path):
    from verifiers.spec import dump_spec, load_spec

    spec = load_spec("booking_tools")
    (tmp_path / "spec.json").write_text(dump_spec(spec))
    (tmp_path / "s.toml").write_text('[verifier]\nspec = "spec.json"\n')
    guard = Guard.from_config(tmp_path / "s.toml")
    first = guard.versions()["spec_sha256"]
    running = guard.start_episode(task="book a flight")

    changed = json.loads(dump_spec(spec))
    changed["name"] = "booking-tools-v2"
    (tmp_path / "spec.json").write_text(json.dumps(changed))
    later = guard.start_episode(task="book a hotel")
    second = guard.versions()["spec_sha256"]
    (tmp_path / "spec.json").write_text('{"checks": 5')
    refused = guard.start_episode(task="book a car")

    assert first != second and [e.outcome for e in guard.swaps] == ["swapped", "refused"]
    assert guard.versions()["spec_sha256"] == second  # the broken file never replaced the working one
    assert running.findings == [] and later.findings == []
    assert [f.check for f in refused.findings] == ["swap_refused"]
    for ctx in (running, later, refused):
        ctx.on_step(Step(index=0, kind=StepKind.FINAL, text="done"))
        ctx.finish()
    os.utime(tmp_path / "spec.json")  # touched again, same bytes: not tried twice
    guard.start_episode(task="again").finish()
    assert len(guard.swaps) == 2


def test_a_deployment_exports_spans_and_metrics_from_its_telemetry_section(tmp_path, otlp_receiver):
    # A subprocess: the deployment installs the global providers, as a real service would.
    (tmp_path / "guardrail.toml").write_text(textwrap.dedent(f"""
        [telemetry]
        otlp_endpoint = "{otlp_receiver.endpoint}"
        service_name = "config-telemetry-test"
        metrics_interval_ms = 200
    """))
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from opentelemetry import metrics, trace
        from guardrail import Guard
        from tests.operate_agents import Shop, run_langchain

        guard = Guard.from_config({str(tmp_path / "guardrail.toml")!r})
        run_langchain(guard, 7, Shop())
        trace.get_tracer_provider().force_flush()
        metrics.get_meter_provider().force_flush()
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path, check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    assert otlp_receiver.got_spans.wait(10) and otlp_receiver.got_metrics.wait(10)
    assert {s.service_name for s in otlp_receiver.spans} == {"config-telemetry-test"}
    assert any(s.name == "guardrail.gate" for s in otlp_receiver.spans)
    gate = [p for p in otlp_receiver.metric("guardrail.layer.duration") if p.attributes["guardrail.layer"] == "gate"
            and p.attributes["guardrail.hook"] == "before_action"]
    assert sum(p.value for p in gate) >= 2  # both tool calls held to their schemas before they ran
