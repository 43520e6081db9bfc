"""`guardrail init` (a commented guardrail.toml for the agent in this folder) and `guardrail config check|schema|env`."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from guardrail.core.cliutil import Command, emit_json

__all__ = ["CONFIG", "INIT", "detect_framework", "render_template"]

_SCAN_FILES = 400  # Python files read to tell which framework the agent uses
_SCAN_BYTES = 256 * 1024
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".tox", "build", "dist", "site-packages"}
_PATTERNS = {
    "langgraph": re.compile(rb"^\s*(from|import)\s+(langgraph|langchain)\b", re.M),
    "autogen": re.compile(rb"^\s*(from|import)\s+autogen_(agentchat|core|ext)\b", re.M),
}

_USAGE = {
    "langgraph": '''# In the agent (LangChain v1 create_agent / LangGraph):
#
#     from langchain.agents import create_agent
#     from guardrail import Guard
#
#     guard = Guard.from_config("guardrail.toml", tools=tools)   # your tools: their schemas join the gate's
#     agent = guard.bind(create_agent(model, tools, middleware=guard.langchain_middleware()))
''',
    "autogen": '''# In the agent (AutoGen AgentChat):
#
#     from autogen_agentchat.agents import AssistantAgent
#     from adapters.autogen import AutoGenGuard
#     from guardrail import Guard
#
#     guarded = AutoGenGuard(Guard.from_config("guardrail.toml"))
#     agent = AssistantAgent("agent", model_client=guarded.model_client(client),
#                            workbench=guarded.workbench(tools))
#     await guarded.afinish(await agent.run(task=task))
''',
    None: '''# In the agent:
#
#     from guardrail import Guard
#     guard = Guard.from_config("guardrail.toml")   # then the adapter of your framework (docs/integrations.md)
''',
}


def detect_framework(root: str | os.PathLike[str] = ".") -> str | None:
    """"langgraph" or "autogen" when the Python files under `root` import one of them (the first few hundred files)."""
    counts = dict.fromkeys(_PATTERNS, 0)
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            seen += 1
            if seen > _SCAN_FILES:
                break
            path = os.path.join(folder, name)
            try:
                if os.path.islink(path):
                    continue
                with open(path, "rb") as handle:
                    head = handle.read(_SCAN_BYTES)
            except OSError:
                continue
            for framework, pattern in _PATTERNS.items():
                if pattern.search(head):
                    counts[framework] += 1
        if seen > _SCAN_FILES:
            break
    best = max(counts.items(), key=lambda item: item[1])
    return best[0] if best[1] else None


def _found(root: Path, names: tuple[str, ...]) -> str | None:
    return next((name for name in names if (root / name).is_file()), None)


def render_template(framework: str | None, root: str | os.PathLike[str] = ".") -> str:
    """The commented guardrail.toml `guardrail init` writes (the files already in `root` filled in)."""
    base = Path(root)
    model = _found(base, ("monitor.npz", "model.npz"))
    spec = _found(base, ("spec.json", "spec.toml"))
    store = "runs/" if (base / "runs" / "runs.jsonl").is_file() else "sqlite:///runs.db"
    tools = _found(base, ("tools.json",))

    def line(key: str, value: str | None, example: str) -> str:
        return f'{key} = "{value}"' if value else f'# {key} = "{example}"'

    return f'''# guardrail.toml: how guardrail guards this agent (guardrail config check guardrail.toml).
# Every key is optional. Relative paths are read from this file's folder. Any key can be
# overridden from the environment: GUARDRAIL_MODE=intervene, GUARDRAIL_MONITOR_MODEL=..., GUARDRAIL_RECORD_STORE=...
# (guardrail config env lists them). Editors: `guardrail config schema > guardrail.schema.json`, then put
# `#:schema ./guardrail.schema.json` on the first line (Taplo / Even Better TOML).
{_USAGE.get(framework, _USAGE[None])}
version = 1
mode = "report"        # report: decisions are recorded, never enacted; intervene: block bad calls, repair bad runs
fail = "open"          # open: a layer that fails lets the agent go on (a finding says so); closed: it blocks
watch = true           # swap in a changed model or spec file at the next episode start (no restart)

[gate]                 # 1: every tool call held to its declared schema; a workspace adds read-only probes
# workspace = "."
# budget_ms = 250      # hard deadline of one gate decision

[consistency]          # 2: self-consistency over N sampled plans (pass sandbox= to Guard.from_config)
# n = 5

[monitor]              # 3: the step monitor, fitted on healthy runs (guardrail fit runs/ -o monitor.npz)
{line("model", model, "monitor.npz")}
# shadow_model = "monitor-next.npz"   # scored beside the live model, never acting (guardrail runs --compare)

[verifier]             # 4: deterministic checks (guardrail fit-spec runs/ -o spec.json, or a shipped spec's name)
{line("spec", spec, "spec.json")}
# shadow_spec = "spec-next.json"

[repair]               # 5: roll back and re-run a flagged run (pass checkpointer= to Guard.from_config)
enabled = false

[tools]                # the tools' argument schemas, when the agent's tools are not passed in code
{line("schemas", tools, "tools.json")}

[record]               # every episode into a run store: label them, fit on the healthy ones, watch drift
store = "{store}"
redact = true          # secrets masked in every stored string

[capture]
content = false        # tool arguments and results on spans (redacted); the run store keeps them either way

[alarm]                # what a monitor alarm does
# on_alarm = "stop"

[telemetry]            # OTLP/HTTP export of spans and metrics (or the standard OTEL_EXPORTER_OTLP_* variables)
# otlp_endpoint = "http://localhost:4318"
service_name = "guardrail"
'''


# --------------------------------------------------------------------------- init
def _init_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--framework", choices=("langgraph", "autogen"), default=None,
                        help="the agent's framework (default: read from the imports of the Python files here)")
    parser.add_argument("-o", "--out", default="guardrail.toml", help="where to write (default: ./guardrail.toml)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")


def _run_init(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and not args.force:
        sys.stderr.write(f"guardrail init: {out} exists; --force overwrites it\n")
        return 2
    root = out.parent if str(out.parent) else Path(".")
    framework = args.framework or detect_framework(root)
    text = render_template(framework, root)
    from guardrail.core.fileio import atomic_write_text

    atomic_write_text(out, text)
    said = framework or "no framework recognised (--framework langgraph|autogen)"
    sys.stdout.write(f"wrote {out} ({said}); check it with: guardrail config check {out}\n")
    return 0


INIT = Command(help="write a commented guardrail.toml for the agent in this folder", add_arguments=_init_arguments,
               run=_run_init)


# --------------------------------------------------------------------------- config
def _config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("check", "schema", "env"),
                        help="check FILE: every problem, one line each; schema: the JSON Schema; env: the "
                             "GUARDRAIL_* override variables")
    parser.add_argument("file", nargs="?", default="guardrail.toml", help="the deployment file (check)")
    parser.add_argument("--shallow", action="store_true", help="check keys and files only, do not load the model "
                                                               "and spec")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _run_config(args: argparse.Namespace) -> int:
    from guardrail.app.config import check_config, config_schema, env_variables

    if args.action == "schema":
        sys.stdout.write(json.dumps(config_schema(), indent=1) + "\n")
        return 0
    if args.action == "env":
        for variable, path in env_variables().items():
            sys.stdout.write(f"{variable}\t{'.'.join(path)}\n")
        return 0
    problems = check_config(args.file, deep=not args.shallow)
    if args.json:
        emit_json({"file": args.file, "ok": not problems, "problems": problems})
    elif problems:
        for problem in problems:
            sys.stdout.write(f"{args.file}: {problem}\n")
        sys.stdout.write(f"{len(problems)} problem(s)\n")
    else:
        sys.stdout.write(f"{args.file}: ok\n")
    return 1 if problems else 0


CONFIG = Command(help="check a guardrail.toml (one message per problem), print its JSON Schema or its "
                      "environment variables", add_arguments=_config_arguments, run=_run_config)
