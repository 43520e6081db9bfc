"""The gate: check one proposed action against the workspace, and the Guard layer that runs it before each action."""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from guardrail.core.events import Action, ActionKind, Finding, Result, Severity
from guardrail.core.layer import EpisodeContext, Layer
from guardrail.gate import budget
from guardrail.gate.backend import DECISION_MEMO, LocalBackend, ProbeBackend, Roots
from guardrail.gate.budget import BudgetExceeded, Deadline
from guardrail.gate.extract_tool import ToolSchema, checks_arguments_only, tool_schema
from guardrail.gate.index import ModuleIndex, TargetPython, TargetPythonError
from guardrail.gate.normalize import ActionError, extract, normalize_action
from guardrail.gate.predicates import Outcome, Predicate, ProbeResult
from guardrail.gate.probe import Prober
from guardrail.gate.report import GateReport, repair_hint
from guardrail.gate.scope import Scope
from guardrail.gate.tool_args import SchemaError, args_problems, schema_signature
from guardrail.gate.view import FsView
from guardrail.gate.warm import warm_workspace

__all__ = ["COLD_S", "EditorState", "Gate", "GateLayer", "GateState"]

# What a decision may spend on top of its budget on its own cold work (`budget.Deadline`). Normal projects never
# reach it: the slowest cold step measured on the benchmark's twelve projects, with two busy-loop processes on the
# two cores, is the target interpreter's first answer (about 0.3 s); a 214 KB module parses in about 0.2 s.
COLD_S = 1.0

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

    `workspace` is the repository root the agent works in; `roots` any further directories the
    agent can write (a scratch dir, /tmp): together they are the workspace roots. `cwd` is the
    directory its commands start in (default: the workspace); `python` the interpreter the
    agent's commands run (default: this process's; a relative path is resolved against `cwd`,
    the way the agent's shell would). Nothing under the workspace roots is ever executed, and no
    probe looks outside them and the target's import paths (plus the PATH directories, for
    command names). `budget_s` is a hard deadline over the whole decision, hints included:
    what it leaves undecided is unknown and the report says so, except that a decision waits for its own cold
    work (the first parse of a normal-size module, the interpreter's first answer, a standard module's names)
    up to `cold_s` more: that work is done once, ahead of time in the background (`prepare`, which also
    parses the workspace's files and keeps them on disk, `guardrail.gate.warm`), so a cold cache is not
    a reason to leave a predicate unknown; pathological input gets no such credit. `tools` maps tool names to a
    JSON schema, an OpenAI/Anthropic tool dict or a Python callable, for `tool_args_valid`.
    `backend` is where probes read (default: this machine's filesystem).
    """

    def __init__(self, workspace: str | os.PathLike[str], *, python: str | None = None,
                 cwd: str | os.PathLike[str] | None = None, budget_s: float = 0.25,
                 tools: Mapping[str, Mapping[str, Any] | Callable[..., Any]] | None = None,
                 path_env: str | None = None, roots: Iterable[str | os.PathLike[str]] = (),
                 backend: ProbeBackend | None = None, cold_s: float = COLD_S, warm: bool = True) -> None:
        self._options: dict[str, Any] = {"python": python, "cwd": cwd, "budget_s": budget_s, "tools": tools,
                                         "path_env": path_env, "roots": tuple(roots), "cold_s": cold_s, "warm": warm}
        self.cold_s = cold_s
        self.warm = warm
        self.warmed: dict[str, Any] | None = None  # what the background warm-up did, once it is done
        self._warm_done = threading.Event()
        self.backend: ProbeBackend = backend or LocalBackend()
        self.workspace = os.path.abspath(os.fspath(workspace))
        self.cwd = os.path.abspath(os.fspath(cwd)) if cwd is not None else self.workspace
        # A bare interpreter name is looked up on the backend's machine (the sandbox's PATH for a remote one).
        self.python = resolve_python(python, self.cwd, getattr(self.backend, "find_program", None))
        self.budget_s = budget_s
        self.schemas: dict[str, ToolSchema] = {name: tool_schema(t) for name, t in (tools or {}).items()}
        self.path_env = path_env
        self.roots = Roots.of([self.workspace, *roots], resolve=getattr(self.backend, "realpaths", None))
        self.fs = FsView(self.backend, self.roots, command_dirs=_command_dirs(self._path_env()))
        self._index: ModuleIndex | None = None
        self._index_error: str | None = None
        self._index_refused = False
        self._index_done = threading.Event()
        self._index_thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def using(self, backend: ProbeBackend, *, python: str | None = None, path_env: str | None = None) -> Gate:
        """The same gate (workspace, roots, cwd, tools, budget) probing through `backend`, e.g. inside the agent's
        sandbox; `python` and `path_env` name the agent's interpreter and PATH there (default: as given before,
        else the backend's own defaults)."""
        options = dict(self._options)
        options["python"] = python or options["python"]
        options["path_env"] = path_env or options["path_env"]
        return Gate(self.workspace, backend=backend, **options)

    # ------------------------------------------------------------------ the target's index
    def prepare(self) -> Gate:
        """Start learning the target interpreter's paths in the background (the first check waits for it
        only as long as its budget allows)."""
        with self._lock:
            if self._index_thread is None:
                self._index_thread = threading.Thread(target=self._build_index, name="guardrail-gate-index",
                                                      daemon=True)
                self._index_thread.start()
        return self

    def _build_index(self) -> None:
        try:
            target = self.backend.import_paths(self.python, self.roots)
            self.fs.set_import_roots(target.import_roots)
            self._index = ModuleIndex(target, self.fs)
        except TargetPythonError as exc:
            self._index_error = str(exc)
            self._index_refused = exc.refused
        except Exception as exc:  # noqa: BLE001 - a broken interpreter makes namespace predicates unknown
            self._index_error = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            self._index_done.set()
        if self.warm and getattr(self.backend, "key", "") == "local":
            try:
                self.warmed = warm_workspace(self.workspace, self.fs, self._index)
            except Exception as exc:  # noqa: BLE001 - warming is an optimisation: a failure only leaves it cold
                self.warmed = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        self._warm_done.set()

    def wait_warm(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        """Wait until the background warm-up is done (started by `prepare`); what it did."""
        self.prepare()
        self._warm_done.wait(timeout_s)
        return self.warmed

    def use_target(self, target: TargetPython, *, path_env: str | None = None) -> None:
        """Judge imports against `target` and commands against `path_env` instead of asking an interpreter.

        For an environment the operator describes rather than runs (an agent's sandbox, a SWE-bench
        ``environment.yml``): the target's ``sys_path`` outside the workspace roots is read as the
        operator's, like a trusted interpreter's import paths.
        """
        outside = tuple(p for p in target.sys_path if not self.roots.holds_lexically(os.path.abspath(p)))
        with self._lock:
            if path_env is not None:
                self.path_env = path_env
                self.fs.set_command_dirs(_command_dirs(self._path_env()))
            self.fs.set_import_roots((*target.import_roots, *outside))
            self._index, self._index_error, self._index_refused = ModuleIndex(target, self.fs), None, False
            self._index_thread = threading.current_thread()  # nothing left to learn in the background
            self._index_done.set()

    def index_ready(self) -> bool:
        """Whether the target interpreter's module index is built (or known unavailable): a decision then never
        waits for it."""
        return self._index_done.is_set()

    def index(self, wait_s: float | None = None) -> ModuleIndex | None:
        """The target's module index (one short subprocess to a trusted interpreter, run once, in the
        background). Waits up to `wait_s` seconds for it (None: until it is built or has failed)."""
        self.prepare()
        self._index_done.wait(wait_s)
        return self._index

    def _path_env(self) -> str:
        if self.path_env is not None:
            return self.path_env
        # A backend for another machine gives that machine's PATH and default interpreter.
        system = getattr(self.backend, "default_path_env", None)
        default = getattr(self.backend, "default_python", None)
        python = self.python or (default() if default is not None else sys.executable)
        path = system() if system is not None else os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        return os.pathsep.join([os.path.dirname(python), path]) if python else path

    # ------------------------------------------------------------------ decisions
    def check(self, action: Action | Mapping[str, Any], state: GateState | None = None) -> GateReport:
        """Every predicate `action` assumes and whether it holds. Never raises for what the agent proposes;
        `latency_ms` is the wall time of the whole decision (parsing, probing and hints)."""
        deadline = Deadline(self.budget_s, cold_s=self.cold_s)
        report, _ = self._check(action, state, deadline)
        report.latency_ms = (time.perf_counter() - deadline.start) * 1000.0
        report.cold_ms = deadline.cold_spent * 1000.0
        return report

    def _check(self, raw: Action | Mapping[str, Any], state: GateState | None,
               deadline: Deadline) -> tuple[GateReport, Scope | None]:
        # The deadline and the per-decision stat memo (context variables, set directly: this is the hot path).
        deadline_token, memo_token = budget._CURRENT.set(deadline), DECISION_MEMO.set({})
        try:
            return self._decide(raw, state, deadline)
        except (RecursionError, MemoryError) as exc:  # the action itself too deep or too big to handle
            return GateReport(error=f"action could not be analysed ({type(exc).__name__})"), None
        finally:
            DECISION_MEMO.reset(memo_token)
            budget._CURRENT.reset(deadline_token)

    def _decide(self, raw: Action | Mapping[str, Any], state: GateState | None,
                deadline: Deadline) -> tuple[GateReport, Scope | None]:
        try:
            action = normalize_action(raw)
        except ActionError as exc:
            return GateReport(error=str(exc)), None
        state = state or GateState()
        if not self._index_done.is_set():
            with deadline.cold_work():  # the interpreter's first answer: cold work, waited for up to the cap
                index = self.index(wait_s=deadline.cold_allowance())
        else:
            index = self._index
        version = index.target.version if index is not None else None
        cwd = action.cwd or state.cwd or self.cwd
        scope = Scope(cwd=os.path.normpath(os.path.join(self.workspace, cwd)), workspace=self.workspace,
                      created=dict(state.created), installed=set(state.installed),
                      install_unknown=state.install_unknown, fs=self.fs)
        try:
            predicates = _dedupe(extract(action, scope, open_file=state.editor.open_file, schemas=self.schemas,
                                         python_version=version))
        except BudgetExceeded as exc:
            predicates = [Predicate("analysis_complete", ("the action", str(exc), "budget"), False, "gate")]
        except (RecursionError, MemoryError) as exc:
            predicates = [Predicate("analysis_complete", ("the action", f"too deeply nested ({type(exc).__name__})",
                                                          "limit"), False, "gate")]
        # Every path the action names, stat'ed in one backend call (one round-trip for a remote backend), with the
        # commands it runs.
        self.fs.prefetch((str(a) for p in predicates for a in p.args[:1] if isinstance(a, str) and a.startswith("/")),
                         [str(p.args[0]) for p in predicates if p.name == "executable_available" and p.args
                          and "/" not in str(p.args[0])])
        prober = Prober(index, fs=self.fs, workspace=self.workspace, deadline=deadline, **self._index_status())
        # Probes that read or parse file content go last: a pathological file can then cost its own
        # predicate, not the stat-and-listing ones that follow it in the action.
        order = sorted(range(len(predicates)), key=lambda i: predicates[i].name in _CONTENT_PROBES)
        probed = {i: prober.probe(predicates[i]) for i in order}
        results = [probed[i] for i in range(len(predicates))]
        for result in results:
            if result.outcome is Outcome.FALSE:
                result.hint = _hint(result, self.fs)
        report = GateReport(results=results, budget_exceeded=any(r.evidence.get("budget_exceeded") for r in results))
        if any(r.evidence.get("interpreter_unavailable") for r in results):
            report.notices.append(("target_interpreter_unavailable", str(self._index_error)))
        return report, scope

    def _index_status(self) -> dict[str, Any]:
        if self._index is not None:
            return {}
        if not self._index_done.is_set():
            return {"index_error": "the target interpreter is still being asked for its paths",
                    "index_evidence": {"budget_exceeded": True}}
        return {"index_error": self._index_error,
                "index_evidence": {"interpreter_unavailable": True, "refused": self._index_refused}}

    def check_and_advance(self, action: Action | Mapping[str, Any], state: GateState) -> GateReport:
        """Check, then carry the action's effects (cwd, created files, installs) into `state`."""
        deadline = Deadline(self.budget_s, cold_s=self.cold_s)
        report, scope = self._check(action, state, deadline)
        if scope is not None and not report.blocking:
            state.cwd = scope.cwd if not scope.cwd_unknown else state.cwd
            state.created.update(scope.created)
            state.installed |= scope.installed
            state.install_unknown = state.install_unknown or scope.install_unknown
            _advance_editor(action, state, scope.cwd)
        report.latency_ms = (time.perf_counter() - deadline.start) * 1000.0
        report.cold_ms = deadline.cold_spent * 1000.0
        return report


_CONTENT_PROBES = frozenset({"symbol_defined", "attribute_defined", "pytest_target_exists", "editor_text_present",
                             "editor_line_in_range"})


def resolve_python(python: str | None, cwd: str, which: Callable[[str], str | None] | None = None) -> str | None:
    """The target interpreter as an absolute path: relative to the agent's cwd, a bare name looked up on PATH
    (with `which`, on the backend's machine)."""
    if not python:
        return None
    if os.path.isabs(python):
        return os.path.normpath(python)
    if os.sep in python or (os.altsep and os.altsep in python):
        return os.path.normpath(os.path.join(cwd, python))
    return (which or shutil.which)(python) or python


def _command_dirs(path_env: str) -> list[str]:
    # Relative PATH entries would resolve against this process's cwd, not the agent's: left out.
    return list(dict.fromkeys(os.path.normpath(d) for d in path_env.split(os.pathsep) if os.path.isabs(d)))


def _hint(result: ProbeResult, fs: FsView) -> str:
    """The repair hint of a violation, computed inside the decision ("" when none or no time is left)."""
    try:
        return repair_hint(result, fs) or ""
    except BudgetExceeded:
        return ""


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

    Every call is first held to the schema its tool declares (``tool_args_valid``: the schemas the
    adapters read from the agent's own tools, `Guard.start_episode(tool_schemas=...)`, the Guard's
    ``tool_schemas``); with a `workspace` the gate then probes the action's preconditions there.
    ``GateLayer()`` with no workspace checks declared schemas only (what a zero-configuration Guard runs).

    Per-episode state (cwd after ``cd``, files created, packages installed, the editor's open
    file) lives in the episode context. The harness can set the open file with
    `set_editor_state`; otherwise it is read from SWE-agent's ``[File: ...]`` observation header.
    """

    name = "gate"

    def __init__(self, workspace: str | os.PathLike[str] | None = None, *, python: str | None = None,
                 cwd: str | os.PathLike[str] | None = None, budget_s: float = 0.25,
                 tools: Mapping[str, Mapping[str, Any] | Callable[..., Any]] | None = None,
                 persistent_shell: bool = True, roots: Iterable[str | os.PathLike[str]] = (),
                 backend: ProbeBackend | None = None, path_env: str | None = None) -> None:
        self.gate: Gate | None = None
        if workspace is not None:
            self.gate = Gate(workspace, python=python, cwd=cwd, budget_s=budget_s, tools=tools, roots=roots,
                             backend=backend, path_env=path_env).prepare()
        self.persistent_shell = persistent_shell

    def use_backend(self, backend: ProbeBackend, *, python: str | None = None, path_env: str | None = None) -> None:
        """Probe through `backend` from now on (e.g. the agent's sandbox); see `Gate.using`."""
        if self.gate is None:
            raise ValueError("this gate has no workspace to probe (GateLayer(workspace=...))")
        self.gate = self.gate.using(backend, python=python, path_env=path_env).prepare()

    def new_state(self, ctx: EpisodeContext) -> GateState:
        return GateState()

    def set_editor_state(self, ctx: EpisodeContext, *, open_file: str | None) -> None:
        ctx.state(self).editor.open_file = open_file

    def runs_inline(self, hook: str, ctx: EpisodeContext, *args: Any) -> bool:
        """On the async path, a call checked against its schema alone (no workspace, or a tool the gate probes
        nothing for, once the workspace's index is ready) and the observation-header read after a result run on
        the event loop: short CPU work, cheaper than the worker-thread hop. Every other action is probed in a
        worker thread."""
        if hook != "before_action" or self.gate is None:
            return True
        action = args[0] if args else None
        return (isinstance(action, Action) and action.kind is ActionKind.TOOL
                and checks_arguments_only(action.tool or "") and self.gate.index_ready())

    def before_action(self, ctx: EpisodeContext, action: Action) -> Iterable[Finding] | None:
        declared = declared_args_findings(ctx, action, layer=self.name) or []
        if self.gate is None or any(f.blocking for f in declared):
            return declared  # a call that breaks its tool's declared schema is not probed further
        state: GateState = ctx.state(self)
        with ctx.lock:
            report = self.gate.check_and_advance(action, state)
            if not self.persistent_shell:
                state.cwd = None
        return declared + report.findings(layer=self.name, step=ctx.step_index)

    def after_result(self, ctx: EpisodeContext, action: Action, result: Result) -> Iterable[Finding] | None:
        if self.gate is None:
            return None
        matches = _OPEN_FILE_HEADER.findall(result.output[-20_000:]) if result.output else []
        if matches:
            ctx.state(self).editor.open_file = matches[-1]
        return None


def declared_args_findings(ctx: EpisodeContext, action: Action, *, layer: str) -> list[Finding] | None:
    """The ``tool_args_valid`` finding for a structured call its tool's declared schema rejects (blocking),
    a note when the declared schema itself is unusable, None when the call fits or the tool declared none."""
    if action.kind is not ActionKind.TOOL or not action.tool:
        return None
    schema = ctx.tool_schema(action.tool)
    if schema is None:
        return None
    try:
        problems = args_problems(action.args, schema)
    except SchemaError as exc:
        return [Finding(layer=layer, check="tool_schema_unusable", predicate="tool_args_valid", args=[action.tool],
                        severity=Severity.INFO, step=ctx.step_index,
                        message=f"the schema tool {action.tool!r} declares cannot be used: {exc}")]
    if not problems:
        return None
    return [Finding(
        layer=layer, check="malformed_call", predicate="tool_args_valid", args=[action.tool, problems[0]],
        message=f"tool_args_valid({action.tool}) is false: the call does not fit the tool's declared schema: "
                + "; ".join(problems),
        evidence={"family": "tool", "problems": problems},
        hint=f"call it as {schema_signature(action.tool, schema)}",
        blocking=True, severity=Severity.WARNING, step=ctx.step_index)]
