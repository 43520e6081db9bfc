"""The testbed's command table: `guardrail collect`, `guardrail demo` and every `guardrail bench NAME`.

Registered under the `guardrail.cli` entry point by the testbed distribution (``traces/pyproject.toml``),
so the product never imports the testbed: without it installed these commands are simply absent.
"""

from guardrail.core.cli import CommandSpec

__all__ = ["TABLE"]

_TESTBED = "guardrail-testbed (pip install ./traces from a checkout)"


def _bench(target: str, summary: str) -> CommandSpec:
    return CommandSpec(target, summary, group="bench", distribution=_TESTBED)


TABLE: dict[str, CommandSpec] = {
    "collect": CommandSpec("traces.cli:COLLECT", "collect a testbed corpus from real framework agents",
                           distribution=_TESTBED),
    "model": CommandSpec("traces.cli:MODEL", "serve the local model (SmolLM2-135M, OpenAI API) on loopback",
                         distribution="'guardrail-testbed[model]'"),
    "demo": CommandSpec("traces.demo:DEMO", "run the whole guard on scripted LangGraph and AutoGen agents",
                        distribution=_TESTBED),
    "gate": _bench("traces.bench.gate:BENCH", "gate precision/recall/latency on real projects"),
    "sandbox": _bench("traces.bench.sandbox:BENCH", "the gate probing a SWE-ReX sandbox vs the local backend"),
    "gate-traj": _bench("traces.bench.gate_traj:BENCH", "gate blocking precision on replayed agent trajectories"),
    "monitor": _bench("traces.bench.monitor:BENCH", "monitor AUROC/detection/FA on corpora, vs published"),
    "drift": _bench("traces.bench.drift:BENCH", "guardrail drift: false drift on fresh healthy runs, detection of a "
                                                "new tool result shape"),
    "verify": _bench("traces.bench.verify:BENCH", "verifier catch rates and healthy false positives"),
    "consistency": _bench("traces.bench.consistency:BENCH", "naive vs separated self-consistency gate"),
    "repair": _bench("traces.bench.repair:BENCH", "repair rungs vs the resample control"),
    "clients": _bench("traces.bench.clients:BENCH", "ChatOpenAI / AutoGen OpenAI / ChatOllama guarded over loopback HTTP"),
    "overhead": _bench("traces.bench.overhead:BENCH", "added time per step, guarded vs unguarded"),
    "load": _bench("traces.bench.load:BENCH", "steps/s and memory at 1/8/64 concurrent episodes"),
    "scale": _bench("traces.bench.scale:BENCH", "scoring throughput on 1/2/4 Dask workers vs local"),
    "real": _bench("traces.bench.real:BENCH", "the layers on a real model's runs (SmolLM2-135M) vs their scripted twins"),
    "mcp": _bench("traces.bench.mcp:BENCH", "guardrail mcp-proxy: added latency per call, blocking precision/recall"),
    "coding": _bench("traces.bench.coding:BENCH", "coding testbed: report vs intervene with the gate on a real sdist"),
}
