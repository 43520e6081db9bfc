"""The gate: check one proposed action against the workspace, and the Guard layer that runs it before each action."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from guardrail.core.events import Action, ActionKind, Finding, Result
from guardrail.core.layer import EpisodeContext, Layer
from guardrail.gate.extract_tool import ToolSchema, tool_schema
from guardrail.gate.index import ModuleIndex, TargetPythonError, target_python
from guardrail.gate.normalize import ActionError, extract, normalize_action
from guardrail.gate.predicates import Predicate
from guardrail.gate.probe import Prober
from guardrail.gate.report import GateReport
from guardrail.gate.scope import Scope

__all__ = ["EditorState", "Gate", "GateLayer", "GateState"]

# SWE-agent's editor header: "[File: /repo/x.py (120 lines total)]"
_OPEN_FILE_HEADER = re.compile(r"\[File: (.+?) \(\d+ lines total\)\]")


@dataclass
class EditorState:
    """What the harness says about the editor: the open file, when one is open."""

    open_file: str | None = None


@dataclass
class GateState:
    """Per-episode effects the gate carries from one action to the next."""

    cwd: str | None = None
    editor: EditorState = field(default_factory=EditorState)
    created: dict[str, str | None] = field(default_factory=dict)
    installed: set[str] = field(default_factory=set)
    install_unknown: bool = False


class Gate:
    """Checks actions against one workspace and one target interpreter, read-only.

    `workspace` is the repository root the agent works in; `cwd` the directory its commands
    start in (default: the workspace); `python` the interpreter the agent's commands run
    (default: this process's). `budget_s` bounds the probing of one action: predicates
    left when it runs out are unknown and the report says so. `tools` maps tool names to a
    JSON schema, an OpenAI/Anthropic tool dict or a Python callable, for `tool_args_valid`.
    """

    def __init__(self, workspace: str | os.PathLike[str], *, python: str | None = None,
                 cwd: str | os.PathLike[str] | None = None, budget_s: float = 0.25,
                 tools: Mapping[str, Mapping[str, Any] | Callable[..., Any]] | None = None,
                 path_env: str | None = None) -> None:
        self.workspace = os.path.abspath(os.fspath(workspace))
        self.cwd = os.path.abspath(os.fspath(cwd)) if cwd is not None else self.workspace
        self.python = python
        self.budget_s = budget_s
        self.schemas: dict[str, ToolSchema] = {name: tool_schema(t) for name, t in (tools or {}).items()}
        self.path_env = path_env
        self._index: ModuleIndex | None = None
        self._index_error: str | None = None
        self._lock = threading.Lock()

    def index(self) -> ModuleIndex | None:
        """The target's module index, built on first use (one short subprocess asking for sys.path)."""
        if self._index is None and self._index_error is None:
            with self._lock:
                if self._index is None and self._index_error is None:
                    try:
                        self._index = ModuleIndex(target_python(self.python))
                    except TargetPythonError as exc:
                        self._index_error = str(exc)
        return self._index

    def _path_env(self) -> str:
        if self.path_env is not None:
            return self.path_env
        bin_dir = os.path.dirname(self.python or sys.executable)
        return os.pathsep.join([bin_dir, os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")])

    def check(self, action: Action | Mapping[str, Any], state: GateState | None = None) -> GateReport:
        """Every predicate `action` assumes and whether it holds. Never raises for what the agent proposes."""
        started = time.perf_counter()
        report, _ = self._check(action, state, started)
        report.latency_ms = (time.perf_counter() - started) * 1000.0
        return report

    def _check(self, raw: Action | Mapping[str, Any], state: GateState | None,
               started: float) -> tuple[GateReport, Scope | None]:
        try:
            action = normalize_action(raw)
        except ActionError as exc:
            return GateReport(error=str(exc)), None
        state = state or GateState()
        index = self.index()
        probe_start = time.perf_counter()
        version = index.target.version if index is not None else None
        cwd = action.cwd or state.cwd or self.cwd
        scope = Scope(cwd=os.path.normpath(os.path.join(self.workspace, cwd)), workspace=self.workspace,
                      created=dict(state.created), installed=set(state.installed),
                      install_unknown=state.install_unknown)
        try:
            predicates = extract(action, scope, open_file=state.editor.open_file, schemas=self.schemas,
                                 python_version=version)
        except RecursionError:
            return GateReport(error="action too deeply nested to analyse"), None
        # The budget covers this action's probes, not the once-per-interpreter sys.path query above.
        prober = Prober(index, workspace=self.workspace, path_env=self._path_env(),
                        deadline=max(started, probe_start) + self.budget_s, index_error=self._index_error)
        results = [prober.probe(p) for p in _dedupe(predicates)]
        exceeded = any(r.evidence.get("budget_exceeded") for r in results)
        return GateReport(results=results, budget_exceeded=exceeded), scope

    def check_and_advance(self, action: Action | Mapping[str, Any], state: GateState) -> GateReport:
        """Check, then carry the action's effects (cwd, created files, installs) into `state`."""
        started = time.perf_counter()
        report, scope = self._check(action, state, started)
        if scope is not None and not report.blocking:
            state.cwd = scope.cwd if not scope.cwd_unknown else state.cwd
            state.created.update(scope.created)
            state.installed |= scope.installed
            state.install_unknown = state.install_unknown or scope.install_unknown
            _advance_editor(action, state, scope.cwd)
        report.latency_ms = (time.perf_counter() - started) * 1000.0
        return report


def _advance_editor(raw: Action | Mapping[str, Any], state: GateState, cwd: str) -> None:
    try:
        action = normalize_action(raw)
    except ActionError:
        return
    if action.kind is ActionKind.SWE_AGENT and action.command:
        words = action.command.strip().split()
        if len(words) >= 2 and words[0] in ("open", "create"):
            state.editor.open_file = os.path.normpath(os.path.join(cwd, words[1].strip("\"'")))


def _dedupe(predicates: Iterable[Predicate]) -> list[Predicate]:
    seen: dict[tuple[str, tuple[Any, ...]], int] = {}
    out: list[Predicate] = []
    for predicate in predicates:
        key = (predicate.name, predicate.args)
        if key in seen:
            kept = out[seen[key]]
            if predicate.necessary and not kept.necessary and predicate.hedge is None:
                out[seen[key]] = predicate
            continue
        seen[key] = len(out)
        out.append(predicate)
    return out


class GateLayer(Layer):
    """The StateMirror gate as a Guard layer: typed warnings before each action, blocking under intervene.

    Per-episode state (cwd after ``cd``, files created, packages installed, the editor's open
    file) lives in the episode context. The harness can set the open file with
    `set_editor_state`; otherwise it is read from SWE-agent's ``[File: ...]`` observation header.
    """

    name = "gate"

    def __init__(self, workspace: str | os.PathLike[str], *, python: str | None = None,
                 cwd: str | os.PathLike[str] | None = None, budget_s: float = 0.25,
                 tools: Mapping[str, Mapping[str, Any] | Callable[..., Any]] | None = None,
                 persistent_shell: bool = True) -> None:
        self.gate = Gate(workspace, python=python, cwd=cwd, budget_s=budget_s, tools=tools)
        self.persistent_shell = persistent_shell

    def new_state(self, ctx: EpisodeContext) -> GateState:
        return GateState()

    def set_editor_state(self, ctx: EpisodeContext, *, open_file: str | None) -> None:
        ctx.state(self).editor.open_file = open_file

    def before_action(self, ctx: EpisodeContext, action: Action) -> Iterable[Finding] | None:
        state: GateState = ctx.state(self)
        with ctx.lock:
            report = self.gate.check_and_advance(action, state)
            if not self.persistent_shell:
                state.cwd = None
        return report.findings(layer=self.name, step=ctx.step_index)

    def after_result(self, ctx: EpisodeContext, action: Action, result: Result) -> Iterable[Finding] | None:
        matches = _OPEN_FILE_HEADER.findall(result.output[-20_000:]) if result.output else []
        if matches:
            ctx.state(self).editor.open_file = matches[-1]
        return None
