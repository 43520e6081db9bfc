"""The demo runs the deployment loop end to end: zero-config guard and record, label, fit, redeploy, look."""

from __future__ import annotations

import json

import pytest

from guardrail.core.runstore import open_store
from traces.demo import FIT_RUNS, _print_summary, run_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return out, run_demo(out)


def test_zero_config_guard_blocks_a_dropped_argument_with_the_signature_and_the_agent_recovers(demo):
    _, summary = demo
    slipped = summary["record"]["slipped"]

    assert len(slipped["blocked"]) == 1
    assert "missing required argument" in slipped["blocked"][0] and "Hint: call it as" in slipped["blocked"][0]
    assert f"${slipped['expected_total']:g}" in slipped["answer"]
    assert summary["record"]["flagged"] == 0  # no healthy run was flagged by the zero-config guard


def test_every_recorded_run_is_in_the_store_and_the_clean_ones_are_labelled_healthy(demo):
    out, summary = demo
    summaries = open_store(summary["store"], create=False).summaries()
    first = summaries[: 2 * FIT_RUNS + 1]

    assert summary["label"].startswith(f"labelled {2 * FIT_RUNS} clean unlabelled episode(s) 'healthy'")
    assert [s.label for s in first].count("healthy") == 2 * FIT_RUNS
    assert [s.episode_id for s in first if s.label == "failed"] == [summary["record"]["slipped"]["episode_id"]]
    assert {s.framework for s in first} == {"langgraph", "autogen"}
    assert (out / "monitor.npz").is_file() and json.loads((out / "spec.json").read_text())["variants"]


def test_the_redeployed_guard_repairs_a_slipped_sum_and_stops_a_failing_team(demo):
    _, summary = demo
    repaired, healthy, alarmed = (summary["redeploy"][k] for k in ("repaired", "healthy", "alarmed"))

    record = repaired["repair"]
    assert record["outcome"] == "repaired" and record["fork_checkpoint"]
    assert f"{repaired['expected_total']:g}" in repaired["answer"]
    assert f"{repaired['expected_total']:g}" not in record["original_answer"]
    assert healthy["verdict"] == "allow" and healthy["repair"] is None
    assert alarmed["alarm"] and alarmed["stop_reason"].startswith("guardrail alarm")
    assert alarmed["alarm_step"] >= 1  # not before the first failing tool call (onset 1)


def test_the_redeployed_runs_say_which_model_and_spec_judged_them(demo):
    _, summary = demo
    rows = {s.episode_id: s for s in open_store(summary["store"], create=False).summaries()}
    redeployed = [rows[summary["redeploy"][k]["episode_id"]] for k in ("repaired", "healthy", "alarmed")]
    zero_config = rows[summary["record"]["slipped"]["episode_id"]]

    assert all(r.model_sha256 and r.spec_sha256 for r in redeployed)
    assert zero_config.model_sha256 is None and zero_config.spec_sha256 is None


def test_runs_txt_and_the_report_and_spans_are_written(demo):
    out, summary = demo
    runs = (out / "runs.txt").read_text()
    assert summary["runs"] in runs and "healthy" in runs
    assert (out / "report" / "index.html").is_file()
    spans = json.loads((out / "spans.json").read_text())
    gate = [s for s in spans if s["name"] == "guardrail.gate"]
    assert "block" in [s["attributes"]["guardrail.decision"] for s in gate]
    assert any(s["name"] == "guardrail.repair" for s in spans)
    assert any(s["name"] == "guardrail.monitor" and "guardrail.score" in s["attributes"] for s in spans)


def test_the_report_opens_every_recorded_episode(demo):
    out, summary = demo
    page = out / "report" / "index.html"
    text = page.read_text()
    site = json.loads((out / "report" / "site.json").read_text())

    assert summary["report"] == str(page)
    assert len(site["episodes"]) == len(open_store(summary["store"], create=False).summaries())
    assert all((out / "report" / e["page"]).is_file() for e in site["episodes"])
    assert text.count("<svg class='spark'") == len(site["episodes"])  # every stream drawn, none left out


def test_summary_printout_names_each_scene(demo, capsys):
    _print_summary(demo[1])

    printed = capsys.readouterr().out
    for marker in ("BLOCKED", "labelled", "wrote", "repaired inside the run", "ALARM", "guardrail runs"):
        assert marker in printed
