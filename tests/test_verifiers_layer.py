"""VerifierLayer in the Guard: per-result contract and grounding at their step, end-of-run checks, intervene verdicts."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from adapters.langchain import GuardMiddleware
from guardrail import Guard
from guardrail.core.events import Action, Result, Step, StepKind, ToolEvent, Verdict
from verifiers import VerifierLayer

FLIGHTS = {("Osaka", "Prague"): 364, ("Prague", "Bergen"): 410, ("Bergen", "Tunis"): 222, ("Tunis", "Osaka"): 179}
HOTELS = {"Prague": 288, "Bergen": 177, "Tunis": 155}
WEATHER = {"Prague": "rainy", "Bergen": "rainy", "Tunis": "mild"}
TOTAL = sum(FLIGHTS.values()) + 2 * sum(HOTELS.values())  # 2415


def drive(guard: Guard, calls: list[tuple[str, dict[str, Any], str]], answer: str):
    """Feed a run through the Guard the way an adapter does: before/after each call, a step, then finish."""
    ctx = guard.start_episode(tools=["lookup_flight", "lookup_hotel", "get_weather", "calculator"])
    decisions = []
    for name, args, output in calls:
        action = Action.tool_call(name, args)
        guard.before_action(ctx, action)
        decisions.append(guard.after_result(ctx, action, Result(output=output)))
        guard.on_step(ctx, Step(index=ctx.step_index, kind=StepKind.TOOL_CALL,
                                tool_events=[ToolEvent(name=name, args=args, result=output)]))
    final = guard.on_finish(ctx, answer=answer)
    return ctx, decisions, final


def tour_calls(expression: str = "(364+410+222+179)+(288+177+155)*2", result: str = "2415"):
    calls = [("lookup_flight", {"origin": o, "destination": d}, f"${p}") for (o, d), p in FLIGHTS.items()]
    calls += [("lookup_hotel", {"city": c}, f"${p}/night") for c, p in HOTELS.items()]
    calls += [("get_weather", {"city": c}, w) for c, w in WEATHER.items()]
    calls.append(("calculator", {"expression": expression}, result))
    return calls


def test_a_correct_run_gets_no_findings_in_intervene_mode():
    ctx, decisions, final = drive(Guard([VerifierLayer("booking_tour")], mode="intervene"), tour_calls(),
                                  f"The total is ${TOTAL}. Rainy in Prague and Bergen, mild in Tunis.")
    assert all(d.verdict is Verdict.ALLOW for d in decisions)
    assert final.verdict is Verdict.ALLOW and ctx.findings == []


def test_a_wrong_total_asks_for_repair_at_the_end():
    _, _, final = drive(Guard([VerifierLayer("booking_tour")], mode="intervene"), tour_calls(),
                        "The total is $2515.")
    assert final.verdict is Verdict.REPAIR
    assert [f.check for f in final.findings] == ["total_consistency"]


def test_a_malformed_result_is_blocked_when_it_arrives():
    calls = tour_calls()
    calls[2] = ("lookup_flight", {"origin": "Bergen", "destination": "Tunis"}, "$222 $17")
    ctx, decisions, _ = drive(Guard([VerifierLayer("booking_tour")], mode="intervene"), calls, "The total is $2415.")
    assert decisions[2].verdict is Verdict.BLOCK
    [contract] = [f for f in ctx.findings if f.check == "tool_contract"]
    assert contract.step == 2  # the step this result belongs to


def test_an_invented_figure_in_the_calculator_is_reported_at_that_call_in_report_mode():
    calls = tour_calls(expression="(364+410+222+179)+(288+177+140)*2", result="2385")
    ctx, decisions, _ = drive(Guard([VerifierLayer("booking_tour")], mode="report"), calls, "The total is $2385.")
    assert decisions[-1].verdict is Verdict.WARN
    [grounding] = decisions[-1].findings
    assert grounding.check == "grounding" and grounding.evidence["ungrounded"] == [140.0]


def test_results_are_counted_once_when_an_adapter_sends_both_results_and_steps():
    ctx, _, final = drive(Guard([VerifierLayer("booking_tour")]), tour_calls(), "The total is $2415.")
    layer_state = ctx.state(ctx.guard.layers[0])
    assert len(layer_state.calls) == 11


def test_replaying_recorded_steps_without_results_still_runs_every_check():
    guard = Guard([VerifierLayer("booking_tour")], mode="intervene")
    ctx = guard.start_episode()
    for index, (name, args, output) in enumerate(tour_calls()[:-1]):
        guard.on_step(ctx, Step(index=index, kind=StepKind.TOOL_CALL,
                                tool_events=[ToolEvent(name=name, args=args, result=output)]))
    decision = guard.on_step(ctx, Step(index=10, kind=StepKind.FINAL, text="The total is $2,400 all in, plus a $95 transfer."))
    assert [(f.check, f.evidence["ungrounded"]) for f in decision.findings] == [("grounding", [95.0])]
    final = guard.on_finish(ctx)
    assert {f.check for f in final.findings} == {"total_consistency"}


def test_findings_are_spans_of_the_verifier_layer(spans):
    drive(Guard([VerifierLayer("booking_tour")]), tour_calls(), "The total is $2515.")
    finishing = [s for s in spans.get_finished_spans()
                 if s.name == "guardrail.verifier" and s.attributes["guardrail.hook"] == "on_finish"]
    assert len(finishing) == 1 and finishing[0].attributes["guardrail.finding_count"] == 1


# ------------------------------------------------------------------ a real LangChain agent
class ScriptedChatModel(GenericFakeChatModel):
    """Replays scripted turns; `bind_tools` returns itself so `create_agent` accepts it."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@tool
def lookup_flight(origin: str, destination: str) -> str:
    """Price of a flight leg."""
    price = FLIGHTS.get((origin, destination))
    return f"${price}" if price is not None else "No route found."


@tool
def lookup_hotel(city: str) -> str:
    """Nightly hotel rate in a city."""
    return f"${HOTELS[city]}/night" if city in HOTELS else "Unknown city."


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return WEATHER.get(city, "unknown")


@tool
def calculator(expression: str) -> str:
    """Evaluate + - * / over numbers."""
    allowed = set("0123456789+-*/(). ")
    if not set(expression) <= allowed:
        return "Error: only basic arithmetic is supported."
    return f"{eval(expression, {'__builtins__': {}}):g}"  # noqa: S307 - the characters are restricted above


def agent_turns(answer: str, expression: str = "(364+410+222+179)+(288+177+155)*2") -> list[AIMessage]:
    turns = []
    calls = [("lookup_flight", {"origin": o, "destination": d}) for (o, d) in FLIGHTS]
    calls += [("lookup_hotel", {"city": c}) for c in HOTELS] + [("get_weather", {"city": c}) for c in WEATHER]
    calls.append(("calculator", {"expression": expression}))
    for i, (name, args) in enumerate(calls):
        turns.append(AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"c{i}"}]))
    turns.append(AIMessage(content=answer))
    return turns


def run_agent(turns: list[AIMessage], **middleware_options: Any) -> dict[str, Any]:
    guard = Guard([VerifierLayer("booking_tour")], mode="intervene")
    agent = create_agent(ScriptedChatModel(messages=iter(turns)), [lookup_flight, lookup_hotel, get_weather, calculator],
                         middleware=[GuardMiddleware(guard, **middleware_options)])
    return agent.invoke({"messages": [{"role": "user", "content": "Price the grand tour."}]},
                        {"configurable": {"thread_id": "tour"}})


def test_a_real_agent_with_a_correct_total_passes():
    out = run_agent(agent_turns("The total cost is $2415 USD."))
    assert out["guardrail_verdict"] == "allow"
    assert out["guardrail_findings"] == []


def test_a_real_agent_that_misadds_is_warned_at_the_calculator_and_sent_to_repair():
    repairs = []

    def on_repair(decision, state, runtime):
        repairs.append(decision)
        return None

    wrong = "(364+410+222+179)*3+(288+177+155)*2"
    out = run_agent(agent_turns("The total cost is $4765 USD.", expression=wrong), on_repair=on_repair)
    assert out["guardrail_verdict"] == "repair"
    assert [f.check for f in repairs[0].findings] == ["total_consistency"]
    # The multiplier 3 is no figure the task admits: the calculator's result comes back as an error with the warning.
    calculator_reply = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert calculator_reply.status == "error"
    assert calculator_reply.content.startswith("4765") and "calculator used 3" in calculator_reply.content


async def test_the_async_hooks_run_the_same_checks():
    guard = Guard([VerifierLayer("booking_tour")], mode="intervene")
    ctx = guard.start_episode()
    decisions = []
    for name, args, output in tour_calls():
        action = Action.tool_call(name, args)
        decisions.append(await guard.aafter_result(ctx, action, Result(output=output.replace("$222", "$222 $9"))))
        await guard.aon_step(ctx, Step(index=ctx.step_index, kind=StepKind.TOOL_CALL,
                                       tool_events=[ToolEvent(name=name, args=args, result=output)]))
    final = await guard.aon_finish(ctx, answer="The total is $2515.")
    # The malformed flight price is blocked; so is the calculator call that then uses 222, never validly received.
    blocked = [(i, d.findings[0].check) for i, d in enumerate(decisions) if d.verdict is Verdict.BLOCK]
    assert blocked == [(2, "tool_contract"), (10, "grounding")]
    assert final.verdict is Verdict.REPAIR
