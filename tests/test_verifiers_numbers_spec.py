"""The number reader and the spec loader, including fuzzing on untrusted text."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrail.core.events import Episode, Step, StepKind, ToolEvent
from tests.fuzzing import FUZZ, nasty_text
from verifiers import (
    NumberFormatError,
    SpecError,
    find_figures,
    load_spec,
    pick_spec,
    read_number,
    verify_episode,
)
from verifiers.spec import builtin_specs


# ---------------------------------------------------------------- reading numbers
@pytest.mark.parametrize(("text", "value"), [
    ("2415", 2415.0), ("$2,415", 2415.0), ("$14,694 USD", 14694.0), ("USD 40", 40.0), ("3671.62", 3671.62),
    ("$2.5k", 2500.0), ("-12", -12.0), ("two thousand four hundred and fifteen", 2415.0), ("fifty-two dollars", 52.0),
])
def test_read_number_reads_currency_separators_and_words(text, value):
    assert read_number(text) == value


@pytest.mark.parametrize("text", ["$1,23,4", "12.3.4", "$", "abc", "1e309", "twelveish", ""])
def test_read_number_rejects_what_is_not_a_number_with_the_reason(text):
    with pytest.raises(NumberFormatError, match=r"\S"):
        read_number(text)


def test_find_figures_marks_money_rates_and_prose():
    figures, unreadable = find_figures("Hotels at $288/night, 3 cities, total $2,415 USD.")
    assert [(f.value, f.monetary, f.rate) for f in figures] == [(288.0, True, True), (3.0, False, False),
                                                                (2415.0, True, False)]
    assert unreadable == []


@pytest.mark.parametrize("text", ["total $1,23,4", "total $12.3.4", "total $X", "total $ -"])
def test_unreadable_currency_is_reported_not_dropped(text):
    figures, unreadable = find_figures(text, monetary_only=True)
    assert figures == [] and len(unreadable) == 1


@pytest.mark.fuzz
@FUZZ
@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=99))
def test_formatted_amounts_read_back_exactly(units, cents):
    assert read_number(f"${units:,}.{cents:02d}") == pytest.approx(units + cents / 100)


@pytest.mark.fuzz
@FUZZ
@given(nasty_text)
def test_read_number_either_reads_a_finite_number_or_says_why(text):
    try:
        assert math.isfinite(read_number(text))
    except NumberFormatError:
        pass


@pytest.mark.fuzz
@FUZZ
@given(st.text(alphabet="$0123456789,. USDkm-twohundred/night", max_size=60) | nasty_text)
def test_find_figures_never_raises_and_returns_finite_values(text):
    figures, unreadable = find_figures(text)
    assert all(math.isfinite(f.value) for f in figures)
    assert all(u.reason for u in unreadable)


@pytest.mark.fuzz
@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["lookup_flight", "lookup_hotel", "get_weather", "calculator"]),
                          st.dictionaries(st.sampled_from(["city", "origin", "destination", "expression"]), nasty_text,
                                          max_size=3),
                          nasty_text), max_size=8), nasty_text)
def test_verify_episode_never_raises_on_arbitrary_runs(calls, answer):
    steps = [Step(index=i, kind=StepKind.TOOL_CALL, tool_events=[ToolEvent(name=n, args=a, result=r)])
             for i, (n, a, r) in enumerate(calls)]
    steps.append(Step(index=len(steps), kind=StepKind.FINAL, text=answer))
    verdict = verify_episode(Episode(episode_id="fuzz", steps=steps), load_spec("booking_tour"))
    assert all(f.blocking and f.message for f in verdict.findings)


def test_a_huge_answer_is_read_up_to_the_cap_and_says_so():
    figures, unreadable = find_figures("$1 " + "word " * 25_000 + "$2")
    assert [f.value for f in figures] == [1.0] and "cap" in unreadable[-1].reason


# ---------------------------------------------------------------- specs
def test_every_shipped_spec_loads_and_validates():
    names = {spec.name for spec in builtin_specs()}
    assert {"booking_tour", "booking_tools", "research", "research_loop", "generic"} <= names


@pytest.mark.parametrize(("tools", "tasks", "expected"), [
    ({"lookup_flight", "lookup_hotel", "get_weather", "calculator"}, [], "booking_tour"),
    ({"lookup_flight", "lookup_hotel", "search_catalog", "calculator"}, ["Find the cheaper route"], "booking_tools"),
    ({"arxiv_search", "wikipedia_search", "web_search", "python"}, ["You are a research assistant ..."], "research"),
    ({"arxiv_search", "wikipedia_search", "web_search", "python"}, [], "research_loop"),
    ({"read_file"}, [], "generic"),
])
def test_the_spec_is_picked_from_the_tools_and_tasks(tools, tasks, expected):
    assert pick_spec(tools, tasks).name == expected


def test_the_research_spec_requires_the_published_calls():
    required = {name: tool.required.count for name, tool in load_spec("research").tools.items() if tool.required}
    assert required == {"arxiv_search": 2, "wikipedia_search": 2, "web_search": 1, "python": 1}


def test_an_invalid_spec_names_the_bad_field(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"name": "x", "tools": {"t": {"returns": [{"pattern": "(unclosed"}]}}}))
    with pytest.raises(SpecError, match=r"tools\.t\.returns\.0\.pattern.*invalid regular expression"):
        load_spec(path)


def test_a_link_to_an_unknown_tool_is_rejected(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text('name = "x"\n[tools.get_weather.required]\ncount = 1\n'
                    '[tools.get_weather.required.for_each]\ntool = "lookup_hotel"\narg = "city"\n')
    with pytest.raises(SpecError, match="unknown tool 'lookup_hotel'"):
        load_spec(path)


def test_an_unknown_spec_name_lists_the_shipped_ones():
    with pytest.raises(SpecError, match="booking_tour"):
        load_spec("no_such_spec")
