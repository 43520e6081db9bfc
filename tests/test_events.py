"""The event model validates at the edges with messages that say what was wrong."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from guardrail import Action, ActionKind, Episode, Result, Step, StepKind, ToolEvent


def test_tool_arguments_given_as_a_json_string_are_parsed():
    action = Action.tool_call("str_replace_editor", '{"command": "view", "path": "/repo/a.py"}')
    assert action.args == {"command": "view", "path": "/repo/a.py"}
    assert action.kind is ActionKind.TOOL


def test_malformed_json_arguments_name_the_problem():
    with pytest.raises(ValidationError, match="not valid JSON"):
        Action.tool_call("lookup", '{"city": "Oslo"')
    with pytest.raises(ValidationError, match="must be a JSON object, got list"):
        Action.tool_call("lookup", "[1, 2]")


def test_unknown_fields_and_kinds_are_refused():
    with pytest.raises(ValidationError, match="kind"):
        Action(kind="telepathy")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="Extra inputs"):
        Step(index=0, kind=StepKind.TEXT, colour="red")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        Step(index=-1, kind=StepKind.TEXT)
    with pytest.raises(ValidationError, match="at least 1 character"):
        Episode(episode_id="")


def test_a_tool_event_is_built_from_an_action_and_its_result():
    action = Action.tool_call("lookup_hotel", {"city": "Lima"}, call_id="c1")
    event = ToolEvent.from_pair(action, Result(output="$88/night", latency_s=0.2))
    assert (event.id, event.name, event.args, event.result, event.result_chars) == (
        "c1", "lookup_hotel", {"city": "Lima"}, "$88/night", 9)
    shell = ToolEvent.from_pair(Action.shell("ls -la"), None)
    assert shell.name == "bash" and shell.args == {"command": "ls -la"} and shell.result is None


def test_episode_answer_is_the_last_final_step():
    episode = Episode(episode_id="e", steps=[
        Step(index=0, kind=StepKind.TOOL_CALL),
        Step(index=1, kind=StepKind.FINAL, text="It is $5."),
    ])
    assert episode.answer == "It is $5." and episode.is_healthy and episode.T == 2
    assert Episode(episode_id="x").answer is None


def test_describe_keeps_messages_short():
    assert len(Action.shell("echo " + "x" * 10_000).describe()) == 200
    assert Action.tool_call("f", {"b": 1, "a": 2}).describe() == 'f({"a": 2, "b": 1})'


def test_model_argument_text_becomes_a_dict_only_when_it_is_a_json_object():
    from guardrail.core.events import parse_call_arguments

    assert parse_call_arguments('{"city": "Oslo"}') == {"city": "Oslo"}
    assert parse_call_arguments("") == {} and parse_call_arguments(None) == {}
    for raw in ("null", "[1, 2]", "42", '{"city": "Oslo"', "\ud800"):
        assert parse_call_arguments(raw) == raw  # kept exactly as the model emitted it
