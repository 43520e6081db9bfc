"""`guardrail import traj | swe-agent | mini-swe-agent`: the shipped sample trajectories into a run store, and hostile files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from adapters.swe_agent import episode_from_traj, read_traj, sample_path
from guardrail.core.cli import main
from guardrail.core.runstore import open_store

SAMPLES = {"swe_agent_v0.traj": "swe-agent", "swe_agent_function_calling.traj": "swe-agent",
           "v0_missing_test_file.traj": "swe-agent", "v1_cd_then_missing.traj": "swe-agent",
           "mini_swe_agent.traj.json": "mini-swe-agent", "mini_swe_agent_v1.traj.json": "mini-swe-agent"}


def samples(tmp_path: Path) -> Path:
    """The shipped trajectories, copied the way SWE-agent lays out its output (a directory per instance)."""
    root = tmp_path / "trajectories"
    for name in SAMPLES:
        instance = root / name.split(".")[0]
        instance.mkdir(parents=True)
        shutil.copy(sample_path(name), instance / name)
    return root


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def stored(store: str) -> dict[str, Any]:
    with open_store(store, create=False) as opened:
        return {e.episode_id: e for e in opened.episodes()}


def test_sample_trajectories_are_imported_through_the_adapters_parsers(tmp_path: Path, capsys):
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    code, out, err = run(capsys, "import", "traj", str(samples(tmp_path)), "-o", store)
    assert code == 0, err
    assert out.startswith(f"imported {len(SAMPLES)} episode(s)")

    code, out, _ = run(capsys, "runs", store, "--json")
    runs = {r["episode_id"]: r for r in map(json.loads, out.splitlines())}
    assert {name.split(".")[0]: kind for name, kind in SAMPLES.items()} == {k: r["framework"] for k, r in runs.items()}
    assert {r["label"] for r in runs.values()} == {"unlabelled"}
    episodes = stored(store)
    for name in SAMPLES:
        parsed = episode_from_traj(read_traj(sample_path(name)))
        episode = episodes[name.split(".")[0]]
        assert runs[episode.episode_id]["n_steps"] == len(parsed.steps) > 0
        assert [s.text for s in episode.steps] == [s.text for s in parsed.steps]
        assert [[e.model_dump() for e in s.tool_events] for s in episode.steps] == \
               [[e.model_dump() for e in s.tool_events] for s in parsed.steps]
        assert episode.task == parsed.task and episode.meta["imported_from"] == "trajectory"

    code, out, err = run(capsys, "label", store, "--clean-as", "healthy")
    assert code == 0 and "labelled 0" in out and "imported episode(s) left unlabelled" in err  # never judged
    assert run(capsys, "label", store, "--clean-as", "healthy", "--include-imported")[0] == 0
    code, _, err = run(capsys, "fit-spec", store, "-o", str(tmp_path / "spec.json"))
    assert code == 0, err
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert spec["description"].startswith(f"fitted from {len(SAMPLES)} healthy")  # read every imported run


def test_the_kind_named_is_the_kind_imported(tmp_path: Path, capsys):
    files = [str(sample_path(name)) for name in SAMPLES]
    code, out, err = run(capsys, "import", "mini-swe-agent", *files, "-o", str(tmp_path / "runs"))
    assert code == 1 and out.startswith("imported 2 episode(s)")
    assert err.count("a swe-agent trajectory, not a mini-swe-agent one") == 4
    code, out, err = run(capsys, "import", "swe-agent", *files, "-o", str(tmp_path / "runs2"))
    assert code == 1 and out.startswith("imported 4 episode(s)") and err.count("not a swe-agent one") == 2


def test_hostile_trajectory_files_give_one_problem_each_and_the_rest_is_imported(tmp_path: Path, capsys):
    root = samples(tmp_path)
    bad = root / "bad"
    bad.mkdir()
    (bad / "not-json.traj").write_text("{ this is not json")
    (bad / "no-trajectory.traj").write_text(json.dumps({"info": {}}))
    (bad / "wrong-entries.traj").write_text(json.dumps({"trajectory": ["not a step", 3]}))
    (bad / "deep.traj").write_text("[" * 100_000 + "]" * 100_000)
    mini = json.loads(sample_path("mini_swe_agent.traj.json").read_text())
    nested: Any = "x"
    for _ in range(100):
        nested = {"k": nested}
    mini["messages"].insert(2, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "t", "function": {"name": "bash", "arguments": json.dumps({"command": "ls", "more": nested})}}]})
    (bad / "deep-arguments.traj.json").write_text(json.dumps(mini))  # nested where the import reads nothing: kept
    secret = tmp_path / "outside.traj"
    secret.write_text(sample_path("swe_agent_v0.traj").read_text())
    os.symlink(secret, bad / "planted.traj")  # a link inside the directory, pointing out of it
    (bad / "notes.txt").write_text("not a trajectory, not looked at")
    (tmp_path / "empty").mkdir()

    store = str(tmp_path / "runs")
    code, out, err = run(capsys, "import", "traj", str(root), str(tmp_path / "empty"), str(tmp_path / "gone.traj"),
                         "-o", store)
    assert code == 1 and out.startswith(f"imported {len(SAMPLES) + 1} episode(s)")
    problems = [line.removeprefix("  problem: ") for line in err.splitlines() if line.startswith("  problem: ")]
    assert len(problems) == 7, problems
    by_file = {Path(p.split(": ", 1)[0]).name: p for p in problems}
    assert "not valid JSON" in by_file["not-json.traj"]
    assert "no 'trajectory' or 'messages' list" in by_file["no-trajectory.traj"]
    assert "not an object" in by_file["wrong-entries.traj"] and "RecursionError" in by_file["deep.traj"]
    assert "symbolic link" in by_file["planted.traj"] and "no *.traj" in by_file["empty"]
    assert "no such file" in by_file["gone.traj"]
    assert set(stored(store)) == {name.split(".")[0] for name in SAMPLES} | {"deep-arguments"}
