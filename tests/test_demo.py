"""The demo runs end to end: a real LangGraph agent, a blocked call with its hint, and the spans on disk."""

from __future__ import annotations

import json

from guardrail.cli import main
from guardrail.demo import run_demo


def test_demo_blocks_the_wrong_path_and_the_agent_recovers(tmp_path):
    summary = run_demo(tmp_path / "out")

    assert len(summary["blocked"]) == 1
    blocked = summary["blocked"][0]
    assert blocked["tool"] == "read_file"
    assert "notes/todo.md" in blocked["message"] and "notes/todos.md" in blocked["message"]
    assert summary["summary_file_written"]
    assert "3 open items" in summary["answer"]
    assert summary["checkpoints"] > 0


def test_demo_writes_the_spans_it_produced_as_json(tmp_path):
    run_demo(tmp_path / "out")

    spans = json.loads((tmp_path / "out" / "spans.json").read_text())
    gate = [s for s in spans if s["name"] == "guardrail.gate"]
    assert [s["attributes"]["guardrail.decision"] for s in gate][0] == "block"
    root = next(s for s in spans if s["name"] == "invoke_agent demo")
    assert all(s["parent_span_id"] == root["span_id"] for s in gate)
    assert all(s["trace_id"] == root["trace_id"] for s in spans)


def test_demo_command_prints_the_block_and_exits_zero(tmp_path, capsys):
    assert main(["demo", "-o", str(tmp_path / "o")]) == 0

    printed = capsys.readouterr().out
    assert "BLOCKED read_file" in printed
    assert "guardrail.gate" in printed
