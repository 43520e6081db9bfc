"""Classify a batch of sampled plans: reject as hallucinated, defer and quarantine the tool, or accept."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from guardrail.consistency.canonical import canonical_args, canonical_result
from guardrail.consistency.errors import EpochNotFixedError, HallucinationGateError
from guardrail.consistency.registry import DeterminismRegistry, DeterminismStatus

__all__ = [
    "ConsistencyGate",
    "GateThresholds",
    "NOT_RUN",
    "PlanDecision",
    "PlanSample",
    "PlanVerdict",
    "classify_plan",
    "modal_index",
    "pairwise_agreement",
]


class _NotRun:
    def __repr__(self) -> str:
        return "NOT_RUN"


NOT_RUN: Final = _NotRun()  # a sample whose call was not executed (no dry-run harness)


@dataclass(frozen=True)
class PlanSample:
    """One of the N candidate plans for a step: the tool call it proposes and what it returned in the sandbox.

    `epoch` is the id of the sandbox epoch the call ran in. `error` is the tool's error text when
    the call raised (an error is an observed result too); `result` is `NOT_RUN` when the call
    was not executed.
    """

    tool: str | None
    args: Any
    epoch: str | None
    result: Any = NOT_RUN
    error: str | None = None

    @property
    def ran(self) -> bool:
        return self.error is not None or self.result is not NOT_RUN

    def observed(self) -> Any:
        return {"$error": self.error} if self.error is not None else self.result


@dataclass(frozen=True)
class GateThresholds:
    """The decision boundary (the record's defaults)."""

    reject_arg_below: float = 0.20  # argument agreement under this, with the conditions below, rejects
    min_samples: int = 5  # fewer samples cannot reject: agreement over 2-4 samples is too coarse
    defer_arg_at_least: float = 0.80  # arguments agree at least this much ...
    defer_result_below: float = 0.50  # ... but identical calls' results agree less: the tool is suspect

    def validate(self) -> None:
        for name in ("reject_arg_below", "defer_arg_at_least", "defer_result_below"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"GateThresholds.{name} must be within [0, 1], got {value!r}")
        if self.min_samples < 2:
            raise ValueError(f"GateThresholds.min_samples must be at least 2, got {self.min_samples!r}")
        if self.reject_arg_below > self.defer_arg_at_least:
            raise ValueError("GateThresholds.reject_arg_below must not exceed defer_arg_at_least")


class PlanDecision(StrEnum):
    ACCEPT = "accept"
    DEFER = "defer"  # re-sample or escalate; the tool's determinism declaration is quarantined
    REJECT = "reject"  # the fabricated-argument signature


@dataclass(frozen=True)
class PlanVerdict:
    """The gate's decision on one batch, with the figures behind it."""

    decision: PlanDecision
    reason: str  # a short code: fabricated_arguments, nondeterministic_tool, agreement_ok, ...
    message: str
    tool: str | None  # the tool of the modal plan
    tool_status: DeterminismStatus
    n_samples: int
    distinct_args: int
    arg_agreement: float
    result_agreement: float | None  # among samples with the modal arguments; None when fewer than 2 ran
    epoch: str
    chosen_index: int  # a sample carrying the modal arguments: the plan to run on accept
    quarantine: tuple[str, ...] = ()

    def evidence(self) -> dict[str, Any]:
        return {
            "decision": self.decision.value,
            "reason": self.reason,
            "tool": self.tool,
            "tool_status": self.tool_status.value,
            "n_samples": self.n_samples,
            "distinct_args": self.distinct_args,
            "arg_agreement": round(self.arg_agreement, 4),
            "result_agreement": None if self.result_agreement is None else round(self.result_agreement, 4),
            "epoch": self.epoch,
            "quarantine": list(self.quarantine),
        }


def pairwise_agreement(counts: Iterable[int]) -> float:
    """The chance that two distinct samples, drawn without replacement, are equal.

    1.0 when all N agree, 0.0 when all differ. Unlike the modal share (whose floor is 1/N), it
    reaches 0, so the "< 0.20 with N >= 5" rejection is reachable at N = 5.
    """
    sizes = list(counts)
    n = sum(sizes)
    if n < 2:
        return 1.0
    return sum(c * (c - 1) for c in sizes) / (n * (n - 1))


def _argument_keys(samples: Sequence[PlanSample], registry: DeterminismRegistry) -> list[tuple[str, bytes]]:
    keys = []
    for sample in samples:
        schema = registry.schema(sample.tool)
        unordered = schema.unordered_args if schema is not None else frozenset()
        keys.append((sample.tool or "", canonical_args(sample.args, unordered=unordered)))
    return keys


def modal_index(samples: Sequence[PlanSample], registry: DeterminismRegistry) -> int:
    """Index of the first sample whose canonical call is the most common one (the plan to run if accepted)."""
    keys = _argument_keys(samples, registry)
    modal_key, _ = Counter(keys).most_common(1)[0]
    return keys.index(modal_key)


def _check_epoch(samples: Sequence[PlanSample]) -> str:
    epochs = {sample.epoch for sample in samples}
    if None in epochs:
        raise EpochNotFixedError(
            "sample ran with no sandbox epoch: tool nondeterminism would leak into the argument signal; "
            "run every sample of the batch in one pinned sandbox epoch and tag it"
        )
    if len(epochs) != 1:
        raise EpochNotFixedError(
            f"samples ran in {len(epochs)} different sandbox epochs {sorted(str(e) for e in epochs)[:5]}: "
            "tool nondeterminism would leak into the argument signal; run the whole batch in one epoch"
        )
    return str(next(iter(epochs)))


def classify_plan(samples: Sequence[PlanSample], registry: DeterminismRegistry,
                  thresholds: GateThresholds | None = None) -> PlanVerdict:
    """Decide on N sampled plans for one step. Pure: quarantines nothing itself (see `ConsistencyGate`).

    - reject when argument agreement < `reject_arg_below` on a verified-deterministic tool with
      N >= `min_samples` and one fixed epoch;
    - defer when argument agreement >= `defer_arg_at_least` but result agreement among the
      identical calls < `defer_result_below` (and name the tool for quarantine);
    - otherwise accept.
    Raises `EpochNotFixedError` (fail closed) when the samples do not share one epoch, and
    `CanonicalizationError` when a sample is too large to compare.
    """
    rule = thresholds or GateThresholds()
    rule.validate()
    if not samples:
        raise ValueError("classify_plan needs at least one sample")
    epoch = _check_epoch(samples)

    # The one parse-and-canonicalize pass per sample: its arguments now, its result below.
    keys = _argument_keys(samples, registry)
    counts = Counter(keys)
    modal_key, _ = counts.most_common(1)[0]  # ties go to the first seen
    chosen_index = keys.index(modal_key)
    arg_agreement = pairwise_agreement(counts.values())
    tool = modal_key[0] or None
    status = registry.status(tool)

    # Results are compared only among identical calls, so a minority argument variant (which
    # naturally returns something else) is never mistaken for tool nondeterminism.
    schema = registry.schema(tool)
    unordered_result = schema.unordered_result if schema is not None else frozenset()
    modal_results = [canonical_result(sample.observed(), unordered=unordered_result)
                     for sample, key in zip(samples, keys, strict=True) if key == modal_key and sample.ran]
    result_agreement = pairwise_agreement(Counter(modal_results).values()) if len(modal_results) >= 2 else None

    def verdict(decision: PlanDecision, reason: str, message: str, quarantine: tuple[str, ...] = ()) -> PlanVerdict:
        return PlanVerdict(decision, reason, message, tool, status, len(samples), len(counts), arg_agreement,
                           result_agreement, epoch, chosen_index, quarantine)

    called = {key[0] for key in keys if key[0]}
    if not called:
        return verdict(PlanDecision.ACCEPT, "no_tool_call", "no sample called a tool: nothing to gate")
    if any(registry.status(name) is DeterminismStatus.BY_CONTRACT for name in called):
        return verdict(PlanDecision.ACCEPT, "out_of_scope",
                       f"{tool!r} is nondeterministic by contract: divergence across samples carries no signal")

    if arg_agreement < rule.reject_arg_below:
        n = len(samples)
        if n < rule.min_samples:
            return verdict(PlanDecision.ACCEPT, "too_few_samples",
                           f"argument agreement {arg_agreement:.2f} over only {n} samples "
                           f"(rejection needs N >= {rule.min_samples})")
        unverified = sorted(name for name in called if not registry.is_verified(name))
        if unverified:
            return verdict(PlanDecision.ACCEPT, "tool_not_verified",
                           f"argument agreement {arg_agreement:.2f} is low, but {unverified} "
                           f"{'is' if len(unverified) == 1 else 'are'} not verified deterministic "
                           f"({', '.join(registry.status(u).value for u in unverified)}), so low agreement "
                           "cannot be told from tool nondeterminism")
        return verdict(PlanDecision.REJECT, "fabricated_arguments",
                       f"{n} sampled plans proposed {len(counts)} different argument sets for {tool!r} "
                       f"(argument agreement {arg_agreement:.2f} < {rule.reject_arg_below:.2f}) on a "
                       "verified-deterministic tool in one fixed epoch: the arguments look fabricated")

    if (arg_agreement >= rule.defer_arg_at_least and result_agreement is not None
            and result_agreement < rule.defer_result_below):
        suspect = (tool,) if tool and status in (DeterminismStatus.VERIFIED, DeterminismStatus.UNVERIFIED) else ()
        return verdict(PlanDecision.DEFER, "nondeterministic_tool",
                       f"the samples agree on the call to {tool!r} (argument agreement {arg_agreement:.2f}) but "
                       f"identical calls returned different results (result agreement {result_agreement:.2f} < "
                       f"{rule.defer_result_below:.2f}) in one epoch: the plan is likely right and the tool "
                       "is suspect; re-sample or escalate", suspect)
    return verdict(PlanDecision.ACCEPT, "agreement_ok",
                   f"argument agreement {arg_agreement:.2f}"
                   + ("" if result_agreement is None else f", result agreement {result_agreement:.2f}"))


class ConsistencyGate:
    """The gate a harness holds: a determinism registry, the thresholds, and the quarantine they drive."""

    def __init__(self, registry: DeterminismRegistry, thresholds: GateThresholds | None = None) -> None:
        self.registry = registry
        self.thresholds = thresholds or GateThresholds()

    def evaluate(self, samples: Sequence[PlanSample]) -> PlanVerdict:
        """Classify the batch and quarantine the tool a deferral names."""
        verdict = classify_plan(samples, self.registry, self.thresholds)
        for tool in verdict.quarantine:
            self.registry.quarantine(tool, verdict.message, verdict.evidence())
        return verdict

    def gate_or_raise(self, samples: Sequence[PlanSample]) -> PlanVerdict:
        """Strict use: `evaluate`, raising `HallucinationGateError` on a rejection (and on an unfixed epoch)."""
        verdict = self.evaluate(samples)
        if verdict.decision is PlanDecision.REJECT:
            raise HallucinationGateError(verdict.message, verdict)
        return verdict
