"""Numbers with their units: the reader, its agreement with pint, grounding through conversions, hostile input."""

from __future__ import annotations

import json

import pint
import pytest

from guardrail.core.events import Episode, Step, StepKind, ToolEvent
from verifiers.offline import verify_episode
from verifiers.records import MAX_NUMBERS, result_numbers
from verifiers.spec import VerifierSpec
from verifiers.units import convert, field_unit, find_amounts, resolve_unit

REGISTRY = pint.UnitRegistry()
# Unit spellings an answer uses, as the reader resolves them; each must be what pint itself parses them to.
SPELLINGS = ["K", "kelvin", "km", "m", "cm", "mm", "kg", "g", "lb", "oz", "h", "hours", "min", "minutes", "s",
             "seconds", "days", "weeks", "mph", "km/h", "knots", "kWh", "kW", "W", "Pa", "hPa", "ft", "inches",
             "liters", "ml", "tons"]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_the_reader_resolves_a_unit_exactly_as_pint_does(spelling):
    resolved = resolve_unit(spelling)
    assert resolved is not None
    assert REGISTRY.parse_units(resolved[0]) == REGISTRY.parse_units(spelling)
    assert resolved[1] == str(REGISTRY.parse_units(spelling).dimensionality)


@pytest.mark.parametrize("word", ["units", "bags", "at", "in", "a", "am", "pm", "x", "rows", "items", "nights"])
def test_english_words_after_a_number_are_not_units(word):
    assert resolve_unit(word) is None
    assert find_amounts(f"we have 3 {word} left") == []


def test_amounts_keep_their_value_unit_and_precision():
    [celsius, kelvin, distance, share] = find_amounts("It is 4.0 °C (277.15 K) after 1.2 million km; 33.3% of runs.")
    assert (celsius.value, celsius.unit, celsius.decimals) == (4.0, "degree_Celsius", 1)
    assert (kelvin.value, kelvin.dimension) == (277.15, "[temperature]")
    assert (distance.value, distance.unit, distance.decimals) == (1_200_000.0, "kilometer", -5)
    assert (share.value, share.unit) == (33.3, "percent")


def test_offset_temperatures_convert_both_ways():
    assert convert(277.15, "kelvin", "degree_Celsius") == pytest.approx(4.0)
    assert convert(4.0, "degree_Celsius", "degree_Fahrenheit") == pytest.approx(39.2)
    assert convert(12, "kilometer", "kelvin") is None


def test_a_field_name_carries_its_unit():
    assert field_unit("temp_k") == ("kelvin", "[temperature]")
    assert field_unit("distance_km")[0] == "kilometer"
    assert field_unit("speedKph")[0] == "kilometer_per_hour"
    assert field_unit("city") is None and field_unit("count") is None


def _weather_run(answer: str, *, converted: bool = False) -> Episode:
    events = [ToolEvent(name="get_weather", args={"city": "Oslo"},
                        result=json.dumps({"city": "Oslo", "temp_k": 277.15, "condition": "snowy"}))]
    if converted:
        events.append(ToolEvent(name="convert", args={"value": 277.15, "from_unit": "K", "to_unit": "C"},
                                result="4.00 C"))
    steps = [Step(index=i, kind=StepKind.TOOL_CALL, tool_events=[e]) for i, e in enumerate(events)]
    steps.append(Step(index=len(steps), kind=StepKind.FINAL, text=answer))
    return Episode(episode_id="w", steps=steps, task="What is the weather in Oslo in Celsius?",
                   tools=["get_weather", "convert"])


ALL_CHECKS = VerifierSpec(name="every check, no tool declared")


def grounding(episode: Episode) -> list[str]:
    return [f.message for f in verify_episode(episode, ALL_CHECKS).findings if f.check == "grounding"]


def test_a_conversion_the_tool_made_or_the_answer_made_right_is_grounded():
    assert grounding(_weather_run("In Oslo it is 4.00 °C.", converted=True)) == []
    assert grounding(_weather_run("In Oslo it is 4 °C, or 39.2 °F.")) == []  # converted on its own, correctly


def test_a_wrong_temperature_is_caught_in_any_unit():
    [message] = grounding(_weather_run("In Oslo it is 284.45 K."))
    assert "284.45 K" in message
    assert grounding(_weather_run("In Oslo it is 11.3 °C.", converted=True))


def test_a_sum_of_two_received_amounts_is_grounded_and_a_made_up_one_is_not():
    events = [ToolEvent(name="leg", args={"n": i}, result=f"{km} km") for i, km in enumerate((12.5, 30))]
    steps = [Step(index=0, kind=StepKind.TOOL_CALL, tool_events=events),
             Step(index=1, kind=StepKind.FINAL, text="The route is 42.5 km, 17.5 km more on day two.")]
    assert grounding(Episode(episode_id="r", steps=steps, task="How long is the route?")) == []
    steps[1] = Step(index=1, kind=StepKind.FINAL, text="The route is 45 km.")
    assert grounding(Episode(episode_id="r", steps=steps, task="How long is the route?"))


# ------------------------------------------------------------------ hostile input
def test_a_huge_or_deeply_nested_result_is_read_within_its_bounds():
    wide = json.dumps({f"v{i}_km": i for i in range(50_000)})
    assert len(result_numbers(wide)) <= MAX_NUMBERS
    deep = "[" * 100_000 + "]" * 100_000
    assert result_numbers(deep) == [] or len(result_numbers(deep)) <= MAX_NUMBERS
    assert find_amounts("9" * 200_000 + " km") == []  # read up to the cap; and no finite number anyway
    assert find_amounts("1" + "0" * 400 + " km") == []  # too big to be a float: not a figure


def test_malformed_results_and_answers_never_raise():
    for text in ['{"temp_k": "NaN"}', '{"temp_k": 1e999}', "{not json", "\x00\x05 K", "1e400 km", "-- °C", "∞ K"]:
        result_numbers(text)
        find_amounts(text)
    episode = _weather_run("It is 1e999 K and ∞ °C and 1" + "0" * 400 + " km.")
    verify_episode(episode, ALL_CHECKS)
