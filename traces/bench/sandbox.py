"""`guardrail bench sandbox`: the gate probing a SWE-ReX sandbox (``swerex-remote`` on loopback) vs this machine.

Runs the gate benchmark's labelled cases (`traces.bench.gate`) through one gate per project with the
local backend, then with `adapters.swerex_backend.SwerexBackend` talking to a real ``swerex-remote``
started on 127.0.0.1 (the sandbox sees the same files, so every verdict must be the same), and, as
a control, with the same probe program run on this machine without SWE-ReX (``probe-exec``: what
the probe costs without the sandbox API's HTTP). Each backend gets a warm-up pass,
then a measured one: per action the wall time of the whole decision (the gate's check plus the typed
warnings a Guard layer builds), and the round-trips the backend made. `agree_with_local` is the share
of actions whose verdict (a violation, a blocking one) equals the local backend's; `agree_predicates`
compares every predicate's outcome, `agree_messages` also their messages and hints. ``floor_ms``
gives, measured in the same run, what one bare ``swerex-remote`` round-trip costs (``is_alive``: HTTP only;
``/bin/true``: HTTP and a process; the probe interpreter starting and doing nothing). ``setup_*`` is what a
gate costs before its first action (learning the target interpreter's paths in the sandbox), per project.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from guardrail.core.cliutil import Command, emit_json, print_table, progress
from traces.bench.gate import Case, _add_arguments, _gate_for, _percentile, _state, bench_cases

__all__ = ["BENCH", "SwerexUnavailable", "measure_backend", "report_signature", "swerex_server"]


class SwerexUnavailable(RuntimeError):
    """swe-rex or its ``swerex-remote`` server is not installed here, or the server did not come up."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def swerex_server(cwd: str | os.PathLike[str] = "/", *, timeout_s: float = 60.0) -> Iterator[Any]:
    """A ``RemoteRuntime`` connected to a ``swerex-remote`` started in `cwd` on 127.0.0.1, stopped on exit.

    Raises `SwerexUnavailable` when swe-rex is not installed, RuntimeError when the server does not come up."""
    try:
        from swerex.runtime.remote import RemoteRuntime
    except ImportError as exc:
        raise SwerexUnavailable("swe-rex is not installed: pip install 'guardrail[swe]'") from exc
    server = shutil.which("swerex-remote", path=os.path.dirname(sys.executable)) or shutil.which("swerex-remote")
    if server is None:
        raise SwerexUnavailable("no swerex-remote executable: pip install 'guardrail[swe]'")
    port, token = _free_port(), secrets.token_hex(8)
    log = tempfile.TemporaryFile()  # a file, not a pipe: uvicorn logs every request and a full pipe would stall it
    process = subprocess.Popen([server, "--host", "127.0.0.1", "--port", str(port), "--auth-token", token],
                               cwd=cwd, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    runtime = RemoteRuntime(host="http://127.0.0.1", port=port, auth_token=token, timeout=30)
    try:
        try:
            asyncio.run(runtime.wait_until_alive(timeout=timeout_s))
        except Exception as exc:  # noqa: BLE001 - say why the server did not come up
            process.kill()
            process.wait(timeout=10)
            log.seek(0)
            err = log.read().decode(errors="replace")[-800:]
            raise RuntimeError(f"swerex-remote did not come up on port {port}: {exc}\n{err}") from exc
        yield runtime
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        log.close()


def report_signature(report: Any) -> tuple[tuple[bool, bool], tuple[Any, ...], tuple[Any, ...]]:
    """(verdict, every predicate's outcome, outcomes with messages and hints) of a gate report."""
    outcomes = tuple((r.predicate.name, tuple(str(a) for a in r.predicate.args), r.outcome.value)
                     for r in report.results)
    messages = tuple((*o, r.message, r.hint or "") for o, r in zip(outcomes, report.results, strict=True))
    return (report.hallucinated, report.blocking), outcomes, messages


def measure_backend(name: str, make_backend: Callable[[], Any], cases: list[Case], roots: dict[str, Path],
                    python: str, *, reference: list[Any] | None = None, show: bool = False,
                    budget_s: float = 0.25) -> tuple[dict[str, Any], list[Any]]:
    """One row of the benchmark: a fresh backend and gate per project, a warm-up pass, then the measured pass."""
    backends = {project: make_backend() for project in roots}
    gates, setup_ms = {}, []
    for project, root in roots.items():  # a gate and the target's paths, once per gate: not any action's time
        started = time.perf_counter()
        gates[project] = _gate_for(root, python, backend=backends[project])
        gates[project].budget_s = budget_s
        gates[project].index()
        setup_ms.append((time.perf_counter() - started) * 1000.0)
    setup_trips = sum(getattr(b, "round_trips", 0) for b in backends.values())
    for case in progress(cases, desc=f"{name}: warm-up", total=len(cases), enabled=show):
        gates[case.project].check(case.action, _state(case, roots[case.project])).findings(layer="gate")
    trips_before = sum(getattr(b, "round_trips", 0) for b in backends.values())
    signatures, latencies = [], []
    for case in progress(cases, desc=f"{name}: measured", total=len(cases), enabled=show):
        state = _state(case, roots[case.project])
        started = time.perf_counter()
        report = gates[case.project].check(case.action, state)
        report.findings(layer="gate")
        latencies.append((time.perf_counter() - started) * 1000.0)
        signatures.append(report_signature(report))
    trips = sum(getattr(b, "round_trips", 0) for b in backends.values()) - trips_before
    row: dict[str, Any] = {"backend": name, "n": len(cases), "budget_ms": round(budget_s * 1000)}
    if reference is not None:
        for field, index in (("agree_with_local", 0), ("agree_predicates", 1), ("agree_messages", 2)):
            same = sum(mine[index] == theirs[index] for mine, theirs in zip(signatures, reference, strict=True))
            row[field] = round(same / max(len(cases), 1), 4)
    else:
        row.update(agree_with_local=1.0, agree_predicates=1.0, agree_messages=1.0)
    row.update(median_ms=round(statistics.median(latencies), 3), p95_ms=round(_percentile(latencies, 0.95), 3),
               round_trips_per_action=round(trips / max(len(cases), 1), 3) if reference is not None else 0.0,
               failed_round_trips=sum(getattr(b, "failures", 0) for b in backends.values()),
               setup_median_ms=round(statistics.median(setup_ms), 1),
               setup_round_trips_per_gate=round(setup_trips / max(len(backends), 1), 1))
    failures = sorted({str(b.last_failure) for b in backends.values() if getattr(b, "last_failure", None)})
    if failures:
        row["failure_reasons"] = failures[:5]
    return row, signatures


def _floor(runtime: Any, python: str, repeats: int = 30) -> dict[str, float]:
    """Median ms of bare swerex-remote round-trips, measured next to the rows they bound."""
    from adapters.swerex_backend import SwerexTransport

    transport = SwerexTransport(runtime)

    def median_ms(call: Callable[[], Any]) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000.0)
        return round(statistics.median(times), 3)

    return {"is_alive": median_ms(lambda: asyncio.run(runtime.is_alive())),
            "execute_true": median_ms(lambda: transport(["/bin/true"], timeout_s=5.0)),
            "execute_python": median_ms(lambda: transport([python, "-I", "-S", "-B", "-c", "pass"], timeout_s=5.0))}


def _run(args: argparse.Namespace) -> int:
    from guardrail.gate.backend import LocalBackend
    from guardrail.gate.backend_remote import LocalExecTransport, RemoteBackend

    cases, _, roots, _ = bench_cases(args)
    show = not args.json
    budget_s = args.budget_ms / 1000.0
    rows: list[dict[str, Any]] = []
    local, reference = measure_backend("local", LocalBackend, cases, roots, args.python, show=show,
                                       budget_s=budget_s)
    rows.append(local)
    try:
        with swerex_server("/") as runtime:
            from adapters.swerex_backend import SwerexBackend

            row, _ = measure_backend("swerex", lambda: SwerexBackend(runtime), cases, roots, args.python,
                                     reference=reference, show=show, budget_s=budget_s)
            row["transport"] = "swerex-remote on 127.0.0.1 (RemoteRuntime.execute)"
            probe_python = next(p for p in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
                                if os.path.exists(p))
            row["floor_ms"] = _floor(runtime, probe_python)
            rows.append(row)
    except SwerexUnavailable as exc:
        rows.append({"backend": "swerex", "n": 0, "skipped": str(exc)})
    if not args.no_control:
        row, _ = measure_backend("probe-exec", lambda: RemoteBackend(LocalExecTransport(), name="probe-exec"),
                                 cases, roots, args.python, reference=reference, show=show, budget_s=budget_s)
        row["transport"] = "the same probe, run here by subprocess (no SWE-ReX)"
        rows.append(row)
    meta = {"projects": list(roots), "cases": len(cases), "python": args.python}
    for row in rows:
        row["meta"] = meta
    if args.json:
        for row in rows:
            emit_json(row)
        return 0
    print(f"{len(cases)} actions over {len(roots)} projects")
    print_table([{k: v for k, v in row.items() if not isinstance(v, dict)} for row in rows])
    return 0


def _arguments(parser: argparse.ArgumentParser) -> None:
    _add_arguments(parser)
    parser.add_argument("--no-control", action="store_true", help="skip the probe-exec control row")
    parser.add_argument("--budget-ms", type=float, default=250.0,
                        help="each decision's deadline (default: the gate's own, 250 ms); verdicts a deadline cut "
                             "short are unknown, so agreement under a loaded machine depends on it")


BENCH = Command(
    help="the gate probing a SWE-ReX sandbox (swerex-remote on loopback) vs the local backend, on the gate "
         "benchmark's cases",
    add_arguments=_arguments,
    run=_run,
)
