"""The gate benchmark's plumbing on the local fixture project (no network): cases, execution labels, JSON shape."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from guardrail.core.cli import main
from traces.bench.gate import Case, build_cases, confirm_label, scores

FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "proj"))


def test_cases_cover_every_family_with_both_labels(proj: Path) -> None:
    (proj / "tests" / "test_fixture.py").write_text("def test_one():\n    pass\n\n\nclass TestX:\n"
                                                    "    def test_two(self):\n        pass\n")
    cases = build_cases(proj, "fixture")
    seen = {(c.family, c.intended) for c in cases}
    assert seen == {(f, b) for f in ("namespace", "filesystem", "command", "harness") for b in (True, False)}


def test_execution_confirms_a_missing_file_and_a_valid_command(proj: Path) -> None:
    missing = Case("a", "p", "filesystem", True, {"kind": "shell", "command": "cat nothing_here.txt"})
    valid = Case("b", "p", "namespace", False, {"kind": "python", "code": "from pkg import Engine"})
    assert confirm_label(missing, proj, sys.executable)[0] is True
    assert confirm_label(valid, proj, sys.executable)[0] is False
    assert list(proj.glob("nothing_here*")) == []  # it ran in a throwaway copy


def test_scores_are_standard_precision_recall() -> None:
    result = scores([True, True, False, False], [True, False, True, False])
    assert (result["precision"], result["recall"], result["accuracy"], result["f1"]) == (0.5, 0.5, 0.5, 0.5)


def test_bench_gate_json_prints_one_object_per_method(proj: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "gate", "--json", "--project-dir", str(proj), "--cache", str(tmp_path / "cache"),
                 "--limit", "8", "--no-jedi", "--no-mypy", "--no-pyright"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert [r["method"] for r in rows] == ["statemirror", "statemirror_busy2", "action_only"]
    busy = rows[1]
    assert busy["verdicts_identical_to_idle"] is True and busy["budget_exceeded"] == 0
    assert set(busy) >= {"first_pass", "first_pass_budget_exceeded", "cold_max_ms", "load_average"}
    for row in rows:
        assert set(row) >= {"method", "precision", "recall", "f1", "accuracy", "median_ms", "p95_ms", "cold_ms",
                            "n", "per_family"}
        assert row["n"] == 8
    assert rows[0]["meta"]["executed"] == 8  # the first 8 cases are shell/Python: every label was executed
    assert (tmp_path / "cache" / "labels.json").is_file()


def test_trajectory_files_round_trip_and_replay_labels_by_execution(proj: Path, tmp_path: Path) -> None:
    from adapters.swe_agent import read_traj
    from traces.bench.gate_traj import read_mini, replay, session, write_mini, write_swe

    commands = session(proj, "fixture", (3, 11))
    assert "python3.13 -c 'print(1)'" in commands
    write_swe(commands, tmp_path / "a.traj")
    write_mini(commands, tmp_path / "a.json")
    assert [s.action for s in read_traj(tmp_path / "a.traj").steps] == commands
    assert read_mini(tmp_path / "a.json") == commands
    rows = replay(["cd pkg", "cat core.py | head -n 1", "cat missing.txt || true", "cat nothing.txt"], proj,
                  sys.executable, persistent=True)
    assert [(r["label"], r["warned"], r["blocked"]) for r in rows] == [
        (False, False, False), (False, False, False), (True, True, False), (True, True, True)]


def test_trajectory_patterns_are_tagged_and_the_aci_forms_are_judged_without_running(proj: Path) -> None:
    """bench gate-traj's issue-30 patterns: a tool right of `||` that never ran, the shipped edit/insert forms."""
    from traces.bench.gate_traj import replay, tagged_session

    tagged = tagged_session(proj, "fixture", (3, 11))
    assert {"or-fallback", "agent-env", "aci-edit:ok", "aci-edit:bad"} <= {pattern for _, pattern in tagged}
    chosen = [(c, p) for c, p in tagged if p.startswith(("or-fallback", "aci-edit"))]
    rows = replay([c for c, _ in chosen], proj, sys.executable, persistent=True, patterns=dict(chosen),
                  open_file="pkg/core.py")
    for row in rows:
        if row["pattern"] == "or-fallback" and not row["label"] or row["pattern"] == "aci-edit:ok":
            assert not row["blocked"], row
        if row["pattern"] == "aci-edit:bad":
            assert row["blocked"] and row["label"], row
