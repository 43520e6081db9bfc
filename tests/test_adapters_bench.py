"""`guardrail bench overhead --json` prints one object per (framework, configuration) with the issue's keys."""

from __future__ import annotations

import json

from guardrail.core.cli import main


def test_overhead_json_has_one_row_per_framework_and_configuration(capsys):
    code = main(["bench", "overhead", "--frameworks", "guard", "langgraph", "--configs", "gate",
                 "--repeats", "2", "--warmup", "0", "--json"])

    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert [(r["framework"], r["layers"]) for r in rows] == [("guard", ["gate"]), ("langgraph", ["gate"])]
    for row in rows:
        assert set(row) == {"framework", "configuration", "baseline", "layers", "recorder_dropped",
                            "median_added_ms_per_step", "p95_added_ms_per_step", "steps"}
        assert row["configuration"] == "gate" and row["baseline"] == "unguarded" and row["recorder_dropped"] is None
        assert row["steps"] > 0 and isinstance(row["median_added_ms_per_step"], float)
        assert row["p95_added_ms_per_step"] >= row["median_added_ms_per_step"]


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
