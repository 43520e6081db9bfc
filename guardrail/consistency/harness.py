"""A dry-run harness: execute each of N candidate tool calls in one sandbox epoch and collect the samples."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guardrail.consistency.decision import PlanSample
from guardrail.consistency.registry import DeterminismRegistry, EpochSource, ProbeOutcome, read_epoch

__all__ = ["DryRunHarness", "ProposedCall"]


@dataclass(frozen=True)
class ProposedCall:
    """One candidate's tool call, as a model proposed it (tool None when the candidate called no tool)."""

    tool: str | None
    args: Any
    call_id: str | None = None


class DryRunHarness:
    """Runs candidate calls against sandbox tools and tags each sample with the epoch it ran in.

    `tools` maps a tool name to a callable taking the arguments as keywords (a coroutine function:
    use `arun`) or to an object with ``invoke(args)`` (a LangChain tool). AutoGen tools go through
    `adapters.sampling.sandbox_tools`, which turns them into coroutine functions. `epoch` names the sandbox epoch: a fixed id, or a
    callable read after every call, so a sandbox that moves mid-batch yields samples with
    different epochs and the gate fails closed instead of blaming the arguments.
    """

    def __init__(self, tools: Mapping[str, Any], *, epoch: EpochSource) -> None:
        self.tools = dict(tools)
        self.epoch = epoch

    def call(self, tool: str, args: Mapping[str, Any] | str) -> Any:
        """Run one call (what the determinism probe uses); raises what the tool raises."""
        target = self.tools.get(tool)
        if target is None:
            raise LookupError(f"no tool named {tool!r} in the sandbox (known: {sorted(self.tools)[:20]})")
        if isinstance(args, str):
            args = json.loads(args)  # models often emit the arguments as JSON text; bad JSON is the sample's error
        if not isinstance(args, Mapping):
            raise TypeError(f"arguments for {tool!r} must be an object, got {type(args).__name__}")
        if hasattr(target, "run_json") and not inspect.isfunction(target):
            raise TypeError(f"{tool!r} is an AutoGen tool: wrap it with adapters.sampling.sandbox_tools(...)")
        if hasattr(target, "invoke") and not inspect.isfunction(target):
            return target.invoke(dict(args))  # a LangChain tool
        return target(**args)

    def probe(self, registry: DeterminismRegistry, *, rounds: int = 3, interval_s: float = 0.02,
              advance: Callable[[], None] | None = None) -> dict[str, ProbeOutcome]:
        """The start-up determinism probe of every declared-deterministic tool, in this sandbox
        (`rounds`, `interval_s`, `advance`: see `DeterminismRegistry.probe`)."""
        return registry.probe(self.call, epoch=self.epoch, rounds=rounds, interval_s=interval_s, advance=advance)

    def run(self, calls: Sequence[ProposedCall]) -> list[PlanSample]:
        """Execute every candidate call and return one sample per candidate, in order."""
        samples = []
        for proposed in calls:
            result, error = self._outcome(proposed)
            if error is None and inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()  # never awaited here; closing it avoids a "never awaited" warning
                result, error = None, f"TypeError: {proposed.tool!r} is async; run the batch with arun()"
            samples.append(self._sample(proposed, (result, error)))
        return samples

    async def arun(self, calls: Sequence[ProposedCall]) -> list[PlanSample]:
        """As `run`, with every candidate in flight at once: coroutine tools are awaited on the loop,
        plain functions run in worker threads (a slow sandbox call never holds the event loop)."""
        return list(await asyncio.gather(*(self._arun_one(proposed) for proposed in calls)))

    async def _arun_one(self, proposed: ProposedCall) -> PlanSample:
        if proposed.tool is None:
            return self._sample(proposed, (None, None))
        try:
            result = await asyncio.to_thread(self.call, proposed.tool, proposed.args)
            if inspect.isawaitable(result):  # a coroutine function: created in the thread, awaited here
                result = await result
            outcome: tuple[Any, str | None] = (result, None)
        except Exception as exc:  # the tool's failure is what the sample observed
            outcome = (None, f"{type(exc).__name__}: {exc}")
        return self._sample(proposed, outcome)

    def _outcome(self, proposed: ProposedCall) -> tuple[Any, str | None]:
        if proposed.tool is None:
            return None, None
        try:
            return self.call(proposed.tool, proposed.args), None
        except Exception as exc:  # the tool's failure is what the sample observed
            return None, f"{type(exc).__name__}: {exc}"

    def _sample(self, proposed: ProposedCall, outcome: tuple[Any, str | None]) -> PlanSample:
        result, error = outcome
        return PlanSample(proposed.tool, proposed.args, read_epoch(self.epoch), result=result, error=error)
