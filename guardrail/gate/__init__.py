"""StateMirror: a read-only pre-execution gate that catches hallucinated tool calls before they run."""

from guardrail.gate.layer import EditorState, Gate, GateLayer, GateState
from guardrail.gate.predicates import Outcome, Predicate, ProbeResult
from guardrail.gate.report import GateReport

__all__ = ["EditorState", "Gate", "GateLayer", "GateReport", "GateState", "Outcome", "Predicate", "ProbeResult"]
