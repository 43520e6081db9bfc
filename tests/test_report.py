"""`guardrail report`: score streams, detection per class and findings as HTML with PNG plots, on real corpora."""

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


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


def test_report_command_writes_html_whose_plots_exist(fitted, capsys):
    root, _ = fitted
    out = root / "out"

    assert main(["report", str(root / "small"), "--model", str(root / "monitor.npz"), "-o", str(out), "--json"]) == 0

    printed = json.loads(capsys.readouterr().out)
    page = out / "index.html"
    parser = _Images()
    parser.feed(page.read_text())
    assert printed["html"] == str(page)
    assert len(parser.sources) == 2  # detection by class + the corpus's score streams
    assert all((out / s).read_bytes()[:4] == b"\x89PNG" for s in parser.sources)
    labels = {row["label"] for row in printed["summary"]}
    assert "healthy" in labels and len(labels) >= 2


def test_report_states_the_calibration_and_the_false_alarm_interval(fitted):
    root, monitor = fitted
    out = root / "out_calibration"

    assert main(["report", str(root / "small"), "--model", str(root / "monitor.npz"), "-o", str(out)]) == 0

    page = (out / "index.html").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert "crossfit conformal, 44th of 45 healthy episode maxima" in page
    assert summary["calibration"]["n"] == 45 and summary["calibration"]["method"] == "crossfit"
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


def _chromium() -> str | None:
    import shutil

    return next((path for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
                 if (path := shutil.which(name))), None)


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium on this machine (docs/report.md has the "
                                                 "manual check; apt-get install chromium-headless-shell)")
def test_report_renders_in_headless_chromium(fitted, tmp_path):
    import subprocess

    import matplotlib.image

    root, _ = fitted
    out = tmp_path / "report"
    assert main(["report", str(root / "small"), "--model", str(root / "monitor.npz"), "-o", str(out)]) == 0
    shot = tmp_path / "shot.png"

    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,1800",
                    f"--screenshot={shot}", (out / "index.html").as_uri()], capture_output=True, timeout=90,
                   check=False)

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (1800, 1200)
    assert pixels.std() > 0.05  # not a blank page
    rgb = pixels[..., :3]
    plot_blue = (abs(rgb[..., 0] - 31 / 255) < 0.08) & (abs(rgb[..., 1] - 119 / 255) < 0.08) & (
        abs(rgb[..., 2] - 180 / 255) < 0.08)
    assert plot_blue.mean() > 0.002  # the PNG plots loaded (their bars and lines are matplotlib's blue)
