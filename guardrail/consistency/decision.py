"""Classify a batch of sampled plans: reject as hallucinated, defer and quarantine the tool, or accept.

The decision record's rule (seed 001) is the base: argument agreement over N samples against a
probed determinism registry. Two refinements sit on top, each reported under its own reason so
the record's categories stay visible (`PlanVerdict.record_decision` is what the rule alone says):

- per-argument agreement: free-text arguments (queries, descriptions) are left out of the
  agreement that can reject, since a paraphrase is not a fabrication (``free_text_varies``);
- provenance: low agreement among values that all come from what the agent saw, or that the dry
  run found, is a choice among real things, not an invention (``grounded_choice``); and a call
  whose identifier appears nowhere in the context and was not found by its dry run is rejected
  even when all N samples agree on it (``ungrounded_identifier``): the coincident fabrication
  self-consistency cannot see, on verified and unverified tools alike.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from guardrail.consistency.canonical import (
    canonical_args,
    canonical_args_data,
    canonical_result,
    encode_canonical,
)
from guardrail.consistency.errors import EpochNotFixedError, HallucinationGateError
from guardrail.consistency.registry import DeterminismRegistry, DeterminismStatus, ToolSchema
from guardrail.core.arguments import ArgumentKind, ArgumentSpec, without_free_text
from guardrail.core.provenance import ProvenanceContext, ProvenanceReport, check_arguments

__all__ = [
    "ConsistencyGate",
    "GateThresholds",
    "NOT_RUN",
    "PlanDecision",
    "PlanSample",
    "PlanVerdict",
    "classify_plan",
    "found_by_dry_run",
    "missed_by_dry_run",
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
    """The gate's decision on one batch, with the figures behind it.

    `reason` names the rule that decided: the record's ``fabricated_arguments``,
    ``nondeterministic_tool``, ``agreement_ok``, ``tool_not_verified``, ``too_few_samples``,
    ``out_of_scope``, ``no_tool_call``; or a refinement: ``free_text_varies``, ``grounded_choice``,
    ``ungrounded_identifier``. `record_decision` / `record_reason` are what the record's rule alone
    (whole-call agreement, no provenance) decides on the same samples.
    """

    decision: PlanDecision
    reason: str
    message: str
    tool: str | None  # the tool of the modal plan
    tool_status: DeterminismStatus
    n_samples: int
    distinct_args: int
    arg_agreement: float  # agreement of whole calls (the record's figure)
    result_agreement: float | None  # among samples with the modal arguments; None when fewer than 2 ran
    epoch: str
    chosen_index: int  # a sample carrying the modal arguments: the plan to run on accept
    quarantine: tuple[str, ...] = ()
    record_decision: PlanDecision | None = None
    record_reason: str | None = None
    judged_agreement: float | None = None  # agreement over the arguments that can show fabrication (no free text)
    argument_agreement: Mapping[str, float] = field(default_factory=dict)  # per top-level argument
    free_text: tuple[str, ...] = ()  # argument paths left out of `judged_agreement`
    provenance: ProvenanceReport | None = None  # the chosen call's values; None when not checked

    def evidence(self) -> dict[str, Any]:
        return {
            "decision": self.decision.value,
            "reason": self.reason,
            "record_decision": None if self.record_decision is None else self.record_decision.value,
            "record_reason": self.record_reason,
            "tool": self.tool,
            "tool_status": self.tool_status.value,
            "n_samples": self.n_samples,
            "distinct_args": self.distinct_args,
            "arg_agreement": round(self.arg_agreement, 4),
            "judged_agreement": None if self.judged_agreement is None else round(self.judged_agreement, 4),
            "argument_agreement": {k: round(v, 4) for k, v in self.argument_agreement.items()},
            "free_text": list(self.free_text),
            "result_agreement": None if self.result_agreement is None else round(self.result_agreement, 4),
            "epoch": self.epoch,
            "quarantine": list(self.quarantine),
            "provenance": None if self.provenance is None else self.provenance.evidence(),
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


def _schema_parts(registry: DeterminismRegistry, tool: str | None) -> tuple[frozenset[str], Mapping[str, ArgumentSpec]]:
    schema = registry.schema(tool)
    return (schema.unordered_args, schema.arguments) if schema is not None else (frozenset(), {})


def _argument_keys(samples: Sequence[PlanSample], registry: DeterminismRegistry) -> list[tuple[str, bytes]]:
    keys = []
    for sample in samples:
        unordered, _ = _schema_parts(registry, sample.tool)
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


_ERROR_TEXT = re.compile(r"^\W*(?:error|exception|traceback|not found|no such|unknown|invalid|failed|404)\b",
                         re.IGNORECASE)


def _substantive(result: Any, depth: int = 0) -> bool:
    """True when a tool result shows something was found: not empty, not an error payload."""
    if result is None or result is False or result is NOT_RUN:
        return False
    if isinstance(result, str):
        text = result.strip()
        if text[:1] in ("{", "[") and depth < 2:
            try:
                return _substantive(json.loads(text), depth + 1)
            except (ValueError, RecursionError):
                pass
        return bool(text) and not _ERROR_TEXT.match(text)
    if isinstance(result, Mapping):
        if any(result.get(key) for key in ("error", "errors")):
            return False
        return bool(result)
    if isinstance(result, list | tuple):
        return bool(result)
    return True


def found_by_dry_run(sample: PlanSample) -> bool:
    """The sample's dry run returned something (no error, not empty): the identifiers it named exist."""
    return sample.error is None and sample.ran and _substantive(sample.result)


_NOT_FOUND_TEXT = re.compile(r"LookupError|KeyError|IndexError|FileNotFoundError|NotFound|NoSuch|DoesNotExist|"
                             r"\bnot found\b|\bno such\b|\bunknown\b|\bdoes not exist\b|\bno (?:user|order|"
                             r"product|file|record|item|entry|rate)\b|\b404\b", re.IGNORECASE)


def missed_by_dry_run(sample: PlanSample) -> bool:
    """The sample's dry run said what it named does not exist: an empty result, or a not-found error.

    A tool failing for another reason (a timeout, a torn file) says nothing either way.
    """
    if not sample.ran:
        return False
    if sample.error is not None:
        return bool(_NOT_FOUND_TEXT.search(sample.error))
    result = sample.result
    if isinstance(result, str) and result.strip()[:1] in ("{", "["):
        try:
            result = json.loads(result)
        except (ValueError, RecursionError):
            pass
    if isinstance(result, Mapping) and any(result.get(key) for key in ("error", "errors")):
        return bool(_NOT_FOUND_TEXT.search(str(result.get("error") or result.get("errors"))))
    return not _substantive(result)


@dataclass(frozen=True)
class _Rule:
    decision: PlanDecision
    reason: str
    message: str
    quarantine: tuple[str, ...] = ()


def _record_rule(agreement: float, result_agreement: float | None, n: int, called: set[str], tool: str | None,
                 status: DeterminismStatus, registry: DeterminismRegistry, rule: GateThresholds,
                 what: str = "argument agreement") -> _Rule:
    """The decision record's boundary on one agreement figure."""
    if not called:
        return _Rule(PlanDecision.ACCEPT, "no_tool_call", "no sample called a tool: nothing to gate")
    if any(registry.status(name) is DeterminismStatus.BY_CONTRACT for name in called):
        return _Rule(PlanDecision.ACCEPT, "out_of_scope",
                     f"{tool!r} is nondeterministic by contract: divergence across samples carries no signal")
    if agreement < rule.reject_arg_below:
        if n < rule.min_samples:
            return _Rule(PlanDecision.ACCEPT, "too_few_samples",
                         f"{what} {agreement:.2f} over only {n} samples (rejection needs N >= {rule.min_samples})")
        unverified = sorted(name for name in called if not registry.is_verified(name))
        if unverified:
            return _Rule(PlanDecision.ACCEPT, "tool_not_verified",
                         f"{what} {agreement:.2f} is low, but {unverified} "
                         f"{'is' if len(unverified) == 1 else 'are'} not verified deterministic "
                         f"({', '.join(registry.status(u).value for u in unverified)}), so low agreement "
                         "cannot be told from tool nondeterminism")
        return _Rule(PlanDecision.REJECT, "fabricated_arguments",
                     f"{n} sampled plans proposed different arguments for {tool!r} ({what} {agreement:.2f} < "
                     f"{rule.reject_arg_below:.2f}) on a verified-deterministic tool in one fixed epoch: the "
                     "arguments look fabricated")
    if (agreement >= rule.defer_arg_at_least and result_agreement is not None
            and result_agreement < rule.defer_result_below):
        suspect = (tool,) if tool and status in (DeterminismStatus.VERIFIED, DeterminismStatus.UNVERIFIED) else ()
        return _Rule(PlanDecision.DEFER, "nondeterministic_tool",
                     f"the samples agree on the call to {tool!r} ({what} {agreement:.2f}) but identical calls "
                     f"returned different results (result agreement {result_agreement:.2f} < "
                     f"{rule.defer_result_below:.2f}) in one epoch: the plan is likely right and the tool is "
                     "suspect; re-sample or escalate", suspect)
    return _Rule(PlanDecision.ACCEPT, "agreement_ok",
                 f"{what} {agreement:.2f}" + ("" if result_agreement is None else
                                               f", result agreement {result_agreement:.2f}"))


def _per_argument(data: Sequence[Any]) -> dict[str, float]:
    """Agreement of each top-level argument on its own (a missing argument is a value too)."""
    if not all(isinstance(d, dict) for d in data):
        return {}
    names = sorted({key for d in data for key in d})
    return {name: pairwise_agreement(Counter(encode_canonical(d.get(name, {"$missing": True}))
                                             for d in data).values()) for name in names}


def _free_text_paths(data: Any, judged: Any) -> list[str]:
    """Top-level argument names whose value was dropped (wholly or partly) as free text."""
    if not isinstance(data, dict) or not isinstance(judged, dict):
        return []
    return sorted(key for key in data if key not in judged or judged[key] != data[key])


def classify_plan(samples: Sequence[PlanSample], registry: DeterminismRegistry,
                  thresholds: GateThresholds | None = None, *, context: ProvenanceContext | None = None,
                  per_argument: bool = True, provenance: bool = True) -> PlanVerdict:
    """Decide on N sampled plans for one step. Pure: quarantines nothing itself (see `ConsistencyGate`).

    The record's rule, on the agreement of the arguments that can show fabrication:
    - reject when that agreement < `reject_arg_below` on a verified-deterministic tool with
      N >= `min_samples` and one fixed epoch;
    - defer when it is >= `defer_arg_at_least` but result agreement among the identical calls
      < `defer_result_below` (and name the tool for quarantine);
    - otherwise accept.
    With `per_argument`, free-text arguments are left out of that agreement. With `provenance`, a
    low-agreement batch whose every variant is grounded (in `context`, or found by its dry run)
    is accepted as a choice, and a call whose identifier is grounded nowhere in a non-empty
    `context` and was not found by its dry run is rejected, however well the samples agree.
    ``per_argument=False, provenance=False`` is the record's rule alone.
    Raises `EpochNotFixedError` (fail closed) when the samples do not share one epoch, and
    `CanonicalizationError` when a sample is too large to compare.
    """
    rule = thresholds or GateThresholds()
    rule.validate()
    if not samples:
        raise ValueError("classify_plan needs at least one sample")
    epoch = _check_epoch(samples)

    # The one parse-and-canonicalize pass per sample: its arguments now, its result below.
    schemas = [_schema_parts(registry, sample.tool) for sample in samples]
    data = [canonical_args_data(sample.args, unordered=unordered) for sample, (unordered, _) in
            zip(samples, schemas, strict=True)]
    keys = [(sample.tool or "", encode_canonical(d)) for sample, d in zip(samples, data, strict=True)]
    counts = Counter(keys)
    modal_key, _ = counts.most_common(1)[0]  # ties go to the first seen
    chosen_index = keys.index(modal_key)
    arg_agreement = pairwise_agreement(counts.values())
    tool = modal_key[0] or None
    status = registry.status(tool)
    n = len(samples)

    # Results are compared only among identical calls, so a minority argument variant (which
    # naturally returns something else) is never mistaken for tool nondeterminism.
    schema = registry.schema(tool)
    unordered_result = schema.unordered_result if schema is not None else frozenset()
    modal = [i for i, key in enumerate(keys) if key == modal_key]
    modal_results = [canonical_result(samples[i].observed(), unordered=unordered_result) for i in modal
                     if samples[i].ran]
    result_agreement = pairwise_agreement(Counter(modal_results).values()) if len(modal_results) >= 2 else None
    called = {key[0] for key in keys if key[0]}
    record = _record_rule(arg_agreement, result_agreement, n, called, tool, status, registry, rule)

    def verdict(decided: _Rule, **extra: Any) -> PlanVerdict:
        return PlanVerdict(decided.decision, decided.reason, decided.message, tool, status, n, len(counts),
                           arg_agreement, result_agreement, epoch, chosen_index, decided.quarantine,
                           record.decision, record.reason, **extra)

    if not per_argument and not provenance:
        return verdict(record, judged_agreement=arg_agreement)

    judged_keys = keys
    free_text: tuple[str, ...] = ()
    if per_argument:
        judged_data = [without_free_text(d, specs) for d, (_, specs) in zip(data, schemas, strict=True)]
        judged_keys = [(key[0], encode_canonical(j)) for key, j in zip(keys, judged_data, strict=True)]
        free_text = tuple(_free_text_paths(data[chosen_index], judged_data[chosen_index]))
    judged_agreement = pairwise_agreement(Counter(judged_keys).values())
    decided = _record_rule(judged_agreement, result_agreement, n, called, tool, status, registry, rule,
                           "agreement of the non-free-text arguments" if free_text else "argument agreement")
    if record.decision is PlanDecision.REJECT and decided.decision is PlanDecision.ACCEPT:
        decided = _Rule(PlanDecision.ACCEPT, "free_text_varies",
                        f"the samples differ only in free-text arguments {list(free_text)} (whole-call agreement "
                        f"{arg_agreement:.2f}, the rest {judged_agreement:.2f}): a paraphrase is not a fabrication")
    extra: dict[str, Any] = {"judged_agreement": judged_agreement, "argument_agreement": _per_argument(data),
                             "free_text": free_text}
    if not provenance or not called:
        return verdict(decided, **extra)

    def report_for(i: int, documentation: dict[str, ProvenanceContext]) -> ProvenanceReport:
        tool_schema = registry.schema(samples[i].tool)
        docs = None
        if tool_schema is not None and tool_schema.documentation:
            docs = documentation.setdefault(tool_schema.name, ProvenanceContext([tool_schema.documentation]))
        return check_arguments(data[i], schemas[i][1], context or _EMPTY, docs)

    docs_cache: dict[str, ProvenanceContext] = {}
    if decided.reason == "free_text_varies" and not _free_text_grounded(
            samples, keys, registry, lambda i: report_for(i, docs_cache)):
        decided = record  # the wording varies, but some variant names a code nothing supports: the record stands
    if decided.decision is PlanDecision.REJECT:
        if _every_variant_grounded(samples, keys, registry, lambda i: report_for(i, docs_cache)):
            decided = _Rule(PlanDecision.ACCEPT, "grounded_choice",
                            f"{n} sampled plans chose among {len(set(judged_keys))} different argument sets for "
                            f"{tool!r} (agreement {judged_agreement:.2f}), but every one is grounded in what the "
                            "agent saw or was found by its dry run: a choice among real things, not an invention")
    if context is None or context.empty:
        return verdict(decided, **extra)
    report = report_for(chosen_index, docs_cache)
    ran = [samples[i] for i in modal if samples[i].ran]
    found = _confirms(schema) and any(found_by_dry_run(sample) for sample in ran)
    not_found = _confirms(schema) and not found and any(missed_by_dry_run(sample) for sample in ran)
    if found:
        report = report.confirmed_by_execution()
    extra["provenance"] = report
    if decided.decision is not PlanDecision.REJECT:
        if not report.grounded:
            first = report.ungrounded[0]
            decided = _Rule(PlanDecision.REJECT, "ungrounded_identifier",
                            f"{tool!r} would be called with {first.path or 'its argument'}={first.value!r}: "
                            f"{first.detail} (task, conversation, earlier tool results), and the dry run did not "
                            f"find it (argument agreement {judged_agreement:.2f} over {n} samples): it looks "
                            "invented", decided.quarantine)
        elif report.partial and not_found:
            first = report.partial[0]
            decided = _Rule(PlanDecision.REJECT, "ungrounded_identifier",
                            f"{tool!r} would be called with {first.path or 'its argument'}={first.value!r}, built "
                            "from parts of what the agent saw but never seen whole, and its dry run found nothing "
                            f"(argument agreement {judged_agreement:.2f} over {n} samples): it looks recombined, "
                            "not looked up", decided.quarantine)
    return verdict(decided, **extra)


_EMPTY = ProvenanceContext()


def _confirms(schema: ToolSchema | None) -> bool:
    return schema is None or schema.execution_confirms


def _every_variant_grounded(samples: Sequence[PlanSample], judged_keys: Sequence[tuple[str, bytes]],
                            registry: DeterminismRegistry, report: Any) -> bool:
    """Each distinct argument set is grounded whole in the context, or one of its dry runs found what it names."""
    members: dict[tuple[str, bytes], list[int]] = {}
    for i, key in enumerate(judged_keys):
        members.setdefault(key, []).append(i)
    for indices in members.values():
        if _confirms(registry.schema(samples[indices[0]].tool)) and any(found_by_dry_run(samples[i])
                                                                         for i in indices):
            continue
        if not report(indices[0]).whole:
            return False
    return True


def _free_text_grounded(samples: Sequence[PlanSample], keys: Sequence[tuple[str, bytes]],
                        registry: DeterminismRegistry, report: Any) -> bool:
    """No variant's free text mentions a code (``INC-3fa9c2``) that nothing supports, unless its dry run found it."""
    first: dict[tuple[str, bytes], int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    for key, i in first.items():
        if _confirms(registry.schema(samples[i].tool)) and any(
                found_by_dry_run(samples[j]) for j, other in enumerate(keys) if other == key):
            continue
        if any(g.kind is ArgumentKind.FREE_TEXT and not g.grounded for g in report(i).checked):
            return False
    return True


class ConsistencyGate:
    """The gate a harness holds: a determinism registry, the thresholds, and the quarantine they drive.

    `per_argument` and `provenance` switch the two refinements over the record's rule (both on by
    default; both off is the rule alone). `evaluate(samples, context=...)` takes what the agent
    had seen; without a context, no call is rejected for provenance alone.
    """

    def __init__(self, registry: DeterminismRegistry, thresholds: GateThresholds | None = None, *,
                 per_argument: bool = True, provenance: bool = True) -> None:
        self.registry = registry
        self.thresholds = thresholds or GateThresholds()
        self.per_argument = per_argument
        self.provenance = provenance

    def evaluate(self, samples: Sequence[PlanSample], context: ProvenanceContext | None = None) -> PlanVerdict:
        """Classify the batch and quarantine the tool a deferral names."""
        verdict = classify_plan(samples, self.registry, self.thresholds, context=context,
                                per_argument=self.per_argument, provenance=self.provenance)
        for tool in verdict.quarantine:
            self.registry.quarantine(tool, verdict.message, verdict.evidence())
        return verdict

    def gate_or_raise(self, samples: Sequence[PlanSample], context: ProvenanceContext | None = None) -> PlanVerdict:
        """Strict use: `evaluate`, raising `HallucinationGateError` on a rejection (and on an unfixed epoch)."""
        verdict = self.evaluate(samples, context)
        if verdict.decision is PlanDecision.REJECT:
            raise HallucinationGateError(verdict.message, verdict)
        return verdict
