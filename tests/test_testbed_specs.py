"""Each testbed task's verifier spec validates, passes a healthy run and flags a wrong total."""

from __future__ import annotations

import pytest

from traces.agents import run_langgraph_episode
from traces.policy import Policy
from traces.specs import verifier_spec
from traces.tasks import TASK_KINDS, make_task
from traces.tools import BookingDB, booking_tools
from verifiers import VerifierSpec, pick_spec, verify_episode

DB = BookingDB()


@pytest.mark.parametrize("kind", TASK_KINDS)
def test_spec_of_every_task_kind_validates_and_a_healthy_run_raises_no_flag(kind: str) -> None:
    task = make_task(5, db=DB, kinds=[kind])
    spec = VerifierSpec.model_validate(verifier_spec(task.prompt))
    assert pick_spec(task.tools, [task.prompt], specs=[spec]) is spec  # the spec matches its own task
    episode = run_langgraph_episode(task, Policy(seed=5), toolbox=booking_tools(DB))
    assert not any(verify_episode(episode, spec).flags.values())


def test_an_arithmetic_slip_on_a_route_task_fails_total_consistency() -> None:
    task = make_task(8, db=DB, kinds=["route"])
    spec = VerifierSpec.model_validate(verifier_spec(task.prompt))
    episode = run_langgraph_episode(task, Policy(seed=8, arithmetic_rate=1.0), toolbox=booking_tools(DB))
    assert verify_episode(episode, spec).flags["total_consistency"]


def test_text_that_is_no_testbed_task_has_no_spec() -> None:
    assert verifier_spec("Summarize the news.") is None
