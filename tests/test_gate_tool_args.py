"""`tool_args_valid` against declared schemas: the frameworks' own tools read unasked, the fast path equal to jsonschema."""

from __future__ import annotations

from typing import Any, Literal

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail import Action, Guard, Verdict
from guardrail.gate.tool_args import SchemaError, args_problems, schema_signature
from tests.fuzzing import FUZZ


def convert(value: float, unit: Literal["K", "C", "F"], digits: int = 2) -> str:
    """Convert a temperature."""
    return f"{value:.{digits}f} {unit}"


def _framework_tools() -> dict[str, Any]:
    from autogen_core.tools import FunctionTool
    from langchain_core.tools import tool

    return {"langchain": [tool(convert)], "autogen": [FunctionTool(convert, description="Convert a temperature.")],
            "openai": [{"type": "function", "function": {"name": "convert", "parameters": {
                "type": "object", "properties": {"value": {"type": "number"}, "unit": {"enum": ["K", "C", "F"]}},
                "required": ["value", "unit"]}}}]}


@pytest.mark.parametrize("form", ["langchain", "autogen", "openai"])
def test_tools_given_in_any_form_hold_every_call_to_their_schema(form):
    guard = Guard.default(tools=_framework_tools()[form], mode="intervene")
    ctx = guard.start_episode()

    assert ctx.before_action(Action.tool_call("convert", {"value": 277.15, "unit": "K"})).verdict is Verdict.ALLOW
    missing = ctx.before_action(Action.tool_call("convert", {"value": 277.15}))
    wrong_type = ctx.before_action(Action.tool_call("convert", {"value": "277.15", "unit": "K"}))
    outside_enum = ctx.before_action(Action.tool_call("convert", {"value": 1, "unit": "kelvin"}))
    for decision, words in ((missing, "missing required argument 'unit'"), (wrong_type, "must be number"),
                            (outside_enum, "must be one of")):
        assert decision.verdict is Verdict.BLOCK, decision
        (finding,) = decision.findings
        assert (finding.layer, finding.check, finding.predicate) == ("gate", "malformed_call", "tool_args_valid")
        assert words in finding.message and finding.hint.startswith("call it as convert(")


def test_an_episode_declares_its_own_tools_and_an_unknown_tool_is_not_judged():
    guard = Guard.default(mode="intervene")
    ctx = guard.start_episode(tool_schemas={"lookup": {"type": "object", "properties": {"city": {"type": "string"}},
                                                       "required": ["city"]}})
    assert ctx.before_action(Action.tool_call("lookup", {})).blocked
    assert ctx.before_action(Action.tool_call("other", {})).verdict is Verdict.ALLOW
    assert ctx.episode.tools == ["lookup"]


def test_a_range_is_part_of_the_contract_and_shows_in_the_hint():
    schema = {"type": "object", "properties": {"nights": {"type": "integer", "minimum": 1, "maximum": 30}},
              "required": ["nights"]}
    assert args_problems({"nights": 0}, schema) == ["argument 'nights' must be >= 1, got 0"]
    assert args_problems({"nights": 3}, schema) == []
    assert schema_signature("book", schema) == "book(nights: integer (>=1, <=30))"


def test_a_hostile_schema_is_refused_and_never_blocks():
    regex_bomb = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}}
    assert args_problems({"q": "a" * 40 + "!"}, regex_bomb) == []  # pattern is not part of the contract checked
    with pytest.raises(SchemaError, match="nests deeper"):
        deep: dict[str, Any] = {"type": "object"}
        for _ in range(100):
            deep = {"type": "object", "properties": {"x": deep}}
        args_problems({}, deep)
    with pytest.raises(SchemaError, match="not a valid JSON Schema"):
        args_problems({}, {"type": 5})
    guard = Guard.default(mode="intervene")
    ctx = guard.start_episode(tool_schemas={"t": {"type": "object", "required": "nope"}})
    decision = ctx.before_action(Action.tool_call("t", {}))
    assert decision.verdict is Verdict.ALLOW and decision.findings[0].check == "tool_schema_unusable"


_PRIMITIVES = ["string", "integer", "number", "boolean", "null"]
_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-5, 5, allow_nan=False), st.text(max_size=3))
_flat_schemas = st.builds(
    lambda props, required, closed: {
        "type": "object", "properties": props, "additionalProperties": not closed,
        "required": [name for name in required if name in props]},
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.one_of(
        st.builds(lambda t: {"type": t}, st.sampled_from(_PRIMITIVES)),
        st.builds(lambda vs: {"enum": vs}, st.lists(_values, min_size=1, max_size=3)),
        st.just({}))),
    st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True),
    st.booleans())


@pytest.mark.fuzz
@FUZZ
@given(schema=_flat_schemas, args=st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _values, max_size=4))
def test_the_fast_path_says_what_jsonschema_says(schema, args):
    expected = jsonschema.Draft202012Validator(schema).is_valid(args)
    assert (args_problems(args, schema) == []) is expected
