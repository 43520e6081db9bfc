"""Canonical forms: equal meaning gives equal bytes, different meaning never does."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail.consistency import (
    CanonicalizationError,
    CanonicalLimits,
    ToolSchema,
    canonical_args,
    canonical_bytes,
    canonical_result,
)
from guardrail.consistency.canonical import spelling
from tests.fuzzing import FUZZ


def test_key_order_does_not_matter():
    assert canonical_args({"b": 1, "a": {"y": 2, "x": 3}}) == canonical_args({"a": {"x": 3, "y": 2}, "b": 1})


@pytest.mark.parametrize("spelling", ["1", "1.0", "1e0", "1.000", "10e-1"])
def test_integral_numbers_in_any_float_spelling_are_equal(spelling):
    assert canonical_args(f'{{"n": {spelling}}}') == canonical_args({"n": 1})


def test_distinct_floats_stay_distinct_and_negative_zero_is_zero():
    assert canonical_args({"x": 0.1}) != canonical_args({"x": 0.10000000000000002})
    assert canonical_args({"x": -0.0}) == canonical_args({"x": 0})
    assert canonical_args({"x": 2.5}) == b'{"x":2.5}'


def test_huge_integral_float_is_not_turned_into_an_int():
    assert canonical_args({"x": 1e300}) == b'{"x":1e+300}'


def test_bool_is_not_the_number_one():
    assert canonical_args({"flag": True}) != canonical_args({"flag": 1})


def test_nan_is_tagged_not_confused_with_a_string():
    assert canonical_args({"x": float("nan")}) != canonical_args({"x": "NaN"})
    assert canonical_args({"x": float("inf")}) != canonical_args({"x": float("-inf")})


def test_unicode_composed_and_decomposed_forms_are_equal():
    composed = "caf\u00e9"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    assert canonical_args({"city": composed}) == canonical_args({"city": decomposed})
    assert canonical_args({decomposed: 1}) == canonical_args({composed: 1})


def test_keys_equal_after_normalization_are_a_clear_error():
    with pytest.raises(CanonicalizationError, match="duplicate key"):
        canonical_args({"caf\u00e9": 1, unicodedata.normalize("NFD", "caf\u00e9"): 2})


def test_lists_keep_order_unless_the_schema_says_otherwise():
    assert canonical_args({"ids": [1, 2]}) != canonical_args({"ids": [2, 1]})
    unordered = frozenset({"ids"})
    assert canonical_args({"ids": [1, 2]}, unordered=unordered) == canonical_args({"ids": [2, 1]}, unordered=unordered)


def test_nested_order_insensitive_lists_by_path():
    unordered = frozenset({"rows[].tags", "rows"})
    one = {"rows": [{"id": 1, "tags": ["a", "b"]}, {"id": 2, "tags": ["c", "d"]}]}
    two = {"rows": [{"tags": ["d", "c"], "id": 2}, {"tags": ["b", "a"], "id": 1}]}
    assert canonical_args(one, unordered=unordered) == canonical_args(two, unordered=unordered)
    # Only the named paths: the inner list of another field keeps its order.
    assert canonical_args({"m": [[1, 2]]}, unordered=frozenset({"m"})) != canonical_args(
        {"m": [[2, 1]]}, unordered=frozenset({"m"}))
    assert canonical_args({"m": [[1, 2]]}, unordered=frozenset({"m[]"})) == canonical_args(
        {"m": [[2, 1]]}, unordered=frozenset({"m[]"}))


def test_json_schema_unique_items_marks_lists_order_insensitive():
    schema = ToolSchema.from_json_schema("get_order", {
        "type": "object", "deterministic": True,
        "properties": {
            "fields": {"type": "array", "uniqueItems": True, "items": {"type": "string"}},
            "path": {"type": "array", "items": {"type": "string"}},
            "filters": {"type": "object", "properties": {
                "ids": {"type": "array", "x-order-insensitive": True, "items": {"type": "integer"}}}},
        },
    })
    assert schema.deterministic is True
    assert schema.unordered_args == frozenset({"fields", "filters.ids"})


def test_json_text_arguments_equal_the_parsed_object():
    assert canonical_args('{"b": [1.0, "x"], "a": null}') == canonical_args({"a": None, "b": [1, "x"]})


def test_text_results_ignore_line_endings_and_trailing_spaces_but_not_content():
    assert canonical_result("line one  \r\nline two\n") == canonical_result("line one\nline two")
    assert canonical_result("line one\nline two") != canonical_result("line two\nline one")


def test_json_text_results_compare_as_data():
    assert canonical_result('{"b": 1, "a": 2.0}') == canonical_result({"a": 2, "b": 1})


def test_sets_and_tuples_and_bytes():
    assert canonical_bytes({3, 1, 2}) == canonical_bytes([1, 2, 3], unordered=frozenset({""}))
    assert canonical_bytes((1, 2)) == canonical_bytes([1, 2])
    assert canonical_bytes(b"\x00\xff") == b'{"$bytes":"00ff"}'


def test_unsupported_types_get_a_clear_error():
    with pytest.raises(CanonicalizationError, match="cannot canonicalize a object"):
        canonical_bytes({"x": object()})


def test_depth_and_size_are_bounded():
    deep: object = 1
    for _ in range(100):
        deep = [deep]
    with pytest.raises(CanonicalizationError, match="nested deeper"):
        canonical_bytes(deep)
    with pytest.raises(CanonicalizationError, match="elements"):
        canonical_bytes(list(range(50)), limits=CanonicalLimits(max_nodes=10))
    with pytest.raises(CanonicalizationError, match="characters"):
        canonical_bytes("x" * 100, limits=CanonicalLimits(max_chars=10))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@pytest.mark.fuzz
@FUZZ
@given(json_values)
def test_canonical_bytes_are_valid_json_and_a_fixed_point(value):
    try:
        encoded = canonical_bytes(value)
    except CanonicalizationError:
        return  # only duplicate keys after NFC may legitimately fail here
    assert canonical_bytes(json.loads(encoded)) == encoded


@pytest.mark.fuzz
@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_argument_text_never_crashes(text):
    try:
        canonical_args(text)
        canonical_result(text)
    except CanonicalizationError:
        pass


# ---------------------------------------------------------------------------- spellings of one argument
@pytest.mark.parametrize("spellings", [
    [{"amount": 1000}, {"amount": 1e3}, {"amount": "1e3"}, {"amount": "1,000.0"}, {"amount": " 1000 "},
     '{"amount": 1000.0}', '{\n  "amount": "+1000"\n}'],
    [{"path": "b"}, {"path": "./b"}, {"path": "./a/../b"}, {"path": "b/"}, {"path": "b "}],
    [{"path": "docs/a.md"}, {"path": "docs//a.md"}, {"path": "./docs/x/../a.md"}],
    [{"q": "deploy rollback"}, {"q": "  deploy   rollback"}, {"q": "deploy rollback\t"}],
    [{"name": "caf\u00e9"}, {"name": "cafe\u0301"}, {"name": " caf\u00e9"}],
    [{"ids": [1, 2]}, {"ids": ["1", "2.0"]}],
], ids=["numbers", "paths", "nested-paths", "whitespace", "unicode", "lists"])
def test_spellings_of_one_argument_agree(spellings):
    assert len({canonical_args(s) for s in spellings}) == 1


@pytest.mark.parametrize("different", [
    ({"id": "007"}, {"id": 7}),  # a leading zero is an identifier
    ({"amount": "1,5"}, {"amount": 1.5}),  # an ambiguous decimal comma stays text
    ({"v": "1.2.3"}, {"v": "1.2"}),
    ({"url": "http://x/a/../b"}, {"url": "http://x/b"}),  # URLs are not file paths
    ({"cmd": "echo  a"}, {"cmd": "echo a b"}),
    ({"path": "../b"}, {"path": "b"}),  # leaving the folder is another place
    ({"text": "a\nb"}, {"text": "a b"}),  # lines stay lines
])
def test_different_meanings_stay_apart(different):
    left, right = different
    assert canonical_args(left) != canonical_args(right)


def test_results_are_not_respelled():
    # Only arguments are read for their meaning; a tool result that is "1000" vs 1000 is what the tool said.
    assert canonical_result("1000") != canonical_result(1000)
    assert spelling("1e400") == "1e400" and spelling("-0") == 0
