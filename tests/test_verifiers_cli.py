"""`guardrail verify` and `guardrail bench verify`: the JSON interface, spec choice, bad input, engines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardrail.core.cli import main
from guardrail.core.corpus import read_corpus, write_corpus
from guardrail.core.engine import LocalEngine
from verifiers.cli import shards_for, verify_shard

COLD_IDS = ["organic-demo-000", "organic-demo-001", "organic-demo-002", "organic-demo-096"]


@pytest.fixture(scope="module")
def small_corpus(sentinel_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four real cold episodes (healthy, arithmetic error, incomplete, hallucinated) in the project's own format."""
    episodes = [e for e in read_corpus(sentinel_dir / "organic_demo7b_cold").episodes if e.episode_id in COLD_IDS]
    path = tmp_path_factory.mktemp("cold4")
    write_corpus(path, episodes, name="cold4")
    return path


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict], str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, [json.loads(line) for line in captured.out.splitlines() if line.strip()], captured.err


def test_verify_json_prints_one_record_per_episode_with_the_interface_fields(small_corpus, capsys):
    status, records, _ = run_json(capsys, "verify", str(small_corpus), "--json")
    assert status == 0
    assert [r["episode_id"] for r in records] == COLD_IDS
    for record in records:
        assert set(record) == {"episode_id", "flags", "findings"}
        assert all(set(f) == {"check", "step", "message"} for f in record["findings"])
    flagged = {r["episode_id"]: {c for c, f in r["flags"].items() if f} for r in records}
    assert flagged == {"organic-demo-000": set(), "organic-demo-001": {"total_consistency", "grounding"},
                       "organic-demo-002": {"required_coverage"}, "organic-demo-096": {"grounding"}}


def test_verify_reads_the_sentinel_format_too(sentinel_dir, capsys):
    status, records, _ = run_json(capsys, "verify", str(sentinel_dir / "real_task_rollback"), "--json")
    assert status == 0 and len(records) == 20


def test_an_explicit_spec_file_is_used(small_corpus, tmp_path, capsys):
    spec = tmp_path / "only_completion.toml"
    spec.write_text('format = "guardrail-verifier-spec"\nversion = 1\nname = "only_completion"\n'
                    'checks = ["completion"]\n')
    status, records, _ = run_json(capsys, "verify", str(small_corpus), "--spec", str(spec), "--json")
    assert status == 0 and not any(any(r["flags"].values()) for r in records)


def test_an_invalid_spec_is_a_clear_error(small_corpus, tmp_path, capsys):
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps({"name": "bad", "checks": ["totals"]}))
    status, records, err = run_json(capsys, "verify", str(small_corpus), "--spec", str(spec), "--json")
    assert status == 2 and records == []
    assert "checks.0" in err and "bad.json" in err


def test_a_corrupt_line_is_reported_and_the_rest_still_verified(small_corpus, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    for source in small_corpus.iterdir():
        (broken / source.name).write_bytes(source.read_bytes())
    victim = broken / "organic-demo-002.jsonl"
    victim.write_text(victim.read_text() + "{not json\n")
    status, records, err = run_json(capsys, "verify", str(broken), "--json")
    assert status == 1
    assert len(records) == 4
    assert "organic-demo-002.jsonl" in err and "not valid JSON" in err


def test_shards_run_through_an_engine_give_the_same_records(small_corpus):
    shards = shards_for(str(small_corpus), COLD_IDS, "booking_tour", size=3)
    assert len(shards) == 2 and json.loads(json.dumps(shards)) == shards
    direct = [r for shard in shards for r in verify_shard(shard)]
    with LocalEngine() as engine:
        mapped = [r for shard in engine.map(verify_shard, shards) for r in shard]
    assert mapped == direct and [r["episode_id"] for r in mapped] == COLD_IDS


def test_the_dask_engine_gives_the_same_records_as_the_local_one(small_corpus, capsys):
    pytest.importorskip("distributed", reason="the dask engine needs 'distributed' (pip install 'guardrail[scale]')")
    _, local, _ = run_json(capsys, "verify", str(small_corpus), "--json")
    _, dask, _ = run_json(capsys, "verify", str(small_corpus), "--json", "--engine", "dask", "--workers", "1")
    assert dask == local


def test_bench_verify_reports_ours_beside_the_published_figures(sentinel_dir, tmp_path, capsys):
    # The cold corpus alone (the full bench reads every corpus: `guardrail bench verify`).
    (tmp_path / "results").symlink_to(sentinel_dir / "results")
    (tmp_path / "organic_demo7b_cold").symlink_to(sentinel_dir / "organic_demo7b_cold")
    status = main(["bench", "verify", "--json", "--sentinel", str(tmp_path), "--no-testbed"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0
    cold_healthy = next(r for r in report["organic"] if r["corpus"] == "organic_demo7b_cold" and r["label"] == "healthy")
    assert cold_healthy["any_check"] == "0/63" and cold_healthy["published_totals"] == "0/63"
    assert [r["label"] for r in report["organic"]] == ["healthy", "arithmetic_error", "hallucinated", "incomplete"]
    assert report["injected"] == [] and report["tool_contract_healthy"] == {"flagged": 0, "healthy": 63,
                                                                           "published": "0/1825"}
    # Fitted on 60% of cold's healthy runs, beside the hand-written booking_tour spec on the rest.
    fitted = {(r["spec"], r["label"]): r for r in report["fitted"]}
    assert fitted[("fitted", "healthy")]["any"] == fitted[("hand-written", "healthy")]["any"] == "0/25"
    assert fitted[("fitted", "arithmetic_error")]["with_coverage"] == "37/37"
    assert report["fitted_summary"][0]["k_fold_healthy_flagged"] == "0/63"
    assert report["fitted_transfer"] == [] and report["fit_seconds"] is None  # no ext corpus, no testbed here
    # Fitted on cold exactly as shipped (every run "healthy"): the totals check is kept, and every run it lists as an
    # exception to relabel is a failure by the published labels.
    shipped = report["fitted_as_shipped"]
    assert "total_consistency" in shipped["checks"] and shipped["healthy_as_shipped"] == 120
    assert shipped["exceptions"] and all(c["runs"] == c["published_failures"] for c in shipped["exceptions"].values())
