"""The `guardrail` command line: version, help, corpus inspection, and clear messages for what is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from guardrail.core.cli import main
from guardrail.core.corpus import write_corpus
from tests.test_corpus import make_episode


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "guardrail.core.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_version_is_printed():
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.startswith("guardrail ")


def test_inspect_reports_a_corpus_as_json(tmp_path: Path, capsys):
    write_corpus(tmp_path, [make_episode("a"), make_episode("b", label="looping", tau=1)])
    assert main(["inspect", str(tmp_path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["episodes"] == 2 and record["labels"] == {"healthy": 1, "looping": 1}
    assert record["issues"] == []


def test_inspect_exits_non_zero_and_lists_problems(tmp_path: Path, capsys):
    write_corpus(tmp_path, [make_episode("a")])
    (tmp_path / "a.jsonl").write_text("garbage\n")
    assert main(["inspect", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "a.jsonl:1: not valid JSON" in out


def test_inspect_of_a_missing_directory_is_a_clear_error(tmp_path: Path, capsys):
    assert main(["inspect", str(tmp_path / "nope"), "--json"]) == 1
    assert "not a directory" in json.loads(capsys.readouterr().out)["error"]


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out
