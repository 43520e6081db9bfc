"""`guardrail report STORE|CORPUS... [--model M] -o DIR`: a static site you can open a run in.

    guardrail report sqlite:///runs.db --model monitor.npz -o out/report    # then open out/report/index.html

The index holds the summary (alarm rate per label with its interval, the alarm budget, the drift
verdict) and every episode in a list filterable by label, verdict, layer that fired, framework
and date, each with its score line. Each episode has a page: its task, every step's tool calls
with arguments and results (content only where it was recorded), the answer, every finding at
its step, the score per step (and, re-scored with ``--model``, per detector and channel) against
the threshold, the decisions, and live and shadow side by side where a shadow ran. Pages are
self-contained HTML (`guardrail.app.site`, plots in `guardrail.app.svg`): no server, no network.
"""

from __future__ import annotations

import argparse
import html
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrail.app.site import SiteData, SiteEpisode, as_dict, write_site
from guardrail.core.cliutil import Command, emit_json, progress
from guardrail.core.events import Episode, Finding, Step, StepKind

__all__ = ["REPORT", "EpisodeRow", "ReportData", "build_report", "build_site", "score_corpora", "site_episode",
           "write_report"]


# --------------------------------------------------------------------------- one episode
def _recorded_scores(episode: Episode) -> list[float | None]:
    out: list[float | None] = []
    for step in episode.steps:
        guard = step.meta.get("guard") if isinstance(step.meta, dict) else None
        score = guard.get("score") if isinstance(guard, dict) else None
        out.append(float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None)
    return out


def _shadow_scores(episode: Episode) -> dict[str, list[float | None]]:
    names = sorted({name for s in episode.steps if isinstance(s.meta.get("shadow"), dict) for name in s.meta["shadow"]})
    out: dict[str, list[float | None]] = {}
    for name in names:
        values: list[float | None] = []
        for step in episode.steps:
            entry = (step.meta.get("shadow") or {}).get(name) if isinstance(step.meta.get("shadow"), dict) else None
            score = entry.get("score") if isinstance(entry, dict) else None
            values.append(float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None)
        if any(v is not None for v in values):
            out[name] = values
    return out


def _rescore(model: Any, episode: Episode) -> tuple[list[float | None], dict[str, list[float | None]], int | None]:
    stream = model.start(episode.task)
    fused: list[float | None] = []
    channels: dict[str, list[float | None]] = defaultdict(list)
    for i, step in enumerate(episode.steps):
        fused.append(float(stream.update(step)))
        for name, value in stream.channel_scores().items():
            channels[name].extend([None] * (i - len(channels[name])))
            channels[name].append(float(value))
    return fused, dict(channels), stream.alarm_step


def _finding_dict(finding: Any) -> dict[str, Any]:
    if isinstance(finding, Finding):
        return {"layer": finding.layer, "check": finding.check, "severity": finding.severity.value,
                "step": finding.step, "blocking": finding.blocking, "message": finding.message, "hint": finding.hint}
    return {k: finding.get(k) for k in ("layer", "check", "severity", "step", "blocking", "message", "hint")}


def site_episode(source: str, episode: Episode, model: Any = None, findings: Sequence[Any] = (),
                 model_sha256: str | None = None) -> SiteEpisode:
    """One episode for the site: the live guard's recorded scores, and with `model` every detector and channel."""
    run = as_dict(episode.meta.get("run"))
    recorded = _recorded_scores(episode)
    out = SiteEpisode(source=source, episode=episode, shadow_scores=_shadow_scores(episode))
    out.findings = [_finding_dict(f) for f in [*run.get("findings", []), *findings] if isinstance(f, dict | Finding)]
    alarm = next((f.get("step") for f in out.findings if f.get("severity") == "alarm" and f.get("layer") == "monitor"),
                 None)
    if any(v is not None for v in recorded):
        out.scores, out.score_origin = recorded, "recorded"
    if model is not None and episode.steps:
        fused, out.channels, stream_alarm = _rescore(model, episode)
        out.threshold = float(model.threshold_) if math.isfinite(model.threshold_) else None
        if out.score_origin is None:
            out.scores, out.score_origin = fused, "re-scored with --model"
            alarm = alarm if alarm is not None else stream_alarm
        judged = (run.get("versions") or {}).get("model_sha256") if isinstance(run.get("versions"), dict) else None
        if judged and model_sha256 and judged != model_sha256:
            out.notes.append(f"channels re-scored with --model (sha256 {model_sha256[:12]}); this run was judged by "
                             f"{judged[:12]}: the live line is that model's")
    out.alarm_step = alarm if isinstance(alarm, int) else None
    return out


# --------------------------------------------------------------------------- the summary
def summary_rows(episodes: Sequence[SiteEpisode]) -> list[dict[str, Any]]:
    """Per source and label: episodes, alarm rate with its 95% Clopper-Pearson interval, median delay, flagged share."""
    from monitors.calibration import binomial_ci

    groups: dict[tuple[str, str], list[SiteEpisode]] = defaultdict(list)
    for e in episodes:
        groups[(e.source, e.episode.label)].append(e)
    out = []
    for (source, label), rows in sorted(groups.items()):
        alarms = sum(r.alarm_step is not None for r in rows)
        delays = sorted(r.alarm_step - r.episode.tau for r in rows if r.alarm_step is not None
                        and r.episode.tau is not None)
        flagged = sum(1 for r in rows if any(f.get("blocking") for f in r.findings))
        out.append({"source": source, "label": label, "episodes": len(rows), "alarm_rate": alarms / len(rows),
                    "alarm_rate_ci": binomial_ci(alarms, len(rows)),
                    "median_delay": delays[len(delays) // 2] if delays else None, "flagged": flagged / len(rows)})
    return out


# --------------------------------------------------------------------------- sources
def _is_store(location: str) -> bool:
    from guardrail.core.runstore import is_store_dir, is_store_url

    return is_store_url(location) or is_store_dir(location)


def _read_source(location: str, notes: list[str]) -> tuple[str, list[Episode]]:
    from guardrail.core.corpus import CorpusIssue

    if _is_store(location):
        from guardrail.core.runstore import open_store

        problems: list[CorpusIssue] = []
        with open_store(location, create=False) as store:
            episodes = list(store.episodes(problems=problems))
        notes.extend(f"{location}: {p}" for p in problems[:20])
        name = location.rstrip("/").rsplit("/", 1)[-1] or location
        return name, episodes
    from guardrail.core.corpus import read_corpus

    corpus = read_corpus(location)
    notes.extend(f"{corpus.name}: {issue}" for issue in corpus.issues[:20])
    return corpus.name, list(corpus.episodes)


def build_site(sources: Sequence[str | Path], *, model_path: str | Path | None = None, spec: Any = None,
               title: str = "guardrail report", show_progress: bool = True) -> SiteData:
    """Everything `guardrail report` shows, read from run stores and corpora (see the module docstring)."""
    model = sha = None
    data = SiteData(title=title, sources=[str(s) for s in sources])
    if model_path is not None:
        from guardrail.core.fileio import sha256_file
        from monitors.model_file import load_monitor

        model, sha = load_monitor(model_path), sha256_file(model_path)
        data.model, data.threshold = str(model_path), float(model.threshold_)
        calibration = getattr(model, "calibration_", None)
        data.calibration = calibration.describe() if calibration is not None else None
    verify = None
    if spec is not None:
        from verifiers.offline import verify_episode
        from verifiers.spec import load_spec

        verify = (verify_episode, load_spec(spec) if isinstance(spec, str | Path) else spec)
    for location in sources:
        name, episodes = _read_source(str(location), data.notes)
        for episode in progress(episodes, desc=f"report {name}", total=len(episodes), enabled=show_progress):
            findings = list(verify[0](episode, verify[1]).findings) if verify is not None else []
            data.episodes.append(site_episode(name, episode, model, findings, sha))
    data.summary = summary_rows(data.episodes)
    if model is not None:
        data.drift = _drift(data, model, sources, sha)
    return data


def _drift(data: SiteData, model: Any, sources: Sequence[str | Path], sha: str | None) -> dict[str, Any] | None:
    from guardrail.app.drift import drift_report, healthy_runs

    episodes: list[Episode] = []
    notes: list[str] = []
    for location in sources:
        runs, said = healthy_runs(str(location), model_sha256=sha if _is_store(str(location)) else None)
        episodes.extend(runs)
        notes.extend(said)
    report = drift_report(model, episodes, notes=notes)
    return report.to_json()


# --------------------------------------------------------------------------- the programmatic report (demo, tests)
@dataclass
class EpisodeRow:
    """One episode as a `ReportData` report holds it (scored by a model; the episode kept for its page)."""

    corpus: str
    episode_id: str
    label: str
    tau: int | None
    steps: int
    scores: list[float] = field(default_factory=list)
    alarm_step: int | None = None
    findings: list[Finding] = field(default_factory=list)
    episode: Episode | None = None
    channels: dict[str, list[float | None]] = field(default_factory=dict)

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
    """A report built in code: scored rows, the threshold, and findings not tied to a row (a scene's, the gate's)."""

    title: str
    threshold: float | None
    rows: list[EpisodeRow] = field(default_factory=list)
    gate_findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    calibration: Any = None
    other_findings: list[tuple[str, Finding]] = field(default_factory=list)

    def site_episodes(self) -> list[SiteEpisode]:
        out = []
        for row in self.rows:
            episode = row.episode or Episode(episode_id=row.episode_id, label=row.label, tau=row.tau,
                                             steps=[Step(index=i, kind=StepKind.TEXT) for i in range(row.steps)])
            item = SiteEpisode(source=row.corpus, episode=episode, scores=list(row.scores),
                               score_origin="re-scored with the report's model" if row.scores else None,
                               channels=dict(row.channels), threshold=self.threshold, alarm_step=row.alarm_step,
                               findings=[_finding_dict(f) for f in row.findings])
            out.append(item)
        return out

    def summary(self) -> list[dict[str, Any]]:
        """Per corpus and label: episodes, alarm rate (healthy: false alarms) with its 95% Clopper-Pearson
        interval, median delay, the share the verifiers flagged."""
        rows = summary_rows(self.site_episodes())
        return [{"corpus": r["source"], "label": r["label"], "episodes": r["episodes"], "alarm_rate": r["alarm_rate"],
                 "alarm_rate_ci": r["alarm_rate_ci"], "median_delay": r["median_delay"],
                 "verifier_flagged": r["flagged"]} for r in rows]


def _row(corpus: str, episode: Episode, model: Any, verify: Any) -> EpisodeRow:
    findings: list[Finding] = []
    if verify is not None:
        verify_episode, spec = verify
        findings = list(verify_episode(episode, spec).findings)
    fused: list[float | None] = []
    channels: dict[str, list[float | None]] = {}
    alarm = None
    if episode.steps:
        fused, channels, alarm = _rescore(model, episode)
    return EpisodeRow(corpus=corpus, episode_id=episode.episode_id, label=episode.label, tau=episode.tau,
                      steps=len(episode.steps), scores=[float(s) for s in fused if s is not None], alarm_step=alarm,
                      findings=findings, episode=episode, channels=channels)


def score_corpora(paths: Sequence[str | Path], model: Any, *, spec: Any = None,
                  show_progress: bool = True) -> ReportData:
    """Score every episode of every corpus with a fitted monitor (and run a verifier spec when given)."""
    from guardrail.core.corpus import read_corpus

    verify = None
    if spec is not None:
        from verifiers.offline import verify_episode
        from verifiers.spec import load_spec

        verify = (verify_episode, load_spec(spec) if isinstance(spec, str) else spec)
    data = ReportData(title="guardrail report", threshold=float(model.threshold_),
                      calibration=getattr(model, "calibration_", None))
    for path in paths:
        corpus = read_corpus(path)
        data.notes.extend(f"{corpus.name}: {issue}" for issue in corpus.issues[:20])
        for episode in progress(corpus.episodes, desc=f"score {corpus.name}", total=len(corpus.episodes),
                                enabled=show_progress):
            data.rows.append(_row(corpus.name, episode, model, verify))
    return data


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain HTML table of `rows` (every cell escaped), for a report's extra sections."""
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3f}"
        return html.escape("-" if value is None else str(value))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(data: ReportData, out_dir: str | Path, *, extra_sections: Sequence[tuple[str, str]] = (),
                 extra_images: Sequence[tuple[str, str]] = ()) -> Path:
    """Write the site of a `ReportData` into `out_dir` (index.html, episodes/, site.json); returns the index.

    `extra_sections` are (title, trusted HTML); `extra_images` (caption, file name in `out_dir`).
    """
    site = SiteData(title=data.title, episodes=data.site_episodes(),
                    sources=sorted({r.corpus for r in data.rows}), threshold=data.threshold,
                    calibration=None if data.calibration is None else data.calibration.describe(),
                    notes=list(data.notes))
    site.model = "the report's model" if data.threshold is not None else None
    site.summary = summary_rows(site.episodes)
    site.other_findings = [("gate", _finding_dict(f)) for f in data.gate_findings] + \
        [(where, _finding_dict(f)) for where, f in data.other_findings]
    site.sections = list(extra_sections) + [(caption, f"<img src='{html.escape(name, quote=True)}' "
                                                      f"alt='{html.escape(caption, quote=True)}'>")
                                            for caption, name in extra_images]
    return write_site(site, out_dir)


def build_report(corpora: Sequence[str | Path], model_path: str | Path, out_dir: str | Path, *,
                 spec: Any = None, show_progress: bool = True) -> tuple[Path, SiteData]:
    data = build_site(corpora, model_path=model_path, spec=spec, show_progress=show_progress)
    return write_site(data, out_dir), data


# --------------------------------------------------------------------------- the command
def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sources", nargs="+", metavar="STORE|CORPUS",
                        help="run stores (a directory, sqlite:///PATH, postgresql://...) or corpus directories")
    parser.add_argument("--model", default=None, help="a fitted monitor model file: the threshold, every detector "
                                                      "and channel per step, the alarm budget and the drift verdict")
    parser.add_argument("--spec", default=None, help="also run this verifier spec (a name or a file)")
    parser.add_argument("-o", "--out", default="out/report", help="output directory (default: out/report)")
    parser.add_argument("--title", default="guardrail report")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def _run(args: argparse.Namespace) -> int:
    from guardrail.core.corpus import CorpusError
    from guardrail.core.runstore import StoreError
    from monitors.model_file import ModelFileError

    try:
        data = build_site(args.sources, model_path=args.model, spec=args.spec, title=args.title)
        page = write_site(data, args.out)
    except (OSError, ValueError, CorpusError, StoreError, ModelFileError) as exc:
        sys.stderr.write(f"guardrail report: {exc}\n")
        return 2
    if args.json:
        emit_json({"html": str(page), "threshold": data.threshold, "calibration": data.calibration,
                   "drift": data.drift, "summary": data.summary, "episodes": len(data.episodes)})
    else:
        sys.stdout.write(f"wrote {page} ({len(data.episodes)} episodes)\n")
    return 0


REPORT = Command(help="a static site of run stores or corpora: summary with budget and drift, a filterable "
                      "episode list, one page per episode", add_arguments=_add_arguments, run=_run)
