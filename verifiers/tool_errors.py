"""tool_error: a tool failed for an item, no later call got it, and the answer reports that item as a success.

The item is what the failed call was about (its string arguments: a SKU, a city, a contact).
The answer "reports success" for it when a clause names the item and says nothing of the
failure (no "not", "unavailable", "unknown", "could not", "error", "failed", ...). An item the
answer never names is left alone here (a missing part is `answer_parts`' business).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from guardrail.core.events import Finding
from verifiers.observed import Call, finding

__all__ = ["check_tool_errors"]

_FAILURE_WORDS = re.compile(
    r"(?i)\b(?:not|no|never|none|unavailable|unknown|unable|cannot|can't|couldn't|could not|didn't|did not|wasn't|"
    r"isn't|missing|error|errors|failed|fails|failure|invalid|unrecognized|unrecognised|unsupported|sorry|"
    r"unfortunately|n/a|problem|issue|couldn’t|can’t)\b")
_CLAUSES = re.compile(r"(?:[.!?](?=\s|$)|[;\n]|,|\bbut\b|\bwhile\b|\bhowever\b)+", re.IGNORECASE)
MIN_ITEM_CHARS = 3


def _items(call: Call) -> list[str]:
    args = call.args if isinstance(call.args, dict) else {}
    return [str(v).strip() for v in args.values()
            if isinstance(v, str) and MIN_ITEM_CHARS <= len(v.strip()) <= 80 and not v.strip().isdigit()]


def check_tool_errors(calls: Sequence[Call], answer: str | None, *, step: int | None) -> list[Finding]:
    """One finding naming each failed item the answer states as if it had been found."""
    if not answer:
        return []
    failed: dict[str, Call] = {}
    for call in calls:
        items = _items(call)
        if call.classified.kind == "error":
            for item in items:
                failed.setdefault(item.casefold(), call)
        elif call.made:
            for item in items:
                failed.pop(item.casefold(), None)  # a retry (or another tool) got it after all
    ignored: list[tuple[str, Call]] = []
    clauses = [c for c in _CLAUSES.split(answer[:20_000]) if c and c.strip()]
    for item, call in failed.items():
        pattern = re.compile(r"(?<!\w)" + re.escape(item) + r"(?!\w)", re.IGNORECASE)
        naming = [c for c in clauses if pattern.search(c)]
        if naming and not any(_FAILURE_WORDS.search(c) for c in naming):
            ignored.append((item, call))
    if not ignored:
        return []
    shown = "; ".join(f"{call.tool} failed for {item!r} ({(call.result or 'error').strip()[:80]})"
                      for item, call in ignored[:5])
    return [finding("tool_error", f"the answer reports items a tool failed for as if they were found: {shown}",
                    step=step, evidence={"items": [item for item, _ in ignored[:20]]},
                    hint="say which items the tools could not find instead of reporting them as found")]
