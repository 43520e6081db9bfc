"""Fuzzing the testbed's parsers of untrusted text: the calculator, the task parser, result readers, tool arguments."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.tasks import PlannedCall, parse_goal, read_value
from traces.tools import BookingDB, ToolError, booking_tools, evaluate_expression

# Small in the default run; `make fuzz` sets GUARDRAIL_FUZZ_EXAMPLES for a long campaign.
EXAMPLES = int(os.environ.get("GUARDRAIL_FUZZ_EXAMPLES", "60"))
ARITHMETIC = st.text(alphabet="0123456789+-*/%().,$ eminaxroudbs", max_size=80)
DB = BookingDB()
CALLS = [PlannedCall.of("lookup_flight", "k", "money"), PlannedCall.of("get_weather", "k", "weather"),
         PlannedCall.of("read_file", "k", "lines"), PlannedCall.of("search_docs", "k", "fee"),
         PlannedCall.of("search_catalog", "k", "catalog:sun hat")]


def _calculator_is_total(expression: str) -> None:
    try:
        value = evaluate_expression(expression)
    except ValueError:
        return
    assert isinstance(value, float)


@pytest.mark.fuzz
@settings(max_examples=EXAMPLES, deadline=None)
@given(ARITHMETIC)
def test_calculator_returns_a_number_or_a_value_error(expression: str) -> None:
    _calculator_is_total(expression)


@pytest.mark.parametrize("expression", ["((2**16)**16)**16", "9e300*9e300", "10**10**10", "1/0", "min()", "(" * 300])
def test_calculator_refuses_overflow_and_nonsense_with_a_value_error(expression: str) -> None:
    with pytest.raises(ValueError):
        evaluate_expression(expression)


@pytest.mark.fuzz
@settings(max_examples=EXAMPLES, deadline=None)
@given(st.text(max_size=400))
def test_task_parser_and_result_readers_never_raise(text: str) -> None:
    parse_goal(text)
    for call in CALLS:
        read_value(call, text, pick=3)


@pytest.mark.fuzz
@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from(["lookup_flight", "lookup_hotel", "get_weather", "search_catalog", "calculator",
                        "search_docs", "read_file"]),
       st.text(max_size=60), st.text(max_size=60))
def test_tools_answer_any_argument_with_text_or_a_tool_error(tool: str, first: str, second: str) -> None:
    box = booking_tools(DB)
    function = getattr(box, tool)
    args = (first, second) if tool == "lookup_flight" else (first,)
    try:
        assert isinstance(function(*args), str)
    except ToolError as exc:
        assert str(exc).startswith("Error")
    assert len(box.log) == 1

