"""The verifier spec of a testbed task, in the `verifiers.spec` format, built from the task's text alone.

A deployable check may read the task (that is what the user asked for) but never its ground
truth, so this works from the prompt: `parse_goal` gives the goal, the goal gives the calls a
complete run makes (required coverage), the units each priced line item counts (total
consistency: nights, bags) and the figures a run may use without a tool giving them.
"""

from __future__ import annotations

import re
from typing import Any

from traces.tasks import (
    BaggageGoal,
    CatalogGoal,
    FareGoal,
    Goal,
    HotelGoal,
    NightsGoal,
    PickGoal,
    RouteGoal,
    TourGoal,
    TravellersGoal,
    TwoLegsGoal,
    parse_goal,
)

__all__ = ["TOOL_SHAPES", "verifier_spec"]

_NUMBER = r"(?P<value>\d+(?:\.\d+)?)"
TOOL_SHAPES: dict[str, list[dict[str, str]]] = {
    "lookup_flight": [{"pattern": rf"\${_NUMBER}", "kind": "value"}],
    "lookup_hotel": [{"pattern": rf"\${_NUMBER}/night", "kind": "value"}],
    "get_weather": [{"pattern": "sunny|mild|cloudy|rainy|windy|snowy", "kind": "value"}],
    "search_catalog": [{"pattern": rf"[^;]+ \(SKU-\d+\): \${_NUMBER}(?:; .*)?", "kind": "value"},
                       {"pattern": r"No catalog items match .*", "kind": "empty"}],
    "calculator": [{"pattern": rf"-?{_NUMBER}", "kind": "value"}],
    "search_docs": [{"pattern": rf"(?s).*\${_NUMBER} per checked bag.*", "kind": "value"},
                    {"pattern": r"No documents match .*", "kind": "empty"}],
    "read_file": [{"pattern": r"(?s)(?:[A-Z][a-z]+ [A-Z][a-z]+\n?)+", "kind": "value"}],
}
_KEY_ARGS = {"lookup_flight": ["origin", "destination"], "lookup_hotel": ["city"], "get_weather": ["city"],
             "search_catalog": ["query"], "search_docs": ["query"], "read_file": ["path"]}


def _required(goal: Goal) -> dict[str, dict[str, Any]]:
    return {tool: {"count": count, "distinct_by": _KEY_ARGS[tool]} for tool, count in goal.required_counts().items()}


def _line_items(goal: Goal) -> tuple[dict[str, dict[str, Any]], list[float], bool]:
    """(line items per tool, constants, whether a total can be checked from line items at all).

    Multiplicities are numbers or expressions over `_QUANTITIES` (version 2 of the spec format).
    """
    if isinstance(goal, RouteGoal):
        return ({"lookup_flight": {"multiplicity": 1, "key_args": _KEY_ARGS["lookup_flight"], "count": 2},
                 "lookup_hotel": {"multiplicity": goal.nights, "key_args": ["city"], "count": 1}},
                [goal.nights], True)
    if isinstance(goal, TourGoal):
        stops = len(goal.stops)
        return ({"lookup_flight": {"multiplicity": 1, "key_args": _KEY_ARGS["lookup_flight"], "count": stops},
                 "lookup_hotel": {"multiplicity": goal.nights, "key_args": ["city"], "count": stops - 1}},
                [goal.nights], True)
    if isinstance(goal, PickGoal):
        return {"lookup_hotel": {"multiplicity": goal.nights, "key_args": ["city"], "count": 1}}, [goal.nights], True
    if isinstance(goal, BaggageGoal):
        return ({"lookup_flight": {"multiplicity": 1, "key_args": _KEY_ARGS["lookup_flight"], "count": 2},
                 "search_docs": {"multiplicity": 2 * goal.bags, "key_args": ["query"], "count": 1}},
                [goal.bags, 2], True)
    if isinstance(goal, CatalogGoal):
        # Each item counts its own quantity, read from the task next to the item's name.
        return ({"search_catalog": {"multiplicity": "quantity", "key_args": ["query"], "count": len(goal.items)}},
                sorted({float(q) for q, _ in goal.items}), True)
    if isinstance(goal, FareGoal | TwoLegsGoal):
        legs = 1 if isinstance(goal, FareGoal) else 2
        return {"lookup_flight": {"multiplicity": 1, "key_args": _KEY_ARGS["lookup_flight"], "count": legs}}, [], True
    if isinstance(goal, HotelGoal | NightsGoal):
        nights = goal.nights if isinstance(goal, NightsGoal) else 1
        return ({"lookup_hotel": {"multiplicity": nights, "key_args": ["city"], "count": 1}},
                [nights] if nights > 1 else [], True)
    if isinstance(goal, TravellersGoal):
        # The fares count once per traveller listed in the file the run reads.
        return ({"lookup_flight": {"multiplicity": "travellers", "key_args": _KEY_ARGS["lookup_flight"], "count": 2}},
                [], True)
    return {}, [], False


# Quantities a multiplicity may name: a per-item quantity from the task text, a head count from a file.
_QUANTITIES: dict[str, dict[str, Any]] = {
    "quantity": {"from": "task", "pattern": r"(?P<value>\d+) x {key}"},
    "travellers": {"from": "tool", "tool": "read_file", "measure": "items"},
}


def verifier_spec(task_text: str) -> dict[str, Any] | None:
    """A `verifiers.spec.VerifierSpec`-shaped dict for a testbed task, or None when the text is no testbed task."""
    goal = parse_goal(task_text)
    if goal is None:
        return None
    items, constants, totals = _line_items(goal)
    required = _required(goal)
    tools: dict[str, dict[str, Any]] = {}
    for tool in {*goal.tools, *required}:
        spec: dict[str, Any] = {"returns": TOOL_SHAPES[tool]}
        if tool in items:
            spec["line_item"] = items[tool]
        if tool in required:
            spec["required"] = required[tool]
        if tool == "calculator":
            spec.update({"combines": True, "expression_arg": "expression"})
        tools[tool] = spec
    checks = ["required_coverage", "tool_contract", "completion"]
    if totals:
        # Grounding needs the same thing totals do: each priced item's units (a number, a per-item
        # quantity, a head count read from a file); without them a correct total looks ungrounded.
        checks = ["total_consistency", *checks[:2], "grounding", checks[2]]
    used = {str(i["multiplicity"]) for i in items.values()}
    return {
        "format": "guardrail-verifier-spec",
        "version": 2,
        "name": f"testbed_{goal.kind}",
        "description": f"testbed task ({goal.kind}): {goal.text()}",
        "match": {"tools_all": sorted(required), "task_pattern": re.escape(goal.text())},
        "priority": 50,
        "checks": checks,
        "tools": dict(sorted(tools.items())),
        "error_shapes": [r"(?s)(?:Error|ERROR): .*"],
        "total_words": ["total", "comes to", "answer"],
        "constants": [float(c) for c in constants],
        "quantities": {name: q for name, q in _QUANTITIES.items() if name in used},
    }


def flag_rates(corpus_dir: str) -> dict[str, dict[str, float]]:
    """Per label: the share of episodes each check flags (and any check), with each episode's own task spec."""
    from collections import Counter, defaultdict

    from guardrail.core.corpus import read_corpus
    from verifiers import VerifierSpec, verify_episode

    counts: Counter[str] = Counter()
    flagged: dict[str, Counter[str]] = defaultdict(Counter)
    for episode in read_corpus(corpus_dir).episodes:
        raw = verifier_spec(episode.task or "")
        if raw is None:
            continue
        flags = verify_episode(episode, VerifierSpec.model_validate(raw)).flags
        counts[episode.label] += 1
        flagged[episode.label]["any"] += any(flags.values())
        for check, hit in flags.items():
            flagged[episode.label][check] += hit
    return {label: {"n": float(n), **{k: v / n for k, v in sorted(flagged[label].items())}}
            for label, n in sorted(counts.items())}


if __name__ == "__main__":  # python -m traces.specs CORPUS_DIR...: the verifiers' flag rates per label
    import json
    import sys

    for path in sys.argv[1:]:
        print(json.dumps({"corpus": path, "flag_rates": flag_rates(path)}))
