"""The five checks on hand-made booking-tour runs: each check's positive and negative case."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from guardrail.core.events import Episode, Step, StepKind, ToolEvent
from verifiers import Contract, ContractError, contracts_for, load_spec, verify_episode

SPEC = load_spec("booking_tour")
LEGS = [("Osaka", "Prague", "$364"), ("Prague", "Bergen", "$410"), ("Bergen", "Tunis", "$222"), ("Tunis", "Osaka", "$179")]
HOTELS = [("Prague", "$288/night"), ("Bergen", "$177/night"), ("Tunis", "$155/night")]
WEATHER = [("Prague", "rainy"), ("Bergen", "rainy"), ("Tunis", "mild")]
TRUE_TOTAL = 364 + 410 + 222 + 179 + 2 * (288 + 177 + 155)  # 2415


def tour(*, legs=LEGS, hotels=HOTELS, weather=WEATHER, expression="(364+410+222+179)+(288*2)+(177*2)+(155*2)",
         calc_result="2415", answer="The total cost of the tour is $2415 USD. Rainy in Prague and Bergen, mild in Tunis.",
         extra: list[tuple[str, dict[str, Any], str]] = ()) -> Episode:
    calls: list[tuple[str, dict[str, Any], str]] = []
    calls += [("lookup_flight", {"origin": o, "destination": d}, r) for o, d, r in legs]
    calls += [("lookup_hotel", {"city": c}, r) for c, r in hotels]
    calls += [("get_weather", {"city": c}, r) for c, r in weather]
    calls += list(extra)
    if expression is not None:
        calls.append(("calculator", {"expression": expression}, calc_result))
    steps = [Step(index=i, kind=StepKind.TOOL_CALL, text=f"[{name}(...) -> {result}]",
                  tool_events=[ToolEvent(name=name, args=args, result=result)])
             for i, (name, args, result) in enumerate(calls)]
    if answer is not None:
        steps.append(Step(index=len(steps), kind=StepKind.FINAL, text=answer))
    return Episode(episode_id="hand-made", steps=steps)


def checks_flagged(episode: Episode) -> set[str]:
    return {check for check, flagged in verify_episode(episode, SPEC).flags.items() if flagged}


def findings_of(episode: Episode, check: str):
    return [f for f in verify_episode(episode, SPEC).findings if f.check == check]


def test_a_correct_run_passes_every_check():
    assert checks_flagged(tour()) == set()


# ---------------------------------------------------------------- total_consistency
def test_a_total_that_is_not_the_sum_of_the_items_is_flagged():
    episode = tour(answer="The total is $2515 USD.")
    [finding] = findings_of(episode, "total_consistency")
    assert finding.evidence["recomputed"] == TRUE_TOTAL
    assert finding.step == len(episode.steps) - 1
    assert finding.blocking


def test_wrong_multiplicity_counting_hotels_once_is_flagged():
    once = 364 + 410 + 222 + 179 + 288 + 177 + 155
    episode = tour(expression="364+410+222+179+288+177+155", calc_result=str(once),
                   answer=f"The total is ${once}.")
    assert "total_consistency" in checks_flagged(episode)


def test_flights_counted_three_times_is_flagged_even_though_the_calculator_did_it():
    wrong = 3 * (364 + 410 + 222 + 179) + 2 * (288 + 177 + 155)
    episode = tour(expression="(364+410+222+179)*3+(288+177+155)*2", calc_result=str(wrong),
                   answer=f"The grand total is ${wrong:,} USD.")
    assert "total_consistency" in checks_flagged(episode)


def test_the_total_is_read_after_the_total_word_not_the_last_figure():
    episode = tour(answer="The total is $2,415, of which flights are $1175 and hotels $1240.")
    assert checks_flagged(episode) == set()


def test_an_answer_without_a_total_is_flagged():
    assert "total_consistency" in checks_flagged(tour(answer="The tour is booked; enjoy the weather."))


def test_an_extra_flight_lookup_admits_any_four_legs():
    extra = [("lookup_flight", {"origin": "Osaka", "destination": "Lisbon"}, "$999")]
    assert "total_consistency" not in checks_flagged(tour(extra=extra))


def test_a_retried_lookup_counts_once_with_its_latest_value():
    extra = [("lookup_hotel", {"city": "Tunis"}, "$155/night")]
    assert checks_flagged(tour(extra=extra)) == set()


# ---------------------------------------------------------------- unreadable currency
def test_an_unreadable_currency_figure_is_an_explicit_error_not_a_pass():
    episode = tour(answer="The total is $2,41,5 USD.")
    flagged = checks_flagged(episode)
    assert {"total_consistency", "grounding"} <= flagged
    [finding] = findings_of(episode, "total_consistency")
    assert "cannot read" in finding.message and "$2,41,5" in finding.message


def test_a_currency_sign_with_no_number_is_unreadable():
    assert "total_consistency" in checks_flagged(tour(answer="The total is $TBD."))


# ---------------------------------------------------------------- required_coverage
def test_a_missing_flight_leg_is_a_missing_call():
    [finding] = findings_of(tour(legs=LEGS[:3], answer="The total is $2236."), "required_coverage")
    assert "lookup_flight: 3 of 4" in finding.message


def test_weather_missing_for_a_hotel_city_is_flagged_by_name():
    [finding] = findings_of(tour(weather=WEATHER[:2]), "required_coverage")
    assert finding.evidence["missing"] == ["tunis"]


def test_weather_for_the_wrong_city_does_not_cover_a_hotel_city():
    weather = [*WEATHER[:2], ("Osaka", "sunny")]
    [finding] = findings_of(tour(weather=weather), "required_coverage")
    assert finding.evidence["missing"] == ["tunis"]


def test_a_call_that_only_got_an_error_must_be_repeated():
    legs = [*LEGS[:3], ("Tunis", "Osaka", "ERROR: service temporarily unavailable - no data returned.")]
    flagged = checks_flagged(tour(legs=legs, answer="The total is $2236."))
    assert "required_coverage" in flagged and "tool_contract" not in flagged


# ---------------------------------------------------------------- tool_contract
def test_a_malformed_result_is_flagged_at_its_step():
    legs = [*LEGS[:2], ("Bergen", "Tunis", "$222 $17"), LEGS[3]]
    [finding] = findings_of(tour(legs=legs), "tool_contract")
    assert finding.step == 2
    assert "lookup_flight" in finding.message


def test_a_declared_empty_answer_is_a_valid_shape():
    legs = [*LEGS, ("Osaka", "Cusco", "No route found between Osaka and Cusco.")]
    assert "tool_contract" not in checks_flagged(tour(legs=legs))


def test_contract_from_a_pattern():
    contract = Contract.from_pattern(r"\$\d+")
    assert contract.violation("$12") is None
    assert "does not fully match" in contract.violation("$12 extra")


def test_contract_from_a_return_annotation():
    def lookup_price(item: str) -> float:
        return 1.0

    contract = Contract.from_callable(lookup_price)
    assert contract.violation("12.5") is None
    assert contract.violation("", data=3.0) is None
    assert "not a float" in contract.violation("twelve")


def test_contract_from_a_pydantic_model():
    class Quote(BaseModel):
        price: float
        currency: str

    contract = Contract.from_model(Quote)
    assert contract.violation('{"price": 3, "currency": "USD"}') is None
    assert "price" in contract.violation('{"currency": "USD"}')


def test_contract_from_a_json_schema():
    contract = Contract.from_json_schema({"type": "object", "required": ["results"],
                                          "properties": {"results": {"type": "array"}}})
    assert contract.violation('{"results": []}') is None
    assert "not JSON" in contract.violation("No web results.")
    assert "results" in contract.violation('{"hits": 1}')


def test_a_callable_without_a_return_annotation_cannot_make_a_contract():
    def untyped(x):
        return x

    with pytest.raises(ContractError, match="no return annotation"):
        Contract.from_callable(untyped)


def test_a_tool_contract_overrides_the_spec_shapes():
    contracts = {"lookup_flight": Contract.from_pattern(r"\$\d+ USD")}
    verdict = verify_episode(tour(), SPEC, contracts=contracts)
    assert sum(f.check == "tool_contract" for f in verdict.findings) == 4


# ---------------------------------------------------------------- grounding
def test_an_invented_price_in_the_calculator_is_flagged_at_that_step():
    episode = tour(hotels=HOTELS[:2], expression="(364+410+222+179)+(288*2)+(177*2)+(140*2)", calc_result="2385",
                   answer="The total is $2385.")
    [finding] = findings_of(episode, "grounding")
    assert finding.evidence["ungrounded"] == [140.0]
    assert finding.step == len(episode.steps) - 2  # the calculator step, not the answer


def test_an_ungrounded_figure_in_the_answer_is_flagged():
    episode = tour(answer="The total is $2415 USD, including a $95 airport transfer.")
    [finding] = findings_of(episode, "grounding")
    assert finding.evidence["ungrounded"] == [95.0]


def test_sums_of_received_items_are_grounded():
    answer = "Flights cost $1175 and the hotels $1240 for two nights each, so the total is $2415."
    assert "grounding" not in checks_flagged(tour(answer=answer))


def test_a_weather_contradiction_is_flagged():
    episode = tour(answer="The total is $2415. It will be sunny in Prague, rainy in Bergen and mild in Tunis.")
    [finding] = findings_of(episode, "grounding")
    assert finding.evidence["contradictions"] == [["get_weather", "prague", "sunny", "rainy"]]


def test_respectively_lists_pair_cities_and_weather_by_position():
    good = "The total is $2415. Prague, Bergen and Tunis are rainy, rainy and mild respectively."
    bad = "The total is $2415. Prague, Bergen and Tunis are rainy, mild and mild respectively."
    assert "grounding" not in checks_flagged(tour(answer=good))
    assert "grounding" in checks_flagged(tour(answer=bad))


# ---------------------------------------------------------------- completion
@pytest.mark.parametrize("answer", ["", "   ", 'calculator({"expression": "1+1"})',
                                    '{"name": "lookup_flight", "arguments": {"origin": "Osaka"}}'])
def test_an_empty_or_bare_tool_call_answer_is_incomplete(answer):
    assert "completion" in checks_flagged(tour(answer=answer))


@pytest.mark.parametrize("answer", ["Done (total $512)", "The total is $1108.", "Booked (see above)."])
def test_a_real_answer_with_parentheses_is_complete(answer):
    # The monitor once had its own completion check that read "Done (total $512)" as a bare tool call;
    # there is one completion check now, and a sentence is an answer.
    assert "completion" not in checks_flagged(tour(answer=answer))


def test_a_run_that_ends_on_a_tool_call_is_incomplete():
    [finding] = findings_of(tour(answer=None), "completion")
    assert "ended on a tool call" in finding.message


def test_the_json_record_has_exactly_the_interface_fields():
    record = verify_episode(tour(answer="The total is $1."), SPEC).to_json()
    assert set(record) == {"episode_id", "flags", "findings"}
    assert set(record["flags"]) == {"total_consistency", "required_coverage", "tool_contract", "grounding",
                                    "completion", "answer_parts", "tool_error", "provenance"}


class Quote(BaseModel):
    price: float


def test_contracts_are_read_off_real_langchain_and_autogen_tools():
    from autogen_core.tools import FunctionTool
    from langchain_core.tools import tool

    @tool
    def quote(item: str) -> Quote:
        """Price an item."""
        return Quote(price=1.0)

    @tool
    def describe(item: str) -> str:
        """Free text: says nothing about its shape."""
        return item

    def count_items(kind: str) -> int:
        return 3

    contracts = contracts_for([quote, describe, FunctionTool(count_items, description="count")])
    assert sorted(contracts) == ["count_items", "quote"]
    assert contracts["quote"].violation('{"price": 2.5}') is None
    assert contracts["quote"].violation('{"price": "cheap"}') is not None
    assert contracts["count_items"].violation("3") is None
    assert contracts["count_items"].violation("three") is not None


def test_too_many_alternatives_is_said_not_flagged():
    extra = [("lookup_flight", {"origin": f"City{i}", "destination": f"Town{i}"}, f"${100 + i}") for i in range(24)]  # C(28, 4) > MAX_COMBINATIONS
    verdict = verify_episode(tour(extra=extra, answer="The total is $99999."), SPEC)
    [note] = [f for f in verdict.findings if f.check == "total_consistency"]
    assert not note.blocking and note.severity == "info" and "not checked" in note.message
    assert verdict.flags["total_consistency"] is False


def test_two_hotels_at_the_same_rate_are_two_items_for_grounding():
    hotels = [("Prague", "$150/night"), ("Bergen", "$150/night"), ("Tunis", "$155/night")]
    total = 364 + 410 + 222 + 179 + 2 * (150 + 150 + 155)
    answer = f"Hotels in Prague and Bergen cost $600 together; the total is ${total}."
    episode = tour(hotels=hotels, expression="(364+410+222+179)+(150*2)+(150*2)+(155*2)", calc_result=str(total),
                   answer=answer)
    assert checks_flagged(episode) == set()
