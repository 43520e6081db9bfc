"""Each injector alters the tool results from its onset, the agent reacts, and tau is the step it first showed."""

from __future__ import annotations

import json

import pytest

from guardrail.core.corpus import RejectedEntry
from guardrail.core.events import Episode, ToolEvent
from traces.agents import run_langgraph_episode
from traces.collect import label_run
from traces.injectors import INJECTED_CLASSES, LOOP_MESSAGE, make_injector
from traces.policy import Policy
from traces.tasks import Task, make_task, parse_goal
from traces.tools import BookingDB, booking_tools

DB = BookingDB()
ONSET = 2


def _run(failure_class: str, seed: int = 21, onset: int = ONSET) -> tuple[Episode | RejectedEntry, Task, list[int]]:
    task = make_task(seed, db=DB)
    injector = make_injector(failure_class, onset=onset, seed=seed, db=DB)
    box = booking_tools(DB, fault=injector)
    episode = run_langgraph_episode(task, Policy(seed=seed), toolbox=box, episode_id=f"t-{failure_class}")
    return label_run(episode, task, failure_class, injector=injector, toolbox=box), task, injector.applied


def _events_from(episode: Episode, step: int) -> list[ToolEvent]:
    return [e for s in episode.steps[step:] for e in s.tool_events]


@pytest.mark.parametrize("failure_class", INJECTED_CLASSES)
def test_injected_episode_is_labelled_with_tau_at_the_first_altered_result(failure_class: str) -> None:
    episode, _, applied = _run(failure_class)
    assert isinstance(episode, Episode)
    assert episode.label == failure_class and applied and min(applied) == ONSET
    assert episode.tau is not None
    before = [e for s in episode.steps[: episode.tau] for e in s.tool_events]
    assert len(before) == ONSET  # one call per step before the onset, all untouched
    assert episode.meta["injection"]["first_applied_step"] == episode.tau


def test_looping_makes_the_agent_repeat_the_exact_same_call() -> None:
    episode, _, _ = _run("looping")
    assert isinstance(episode, Episode) and episode.tau is not None
    repeated = [(e.name, json.dumps(e.args, sort_keys=True)) for e in _events_from(episode, episode.tau)
                if e.result == LOOP_MESSAGE]
    assert len(repeated) >= 3 and len(set(repeated)) == 1


def test_tool_cascade_fails_every_call_from_the_onset() -> None:
    episode, _, _ = _run("tool_cascade")
    assert isinstance(episode, Episode) and episode.tau is not None
    after = _events_from(episode, episode.tau)
    assert after and all(e.is_error and "HTTP 503" in (e.result or "") for e in after)


def test_context_corruption_splices_a_second_figure_into_a_true_result() -> None:
    episode, task, _ = _run("context_corruption")
    assert isinstance(episode, Episode) and episode.tau is not None
    corrupted = episode.steps[episode.tau].tool_events[0].result or ""
    assert corrupted.count("$") == 2 and not episode.steps[episode.tau].tool_events[0].is_error


def test_goal_drift_makes_the_agent_pursue_the_injected_task() -> None:
    episode, task, _ = _run("goal_drift")
    assert isinstance(episode, Episode) and episode.tau is not None
    drifted_text = episode.steps[episode.tau].tool_events[0].result or ""
    assert "New task:" in drifted_text
    new_goal = parse_goal(drifted_text.split("New task:", 1)[1])
    assert new_goal is not None and new_goal != task.goal
    new_calls = {(c.tool, json.dumps(c.arg_dict, sort_keys=True)) for c in new_goal.calls()}
    later = {(e.name, json.dumps(e.args, sort_keys=True)) for e in _events_from(episode, episode.tau + 1)}
    assert later & new_calls


def test_malformed_json_results_are_truncated_envelopes() -> None:
    episode, _, applied = _run("malformed_json")
    assert isinstance(episode, Episode) and episode.tau is not None
    text = episode.steps[episode.tau].tool_events[0].result or ""
    assert text.startswith('{"results"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_wrong_document_replaces_the_result_with_an_unrelated_document() -> None:
    episode, _, _ = _run("wrong_document")
    assert isinstance(episode, Episode) and episode.tau is not None
    text = episode.steps[episode.tau].tool_events[0].result or ""
    assert "$" not in text and text.endswith(".")


@pytest.mark.parametrize(("failure_class", "marker"), [("rate_limit", "429"), ("timeout", "timed out")])
def test_transient_errors_stop_after_their_duration_and_the_agent_recovers(failure_class: str, marker: str) -> None:
    episode, _, applied = _run(failure_class)
    assert isinstance(episode, Episode) and episode.tau is not None
    after = _events_from(episode, episode.tau)
    errors = [e for e in after if e.is_error and marker in (e.result or "")]
    assert len(errors) == len(applied) >= 2
    assert any(not e.is_error for e in after)  # the service came back


def test_an_injector_that_never_fires_is_rejected_with_its_reason() -> None:
    outcome, _, applied = _run("timeout", onset=500)
    assert applied == []
    assert isinstance(outcome, RejectedEntry)
    assert outcome.requested_label == "timeout" and "never fired" in outcome.reason
