"""`guardrail demo`: a guarded LangGraph agent on real files, with a blocked call and the spans it produced."""

from __future__ import annotations

import argparse
import difflib
import json
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from guardrail.cliutil import Command, emit_json
from guardrail.events import Action, Finding, Severity
from guardrail.fileio import atomic_write_text
from guardrail.layer import EpisodeContext, Layer

__all__ = ["DEMO", "run_demo", "PathExistsLayer", "span_record"]

# What the workspace holds: a small project an agent is asked to summarize.
_WORKSPACE_FILES = {
    "notes/todos.md": "- ship the gate\n- fit the monitor\n- write the report\n",
    "notes/meeting.md": "Decided: intervene mode by default for the demo.\n",
    "README.md": "# demo project\n",
}
_READ_TOOLS = {"read_file": "path"}


class PathExistsLayer(Layer):
    """A minimal gate for the demo's file tools: a file to read must exist (used when the full gate is absent).

    It checks the one necessary precondition of ``read_file`` (the file exists in the workspace)
    and suggests the closest existing path, like the full gate does for every predicate.
    """

    name = "gate"

    def __init__(self, workspace: str | Path) -> None:
        self.workspace = Path(workspace)

    def before_action(self, ctx: EpisodeContext, action: Action) -> Iterable[Finding] | None:
        arg = _READ_TOOLS.get(action.tool or "")
        target = action.args.get(arg) if arg else None
        if not isinstance(target, str):
            return None
        path = (self.workspace / target).resolve()
        if path.is_file():
            return None
        existing = sorted(str(p.relative_to(self.workspace)) for p in self.workspace.rglob("*") if p.is_file())
        close = difflib.get_close_matches(target, existing, n=3, cutoff=0.5)
        return [Finding(
            layer=self.name, check="file_exists", predicate="file_exists", args=[target],
            message=f"{action.tool} needs {target!r}, which does not exist in the workspace",
            hint=f"did you mean {', '.join(repr(c) for c in close)}?" if close else "list the directory first",
            evidence={"workspace": str(self.workspace), "closest": close},
            blocking=True, severity=Severity.WARNING,
        )]


def _make_tools(workspace: Path) -> list[Any]:
    from langchain_core.tools import tool

    def inside(path: str) -> Path:
        resolved = (workspace / path).resolve()
        if workspace.resolve() not in (resolved, *resolved.parents):
            raise ValueError(f"{path!r} is outside the workspace")
        return resolved

    @tool
    def read_file(path: str) -> str:
        """Read a text file of the workspace."""
        return inside(path).read_text(encoding="utf-8")

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a text file in the workspace."""
        target = inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} chars to {path}"

    @tool
    def list_files(directory: str = ".") -> str:
        """List the files under a workspace directory."""
        root = inside(directory)
        return "\n".join(sorted(str(p.relative_to(workspace)) for p in root.rglob("*") if p.is_file()))

    return [read_file, write_file, list_files]


def _script() -> Iterator[Any]:
    """The scripted model's turns: a wrong path (blocked with a hint), the right one, a write, an answer."""
    from langchain_core.messages import AIMessage

    yield AIMessage(content="Reading the todo list.",
                    tool_calls=[{"name": "read_file", "args": {"path": "notes/todo.md"}, "id": "call_1"}])
    yield AIMessage(content="The guard says the file is notes/todos.md.",
                    tool_calls=[{"name": "read_file", "args": {"path": "notes/todos.md"}, "id": "call_2"}])
    yield AIMessage(content="Writing the summary.",
                    tool_calls=[{"name": "write_file", "args": {"path": "summary.md",
                                                               "content": "3 open items: gate, monitor, report\n"},
                                 "id": "call_3"}])
    yield AIMessage(content="There are 3 open items: ship the gate, fit the monitor, write the report.")


def _scripted_model() -> Any:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class ScriptedChatModel(GenericFakeChatModel):
        """A fake chat model whose `bind_tools` returns itself (the turns are scripted)."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    return ScriptedChatModel(messages=_script())


def span_record(span: Any) -> dict[str, Any]:
    """One finished OpenTelemetry span as plain JSON (what `spans.json` holds)."""
    ctx = span.get_span_context()
    return {
        "name": span.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


def _gate_layer(workspace: Path) -> Layer:
    try:
        from guardrail.statemirror import GateLayer  # type: ignore[attr-defined]
    except ImportError:
        return PathExistsLayer(workspace)
    return GateLayer(workspace=workspace)  # type: ignore[no-any-return]


def run_demo(out_dir: str | Path = "out/demo", *, workspace: str | Path | None = None) -> dict[str, Any]:
    """Run the guarded agent once; write spans.json and summary.json under `out_dir`; return the summary."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.sqlite import SqliteSaver
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from adapters.langchain import GuardMiddleware
    from guardrail.guard import Guard

    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.TemporaryDirectory(prefix="guardrail-demo-")
    root = Path(workspace) if workspace else Path(scratch.name) / "workspace"
    for rel, text in _WORKSPACE_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("guardrail.demo")
    guard = Guard([_gate_layer(root)], mode="intervene", tracer=tracer)
    middleware = GuardMiddleware(guard)
    connection = sqlite3.connect(Path(scratch.name) / "checkpoints.sqlite", check_same_thread=False)
    try:
        saver = SqliteSaver(connection)
        agent = create_agent(_scripted_model(), _make_tools(root), middleware=[middleware], checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "demo-1"}}
        with tracer.start_as_current_span("invoke_agent demo", attributes={"gen_ai.operation.name": "invoke_agent"}):
            final = agent.invoke({"messages": [{"role": "user", "content": "Summarize the open todos."}]}, config)
        checkpoints = len(list(saver.list(config)))
    finally:
        connection.close()
    provider.force_flush()
    spans = [span_record(s) for s in exporter.get_finished_spans()]
    atomic_write_text(out / "spans.json", json.dumps(spans, indent=1, default=str))

    blocked = [
        {"tool": m.name, "message": m.content}
        for m in final["messages"] if getattr(m, "type", "") == "tool" and m.status == "error"
    ]
    summary = {
        "answer": final["messages"][-1].content,
        "blocked": blocked,
        "findings": final.get("guardrail_findings", []),
        "messages": len(final["messages"]),
        "checkpoints": checkpoints,
        "spans": dict(Counter(s["name"] for s in spans)),
        "summary_file_written": (root / "summary.md").is_file(),
        "out_dir": str(out),
        "seconds": round(time.perf_counter() - started, 2),
    }
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=str))
    scratch.cleanup()
    return summary


def _print_summary(summary: dict[str, Any]) -> None:
    write = sys.stdout.write
    write("guardrail demo: a LangGraph agent (create_agent + GuardMiddleware, SQLite checkpointer)\n\n")
    for item in summary["blocked"]:
        write(f"BLOCKED {item['tool']}:\n  {item['message']}\n")
    write(f"\nanswer: {summary['answer']}\n")
    write(f"messages: {summary['messages']}, checkpoints: {summary['checkpoints']}\n")
    write("spans:\n")
    for name, count in sorted(summary["spans"].items()):
        write(f"  {count:3d}  {name}\n")
    write(f"\nwrote {summary['out_dir']}/spans.json and summary.json in {summary['seconds']} s\n")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--out", default="out/demo", help="output directory (default: out/demo)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def _run(args: argparse.Namespace) -> int:
    summary = run_demo(args.out)
    if args.json:
        emit_json(summary)
    else:
        _print_summary(summary)
    return 0 if summary["blocked"] else 1


DEMO = Command(help="run a guarded agent end to end and show what the guard did", add_arguments=_add_arguments,
               run=_run)
