"""Fuzz the repair inputs that come from models and tools: raw tool-call arguments, huge results, odd evidence."""

from __future__ import annotations

import pytest
from autogen_core import FunctionCall
from autogen_core.models import AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, ToolMessage

from adapters.steps import RESULT_CAP, steps_from_autogen_context, steps_from_langchain
from guardrail import Finding
from repair.rungs import RUNGS, RungNotApplicable, make_hint
from tests.fuzzing import FUZZ, json_values, nasty_text

pytestmark = pytest.mark.fuzz


@FUZZ
@given(arguments=nasty_text, result=nasty_text, is_error=st.booleans())
def test_autogen_steps_keep_whatever_arguments_the_model_emitted(arguments: str, result: str, is_error: bool) -> None:
    messages = [
        AssistantMessage(content=[FunctionCall(id="c1", name="lookup", arguments=arguments)], source="agent"),
        FunctionExecutionResultMessage(content=[FunctionExecutionResult(call_id="c1", content=result, name="lookup",
                                                                        is_error=is_error)]),
    ]
    (step,) = steps_from_autogen_context(messages)
    event = step.tool_events[0]
    assert event.result == result and event.is_error == is_error
    assert event.args is not None


@FUZZ
@given(args=st.dictionaries(nasty_text, json_values, max_size=4),
       size=st.integers(0, 3 * RESULT_CAP))
def test_langchain_steps_cap_tool_results_and_count_their_full_size(args: dict, size: int) -> None:
    messages = [AIMessage(content="", tool_calls=[{"name": "lookup", "args": args, "id": "c1"}]),
                ToolMessage(content="x" * size, tool_call_id="c1")]
    (step,) = steps_from_langchain(messages)
    event = step.tool_events[0]
    assert len(event.result or "") == min(size, RESULT_CAP)
    assert event.result_chars == size and event.result_truncated == (size > RESULT_CAP)


@FUZZ
@given(evidence=st.dictionaries(st.sampled_from(["expected", "stated", "values", "other"]), json_values, max_size=4),
       message=nasty_text | st.text(min_size=2000, max_size=5000), rung=st.sampled_from(RUNGS))
def test_hints_are_bounded_whatever_the_evidence(evidence: dict, message: str, rung: str) -> None:
    finding = Finding(layer="verify", check="total_consistency", message=message, evidence=evidence,
                      blocking=True, step=2, hint=message)
    try:
        hint = make_hint(rung, [finding], tools={"calculator"})  # type: ignore[arg-type]
    except RungNotApplicable:
        pytest.fail("every rung applies when the agent holds a calculator")
    assert hint.text is None or len(hint.text) <= 1200
