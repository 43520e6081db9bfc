"""`guardrail bench overhead --json` prints one object per (framework, configuration) with the issue's keys."""

from __future__ import annotations

import json

from guardrail.core.cli import main

ROW_KEYS = {"framework", "configuration", "baseline", "layers", "recorder_dropped", "writer_ms_per_step",
            "median_added_ms_per_step",
            "p95_added_ms_per_step", "floor_median_ms", "adapter_median_ms", "layers_median_ms", "best_added_ms",
            "best_floor_ms", "best_adapter_ms", "best_layers_ms", "adapter_self_ms", "steps", "load_average"}


def test_overhead_json_has_one_row_per_framework_and_configuration(capsys):
    code = main(["bench", "overhead", "--frameworks", "guard", "langgraph", "autogen", "--configs", "gate",
                 "--repeats", "2", "--warmup", "0", "--json"])

    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert [(r["framework"], r["layers"]) for r in rows] == [("guard", ["gate"]), ("langgraph", ["gate"]),
                                                             ("autogen", ["gate"])]
    for row in rows:
        assert set(row) == ROW_KEYS
        assert row["steps"] > 0 and isinstance(row["median_added_ms_per_step"], float)
        assert row["p95_added_ms_per_step"] >= row["median_added_ms_per_step"]
        assert isinstance(row["adapter_median_ms"], float) and isinstance(row["layers_median_ms"], float)
        assert len(row["load_average"]) == 2
    # The floor (no-op hooks over the bare agent) exists only where there is a framework to host them.
    assert [r["floor_median_ms"] is None for r in rows] == [True, False, False]
    assert [r["best_floor_ms"] is None for r in rows] == [True, False, False]
    # The adapter's own hooks, timed from inside: a positive cost, far under a millisecond a step.
    assert [r["adapter_self_ms"] is None for r in rows] == [True, False, False]
    assert all(0 < r["adapter_self_ms"] < 5 for r in rows[1:])


def test_overhead_growth_reports_the_added_cost_along_a_long_run(capsys):
    code = main(["bench", "overhead", "--frameworks", "langgraph", "autogen", "--configs", "none", "--repeats", "1",
                 "--warmup", "0", "--growth", "--growth-steps", "20", "--growth-repeats", "1", "--json"])

    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    growth = [r for r in rows if r["configuration"].startswith("growth")]
    assert code == 0
    assert [(r["framework"], r["configuration"]) for r in growth] == [
        ("langgraph", "growth-none"), ("langgraph", "growth-all"), ("autogen", "growth-none"), ("autogen", "growth-all")]
    for row in growth:
        assert row["steps_per_run"] == 20 and row["repeats"] == 1
        assert set(row["self_ms_at_step"]) == {"10", "20"}
        assert all(0 < v < 10 for v in row["self_ms_at_step"].values())


def test_overhead_profile_writes_cprofile_files(tmp_path, capsys):
    code = main(["bench", "overhead", "--frameworks", "guard", "--configs", "gate", "--repeats", "1", "--warmup", "0",
                 "--profile", "--out", str(tmp_path)])

    assert code == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["guard-bare.prof", "guard-bare.txt", "guard-diff.txt", "guard-gate.prof", "guard-gate.txt",
                     "guard-none.prof", "guard-none.txt"]
    assert "guardrail/core/guard.py" in (tmp_path / "guard-diff.txt").read_text()
    assert "function calls" in (tmp_path / "guard-gate.txt").read_text()


def test_overhead_refuses_zero_repeats(capsys):
    assert main(["bench", "overhead", "--repeats", "0"]) == 2
    assert "--repeats must be at least 1" in capsys.readouterr().err


def test_the_record_row_is_paired_with_every_layer_unrecorded(capsys):
    code = main(["bench", "overhead", "--frameworks", "guard", "--configs", "record", "--repeats", "2", "--warmup", "0",
                 "--json"])

    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert row["baseline"] == "all" and row["layers"] == ["gate", "monitor", "verifier", "record"]
    assert row["recorder_dropped"] == 0 and row["steps"] > 0
    assert row["writer_ms_per_step"] > 0  # every recorded run was written inside its own timing (a flush)
