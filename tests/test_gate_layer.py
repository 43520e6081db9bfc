"""GateLayer in a Guard: report vs intervene, the conservative blocking rule, episode effects, editor state, CLI."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from guardrail import Action, Guard, Result
from guardrail.core.cli import main
from guardrail.core.events import Verdict
from guardrail.gate import GateLayer

FIXTURE = Path(__file__).parent / "fixtures" / "gate" / "proj"
# Generous: these tests pin behaviour, not speed, on a shared loaded machine (speed is `guardrail bench gate`).
BUDGET_S = 10.0


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "proj"))


def test_intervene_blocks_a_missing_script_and_report_only_warns(proj: Path) -> None:
    action = Action.shell("python reproduce_bug.py")
    blocked = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="intervene").start_episode().before_action(action)
    warned = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="report").start_episode().before_action(action)
    assert blocked.verdict is Verdict.BLOCK
    assert warned.verdict is Verdict.WARN
    assert "reproduce_bug.py" in blocked.message()


def test_intervene_allows_diagnostics_inside_a_script_it_runs(proj: Path) -> None:
    ctx = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="intervene").start_episode()
    decision = ctx.before_action(Action.shell("python broken_script.py"))
    assert decision.verdict is Verdict.WARN
    assert decision.findings[0].predicate == "symbol_defined" and not decision.findings[0].blocking


def test_clean_action_is_allowed_with_no_findings(proj: Path) -> None:
    decision = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="intervene").start_episode().before_action(
        Action.shell("python -m pytest tests/core_tests.py::TestEngine::test_run"))
    assert decision.verdict is Verdict.ALLOW and decision.findings == []


def test_cd_persists_across_actions_of_an_episode(proj: Path) -> None:
    ctx = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="intervene").start_episode()
    assert ctx.before_action(Action.shell("cd docs")).allowed
    assert ctx.before_action(Action.shell("cat index.md")).verdict is Verdict.ALLOW


def test_pip_install_in_an_earlier_action_covers_a_later_import(proj: Path) -> None:
    ctx = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="intervene").start_episode()
    ctx.before_action(Action.shell("pip install brand-new-package"))
    assert ctx.before_action(Action.python("import brand_new_package")).verdict is Verdict.ALLOW
    other = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="intervene").start_episode()
    assert other.before_action(Action.python("import brand_new_package")).verdict is Verdict.BLOCK


def test_editor_state_comes_from_the_observation_or_the_harness(proj: Path) -> None:
    layer = GateLayer(proj, budget_s=BUDGET_S)
    ctx = Guard([layer], mode="intervene").start_episode()
    goto = Action.swe_agent("goto 12")
    assert ctx.before_action(goto).verdict is Verdict.BLOCK
    thirty = proj / "docs" / "thirty.txt"
    ctx.after_result(Action.swe_agent("open docs/thirty.txt"), Result(output=f"[File: {thirty} (30 lines total)]"))
    assert ctx.before_action(goto).verdict is Verdict.ALLOW
    layer.set_editor_state(ctx, open_file=None)
    assert ctx.before_action(goto).verdict is Verdict.BLOCK


def test_open_in_one_action_sets_the_open_file_for_the_next(proj: Path) -> None:
    ctx = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="intervene").start_episode()
    ctx.before_action(Action.swe_agent("open docs/thirty.txt"))
    assert ctx.before_action(Action.swe_agent("goto 30")).verdict is Verdict.ALLOW
    assert ctx.before_action(Action.swe_agent("goto 31")).verdict is Verdict.BLOCK


def test_gate_findings_go_on_the_span(proj: Path, spans) -> None:  # noqa: ANN001 - pytest fixture
    Guard([GateLayer(proj, budget_s=BUDGET_S)]).start_episode().before_action(Action.shell("cat missing.txt"))
    (span,) = [s for s in spans.get_finished_spans() if s.name == "guardrail.gate"]
    assert "file_exists" in span.attributes["guardrail.findings"]


async def test_async_hook_gives_the_same_decision(proj: Path) -> None:
    ctx = Guard([GateLayer(proj, budget_s=BUDGET_S)], mode="intervene").start_episode()
    decision = await ctx.abefore_action(Action.shell("cat missing.txt"))
    assert decision.verdict is Verdict.BLOCK


def run_cli(argv: list[str], stdin: str | None = None, capsys: pytest.CaptureFixture[str] | None = None,
            monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str]:
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(argv)
    assert capsys is not None
    return code, capsys.readouterr().out


def test_check_cli_prints_violations_and_hints(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(["check", "--workspace", str(proj), "--", "python reproduce_bug.py"], capsys=capsys)
    assert code == 1 and "file_exists" in out
    code, out = run_cli(["check", "--workspace", str(proj), "--", "python reproduce.py"], capsys=capsys)
    assert code == 0 and out.startswith("ok")


def test_check_cli_json_shape(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(["check", "--json", "--workspace", str(proj), "--cwd", str(proj / "docs"), "--",
                         "python -c 'from pkg import Engine'"], capsys=capsys)
    result = json.loads(out)
    assert code == 0
    assert set(result) >= {"id", "hallucinated", "violations", "latency_ms"}
    assert result["hallucinated"] and result["violations"][0]["predicate"] == "importable"


def test_batch_keeps_order_and_reports_bad_lines(proj: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        {"id": "c1", "workspace": str(proj), "cwd": str(proj), "action": {"kind": "shell", "command": "cat x.txt"}},
        "not json at all",
        {"id": "c3", "workspace": str(proj), "action": {"kind": "python", "code": "from pkg import Engine"}},
        {"id": "c4", "workspace": str(proj), "state": {"open_file": str(proj / "docs" / "thirty.txt")},
         "action": {"kind": "swe_agent", "command": "goto 31"}},
        {"id": "c5", "workspace": str(tmp_path / "nowhere"), "action": {"kind": "shell", "command": "ls"}},
        {"id": "c6", "workspace": str(proj), "action": {"kind": "tool", "tool": "str_replace_editor",
                                                        "args": "{not json"}},
        [1, 2],
    ]
    batch = tmp_path / "in.jsonl"
    batch.write_text("\n".join(c if isinstance(c, str) else json.dumps(c) for c in cases) + "\n")
    code, out = run_cli(["check", "--batch", str(batch), "--json"], capsys=capsys)
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(results) == 7
    assert [r.get("id") for r in results] == ["c1", None, "c3", "c4", "c5", "c6", None]
    assert results[0]["hallucinated"] and results[0]["violations"][0]["args"] == [str(proj / "x.txt")]
    assert "error" in results[1] and "not JSON" in results[1]["error"]
    assert results[2]["hallucinated"] is False
    assert results[3]["violations"][0]["predicate"] == "editor_line_in_range"
    assert "not a directory" in results[4]["error"]
    assert "JSON" in results[5]["error"]
    assert "error" in results[6]


def test_batch_answers_every_line_after_hostile_ones(proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15, item 11: one line of deeply nested JSON used to end the batch with a RecursionError."""
    from guardrail.gate import cli as gate_cli

    monkeypatch.setattr(gate_cli, "_MAX_LINE_BYTES", 200_000, raising=False)

    def case(case_id: str) -> bytes:
        return json.dumps({"id": case_id, "workspace": str(proj), "action": {"kind": "shell",
                                                                            "command": "cat x.txt"}}).encode()

    lines = [
        b"[" * 100_000 + b"]" * 100_000,  # RecursionError in the JSON decoder
        case("ok1"),
        b'{"id": "big-int", "workspace": "x", "n": ' + b"9" * 5000 + b"}",  # int() digit limit: ValueError
        b'{"id": 7, "action": \xff\xfe}',  # not UTF-8, not JSON
        b"x" * 300_000,  # over the line cap: skipped unread
        case("ok2"),
    ]
    batch = tmp_path / "hostile.jsonl"
    batch.write_bytes(b"\n".join(lines) + b"\n")
    code, out = run_cli(["check", "--batch", str(batch), "--json"], capsys=capsys)
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(results) == len(lines)
    assert [r["id"] for r in results] == [None, "ok1", "big-int", 7, None, "ok2"]
    assert [("error" in r) for r in results] == [True, False, True, True, True, False]
    assert "RecursionError" in results[0]["error"] and "longer than" in results[4]["error"]
    assert results[5]["hallucinated"]


def test_batch_takes_workspace_cwd_and_python_defaults_and_answers_blank_lines(
        proj: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30: --workspace/--cwd/--python fill the lines that omit them; a blank line gets an error line."""
    lines = [json.dumps({"id": "d1", "action": {"kind": "shell", "command": "cat index.md"}}), "",
             json.dumps({"id": "d2", "cwd": str(proj), "action": {"kind": "shell", "command": "cat index.md"}}),
             "   ", json.dumps({"id": "d3", "workspace": str(tmp_path / "nowhere"),
                               "action": {"kind": "shell", "command": "ls"}})]
    batch = tmp_path / "defaults.jsonl"
    batch.write_text("\n".join(lines) + "\n")
    code, out = run_cli(["check", "--batch", str(batch), "--json", "--workspace", str(proj), "--cwd",
                         str(proj / "docs"), "--python", sys.executable], capsys=capsys)
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(results) == 5
    assert [r.get("id") for r in results] == ["d1", None, "d2", None, "d3"]
    assert results[0]["hallucinated"] is False  # docs/index.md, from the default cwd
    assert "blank" in results[1]["error"] and "blank" in results[3]["error"]
    assert results[2]["hallucinated"] is True  # its own cwd wins: there is no index.md at the root
    assert "not a directory" in results[4]["error"]
