"""The report site's pages: an index you can filter, and one page per episode with its steps, findings and scores.

Every page is a self-contained HTML file (inline CSS, inline SVG, a few lines of inline script on
the index for the filters): it opens from disk with no server and no network. Every string from
a run (ids, tasks, arguments, results, messages) is escaped; file names are derived from ids, never
taken from them.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrail.app.svg import PALETTE, SHADOW_COLOR, Series, bar_chart, line_plot, sparkline
from guardrail.core.events import Episode, Step
from guardrail.core.fileio import atomic_write_text

__all__ = ["MAX_PAGES", "SiteData", "SiteEpisode", "as_dict", "episode_file", "write_site"]

MAX_PAGES = 2000  # episode pages written; the rest are listed on the index only
MAX_STEPS_SHOWN = 1000
TEXT_CAP = 4000  # characters of one text, argument set or result shown
_WARN_OR_WORSE = ("warning", "alarm", "error")
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f3f3f3}tr[hidden]{display:none}
code,pre{font-size:12px}pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;padding:6px;margin:2px 0;
max-height:22em;overflow:auto}.muted{color:#888}.alarm,.error{color:#b00}.warning{color:#a60}
.verdict-alarm,.verdict-block,.verdict-repair{color:#b00;font-weight:600}.verdict-warn{color:#a60}
.step{border:1px solid #ddd;border-radius:6px;padding:8px 10px;margin:10px 0}.step.flagged{border-color:#d62728;
background:#fff6f6}.step h3{font-size:1em;margin:0 0 6px}.finding{border-left:4px solid #d62728;padding:2px 8px;
margin:6px 0;background:#fff}.finding.sev-warning{border-color:#e6a000}.finding.sev-info{border-color:#999}
.side{display:flex;gap:2em;flex-wrap:wrap}.side>div{flex:1;min-width:260px}.filters label{margin-right:1em}
.badge{display:inline-block;padding:1px 6px;border-radius:8px;background:#eee;font-size:12px}
"""


def episode_file(episode_id: str) -> str:
    """The page name of an episode: a readable, safe prefix of its id plus a digest (ids may be anything)."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", episode_id)[:48].strip("_") or "episode"
    return f"{safe}-{hashlib.sha256(episode_id.encode('utf-8', 'replace')).hexdigest()[:10]}.html"


@dataclass
class SiteEpisode:
    """One episode as the site shows it (scores per step; channels when re-scored with a model)."""

    source: str
    episode: Episode
    scores: list[float | None] = field(default_factory=list)  # the live fused score per step
    score_origin: str | None = None  # "recorded" (the live guard's) or "re-scored with <model>"
    channels: dict[str, list[float | None]] = field(default_factory=dict)
    shadow_scores: dict[str, list[float | None]] = field(default_factory=dict)
    threshold: float | None = None
    alarm_step: int | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def run(self) -> dict[str, Any]:
        run = self.episode.meta.get("run") if isinstance(self.episode.meta, dict) else None
        return run if isinstance(run, dict) else {}

    @property
    def verdict(self) -> str | None:
        value = self.run.get("verdict")
        if value:
            return str(value)
        return "alarm" if self.alarm_step is not None else None

    @property
    def started(self) -> str:
        return str(self.run.get("started_at") or self.episode.meta.get("started_at") or "")[:19]

    @property
    def layers_fired(self) -> list[str]:
        return sorted({str(f.get("layer")) for f in self.findings if f.get("severity") in _WARN_OR_WORSE})

    @property
    def page(self) -> str:
        return episode_file(f"{self.source}\x00{self.episode.episode_id}")

    @property
    def max_score(self) -> float | None:
        finite = [v for v in self.scores if v is not None and not math.isnan(v)]
        return max(finite) if finite else None


@dataclass
class SiteData:
    """Everything the site shows."""

    title: str
    episodes: list[SiteEpisode] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    calibration: str | None = None  # the model's calibration, in words
    model: str | None = None
    threshold: float | None = None
    drift: dict[str, Any] | None = None  # a guardrail.app.drift.DriftReport as JSON
    summary: list[dict[str, Any]] = field(default_factory=list)
    other_findings: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (where, finding) off-episode
    sections: list[tuple[str, str]] = field(default_factory=list)  # (title, trusted HTML)
    notes: list[str] = field(default_factory=list)


def as_dict(value: Any) -> dict[str, Any]:
    """`value` when it is a dict, else an empty one (recorded meta is outside input)."""
    return value if isinstance(value, dict) else {}


def _esc(value: Any) -> str:
    return html.escape("-" if value is None else str(value), quote=True)


def _cap(text: str, cap: int = TEXT_CAP) -> str:
    return text if len(text) <= cap else text[:cap] + f"\n…[{len(text) - cap} more characters]"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return _esc(value)


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, css_id: str = "") -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table{f' id={chr(39)}{css_id}{chr(39)}' if css_id else ''}><thead><tr>{head}</tr></thead>" \
           f"<tbody>{body}</tbody></table>"


def _page(title: str, body: str, *, script: str = "") -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_esc(title)}</title>"
            f"<meta name='viewport' content='width=device-width'><style>{_CSS}</style></head><body>{body}"
            + (f"<script>{script}</script>" if script else "") + "</body></html>")


def _verdict(verdict: str | None) -> str:
    return f"<span class='verdict-{_esc(verdict)}'>{_esc(verdict)}</span>"


# --------------------------------------------------------------------------- the index
_FILTER_JS = """
const rows=[...document.querySelectorAll('#episodes tbody tr')];
const val=id=>document.getElementById(id).value;
for(const [k,v] of new URLSearchParams(location.search)){const el=document.getElementById('f-'+k);if(el)el.value=v;}
function apply(){const f={label:val('f-label'),verdict:val('f-verdict'),layer:val('f-layer'),
framework:val('f-framework'),from:val('f-from'),to:val('f-to'),q:val('f-q').toLowerCase()};let shown=0;
for(const r of rows){const d=r.dataset;const ok=(!f.label||d.label===f.label)&&(!f.verdict||d.verdict===f.verdict)&&
(!f.layer||d.layers.split(' ').includes(f.layer))&&(!f.framework||d.framework===f.framework)&&
(!f.from||d.date>=f.from)&&(!f.to||d.date.slice(0,f.to.length)<=f.to)&&(!f.q||d.search.includes(f.q));
r.hidden=!ok;if(ok)shown++;}document.getElementById('shown').textContent=shown+' of '+rows.length+' episodes';}
document.querySelectorAll('.filters select,.filters input').forEach(e=>e.addEventListener('input',apply));apply();
"""


def _select(ident: str, label: str, values: Sequence[str]) -> str:
    options = "".join(f"<option value='{_esc(v)}'>{_esc(v)}</option>" for v in values)
    return f"<label>{_esc(label)} <select id='{ident}'><option value=''>all</option>{options}</select></label>"


def _index(data: SiteData, paged: set[int]) -> str:
    parts = [f"<h1>{_esc(data.title)}</h1>",
             "<p class='muted'>" + _esc(", ".join(data.sources)) + "</p>", "<h2>Summary</h2>"]
    if data.model:
        budget = data.calibration or "not calibrated"
        parts.append(f"<p>Model: <code>{_esc(data.model)}</code>. Alarm budget: {_esc(budget)}.</p>")
    else:
        parts.append("<p class='muted'>No model given (--model): scores are the live guard's recorded ones, "
                     "without a threshold or channels.</p>")
    if data.drift is not None:
        css = "alarm" if data.drift.get("verdict") == "refit" else ""
        parts.append(f"<p id='drift' class='{css}'><b>Drift:</b> {_esc(data.drift.get('message'))}</p>")
    parts.append("<p>alarm_rate_ci: 95% Clopper-Pearson interval of the alarm rate (for healthy episodes, of the "
                 "false-alarm rate).</p>")
    shown = [{**row, "alarm_rate_ci": None if row["alarm_rate_ci"] is None else
              f"{row['alarm_rate_ci'][0]:.3f}-{row['alarm_rate_ci'][1]:.3f}"} for row in data.summary]
    parts.append(_table(shown, ["source", "label", "episodes", "alarm_rate", "alarm_rate_ci", "median_delay",
                                "flagged"], css_id="summary"))
    bars = [(f"{r['label']} ({r['source']})" if len(data.sources) > 1 else r["label"], r["alarm_rate"],
             f"{r['label']}: {r['alarm_rate']:.3f} of {r['episodes']}") for r in data.summary]
    if bars:
        parts.append("<h3>Alarm rate by label</h3>" + bar_chart(bars, title="alarm rate by label"))
    for title, section in data.sections:
        parts.append(f"<h2>{_esc(title)}</h2>{section}")
    if data.other_findings:
        parts.append("<h2>Findings outside these episodes</h2>")
        parts.append(_table([{"where": where, **f} for where, f in data.other_findings[:500]],
                            ["where", "layer", "check", "step", "blocking", "message", "hint"]))
    episodes = data.episodes
    labels = sorted({e.episode.label for e in episodes})
    verdicts = sorted({e.verdict or "-" for e in episodes})
    layers = sorted({layer for e in episodes for layer in e.layers_fired})
    frameworks = sorted({e.episode.framework or "-" for e in episodes})
    parts.append("<h2>Episodes</h2><p class='muted'>Filters also come from the address: index.html?label=healthy"
                 "&amp;layer=monitor&amp;from=2026-01-01</p><div class='filters'>" + _select("f-label", "label", labels)
                 + _select("f-verdict", "verdict", verdicts) + _select("f-layer", "layer fired", layers)
                 + _select("f-framework", "framework", frameworks)
                 + "<label>from <input id='f-from' type='date'></label><label>to <input id='f-to' type='date'></label>"
                 + "<label>search <input id='f-q' type='search' placeholder='id or task'></label>"
                 + " <span id='shown' class='badge'></span></div>")
    head = ("<table id='episodes'><thead><tr><th>episode</th><th>label</th><th>verdict</th><th>layer fired</th>"
            "<th>framework</th><th>date</th><th>steps</th><th>max score</th><th>scores</th><th>findings</th>"
            "</tr></thead><tbody>")
    rows = []
    for i, e in enumerate(episodes):
        ep = e.episode
        link = (f"<a href='episodes/{_esc(e.page)}'>{_esc(ep.episode_id[:40])}</a>" if i in paged
                else _esc(ep.episode_id[:40]))
        search = f"{ep.episode_id} {ep.task or ''}".lower()[:500]
        rows.append(
            f"<tr data-label='{_esc(ep.label)}' data-verdict='{_esc(e.verdict or '-')}' "
            f"data-layers='{_esc(' '.join(e.layers_fired))}' data-framework='{_esc(ep.framework or '-')}' "
            f"data-date='{_esc(e.started[:10])}' data-search='{_esc(search)}'>"
            f"<td>{link}</td><td>{_esc(ep.label)}</td><td>{_verdict(e.verdict)}</td>"
            f"<td>{_esc(', '.join(e.layers_fired) or '-')}</td><td>{_esc(ep.framework)}</td>"
            f"<td>{_esc(e.started[:16].replace('T', ' ') or '-')}</td><td>{len(ep.steps)}</td>"
            f"<td>{_fmt(e.max_score)}</td><td>{sparkline(e.scores, threshold=e.threshold, alarm=e.alarm_step)}</td>"
            f"<td>{len(e.findings)}</td></tr>")
    parts.append(head + "".join(rows) + "</tbody></table>")
    if len(episodes) > len(paged):
        parts.append(f"<p class='muted'>{len(episodes) - len(paged)} episode(s) beyond the first {MAX_PAGES} have no "
                     "page of their own.</p>")
    if data.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_esc(n)}</li>" for n in data.notes[:200]) + "</ul>")
    return _page(data.title, "".join(parts), script=_FILTER_JS)


# --------------------------------------------------------------------------- one episode
def _json(value: Any) -> str:
    try:
        text = json.dumps(value, indent=1, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return _cap(text)


def _finding_html(finding: Mapping[str, Any]) -> str:
    severity = str(finding.get("severity") or "warning")
    hint = finding.get("hint")
    return (f"<div class='finding sev-{_esc(severity)}'><b>{_esc(finding.get('layer'))}/{_esc(finding.get('check'))}"
            f"</b> <span class='{_esc(severity)}'>{_esc(severity)}</span>"
            + (" <span class='badge'>blocking</span>" if finding.get("blocking") else "")
            + f"<br>{_esc(_cap(str(finding.get('message') or ''), 1000))}"
            + (f"<br><i>hint:</i> {_esc(_cap(str(hint), 500))}" if hint else "") + "</div>")


def _step_html(step: Step, findings: Sequence[Mapping[str, Any]], e: SiteEpisode) -> str:
    guard = as_dict(step.meta.get("guard"))
    shadow = as_dict(step.meta.get("shadow"))
    flagged = " flagged" if any(f.get("severity") in _WARN_OR_WORSE for f in findings) else ""
    score = e.scores[step.index] if step.index < len(e.scores) else guard.get("score")
    parts = [f"<div class='step{flagged}' id='step-{step.index}'><h3>Step {step.index} "
             f"<span class='badge'>{_esc(step.kind.value)}</span>"
             + (f" score {_fmt(score)}" if score is not None else "")
             + (f" {_verdict(guard.get('verdict'))}" if guard.get("verdict") else "") + "</h3>"]
    if step.text:
        parts.append(f"<pre class='text'>{_esc(_cap(step.text))}</pre>")
    for event in step.tool_events:
        result = ("<pre class='result'>" + _esc(_cap(event.result)) + "</pre>") if event.result is not None else \
            "<p class='muted'>result not recorded" + (" (the call was blocked before it ran)" if event.guard_message
                                                      else "") + "</p>"
        parts.append(f"<div class='call'><b>tool call</b> <code>{_esc(event.name)}</code>"
                     + (" <span class='error'>error</span>" if event.is_error else "")
                     + f"<pre class='args'>{_esc(_json(event.args))}</pre><b>result</b>{result}"
                     + (f"<b>guard's message</b><pre>{_esc(_cap(event.guard_message))}</pre>"
                        if event.guard_message else "") + "</div>")
    if shadow:
        cells = "; ".join(f"{_esc(name)}: score {_fmt(v.get('score'))}" + (" <b class='alarm'>alarm</b>"
                                                                              if v.get("alarm") else "")
                          for name, v in shadow.items() if isinstance(v, dict))
        parts.append(f"<p class='shadow'>shadow: {cells}</p>")
    parts.extend(_finding_html(f) for f in findings)
    parts.append("</div>")
    return "".join(parts)


def _live_and_shadow(e: SiteEpisode) -> str:
    shadow = e.run.get("shadow")
    if not isinstance(shadow, dict) or not shadow:
        return ""
    rows = []
    for name, record in sorted(shadow.items()):
        if not isinstance(record, dict):
            continue
        live_layer = name[len("shadow_"):] if name.startswith("shadow_") else name
        live = [f for f in e.findings if f.get("layer") == live_layer and f.get("check") != "swap_refused"]
        live_alarm = next((f.get("step") for f in live if f.get("severity") == "alarm"), None)
        shadow_findings = [f for f in record.get("findings") or [] if isinstance(f, dict)]
        versions = as_dict(record.get("versions"))
        rows.append(
            f"<tr><td>{_esc(live_layer)}</td><td>{_esc(', '.join(sorted({str(f.get('check')) for f in live})) or 'none')}"
            f" (alarm step {_esc(live_alarm)}; max score {_fmt(e.max_score)})<br><code>"
            f"{_esc(str(e.run.get('versions', {}).get(live_layer == 'monitor' and 'model_sha256' or 'spec_sha256', ''))[:12])}"
            f"</code></td><td>{_esc(', '.join(sorted({str(f.get('check')) for f in shadow_findings})) or 'none')}"
            f" (alarm step {_esc(record.get('alarm_step'))}; max score {_fmt(record.get('max_score'))})<br><code>"
            f"{_esc(str(next(iter(versions.values()), ''))[:12])}</code></td></tr>")
    return ("<h2>Live and shadow</h2><table id='shadow'><thead><tr><th>layer</th><th>live (acted)</th>"
            "<th>shadow (recorded, never acted)</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _episode_page(e: SiteEpisode, data: SiteData) -> str:
    ep = e.episode
    run = e.run
    versions = as_dict(run.get("versions"))
    parts = ["<p><a href='../index.html'>&larr; all episodes</a></p>",
             f"<h1>Episode <code>{_esc(ep.episode_id[:120])}</code></h1>",
             "<table id='facts'><tbody>"
             + "".join(f"<tr><th>{_esc(k)}</th><td>{v}</td></tr>" for k, v in (
                 ("label", _esc(ep.label)), ("verdict", _verdict(e.verdict)), ("status", _esc(run.get("status"))),
                 ("framework", _esc(ep.framework)), ("started", _esc(e.started.replace("T", " ") or None)),
                 ("source", _esc(e.source)), ("steps", str(len(ep.steps))),
                 ("layers fired", _esc(", ".join(e.layers_fired) or "none")),
                 ("judged by", _esc(", ".join(f"{k} {str(v)[:12]}" for k, v in versions.items()) or None)),
                 ("scores", _esc(e.score_origin)))) + "</tbody></table>",
             "<h2>Task</h2>", f"<pre id='task'>{_esc(_cap(ep.task or '(not recorded)'))}</pre>"]
    parts.extend(f"<p class='muted'>{_esc(n)}</p>" for n in e.notes)
    series = [Series("score (live)" if e.score_origin == "recorded" else "score", e.scores, PALETTE[0], 2.5,
                     css="series live")] if any(v is not None for v in e.scores) else []
    components = [name for name in e.channels if "." not in name]
    for i, name in enumerate(components[:6]):
        series.append(Series(name, e.channels[name], PALETTE[(i + 1) % len(PALETTE)], 1.2, css="series channel"))
    parts.append("<h2>Score per step</h2>")
    if series:
        parts.append(line_plot(series, title=f"scores of {ep.episode_id[:60]}", threshold=e.threshold, onset=ep.tau,
                               alarm=e.alarm_step, css_id="score-plot"))
        note = ("components are the detectors the score fuses; the threshold applies to the fused score"
                if components else "give --model to see each detector and channel against the threshold")
        parts.append(f"<p class='muted'>{_esc(note)}. Dashed red: threshold; orange: labelled onset; x: alarm.</p>")
    else:
        parts.append("<p class='muted'>no scores: this run had no monitor and no --model was given</p>")
    shadow_runs = as_dict(e.run.get("shadow"))
    for name, values in e.shadow_scores.items():
        record = as_dict(shadow_runs.get(name))
        threshold = record.get("threshold") if isinstance(record.get("threshold"), int | float) else None
        alarm = record.get("alarm_step") if isinstance(record.get("alarm_step"), int) else None
        parts.append(f"<h3>{_esc(name)} (recorded beside the live score, never acting)</h3>"
                     + line_plot([Series(name, values, SHADOW_COLOR, 2.0, css="series shadow")],
                                 title=f"{name} of {ep.episode_id[:60]}", threshold=threshold, onset=ep.tau,
                                 alarm=alarm, height=220, css_id=f"plot-{name}"))
    if e.channels:
        names = list(e.channels)
        rows = [{"step": i, **{n: e.channels[n][i] if i < len(e.channels[n]) else None for n in names}}
                for i in range(min(len(ep.steps), MAX_STEPS_SHOWN))]
        parts.append("<details><summary>every channel per step</summary>"
                     + _table(rows, ["step", *names], css_id="channels") + "</details>")
    parts.append(_live_and_shadow(e))
    by_step: dict[int | None, list[dict[str, Any]]] = {}
    for finding in e.findings:
        step = finding.get("step")
        by_step.setdefault(step if isinstance(step, int) and 0 <= step < len(ep.steps) else None, []).append(finding)
    parts.append("<h2>Steps</h2>")
    for step in ep.steps[:MAX_STEPS_SHOWN]:
        parts.append(_step_html(step, by_step.get(step.index, []), e))
    if len(ep.steps) > MAX_STEPS_SHOWN:
        parts.append(f"<p class='muted'>{len(ep.steps) - MAX_STEPS_SHOWN} more steps not shown</p>")
    parts.append("<h2>Answer</h2>" + (f"<pre id='answer'>{_esc(_cap(ep.answer))}</pre>" if ep.answer is not None
                                      else "<p class='muted'>the run gave no answer</p>"))
    parts.append("<h2>Findings</h2>")
    parts.append(_table(e.findings, ["step", "layer", "check", "severity", "blocking", "message", "hint"],
                        css_id="findings") if e.findings else "<p>none in this run</p>")
    if by_step.get(None):
        parts.append("<h3>At the end of the run</h3>" + "".join(_finding_html(f) for f in by_step[None]))
    decisions = [d for d in run.get("decisions") or [] if isinstance(d, dict)]
    parts.append("<h2>Decisions</h2>")
    if decisions:
        made: list[dict[str, Any]] = [{"step": d.get("step"), "hook": d.get("hook"), "tool": d.get("tool"),
                 "verdict": d.get("verdict"),
                 "checks": ", ".join(str(f.get("check")) for f in d.get("findings") or [] if isinstance(f, dict))}
                for d in decisions[:MAX_STEPS_SHOWN]]
        parts.append(_table(made, ["step", "hook", "tool", "verdict", "checks"], css_id="decisions"))
    parts.append(f"<p>End of run: {_verdict(e.verdict)}</p>" if e.verdict else "")
    return _page(f"{ep.episode_id[:80]} - {data.title}", "".join(parts))


# --------------------------------------------------------------------------- writing
def write_site(data: SiteData, out_dir: str | Path) -> Path:
    """Write index.html, episodes/*.html and site.json into `out_dir`; returns the index path."""
    out = Path(out_dir)
    pages = out / "episodes"
    pages.mkdir(parents=True, exist_ok=True)
    paged = set(range(min(len(data.episodes), MAX_PAGES)))
    seen: set[str] = set()
    for i in sorted(paged):
        e = data.episodes[i]
        if e.page in seen:  # the same id twice in one source: the first one has the page
            paged.discard(i)
            continue
        seen.add(e.page)
        atomic_write_text(pages / e.page, _episode_page(e, data))
    index = out / "index.html"
    atomic_write_text(index, _index(data, paged))
    atomic_write_text(out / "site.json", json.dumps({
        "title": data.title, "sources": data.sources, "model": data.model, "threshold": data.threshold,
        "calibration": data.calibration, "drift": data.drift, "summary": data.summary,
        "episodes": [{"episode_id": e.episode.episode_id, "source": e.source, "label": e.episode.label,
                      "verdict": e.verdict, "layers_fired": e.layers_fired, "framework": e.episode.framework,
                      "started": e.started, "steps": len(e.episode.steps), "alarm_step": e.alarm_step,
                      "max_score": e.max_score, "findings": len(e.findings),
                      "page": f"episodes/{e.page}" if i in paged else None}
                     for i, e in enumerate(data.episodes)]}, indent=1, default=str))
    return index
