"""The demo runs the whole stack end to end: gate block, verifier catch, rollback repair, monitor alarm, report."""

from __future__ import annotations

import json

import pytest

from traces.demo import _print_summary, run_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return out, run_demo(out)


def test_gate_blocks_the_wrong_path_with_a_hint_and_the_agent_recovers(demo):
    _, summary = demo
    gate = summary["gate"]

    assert len(gate["blocked"]) == 1 and gate["blocked"][0]["tool"] == "read_file"
    assert "notes/todo.md" in gate["blocked"][0]["message"] and "notes/todos.md" in gate["blocked"][0]["message"]
    assert gate["summary_file_written"] and "3 open items" in gate["answer"]


def test_verifier_catches_the_wrong_total(demo):
    _, summary = demo
    verifier = summary["verifier"]

    assert "total_consistency" in verifier["caught"]
    assert f"${verifier['expected_total']:g}" not in verifier["answer"]


def test_repair_forks_the_thread_and_reaches_the_true_total(demo):
    _, summary = demo
    repair = summary["repair"]

    assert repair["outcome"] == "repaired"
    assert repair["fork_checkpoint"] and repair["extra_model_calls"] >= 1
    assert f"{repair['expected_total']:g}" in repair["answer"]
    assert f"{repair['expected_total']:g}" not in repair["original_answer"]


def test_monitor_alarm_stops_the_autogen_team(demo):
    _, summary = demo
    monitor = summary["monitor"]

    assert monitor["alarm"] and monitor["stop_reason"].startswith("guardrail alarm")
    assert monitor["alarm_step"] >= 1  # not before the first failing tool call (onset 1)


def test_spans_json_holds_the_guard_spans_under_their_agent_span(demo):
    out, _ = demo
    spans = json.loads((out / "spans.json").read_text())
    by_id = {s["span_id"]: s for s in spans}

    gate = [s for s in spans if s["name"] == "guardrail.gate"]
    assert "block" in [s["attributes"]["guardrail.decision"] for s in gate]
    assert all(by_id[s["parent_span_id"]]["name"] == "invoke_agent demo-gate" for s in gate)
    assert any(s["name"] == "guardrail.repair" for s in spans)
    assert any(s["name"] == "guardrail.monitor" and "guardrail.score" in s["attributes"] for s in spans)


def test_report_opens_every_episode_and_lists_the_verifier_catch_it_shows(demo):
    out, summary = demo
    page = out / "report" / "index.html"
    text = page.read_text()
    site = json.loads((out / "report" / "site.json").read_text())

    assert summary["report"] == str(page)
    assert all((out / "report" / e["page"]).is_file() for e in site["episodes"])
    assert text.count("<svg class='spark'") == len(site["episodes"])  # every stream drawn, none left out
    assert "Rollback repair" in text and "Verifier catch" in text
    outside = text[text.index("Findings outside these episodes"):]
    assert "total_consistency" in outside and "verifier scene" in outside  # no "none" under its own catch
    assert (out / "monitor.npz").is_file() and (out / "corpus" / "manifest.json").is_file()


def test_summary_printout_names_each_scene(demo, capsys):
    _print_summary(demo[1])

    printed = capsys.readouterr().out
    for marker in ("BLOCKED read_file", "CAUGHT", "outcome: repaired", "ALARM", "guardrail.gate"):
        assert marker in printed
