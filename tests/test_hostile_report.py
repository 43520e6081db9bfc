"""One episode's text never kills the report: ids, labels and corpus names reach matplotlib escaped (issue 15, item 9)."""

from __future__ import annotations

import json
import random

import pytest

from guardrail.core.cli import main
from guardrail.core.corpus import write_corpus
from monitors.model_file import save_monitor
from tests.hostile.model_files import fit_small_monitor

MATH_MARKUP = ["$\\frac{$", "$x^{", "a $b$ c", "$$", "\\$ $\\undefinedcommand$", "$_$", "50$ and 60$"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("report-model") / "monitor.npz"
    save_monitor(fit_small_monitor(), path)
    return path


def _episodes(texts):
    from guardrail import Episode, Step, StepKind, ToolEvent

    rng = random.Random(1)
    out = []
    for i, text in enumerate(texts):
        steps = [Step(index=t, kind=StepKind.TOOL_CALL, text=f"look {t}", latency_s=rng.random(),
                      tool_events=[ToolEvent(name="search", args={"q": text}, result="r")]) for t in range(3)]
        steps.append(Step(index=3, kind=StepKind.FINAL, text=text))
        out.append(Episode(episode_id=f"{text}-{i}", label=text if i % 2 else "healthy", tau=1 if i % 2 else None,
                           steps=steps, task=text))
    return out


def test_math_markup_in_ids_labels_and_corpus_names_is_drawn_as_text(tmp_path, model, capsys):
    corpus = tmp_path / "corpus"
    write_corpus(corpus, _episodes(MATH_MARKUP), name="$\\frac{$ corpus")
    out = tmp_path / "out"

    assert main(["report", str(corpus), "--model", str(model), "-o", str(out), "--json"]) == 0

    printed = json.loads(capsys.readouterr().out)
    assert (out / "index.html").is_file()
    assert {row["label"] for row in printed["summary"]} >= {"healthy", "$x^{", "$$", "$_$"}
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in out.glob("*.png")) and len(list(out.glob("*.png"))) == 2


def test_plain_text_helper_escapes_every_dollar():
    from guardrail.app.report import plain_text

    assert plain_text("$\\frac{$") == "\\$\\frac{\\$"
    assert plain_text("no markup") == "no markup"
