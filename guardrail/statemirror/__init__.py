"""StateMirror: a read-only pre-execution gate that catches hallucinated tool calls before they run."""

from guardrail.statemirror.layer import EditorState, Gate, GateLayer, GateState
from guardrail.statemirror.predicates import Outcome, Predicate, ProbeResult
from guardrail.statemirror.report import GateReport

__all__ = ["EditorState", "Gate", "GateLayer", "GateReport", "GateState", "Outcome", "Predicate", "ProbeResult"]
