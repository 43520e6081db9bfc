"""The gate on hostile workspaces, in a child process under a 1 GB address-space limit.

Asserted for every decision: no tripwire fires and nothing in the workspace changes, no planted
secret (content or name outside the workspace) appears in anything the gate says, the decision
takes under 2 s of wall time, its reported latency is within 10% of that wall time (plus 1 ms for
sub-millisecond decisions, where the clock read itself is a fair share), and the child's peak
memory stays under 1 GB. Small sizes in `make test`, large ones under `make fuzz`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fuzzing import FUZZ_EXAMPLES
from tests.hostile.generators import (
    HostileWorkspace,
    Sizes,
    build_workspace,
    hostile_actions,
    random_actions,
    write_spec,
)

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

SIZES = Sizes.large() if FUZZ_EXAMPLES > 200 else Sizes()
MEMORY_LIMIT = 1 << 30
WALL_LIMIT_MS = 2000.0
LATENCY_SLACK_MS = 1.0
RUNNER = Path(__file__).with_name("runner.py")


def _clear(markers: Path, ws: Path) -> None:
    for marker in markers.iterdir():
        marker.unlink()
    for cache in ws.rglob("__pycache__"):
        shutil.rmtree(cache)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> HostileWorkspace:
    hw = build_workspace(tmp_path_factory.mktemp("hostile"), SIZES)
    # The traps are armed: running each interpreter by hand fires its tripwire (so "no marker" below means
    # the gate ran none of them, not that they could not fire).
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for name, python in hw.evil_venvs.items():
        subprocess.run([str(python), "-B", "-c", "pass"], capture_output=True, timeout=60, env=env)
        assert list(hw.markers.iterdir()), f"the {name} tripwire did not fire when run by hand"
        _clear(hw.markers, hw.ws)
    subprocess.run([sys.executable, "-B", "-c", "import trap"], cwd=hw.ws, capture_output=True, timeout=60, env=env)
    assert (hw.markers / "trap_init").exists()
    _clear(hw.markers, hw.ws)
    assert (hw.outside / ".env").read_text().startswith("DB_PASSWORD=")  # the secrets are there to leak
    return hw


def run_child(hw: HostileWorkspace, cases: list[dict[str, Any]], tmp_path: Path, *,
              python: str | None) -> tuple[list[dict[str, Any]], int]:
    spec, out = tmp_path / "spec.json", tmp_path / "out.jsonl"
    write_spec(spec, hw, cases, python=python, memory_bytes=MEMORY_LIMIT, budget_s=0.25)
    proc = subprocess.run([sys.executable, str(RUNNER), str(spec), str(out)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    # the gate's process, and the parse worker it hands big modules to: each under the limit
    return lines[:-1], max(int(lines[-1]["peak_rss_bytes"]), int(lines[-1]["worker_peak_rss_bytes"]))


def assert_safe_and_bounded(hw: HostileWorkspace, records: list[dict[str, Any]], peak: int,
                            before: dict[str, tuple[int, int]]) -> None:
    assert sorted(p.name for p in hw.markers.iterdir()) == []  # no tripwire fired
    assert hw.snapshot() == before  # nothing written: no .pyc, no file touched
    assert peak < MEMORY_LIMIT
    for record in records:
        said = json.dumps(record["said"])
        leaked = [secret for secret in hw.secrets if secret in said]
        assert not leaked, f"case {record['case']} revealed {leaked}"
        assert record["error"] is None, record
        wall, latency = record["wall_ms"], record["latency_ms"]
        assert wall < WALL_LIMIT_MS, f"case {record['case']} took {wall:.0f} ms"
        assert 0.9 * wall - LATENCY_SLACK_MS <= latency <= wall, f"case {record['case']}: {latency} vs {wall}"


def test_fixed_hostile_actions(hostile: HostileWorkspace, tmp_path: Path) -> None:
    cases = hostile_actions(hostile)
    before = hostile.snapshot()
    records, peak = run_child(hostile, cases, tmp_path, python=None)
    assert_safe_and_bounded(hostile, records, peak, before)
    for case, record in zip(cases, records, strict=True):
        expect = case.get("expect")
        result = record["said"]["result"]
        if expect == "block":
            assert record["blocking"], (case["action"], result)
        elif expect == "unknown":
            assert not result["violations"] and result.get("unknown"), (case["action"], result)
        elif expect == "allow":
            assert not result["violations"], (case["action"], result)


@pytest.mark.parametrize("venv", ["home_inside", "script"])
def test_interpreters_in_the_workspace_are_never_run(hostile: HostileWorkspace, tmp_path: Path, venv: str) -> None:
    python = str(hostile.evil_venvs[venv])
    cases = [{"action": {"kind": "python", "code": "import trap\nimport nosuchmodule_hostile"}},
             {"action": {"kind": "shell", "command": "python -m trap && python reproduce.py"}}]
    before = hostile.snapshot()
    records, peak = run_child(hostile, cases, tmp_path, python=python)
    assert_safe_and_bounded(hostile, records, peak, before)
    for record in records:
        checks = [f["check"] for f in record["said"]["findings"]]
        assert "target_interpreter_unavailable" in checks
        assert not record["blocking"]  # the import predicates are unknown, not violated


def test_random_hostile_actions(hostile: HostileWorkspace, tmp_path: Path) -> None:
    cases = random_actions(hostile, SIZES.random_actions, seed=FUZZ_EXAMPLES)
    before = hostile.snapshot()
    records, peak = run_child(hostile, cases, tmp_path, python=None)
    assert len(records) == len(cases)
    assert_safe_and_bounded(hostile, records, peak, before)
