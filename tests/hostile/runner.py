"""Child process for the hostile-workspace tests: run gate decisions under a memory limit and report each one.

Usage: python runner.py SPEC.json OUT.jsonl. The address-space limit is set before the gate is
imported; every decision's wall time, its reported latency and everything it says (messages,
hints, evidence, findings and the JSON result) are written out, then the peak resident memory. A crash or MemoryError is a non-zero exit.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    limit = int(spec["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    from guardrail.gate import EditorState, Gate, GateState

    gate = Gate(spec["workspace"], python=spec["python"], budget_s=float(spec["budget_s"]))
    gate.index()  # setup (the one interpreter question), outside every decision
    gate.wait_warm(120)  # and the background warm-up a starting Guard does, so no decision shares the GIL with it
    with open(out_path, "w", encoding="utf-8") as out:
        for number, case in enumerate(spec["cases"]):
            state = GateState(editor=EditorState(case.get("open_file")))
            started = time.perf_counter()
            report = gate.check(case["action"], state)
            wall_ms = (time.perf_counter() - started) * 1000.0
            findings = report.findings(layer="gate")  # cheap: hints were built inside the decision
            result = report.to_json(number)
            said = {
                "result": result,
                "findings": [f.model_dump(mode="json") for f in findings],
                "results": [{"predicate": r.predicate.label()[:2000], "outcome": r.outcome.value, "message": r.message,
                             "hint": r.hint, "evidence": r.evidence} for r in report.results],
            }
            out.write(json.dumps({"case": number, "wall_ms": wall_ms, "latency_ms": report.latency_ms,
                                  "blocking": report.blocking, "error": report.error, "said": said},
                                 default=str) + "\n")
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    from guardrail.gate import parse_worker

    worker = parse_worker._WORKER
    if worker is not None:  # let the big modules handed to it finish, so its peak memory is measured too
        worker.drain(120.0)
    worker_peak = worker.peak_rss_bytes if worker is not None else 0
    with open(out_path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"peak_rss_bytes": peak_kb * 1024, "worker_peak_rss_bytes": worker_peak}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
