"""`guardrail report` on real corpora: the summary with its intervals, one page per episode, escaped findings."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser

import pytest

from guardrail.app.report import ReportData, score_corpora, write_report
from guardrail.core.cli import main
from guardrail.core.corpus import read_corpus, write_corpus
from guardrail.core.events import Finding
from monitors import StepMonitor
from monitors.model_file import save_monitor


@pytest.fixture(scope="module")
def fitted(sentinel_dir, tmp_path_factory):
    """A monitor fitted on the healthy half of autogen7b, and a small corpus of the rest (failures kept)."""
    corpus = read_corpus(sentinel_dir / "autogen7b")
    healthy = corpus.healthy()
    monitor = StepMonitor().fit(healthy[:45])  # cross-fit conformal threshold
    root = tmp_path_factory.mktemp("report")
    save_monitor(monitor, root / "monitor.npz")
    failures = [e for e in corpus.episodes if not e.is_healthy][:9]
    write_corpus(root / "small", [*failures, *healthy[45:48]], name="small")
    return root, monitor


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a" and dict(attrs).get("href", "").startswith("episodes/"):
            self.links.append(dict(attrs)["href"])
        if tag == "img":
            self.images.append(dict(attrs)["src"])


def test_report_command_writes_an_index_whose_episode_pages_exist(fitted, capsys):
    root, _ = fitted
    out = root / "out"

    assert main(["report", str(root / "small"), "--model", str(root / "monitor.npz"), "-o", str(out), "--json"]) == 0

    printed = json.loads(capsys.readouterr().out)
    page = out / "index.html"
    parser = _Links()
    parser.feed(page.read_text())
    assert printed["html"] == str(page) and printed["episodes"] == 12
    assert len(parser.links) == 12 and not parser.images  # inline SVG: nothing to fetch
    assert all((out / link).is_file() for link in parser.links)
    assert page.read_text().count("<svg class='spark'") == 12  # every episode's stream drawn
    episode = (out / parser.links[0]).read_text()
    assert "id='score-plot'" in episode and "class='threshold'" in episode
    labels = {row["label"] for row in printed["summary"]}
    assert "healthy" in labels and len(labels) >= 2


def test_report_states_the_calibration_and_the_false_alarm_interval(fitted):
    root, monitor = fitted
    out = root / "out_calibration"

    assert main(["report", str(root / "small"), "--model", str(root / "monitor.npz"), "-o", str(out)]) == 0

    page = (out / "index.html").read_text()
    summary = json.loads((out / "site.json").read_text())
    assert "crossfit conformal, 44th of 45 healthy episode maxima" in page
    assert summary["calibration"] == monitor.calibration_.describe()
    healthy = next(r for r in summary["summary"] if r["label"] == "healthy")
    low, high = healthy["alarm_rate_ci"]
    assert low <= healthy["alarm_rate"] <= high and high > 0.5  # three healthy episodes: a wide interval
    assert monitor.calibration_.describe() in html.unescape(page)


def test_summary_counts_alarms_and_delays_per_class(fitted):
    root, monitor = fitted

    data = score_corpora([root / "small"], monitor, show_progress=False)

    rows = {(r["corpus"], r["label"]): r for r in data.summary()}
    assert sum(r["episodes"] for r in rows.values()) == 12
    for row in data.rows:
        assert len(row.scores) == row.steps
        assert row.detected == (row.alarm_step is not None)
    delayed = [r for r in data.rows if r.delay is not None]
    assert all(r.delay == r.alarm_step - r.tau for r in delayed)


def test_findings_are_escaped_in_the_html(tmp_path):
    data = ReportData(title="t", threshold=None,
                      gate_findings=[Finding(layer="gate", check="file_exists", message="<script>x</script>")])

    page = write_report(data, tmp_path)

    assert "<script>x</script>" not in page.read_text() and "&lt;script&gt;" in page.read_text()


def test_a_missing_model_file_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path), "--model", str(tmp_path / "none.npz"), "-o", str(tmp_path / "o")]) == 2
    assert "guardrail report:" in capsys.readouterr().err


def test_a_directory_that_is_not_a_corpus_is_a_clear_error(fitted, tmp_path, capsys):
    root, _ = fitted

    assert main(["report", str(tmp_path), "--model", str(root / "monitor.npz"), "-o", str(tmp_path / "o")]) == 2
    assert "manifest.json" in capsys.readouterr().err


def test_a_report_without_a_model_shows_the_recorded_scores_only(fitted, tmp_path):
    root, _ = fitted

    assert main(["report", str(root / "small"), "-o", str(tmp_path / "o")]) == 0

    page = (tmp_path / "o" / "index.html").read_text()
    assert "No model given" in page and "<b>Drift:</b>" not in page
