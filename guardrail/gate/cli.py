"""`guardrail check`: run the gate on one action or a JSONL batch of cases and print the verdicts."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

from guardrail.core.cliutil import Command, emit_json
from guardrail.gate.layer import EditorState, Gate, GateState, resolve_python

__all__ = ["CHECK", "check_case"]

_MAX_LINE_BYTES = 10_000_000
# The case id, when a line that cannot be used still shows one near its start (`{"id": 7, ...`).
_LEADING_ID = re.compile(r'^\s*\{\s*"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,30}|null)')


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", help="the repository root the agent works in (with --batch: the default for "
                                              "lines that give none)")
    parser.add_argument("--cwd", help="directory the action runs in (default: the workspace; with --batch: the "
                                      "default for lines that give none)")
    parser.add_argument("--python", help="the interpreter the agent's commands run (default: this one; with --batch: "
                                         "the default for lines that give none)")
    parser.add_argument("--kind", choices=["shell", "python", "swe_agent"], default="shell",
                        help="how to read the action text (default: a shell command)")
    parser.add_argument("--open-file", help="the file open in the agent's editor (for ACI goto/edit/scroll)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per result")
    parser.add_argument("--batch", metavar="IN.jsonl", help="check one case per line ('-' for stdin)")
    parser.add_argument("--budget-ms", type=float, default=250.0, help="probe time budget per action")
    parser.add_argument("action", nargs="*", help="the action text (after --)")


def check_case(case: Any, gates: dict[tuple[str, str | None], Gate], *, budget_s: float = 0.25) -> dict[str, Any]:
    """One batch case -> one result object (an `error` object when the case itself is malformed)."""
    case_id = case.get("id") if isinstance(case, dict) else None
    if not isinstance(case, dict):
        return {"id": None, "error": f"a case must be a JSON object, got {type(case).__name__}"}
    workspace = case.get("workspace")
    if not isinstance(workspace, str) or not workspace:
        return {"id": case_id, "error": "case needs a 'workspace' path"}
    if not os.path.isdir(workspace):
        return {"id": case_id, "error": f"workspace {workspace!r} is not a directory"}
    python = case.get("python")
    if python is not None and not isinstance(python, str):
        return {"id": case_id, "error": "'python' must be a path string"}
    action = case.get("action")
    if not isinstance(action, dict):
        return {"id": case_id, "error": "case needs an 'action' object"}
    cwd = case.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        return {"id": case_id, "error": "'cwd' must be a path string"}
    raw_state = case.get("state") or {}
    if not isinstance(raw_state, dict):
        return {"id": case_id, "error": "'state' must be an object"}
    open_file = raw_state.get("open_file")
    state = GateState(cwd=cwd, editor=EditorState(open_file if isinstance(open_file, str) else None))
    # A relative interpreter path is the agent's: it resolves against the agent's cwd.
    python = resolve_python(python, os.path.normpath(os.path.join(os.path.abspath(workspace), cwd or ".")))
    key = (os.path.abspath(workspace), python)
    gate = gates.get(key)
    if gate is None:
        gate = gates[key] = Gate(workspace, python=python, budget_s=budget_s)
        gate.index()  # setup, once per workspace and interpreter: not part of any decision's budget
    report = gate.check(action, state)
    if report.error:
        return {"id": case_id, "error": report.error}
    return report.to_json(case_id)


def _lines(stream: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) for each line, or (number, None) for a line over the size cap (skipped unread)."""
    for line_no in range(1, sys.maxsize):
        line = stream.readline(_MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > _MAX_LINE_BYTES and not line.endswith(b"\n"):
            while True:  # drop the rest of the line without holding it
                rest = stream.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            yield line_no, None
            continue
        yield line_no, line


def _leading_id(text: str) -> Any:
    match = _LEADING_ID.match(text[:1000])
    if match is None:
        return None
    try:
        return json.loads(match.group(1))
    except ValueError:
        return None


def _with_defaults(case: Any, defaults: dict[str, str | None]) -> Any:
    """The case with `defaults` (--workspace, --cwd, --python) for the fields it does not give."""
    if not isinstance(case, dict):
        return case
    filled = dict(case)
    for key, value in defaults.items():
        if value is not None and filled.get(key) is None:
            filled[key] = value
    return filled


def _run_batch(stream: BinaryIO, budget_s: float, defaults: dict[str, str | None] | None = None) -> int:
    """One output line per input line, whatever the line holds (a blank line too); the exit status is 0.
    `defaults` fill the workspace, cwd and python of lines that omit them."""
    gates: dict[tuple[str, str | None], Gate] = {}
    for line_no, raw in _lines(stream):
        if raw is None:
            emit_json({"id": None, "error": f"line {line_no} is longer than {_MAX_LINE_BYTES} bytes"})
            continue
        text = raw.decode("utf-8", errors="replace")
        if not text.strip():
            emit_json({"id": None, "error": f"line {line_no} is blank: one JSON case per line"})
            continue
        try:
            case = json.loads(text)
        except json.JSONDecodeError as exc:
            emit_json({"id": _leading_id(text),
                       "error": f"line {line_no} is not JSON: {exc.msg} at column {exc.colno}"})
            continue
        except (ValueError, RecursionError, MemoryError) as exc:  # nested too deep, a number too long...
            emit_json({"id": _leading_id(text),
                       "error": f"line {line_no} cannot be read: {type(exc).__name__}: {str(exc)[:200]}"})
            continue
        case = _with_defaults(case, defaults or {})
        try:
            result = check_case(case, gates, budget_s=budget_s)
            emit_json(result)
        except Exception as exc:  # noqa: BLE001 - one bad case never stops the batch
            case_id = case.get("id") if isinstance(case, dict) else None
            emit_json({"id": case_id if isinstance(case_id, str | int | float | None) else str(case_id)[:200],
                       "error": f"internal error: {type(exc).__name__}: {exc}"[:1000]})
    return 0


def _run(args: argparse.Namespace) -> int:
    budget_s = args.budget_ms / 1000.0
    if args.batch:
        defaults = {"workspace": args.workspace, "cwd": args.cwd, "python": args.python}
        if args.batch == "-":
            stdin = getattr(sys.stdin, "buffer", None) or io.BytesIO(sys.stdin.read().encode("utf-8", "replace"))
            return _run_batch(stdin, budget_s, defaults)
        try:
            with open(args.batch, "rb") as stream:
                return _run_batch(stream, budget_s, defaults)
        except OSError as exc:
            print(f"guardrail check: cannot read {args.batch}: {exc.strerror}", file=sys.stderr)
            return 2
    if not args.workspace or not args.action:
        print("guardrail check: give --workspace DIR and the action after --, or --batch IN.jsonl", file=sys.stderr)
        return 2
    text = " ".join(args.action)
    field = "code" if args.kind == "python" else "command"
    case = {"id": None, "workspace": args.workspace, "cwd": args.cwd, "python": args.python,
            "state": {"open_file": args.open_file}, "action": {"kind": args.kind, field: text}}
    result = check_case(case, {}, budget_s=budget_s)
    if args.json:
        emit_json(result)
        return 0
    if "error" in result:
        print(f"error: {result['error']}")
        return 2
    if not result["hallucinated"]:
        print(f"ok: no violated predicate ({result['latency_ms']:.2f} ms)")
        return 0
    print(f"HALLUCINATED ({len(result['violations'])} violated predicate(s), {result['latency_ms']:.2f} ms)")
    for violation in result["violations"]:
        mark = "block" if violation["blocking"] else "warn"
        print(f"  [{mark}] {violation['predicate']}({', '.join(map(repr, violation['args']))}): {violation['message']}")
        if violation.get("hint"):
            print(f"         hint: {violation['hint']}")
    return 1


CHECK = Command(
    help="check a proposed agent action against a workspace before it runs (StateMirror gate)",
    add_arguments=_add_arguments,
    run=_run,
)
