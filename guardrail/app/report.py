"""`guardrail report CORPUS... --model MODEL -o DIR`: an HTML report with PNG plots of scores, detection and findings."""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, progress
from guardrail.core.events import Episode, Finding
from guardrail.core.fileio import atomic_write_bytes, atomic_write_text

__all__ = ["REPORT", "EpisodeRow", "ReportData", "build_report", "score_corpora", "write_report"]

MAX_STREAM_PLOTS = 12  # per corpus: the report shows this many score streams (failures first), not thousands


@dataclass
class EpisodeRow:
    """One episode as the report shows it."""

    corpus: str
    episode_id: str
    label: str
    tau: int | None
    steps: int
    scores: list[float] = field(default_factory=list)
    alarm_step: int | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def detected(self) -> bool:
        return self.alarm_step is not None

    @property
    def delay(self) -> int | None:
        if self.alarm_step is None or self.tau is None:
            return None
        return self.alarm_step - self.tau


@dataclass
class ReportData:
    """Everything one report shows: the rows, the threshold, and findings not tied to a corpus (the gate's)."""

    title: str
    threshold: float | None
    rows: list[EpisodeRow] = field(default_factory=list)
    gate_findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    calibration: Any = None  # the model's monitors.calibration.Calibration, when it has one

    def summary(self) -> list[dict[str, Any]]:
        """Per corpus and label: episodes, alarm rate (for healthy: the false-alarm rate) with its 95%
        Clopper-Pearson interval, median delay, verifier flags."""
        from monitors.calibration import binomial_ci

        groups: dict[tuple[str, str], list[EpisodeRow]] = defaultdict(list)
        for row in self.rows:
            groups[(row.corpus, row.label)].append(row)
        out = []
        for (corpus, label), rows in sorted(groups.items()):
            delays = sorted(r.delay for r in rows if r.delay is not None)
            alarms = sum(r.detected for r in rows)
            out.append({
                "corpus": corpus, "label": label, "episodes": len(rows),
                "alarm_rate": alarms / len(rows),
                "alarm_rate_ci": binomial_ci(alarms, len(rows)),
                "median_delay": delays[len(delays) // 2] if delays else None,
                "verifier_flagged": sum(1 for r in rows if any(f.blocking for f in r.findings)) / len(rows),
            })
        return out


def score_corpora(paths: Sequence[str | Path], model: Any, *, spec: Any = None,
                  show_progress: bool = True) -> ReportData:
    """Score every episode of every corpus with a fitted monitor (and run a verifier spec when given)."""
    from guardrail.core.corpus import read_corpus

    verify = None
    if spec is not None:
        from verifiers.offline import verify_episode
        from verifiers.spec import load_spec

        spec_obj = load_spec(spec) if isinstance(spec, str) else spec
        verify = (verify_episode, spec_obj)
    data = ReportData(title="guardrail report", threshold=float(model.threshold_),
                      calibration=getattr(model, "calibration_", None))
    for path in paths:
        corpus = read_corpus(path)
        data.notes.extend(f"{corpus.name}: {issue}" for issue in corpus.issues[:20])
        for episode in progress(corpus.episodes, desc=f"score {corpus.name}", total=len(corpus.episodes),
                                enabled=show_progress):
            data.rows.append(_row(corpus.name, episode, model, verify))
    return data


def _row(corpus: str, episode: Episode, model: Any, verify: Any) -> EpisodeRow:
    scored = model.score_episode(episode) if episode.steps else None
    findings: list[Finding] = []
    if verify is not None:
        verify_episode, spec = verify
        findings = list(verify_episode(episode, spec).findings)
    return EpisodeRow(corpus=corpus, episode_id=episode.episode_id, label=episode.label, tau=episode.tau,
                      steps=len(episode.steps), scores=[float(s) for s in (scored.scores if scored else [])],
                      alarm_step=scored.alarm_step if scored else None, findings=findings)


# --------------------------------------------------------------------------- plots
def plain_text(text: str) -> str:
    """`text` as matplotlib draws it literally: every ``$`` escaped, so nothing reaches its mathtext parser.

    Episode ids, labels and corpus names come from corpora anyone can write; one ``$\\frac{$`` used
    to abort the whole report.
    """
    return text.replace("$", r"\$")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80] or "x"


def _save(figure: Any, path: Path) -> None:
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())


def plot_streams(data: ReportData, out: Path) -> list[tuple[str, str]]:
    """Score streams against the threshold, onset marked; one PNG per corpus. Returns (corpus, file) pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    files = []
    by_corpus: dict[str, list[EpisodeRow]] = defaultdict(list)
    for row in data.rows:
        if row.scores:
            by_corpus[row.corpus].append(row)
    for corpus, rows in sorted(by_corpus.items()):
        chosen = sorted(rows, key=lambda r: (r.label == "healthy", r.episode_id))[:MAX_STREAM_PLOTS]
        columns = 3
        lines = (len(chosen) + columns - 1) // columns
        figure, axes = plt.subplots(lines, columns, figsize=(4 * columns, 2.4 * lines), squeeze=False)
        for axis, row in zip(axes.flat, chosen, strict=False):
            axis.plot(range(len(row.scores)), row.scores, marker="o", markersize=3, color="#1f77b4")
            if data.threshold is not None:
                axis.axhline(data.threshold, color="#d62728", linestyle="--", linewidth=1, label="threshold")
            if row.tau is not None:
                axis.axvline(row.tau, color="#ff7f0e", linewidth=1.5, label="onset")
            if row.alarm_step is not None:
                axis.plot([row.alarm_step], [row.scores[row.alarm_step]], marker="x", color="#d62728", markersize=9)
            axis.set_title(plain_text(f"{row.episode_id[:28]} ({row.label})"), fontsize=8)
            axis.tick_params(labelsize=7)
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        for axis in list(axes.flat)[len(chosen):]:
            axis.axis("off")
        figure.suptitle(plain_text(f"{corpus}: step scores (dashed: threshold, orange: onset, x: alarm)"),
                        fontsize=10)
        figure.tight_layout()
        name = f"streams_{_slug(corpus)}.png"
        _save(figure, out / name)
        plt.close(figure)
        files.append((corpus, name))
    return files


def plot_detection(data: ReportData, out: Path) -> str | None:
    """Alarm rate per failure class, one bar per corpus."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    summary = data.summary()
    if not summary:
        return None
    labels = sorted({s["label"] for s in summary}, key=lambda x: (x != "healthy", x))
    corpora = sorted({s["corpus"] for s in summary})
    rate = {(s["corpus"], s["label"]): s["alarm_rate"] for s in summary}
    positions = np.arange(len(labels))
    width = 0.8 / max(1, len(corpora))
    figure, axis = plt.subplots(figsize=(max(6, 0.8 * len(labels) + 2), 3.5))
    for offset, corpus in enumerate(corpora):
        axis.bar(positions + offset * width, [rate.get((corpus, label), 0.0) for label in labels], width,
                 label=plain_text(corpus))
    axis.set_xticks(positions + width * (len(corpora) - 1) / 2, [plain_text(label) for label in labels],
                    rotation=30, ha="right", fontsize=8)
    axis.set_ylim(0, 1)
    axis.set_ylabel("alarm rate (healthy: false alarms)")
    axis.legend(fontsize=7)
    name = "detection_by_class.png"
    _save(figure, out / name)
    plt.close(figure)
    return name


# --------------------------------------------------------------------------- html
_CSS = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}"
        "th{background:#f0f0f0}img{max-width:100%;border:1px solid #ddd;margin:.5em 0}"
        ".block{color:#b00}.alarm{color:#b60}code{font-size:12px}")


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3f}"
        return html.escape("-" if value is None else str(value))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _interval(bounds: Sequence[float] | None) -> str | None:
    return None if bounds is None else f"{bounds[0]:.3f}-{bounds[1]:.3f}"


def _finding_rows(findings: Sequence[Finding], where: str = "") -> list[dict[str, Any]]:
    return [{"where": where, "layer": f.layer, "check": f.check, "step": f.step, "blocking": f.blocking,
             "message": f.message[:300], "hint": (f.hint or "")[:200]} for f in findings]


def write_report(data: ReportData, out_dir: str | Path, *, extra_images: Sequence[tuple[str, str]] = (),
                 extra_sections: Sequence[tuple[str, str]] = ()) -> Path:
    """Write index.html, the PNG plots and summary.json into `out_dir`; returns the HTML path.

    `extra_images` are (caption, file name in out_dir); `extra_sections` (title, trusted HTML).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    streams = plot_streams(data, out)
    detection = plot_detection(data, out)
    summary = data.summary()
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(data.title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{html.escape(data.title)}</h1>"]
    if data.threshold is not None:
        parts.append(f"<p>Monitor threshold: <code>{data.threshold:.4g}</code> (calibrated on healthy runs).</p>")
    if data.calibration is not None:
        parts.append(f"<p>Calibration: {html.escape(data.calibration.describe())}.</p>")
    parts.append("<h2>Summary</h2>")
    parts.append("<p>alarm_rate_ci: 95% Clopper-Pearson interval of the alarm rate (for healthy episodes, of the "
                 "false-alarm rate).</p>")
    shown = [{**row, "alarm_rate_ci": _interval(row["alarm_rate_ci"])} for row in summary]
    parts.append(_table(shown, ["corpus", "label", "episodes", "alarm_rate", "alarm_rate_ci", "median_delay",
                                "verifier_flagged"]))
    for title, section in extra_sections:
        parts.append(f"<h2>{html.escape(title)}</h2>{section}")
    if detection:
        parts.append(f"<h2>Detection by class</h2><img src='{detection}' alt='alarm rate per class'>")
    if streams:
        parts.append("<h2>Score streams</h2>")
        parts.extend(f"<h3>{html.escape(corpus)}</h3><img src='{name}' alt='score streams of {html.escape(corpus)}'>"
                     for corpus, name in streams)
    for caption, name in extra_images:
        parts.append(f"<h3>{html.escape(caption)}</h3><img src='{html.escape(name)}' alt='{html.escape(caption)}'>")
    verifier_rows = [r for row in data.rows for r in _finding_rows(row.findings, row.episode_id)]
    parts.append("<h2>Verifier findings</h2>")
    parts.append(_table(verifier_rows[:500], ["where", "check", "step", "blocking", "message"]) if verifier_rows
                 else "<p>none</p>")
    parts.append("<h2>Gate warnings</h2>")
    gate_rows = _finding_rows(data.gate_findings)
    parts.append(_table(gate_rows, ["check", "blocking", "message", "hint"]) if gate_rows else "<p>none</p>")
    episode_rows = [{"corpus": r.corpus, "episode": r.episode_id, "label": r.label, "tau": r.tau, "steps": r.steps,
                     "alarm_step": r.alarm_step, "max_score": max(r.scores) if r.scores else None,
                     "findings": len(r.findings)} for r in data.rows]
    parts.append("<h2>Episodes</h2>")
    parts.append(_table(episode_rows[:2000], ["corpus", "episode", "label", "tau", "steps", "alarm_step",
                                              "max_score", "findings"]))
    if data.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in data.notes) + "</ul>")
    parts.append("</body></html>")
    page = out / "index.html"
    atomic_write_text(page, "\n".join(parts))
    calibration = None if data.calibration is None else data.calibration.to_json()
    atomic_write_text(out / "summary.json", json.dumps({"threshold": data.threshold, "calibration": calibration,
                                                        "summary": summary}, indent=1))
    return page


def build_report(corpora: Sequence[str | Path], model_path: str | Path, out_dir: str | Path, *,
                 spec: Any = None, show_progress: bool = True) -> tuple[Path, ReportData]:
    from monitors.model_file import load_monitor

    model = load_monitor(model_path)
    data = score_corpora(corpora, model, spec=spec, show_progress=show_progress)
    return write_report(data, out_dir), data


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpora", nargs="+", metavar="CORPUS", help="corpus directories (guardrail or sentinel)")
    parser.add_argument("--model", required=True, help="a fitted monitor model file (guardrail fit)")
    parser.add_argument("--spec", default=None, help="also run this verifier spec (a name or a file)")
    parser.add_argument("-o", "--out", default="out/report", help="output directory (default: out/report)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def _run(args: argparse.Namespace) -> int:
    from guardrail.core.corpus import CorpusError
    from monitors.model_file import ModelFileError

    try:
        page, data = build_report(args.corpora, args.model, args.out, spec=args.spec)
    except (OSError, ValueError, CorpusError, ModelFileError) as exc:  # a missing corpus, model or spec: exit 2
        sys.stderr.write(f"guardrail report: {exc}\n")
        return 2
    if args.json:
        calibration = None if data.calibration is None else data.calibration.to_json()
        emit_json({"html": str(page), "threshold": data.threshold, "calibration": calibration,
                   "summary": data.summary()})
    else:
        sys.stdout.write(f"wrote {page} ({len(data.rows)} episodes)\n")
    return 0


REPORT = Command(help="HTML report: score streams vs threshold, detection per class, verifier and gate findings",
                 add_arguments=_add_arguments, run=_run)
