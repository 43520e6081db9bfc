"""Typed warnings: a violated predicate becomes a message, evidence and a repair hint naming the closest real names."""

from __future__ import annotations

import difflib
import heapq
import os
import re
from dataclasses import dataclass, field
from typing import Any

from guardrail.core.events import Finding, Severity
from guardrail.gate import budget
from guardrail.gate.predicates import Outcome, ProbeResult
from guardrail.gate.probe import workspace_files
from guardrail.gate.view import FsView

__all__ = ["GateReport", "finding_of", "repair_hint"]

_BULKY = ("candidates", "siblings", "workspace_files")


def _close(word: str, options: list[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    if not word or not options or len(word) > _MAX_HINT_WORD:
        return []
    # Only violations pay for hints, but a PATH or site-packages holds thousands of names: compare only
    # names that share the first letter or have about the same length (a typo rarely changes both).
    first = word[:1].lower()
    pool = [o for o in options[:50_000] if (o[:1].lower() == first or abs(len(o) - len(word)) <= 1)
            and len(o) <= _MAX_HINT_WORD]
    # difflib.get_close_matches, compared in chunks so the decision's deadline is kept while it runs
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(word)
    scored: list[tuple[float, str]] = []
    for index, option in enumerate(pool[:5_000]):
        if not index & 255:
            budget.check("repair hint")
        matcher.set_seq1(option)
        if matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff and matcher.ratio() >= cutoff:
            scored.append((matcher.ratio(), option))
    return [option for _, option in heapq.nlargest(n, scored)]


_MAX_HINT_WORD = 300  # a longer name or line is not compared (the cost of a comparison grows with its square)


def _closest_line(missing: str, lines: list[str], cutoff: float = 0.5) -> str | None:
    """The file line most like `missing`, among lines sharing a word with it; stops at the deadline."""
    words = set(re.findall(r"\w{3,}", missing))
    if not words or len(missing) > _MAX_HINT_WORD:
        return None
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(missing)
    best, best_ratio, compared = None, cutoff, 0
    for index, line in enumerate(lines):
        if not index & 255:
            budget.check("repair hint")
        if len(line) > _MAX_HINT_WORD or not any(word in line for word in words):
            continue
        compared += 1
        if compared > 500:
            break
        matcher.set_seq1(line)
        if matcher.real_quick_ratio() >= best_ratio and matcher.quick_ratio() >= best_ratio:
            ratio = matcher.ratio()
            if ratio >= best_ratio and (best is None or ratio > best_ratio):
                best, best_ratio = line, ratio
    return best


def repair_hint(result: ProbeResult, fs: FsView | None = None) -> str | None:
    """A one-line suggestion naming the closest existing names, or None when nothing is close.

    Bounded by the deadline of the decision in progress (`budget.within`); the gate computes it
    inside the decision, so its cost is in the reported latency.
    """
    name = result.predicate.name
    evidence = result.evidence
    missing = str(evidence.get("missing", ""))
    candidates = [str(c) for c in evidence.get("candidates", ()) or ()]
    if isinstance(evidence.get("hint"), str):  # a probe that knows the fix names it (guardrail.gate.probe_mcp)
        return str(evidence["hint"])
    if name in ("file_exists", "dir_exists", "path_exists", "parent_dir_exists", "tool_path_arg_exists",
                "pytest_target_exists") and "siblings" in evidence:
        return _path_hint(evidence, fs)
    if name == "executable_available" and missing:
        close = _close(missing, candidates)
        if missing == "python" and "python3" in candidates:
            close = ["python3", *[c for c in close if c != "python3"]]
        return f"did you mean {', '.join(close)}?" if close else None
    if name == "editor_line_in_range" and "lines" in evidence:
        return f"{evidence.get('path')} has {evidence['lines']} lines"
    if name in ("editor_text_present", "mcp_edit_applies"):
        # Candidates exist only for a file under the workspace roots: no other file's text is ever quoted.
        line = _closest_line(missing, candidates) if candidates else None
        return f"closest line in the file: {line!r}" if line else "view the file to copy the exact text"
    if missing and candidates:
        close = _close(missing, candidates)
        if close:
            return f"closest existing names: {', '.join(close)}"
        if name == "symbol_defined":
            public = [c for c in candidates if not c.startswith("_")][:8]
            return f"it defines e.g. {', '.join(public)}" if public else None
    return None


def _path_hint(evidence: dict[str, Any], fs: FsView | None) -> str | None:
    missing = str(evidence.get("missing", ""))
    nearest = str(evidence.get("nearest_dir", ""))
    suggestions = [os.path.join(nearest, s) for s in _close(missing, [str(s) for s in evidence["siblings"]])]
    root = str(evidence.get("workspace", ""))
    # The workspace walk (cached 30 s) runs only for a violation, within the decision's deadline.
    files = workspace_files(root, fs) if root else []
    budget.check("repair hint")
    if root and files and missing:
        by_name: dict[str, list[str]] = {}
        for rel in files:
            by_name.setdefault(os.path.basename(rel), []).append(rel)
        for close_name in _close(missing, list(by_name), n=3, cutoff=0.7):
            for rel in sorted(by_name[close_name], key=len)[:2]:
                suggestion = os.path.join(root, rel)
                if suggestion not in suggestions:
                    suggestions.append(suggestion)
    if not suggestions:
        return f"nearest existing directory: {nearest}" if nearest else None
    return f"closest existing paths: {', '.join(suggestions[:4])}"


def finding_of(result: ProbeResult, *, layer: str, step: int | None = None) -> Finding:
    """The typed warning for one violated (or undecided) predicate."""
    predicate = result.predicate
    evidence = {k: v for k, v in result.evidence.items() if k not in _BULKY}
    evidence["family"] = predicate.family
    evidence["origin"] = predicate.origin
    evidence["outcome"] = result.outcome.value
    violated = result.outcome is Outcome.FALSE
    return Finding(
        layer=layer,
        check="hallucinated_tool_call" if violated else "predicate_unknown",
        message=f"{predicate.label()} is false: {result.message}" if violated else result.message,
        predicate=predicate.name,
        args=[str(a) if not isinstance(a, int | float | str) else a for a in predicate.args],
        evidence=evidence,
        hint=(result.hint if result.hint is not None else repair_hint(result)) or None if violated else None,
        blocking=violated and predicate.necessary,
        severity=Severity.WARNING if violated else Severity.INFO,
        step=step,
    )


@dataclass
class GateReport:
    """Every predicate an action assumed and what the probes said, with the time it took."""

    results: list[ProbeResult] = field(default_factory=list)
    latency_ms: float = 0.0
    budget_exceeded: bool = False
    error: str | None = None
    notices: list[tuple[str, str]] = field(default_factory=list)  # (check, message): e.g. an interpreter not run
    cold_ms: float = 0.0  # of `latency_ms`, the cold work the decision waited for (`budget.Deadline`)

    @property
    def violations(self) -> list[ProbeResult]:
        return [r for r in self.results if r.outcome is Outcome.FALSE]

    @property
    def hallucinated(self) -> bool:
        return bool(self.violations)

    @property
    def blocking(self) -> bool:
        return any(r.predicate.necessary for r in self.violations)

    def findings(self, *, layer: str, step: int | None = None) -> list[Finding]:
        out = [finding_of(r, layer=layer, step=step) for r in self.violations]
        if self.budget_exceeded:
            skipped = [r for r in self.results if r.evidence.get("budget_exceeded")]
            out.append(Finding(layer=layer, check="budget_exceeded", severity=Severity.INFO, step=step,
                               message=f"the gate's budget ran out: {len(skipped)} predicate(s) left unknown "
                                       f"(first: {skipped[0].message[:300] if skipped else 'none'})",
                               evidence={"latency_ms": round(self.latency_ms, 3), "unknown": len(skipped)}))
        if self.error:
            out.append(Finding(layer=layer, check="bad_action", severity=Severity.INFO, step=step,
                               message=self.error))
        for check, message in self.notices:
            out.append(Finding(layer=layer, check=check, severity=Severity.INFO, step=step, message=message))
        return out

    def to_json(self, case_id: Any = None) -> dict[str, Any]:
        """The batch/--json result shape scripts rely on."""
        out: dict[str, Any] = {"id": case_id, "hallucinated": self.hallucinated, "violations": [
            {"predicate": r.predicate.name, "args": [a if isinstance(a, int | float | str) else str(a)
                                                     for a in r.predicate.args],
             "message": r.message, "family": r.predicate.family, "blocking": r.predicate.necessary,
             "hint": (r.hint if r.hint is not None else repair_hint(r)) or None}
            for r in self.violations
        ], "latency_ms": round(self.latency_ms, 3)}
        unknown = [r for r in self.results if r.outcome is Outcome.UNKNOWN]
        if unknown:
            out["unknown"] = [{"predicate": r.predicate.name, "reason": r.message[:300]} for r in unknown[:20]]
        if self.budget_exceeded:
            out["budget_exceeded"] = True
        if self.error:
            out["error"] = self.error
        if self.notices:
            out["notices"] = [{"check": check, "message": message} for check, message in self.notices]
        return out
