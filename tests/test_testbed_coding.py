"""The coding testbed: a scripted agent in a real project tree, gated by StateMirror in report vs intervene mode."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from traces.bench.coding import summarize
from traces.coding.agent import CodingAgent, make_coding_tasks
from traces.coding.project import ProjectIndex, fetch_sdist

CORE = '''"""A tiny library."""


def widen(values):
    return [v * 2 for v in values]


class Window:
    def __init__(self, size):
        self.size = size
'''

TESTS = '''import unittest

from pkg.core import Window, widen


class WidenTests(unittest.TestCase):
    def test_doubles(self):
        self.assertEqual(widen([1, 2]), [2, 4])


class WindowTests(unittest.TestCase):
    def test_size(self):
        self.assertEqual(Window(3).size, 3)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "__init__.py").write_text("from pkg.core import Window, widen\n")
    (root / "pkg" / "core.py").write_text(CORE)
    (root / "tests" / "__init__.py").write_text("")
    (root / "tests" / "test_core.py").write_text(TESTS)
    return root


def test_index_reads_modules_symbols_and_test_nodes_without_importing(project: Path) -> None:
    index = ProjectIndex.build(project)
    assert index.modules["pkg.core"] == "pkg/core.py"
    assert index.symbols["pkg.core"] == ["widen", "Window"]
    assert "tests/test_core.py::WidenTests::test_doubles" in index.test_nodes
    assert index.line_counts["pkg/core.py"] == len(CORE.splitlines())


def test_without_slips_both_modes_run_clean_and_alike(project: Path) -> None:
    agent = CodingAgent(project, slip_rate=0.0, seed=1)
    task = next(t for t in make_coding_tasks(agent.index, 2, seed=0) if t.symbol == "widen")
    report, intervene = agent.run_task(task, "report"), agent.run_task(task, "intervene")
    assert report.tool_errors == intervene.tool_errors == 0
    assert report.warned == intervene.warned == 0
    assert report.steps == intervene.steps == 6  # five actions and the final report
    assert any("1 passed" in output for _, output in report.transcript)


def test_gate_warnings_are_repaired_and_save_errors_under_intervene(project: Path) -> None:
    agent = CodingAgent(project, slip_rate=1.0, seed=3)
    task = next(t for t in make_coding_tasks(agent.index, 2, seed=0) if t.symbol == "widen")
    report, intervene = agent.run_task(task, "report"), agent.run_task(task, "intervene")
    assert report.slips == intervene.slips == 5
    assert report.tool_errors >= 4  # the hallucinated ls/grep/open/import ran and failed
    assert intervene.tool_errors < report.tool_errors
    assert intervene.warned >= 4 and intervene.repaired >= 4
    assert any(output.startswith("BLOCKED: [guardrail:gate/") for _, output in intervene.transcript)
    assert not any(output.startswith("BLOCKED") for _, output in report.transcript)
    summary = summarize([report, intervene])
    assert summary["saved"]["tool_errors"] > 0 and summary["repaired_share"] == pytest.approx(
        intervene.repaired / (intervene.warned - intervene.false_warnings))


def test_fetch_sdist_reuses_the_cached_archive_without_pip(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "sdists").mkdir(parents=True)
    with tarfile.open(cache / "sdists" / "demo_pkg-1.0.tar.gz", "w:gz") as archive:
        data = b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n"
        info = tarfile.TarInfo("demo_pkg-1.0/PKG-INFO")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    root = fetch_sdist("demo-pkg", "1.0", cache=cache)
    assert (root / "PKG-INFO").read_bytes().startswith(b"Metadata-Version")
    assert fetch_sdist("demo-pkg", "1.0", cache=cache) == root


def test_the_same_slips_through_mini_swe_agents_real_loop(project: Path) -> None:
    pytest.importorskip("minisweagent", reason="mini-swe-agent is not installed: pip install 'guardrail[swe]'")
    from traces.coding.mini import run_mini_task

    agent = CodingAgent(project, slip_rate=1.0, seed=3)
    task = next(t for t in make_coding_tasks(agent.index, 2, seed=0) if t.symbol == "widen")
    report, intervene = (run_mini_task(project, agent.index, task, mode, agent._gate, slip_rate=1.0, seed=3)
                         for mode in ("report", "intervene"))
    assert report.slips == intervene.slips == 4  # the scripted agent's slips, without the ACI open
    assert report.crashes == intervene.crashes == 0
    assert report.blocked == 0 and report.tool_errors >= 3
    assert intervene.blocked >= 3 and intervene.blocks_visible == intervene.blocked
    assert intervene.tool_errors < report.tool_errors and intervene.repaired >= 3
    assert summarize([report, intervene])["modes"]["intervene"]["blocks_visible"] == intervene.blocked


@pytest.mark.slow
def test_a_real_model_drives_mini_swe_agent_through_the_gate(project: Path, local_model) -> None:
    pytest.importorskip("minisweagent", reason="mini-swe-agent is not installed: pip install 'guardrail[swe]'")
    from traces.coding.mini import run_mini_task
    from traces.coding.real_model import SYSTEM_TEMPLATE, endpoint_coding_model
    from traces.models import EndpointSpec

    base_url, info = local_model
    spec = EndpointSpec("local:smollm2", base_url, server=info)
    agent = CodingAgent(project, seed=0)
    task = make_coding_tasks(agent.index, 1, seed=0)[0]
    run = run_mini_task(project, agent.index, task, "intervene", agent._gate, slip_rate=0.0, seed=0,
                        model_factory=lambda t, r: endpoint_coding_model(spec, t, r, seed=0),
                        system_template=SYSTEM_TEMPLATE, step_limit=2)
    assert run.crashes == 0 and run.steps == 2 and run.tokens > 0
    assert run.exit_status in ("LimitsExceeded", "Submitted") and len(run.transcript) == 2
    assert all(command for command, _ in run.transcript)  # real commands from the model's tool calls
    assert run.blocks_visible == run.blocked  # every block reached the model as the command's output
