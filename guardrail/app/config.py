"""`guardrail.toml`: one deployment file for the whole guard, read with the standard library, with ``GUARDRAIL_*`` overrides.

    guard = Guard.from_config("guardrail.toml")            # what the file says
    GUARDRAIL_MODE=intervene GUARDRAIL_MONITOR_MODEL=/models/next.npz python agent.py   # the environment wins

Every key is optional; a file with none is the zero-configuration guard (the gate on the tools'
declared schemas, report mode). Relative paths are read from the file's own folder. A key the
file may hold is ``GUARDRAIL_<KEY>`` at the top level and ``GUARDRAIL_<SECTION>_<KEY>`` in a
section (``GUARDRAIL_RECORD_STORE``, ``GUARDRAIL_GATE_BUDGET_MS``); values are TOML scalars for
numbers and booleans, plain text for strings. `check_config` (``guardrail config check FILE``)
lists every problem, one line each, without building anything; `guard_from_config` refuses a
file with problems (`ConfigError`). ``guardrail config schema`` prints the JSON Schema editors read
(shipped as ``guardrail/app/guardrail.schema.json``).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from guardrail.core.fileio import UnsafeFile, json_nesting_exceeds, read_regular

__all__ = ["ENV_PREFIX", "SCHEMA_FILE", "ConfigError", "DeployConfig", "check_config", "config_schema",
           "env_variables", "guard_from_config", "guard_options", "load_config"]

ENV_PREFIX = "GUARDRAIL_"
SCHEMA_FILE = Path(__file__).with_name("guardrail.schema.json")
MAX_CONFIG_BYTES = 1 << 20  # a deployment file is a few hundred bytes
MAX_TOOLS_BYTES = 16 << 20  # a file of tool schemas
CONFIG_VERSION = 1


class ConfigError(ValueError):
    """A deployment file that cannot be used; `problems` holds one message per problem."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GateSection(_Section):
    """Layer 1, the StateMirror gate: always on unless disabled (it holds every call to its tool's schema)."""

    enabled: bool = Field(default=True, description="false switches the gate off")
    workspace: str | None = Field(default=None, description="the repository the agent works in (probed read-only)")
    python: str | None = Field(default=None, description="the agent's interpreter, for import checks (default: this one)")
    budget_ms: float | None = Field(default=None, gt=0, le=60_000, description="hard deadline of one gate decision, in ms "
                                                                      "(default 250)")


class ConsistencySection(_Section):
    """Layer 2, self-consistency over N sampled plans (its sandbox tools are given in code: from_config(sandbox=...))."""

    enabled: bool = Field(default=True, description="false switches self-consistency off")
    n: int | None = Field(default=None, ge=2, le=64, description="plans sampled per step (needs sandbox= in code)")


class MonitorSection(_Section):
    """Layer 3, the step monitor."""

    enabled: bool = Field(default=True, description="false switches the monitor off")
    model: str | None = Field(default=None, description="the fitted model file (guardrail fit)")
    shadow_model: str | None = Field(default=None, description="a candidate model scored beside the live one, never acting")


class VerifierSection(_Section):
    """Layer 4, the deterministic verifiers."""

    enabled: bool = Field(default=True, description="false switches the verifiers off")
    spec: str | None = Field(default=None, description="a spec file (guardrail fit-spec) or a shipped spec's name")
    shadow_spec: str | None = Field(default=None, description="a candidate spec run beside the live one, never acting")


class RepairSection(_Section):
    """Layer 5, repair (the checkpointer is given in code: from_config(checkpointer=...))."""

    enabled: bool = Field(default=False, description="true carries a Repairer (inline repair in the LangChain middleware)")
    max_attempts: int | None = Field(default=None, ge=1, le=10, description="repair attempts per run")


class ToolsSection(_Section):
    """The tools' argument schemas, when the agent's framework tools are not handed to the guard in code."""

    schemas: str | None = Field(default=None, description="a JSON file: {name: JSON schema} or a list of OpenAI-style tools")


class RecordSection(_Section):
    """The run store every episode is recorded into."""

    store: str | None = Field(default=None, description="a directory, sqlite:///PATH or postgresql://...")
    redact: bool = Field(default=True, description="mask secrets in every stored string")
    max_queue: int | None = Field(default=None, ge=1, le=10_000_000, description="recorder queue bound (a full queue drops)")
    max_steps: int | None = Field(default=None, ge=1, le=1_000_000, description="steps one episode may store")
    finish_timeout_s: float | None = Field(default=None, ge=0, le=600, description="how long an episode's end waits for "
                                                                          "the store (default 0: it lands within 50 ms)")


class CaptureSection(_Section):
    """What goes on spans."""

    content: bool = Field(default=False, description="put tool arguments, results and finding messages on spans "
                                             "(redacted, capped)")


class AlarmSection(_Section):
    """What a monitor alarm does."""

    on_alarm: Literal["warn", "stop", "repair"] | None = Field(
        default=None, description="the alarm policy, passed to Guard.default(on_alarm=...)")


class TelemetrySection(_Section):
    """OpenTelemetry export over OTLP/HTTP (the standard OTEL_EXPORTER_OTLP_* variables also work)."""

    otlp_endpoint: str | None = Field(default=None, description="collector base URL, e.g. http://collector:4318")
    service_name: str = Field(default="guardrail", min_length=1, max_length=200)
    traces: bool = Field(default=True, description="export spans")
    metrics: bool = Field(default=True, description="export metrics")
    metrics_interval_ms: int = Field(default=10_000, ge=100, le=3_600_000)


class DeployConfig(_Section):
    """One guard deployment (``guardrail.toml``)."""

    model_config = ConfigDict(extra="forbid", title="guardrail.toml")

    version: Literal[1] = Field(default=1, description="the file format version")
    mode: Literal["report", "intervene"] = Field(default="report", description="report: record only; intervene: block "
                                                                        "and repair")
    fail: Literal["open", "closed"] = Field(default="open", description="open: a failing layer lets the agent go on; "
                                                                 "closed: it blocks")
    watch: bool = Field(default=True, description="swap in a changed model or spec file at episode start")
    gate: GateSection = GateSection()
    consistency: ConsistencySection = ConsistencySection()
    monitor: MonitorSection = MonitorSection()
    verifier: VerifierSection = VerifierSection()
    repair: RepairSection = RepairSection()
    tools: ToolsSection = ToolsSection()
    record: RecordSection = RecordSection()
    capture: CaptureSection = CaptureSection()
    alarm: AlarmSection = AlarmSection()
    telemetry: TelemetrySection = TelemetrySection()

    # Filled by load_config: where relative paths are read from, and which keys the environment set.
    _base: Path = Path(".")
    _from_env: tuple[str, ...] = ()


def config_schema() -> dict[str, Any]:
    """The JSON Schema of ``guardrail.toml`` (what ``guardrail config schema`` prints and editors read)."""
    schema = DeployConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://guardrail.invalid/guardrail.schema.json"
    return schema


# --------------------------------------------------------------------------- the environment
def _sections() -> dict[str, type[_Section]]:
    out = {}
    for name, info in DeployConfig.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, _Section):
            out[name] = info.annotation
    return out


def env_variables() -> dict[str, tuple[str, ...]]:
    """Every override variable and the key path it sets (``GUARDRAIL_RECORD_STORE`` -> ("record", "store"))."""
    out: dict[str, tuple[str, ...]] = {}
    sections = _sections()
    for name in DeployConfig.model_fields:
        if name in sections:
            for key in sections[name].model_fields:
                out[f"{ENV_PREFIX}{name}_{key}".upper()] = (name, key)
        elif name != "version":
            out[f"{ENV_PREFIX}{name}".upper()] = (name,)
    return out


def _scalar_kinds(annotation: Any) -> set[type]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return {kind for arg in args for kind in _scalar_kinds(arg)}
    if typing.get_origin(annotation) is Literal:
        return {type(a) for a in args}
    return {annotation} if isinstance(annotation, type) else set()


def _env_value(path: tuple[str, ...], raw: str) -> Any:
    model: type[BaseModel] = DeployConfig if len(path) == 1 else _sections()[path[0]]
    kinds = _scalar_kinds(model.model_fields[path[-1]].annotation)
    if kinds & {bool, int, float} and not kinds & {str}:
        try:
            return tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            return raw  # validation says what was expected
    return raw


def _apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> list[str]:
    applied = []
    for variable, path in env_variables().items():
        if variable not in environ:
            continue
        value = _env_value(path, environ[variable])
        target = data
        for key in path[:-1]:
            section = target.get(key)
            if not isinstance(section, dict):
                section = target[key] = {}
            target = section
        target[path[-1]] = value
        applied.append(variable)
    return applied


# --------------------------------------------------------------------------- reading
def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _problem(error: Mapping[str, Any]) -> str:
    loc = tuple(error.get("loc") or ())
    if error.get("type") == "extra_forbidden":
        parent = loc[:-1]
        model: type[BaseModel] = DeployConfig
        if parent and parent[0] in _sections():
            model = _sections()[str(parent[0])]
        known = list(model.model_fields)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        where = f"[{_where(parent)}]" if parent else "the top level"
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
        return f"{_where(loc)}: unknown key in {where}{hint}"
    message = str(error.get("msg", "invalid"))
    given = error.get("input")
    shown = "" if isinstance(given, dict) else f", got {json.dumps(given, default=str)[:80]}"
    return f"{_where(loc)}: {message}{shown}"


def _read(path: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, list[str]]:
    if not os.path.lexists(path):
        return None, ["no such file"]
    try:
        data = read_regular(path, MAX_CONFIG_BYTES, "deployment file")
    except (OSError, UnsafeFile, ValueError) as exc:
        return None, [f"cannot read it: {exc}"]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [f"not UTF-8 text (byte {exc.start})"]
    try:
        return tomllib.loads(text), []
    except tomllib.TOMLDecodeError as exc:
        return None, [f"not valid TOML: {exc}"]
    except RecursionError:
        return None, ["not valid TOML: nested too deep"]


def load_config(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> DeployConfig:
    """The deployment file at `path` with the environment's overrides; `ConfigError` listing every problem."""
    config, problems = _load(path, environ)
    if config is None or problems:
        raise ConfigError(os.fspath(path), problems)
    return config


def _load(path: str | os.PathLike[str], environ: Mapping[str, str] | None) -> tuple[DeployConfig | None, list[str]]:
    raw, problems = _read(path)
    if raw is None:
        return None, problems
    applied = _apply_env(raw, os.environ if environ is None else environ)
    try:
        config = DeployConfig.model_validate(raw)
    except ValidationError as exc:
        by_path = {path: variable for variable, path in env_variables().items() if variable in applied}
        return None, [_problem(e) + (f" (set by {by_path[loc]})" if (loc := tuple(str(p) for p in e["loc"])) in by_path
                                     else "") for e in exc.errors()]
    config._base = Path(os.fspath(path)).resolve().parent
    config._from_env = tuple(applied)
    return config, []


def check_config(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None,
                 deep: bool = True) -> list[str]:
    """Every problem with a deployment file, one message each (empty: it is usable).

    Beyond the keys and their types: every named file exists and, with `deep`, loads (the model,
    the spec, the tool schemas), the store URL is one a run store opens, the OTLP endpoint is an
    http(s) URL, and a key this build does not support is named.
    """
    config, problems = _load(path, environ)
    if config is None:
        return problems
    return problems + _semantic_problems(config, deep=deep)


def _path(config: DeployConfig, value: str | None) -> str | None:
    if value is None:
        return None
    expanded = os.path.expanduser(value)
    return expanded if os.path.isabs(expanded) else str(config._base / expanded)


def _spec_source(config: DeployConfig, value: str | None) -> str | None:
    """A spec file relative to the deployment file, or a shipped spec's name as given."""
    if value is None:
        return None
    candidate = _path(config, value)
    if candidate is not None and (os.path.exists(candidate) or Path(value).suffix):
        return candidate
    return value


def _store(config: DeployConfig) -> str | None:
    store = config.record.store
    if store is None:
        return None
    if store.startswith("sqlite:///") and not store.startswith("sqlite:////") and store != "sqlite:///:memory:":
        return "sqlite:///" + str(config._base / store[len("sqlite:///"):])
    if "://" in store:
        return store
    return _path(config, store)


def _supported(option: str) -> bool:
    """True when Guard.default (or the pipeline Guard under it) takes keyword `option` in this build."""
    from guardrail.app.assemble import default_guard
    from guardrail.core.guard import Guard as PipelineGuard

    return any(option in inspect.signature(fn).parameters for fn in (default_guard, PipelineGuard.__init__))


def _semantic_problems(config: DeployConfig, *, deep: bool) -> list[str]:
    problems: list[str] = []
    files = [("gate.workspace", _path(config, config.gate.workspace), "dir"),
             ("monitor.model", _path(config, config.monitor.model), "file"),
             ("monitor.shadow_model", _path(config, config.monitor.shadow_model), "file"),
             ("tools.schemas", _path(config, config.tools.schemas), "file")]
    for key, path, kind in files:
        if path is None:
            continue
        if kind == "dir" and not os.path.isdir(path):
            problems.append(f"{key}: no such directory {path}")
        elif kind == "file" and not os.path.isfile(path):
            problems.append(f"{key}: no such file {path}")
    if deep:
        for key in ("model", "shadow_model"):
            path = _path(config, getattr(config.monitor, key))
            if path is not None and os.path.isfile(path):
                problem = _model_problem(path)
                if problem:
                    problems.append(f"monitor.{key}: {problem}")
        for key in ("spec", "shadow_spec"):
            source = _spec_source(config, getattr(config.verifier, key))
            if source is not None:
                problem = _spec_problem(source)
                if problem:
                    problems.append(f"verifier.{key}: {problem}")
        tools = _path(config, config.tools.schemas)
        if tools is not None and os.path.isfile(tools):
            try:
                _tool_schemas(tools)
            except ConfigError as exc:
                problems.extend(f"tools.schemas: {p}" for p in exc.problems)
    store = config.record.store
    if store is not None and "://" in store and not store.startswith(("sqlite:///", "postgresql://", "postgres://")):
        problems.append(f"record.store: {store[:80]!r} is not a run store URL (a directory, sqlite:///PATH or "
                        "postgresql://...)")
    endpoint = config.telemetry.otlp_endpoint
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        problems.append("telemetry.otlp_endpoint: must be an http(s) URL like http://collector:4318")
    if config.alarm.on_alarm is not None and not _supported("on_alarm"):
        problems.append("alarm.on_alarm: this guardrail build has no alarm policy option (Guard.default takes no "
                        "on_alarm=); remove the key or upgrade guardrail")
    return problems


def _load_problem(target: str, source: str) -> str | None:
    """What loading `source` with `target` ("module:function") says is wrong with it, in one line, or None."""
    module, _, function = target.partition(":")
    try:
        load = getattr(importlib.import_module(module), function)
    except ImportError as exc:
        return f"{module} cannot load in this build: {exc}"
    try:
        load(source)
    except Exception as exc:  # noqa: BLE001 - ModelFileError, SpecError, whatever a damaged file raises: one message
        return " ".join(str(exc).split())[:400]
    return None


def _model_problem(path: str) -> str | None:
    return _load_problem("monitors.model_file:load_monitor", path)


def _spec_problem(source: str) -> str | None:
    return _load_problem("verifiers.spec:load_spec", source)


def _tool_schemas(path: str) -> dict[str, dict[str, Any]]:
    try:
        data = read_regular(path, MAX_TOOLS_BYTES, "tool schema file")
    except (OSError, UnsafeFile, ValueError) as exc:
        raise ConfigError(path, [f"cannot read it: {exc}"]) from exc
    if json_nesting_exceeds(data, 64):
        raise ConfigError(path, ["JSON nested deeper than 64 levels"])
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(path, [f"not valid JSON: {exc}"]) from exc
    if not isinstance(raw, dict | list):
        raise ConfigError(path, ["expected an object {name: schema} or a list of tools"])
    from adapters.tool_schemas import ToolSchemaError, schema_of

    items = raw.items() if isinstance(raw, dict) else ((None, tool) for tool in raw)
    out: dict[str, dict[str, Any]] = {}
    problems = []
    for index, (name, tool) in enumerate(items):
        where = repr(name) if name is not None else f"item {index}"
        if not isinstance(tool, dict):
            problems.append(f"{where}: a tool schema is a JSON object")
            continue
        try:
            found, schema = schema_of(tool, None if name is None else str(name))
        except ToolSchemaError as exc:
            problems.append(f"{where}: {exc}")
            continue
        out[found] = schema
    if problems:
        raise ConfigError(path, problems)
    return out


# --------------------------------------------------------------------------- building
def guard_options(config: DeployConfig) -> dict[str, Any]:
    """The `Guard.default` keyword arguments a deployment file stands for."""
    disable = [name for name, section in (("gate", config.gate), ("consistency", config.consistency),
                                          ("monitor", config.monitor), ("verifier", config.verifier))
               if not section.enabled]
    options: dict[str, Any] = {"mode": config.mode, "fail_closed": config.fail == "closed",
                               "capture_content": config.capture.content, "watch": config.watch,
                               "disable": disable}
    if config.gate.workspace is not None:
        options["workspace"] = _path(config, config.gate.workspace)
    if config.gate.python is not None:
        options["python"] = config.gate.python
    if config.gate.budget_ms is not None:
        options["gate_options"] = {"budget_s": config.gate.budget_ms / 1000.0}
    if config.consistency.n is not None and config.consistency.enabled:
        options["n"] = config.consistency.n
    for key, value in (("model", _path(config, config.monitor.model)),
                       ("shadow_model", _path(config, config.monitor.shadow_model)),
                       ("spec", _spec_source(config, config.verifier.spec)),
                       ("shadow_spec", _spec_source(config, config.verifier.shadow_spec))):
        if value is not None:
            options[key] = value
    if config.repair.enabled:
        options["repair"] = True
        if config.repair.max_attempts is not None:
            options["repair_options"] = {"max_attempts": config.repair.max_attempts}
    tools = _path(config, config.tools.schemas)
    if tools is not None:
        options["tools"] = _tool_schemas(tools)
    store = _store(config)
    if store is not None:
        options["record"] = store
        record_options: dict[str, Any] = {"redact": config.record.redact}
        for key in ("max_queue", "max_steps", "finish_timeout_s"):
            value = getattr(config.record, key)
            if value is not None:
                record_options[key] = value
        options["record_options"] = record_options
    if config.alarm.on_alarm is not None:
        options["on_alarm"] = config.alarm.on_alarm
    return options


def _telemetry(config: DeployConfig, options: dict[str, Any]) -> None:
    telemetry = config.telemetry
    if telemetry.otlp_endpoint is None:
        return
    from guardrail.core.otlp import configure_metrics, configure_tracing

    if telemetry.traces and "tracer" not in options:
        configure_tracing(telemetry.service_name, endpoint=telemetry.otlp_endpoint)
    if telemetry.metrics and "meter" not in options:
        configure_metrics(telemetry.service_name, endpoint=telemetry.otlp_endpoint,
                          export_interval_ms=telemetry.metrics_interval_ms)


def guard_from_config(path: str | os.PathLike[str] = "guardrail.toml", *, cls: Any = None,
                      environ: Mapping[str, str] | None = None, **overrides: Any) -> Any:
    """The Guard `path` describes (see `Guard.from_config`); `overrides` are Guard.default arguments that win."""
    from guardrail.app.assemble import Guard

    config = load_config(path, environ=environ)
    problems = _semantic_problems(config, deep=False)
    if config.consistency.n is not None and config.consistency.enabled and "sandbox" not in overrides:
        problems.append("consistency.n: self-consistency dry-runs every sampled call: pass the sandbox tools in code, "
                        "Guard.from_config(path, sandbox=tools)")
    if problems:
        raise ConfigError(os.fspath(path), problems)
    try:
        options = guard_options(config)
    except ConfigError as exc:
        raise ConfigError(os.fspath(path), [f"tools.schemas: {p}" for p in exc.problems]) from exc
    options.update(overrides)
    _telemetry(config, options)
    guard = (cls or Guard).default(**options)
    guard.config = config
    return guard
