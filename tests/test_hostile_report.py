"""One episode's text never breaks the report site: ids, labels, tasks, arguments and results are escaped, page names
are derived (never taken) from ids, and huge or deeply nested content is capped (issue 15, item 9; issue 28)."""

from __future__ import annotations

import json
import random

import pytest

from guardrail.core.cli import main
from guardrail.core.corpus import write_corpus
from monitors.model_file import save_monitor
from tests.hostile.model_files import fit_small_monitor

HOSTILE = ["<script>alert(1)</script>", "'><img src=x onerror=alert(1)>", "../../../etc/passwd", "$\\frac{$",
           "a\x00b", "\u202eevil", "x" * 5000, "</textarea><svg onload=alert(1)>"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("report-model") / "monitor.npz"
    save_monitor(fit_small_monitor(), path)
    return path


def _nested(depth: int) -> dict:
    value: dict = {"leaf": "<b>deep</b>"}
    for _ in range(depth):
        value = {"k": value}
    return value


def _episodes(texts):
    from guardrail import Episode, Step, StepKind, ToolEvent

    rng = random.Random(1)
    out = []
    for i, text in enumerate(texts):
        steps = [Step(index=t, kind=StepKind.TOOL_CALL, text=f"look {text}", latency_s=rng.random(),
                      tool_events=[ToolEvent(name=text[:60], args={"q": text, "deep": _nested(40)},
                                             result=text * 50)]) for t in range(3)]
        steps.append(Step(index=3, kind=StepKind.FINAL, text=text))
        out.append(Episode(episode_id=f"{text[:200]}-{i}", label=text[:100] if i % 2 else "healthy",
                           tau=1 if i % 2 else None, steps=steps, task=text))
    return out


def test_hostile_ids_labels_and_content_are_escaped_and_capped(tmp_path, model, capsys):
    corpus = tmp_path / "corpus"
    write_corpus(corpus, _episodes(HOSTILE), name="<script>corpus</script>")
    out = tmp_path / "out"

    assert main(["report", str(corpus), "--model", str(model), "-o", str(out), "--json"]) == 0

    printed = json.loads(capsys.readouterr().out)
    assert printed["episodes"] == len(HOSTILE)
    pages = [out / "index.html", *sorted((out / "episodes").iterdir())]
    assert len(pages) == len(HOSTILE) + 1 and all(p.parent in (out, out / "episodes") for p in pages)
    assert not (tmp_path / "etc").exists()
    for page in pages:
        text = page.read_text()
        for raw in ("<script>alert", "<img src=x", "<svg onload", "</textarea>"):
            assert raw not in text, (page.name, raw)
        assert len(text) < 400_000  # 50 copies of a 5,000-character result are cut, not inlined
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in (out / "index.html").read_text()


def test_a_store_with_a_corrupt_journal_line_still_reports_the_rest(tmp_path, model, capsys):
    from guardrail import Guard, Step, StepKind

    guard = Guard.default(record=str(tmp_path / "runs"))
    for i in range(3):
        ctx = guard.start_episode(task=f"task {i}")
        ctx.on_step(Step(index=0, kind=StepKind.TEXT, text="thinking"))
        ctx.finish(answer="done")
    guard.close()
    with open(tmp_path / "runs" / "runs.jsonl", "a") as journal:
        journal.write('{"op": "finish", "episode_id": 5}\n{not json\n')

    assert main(["report", str(tmp_path / "runs"), "--model", str(model), "-o", str(tmp_path / "o"), "--json"]) == 0

    printed = json.loads(capsys.readouterr().out)
    assert printed["episodes"] == 3
    assert "not valid JSON" in (tmp_path / "o" / "index.html").read_text()
