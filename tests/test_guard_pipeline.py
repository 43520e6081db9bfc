"""The Guard pipeline: hook order, modes, fail-open / fail-closed, per-episode state, async twins."""

from __future__ import annotations

import asyncio
import json

import pytest

from guardrail import (
    Action,
    Decision,
    Finding,
    Guard,
    GuardError,
    Layer,
    Result,
    Severity,
    Step,
    StepKind,
    Verdict,
)


class Recorder(Layer):
    """Records every hook call in a shared log; optionally returns canned findings per hook."""

    def __init__(self, name: str, log: list[tuple[str, str]], findings: dict[str, list[Finding]] | None = None):
        self.name = name  # type: ignore[misc]
        self.log = log
        self.findings = findings or {}

    def before_action(self, ctx, action):
        self.log.append((self.name, "before_action"))
        return self.findings.get("before_action")

    def after_result(self, ctx, action, result):
        self.log.append((self.name, "after_result"))
        return self.findings.get("after_result")

    def on_step(self, ctx, step):
        self.log.append((self.name, "on_step"))
        return self.findings.get("on_step")

    def on_finish(self, ctx, episode):
        self.log.append((self.name, "on_finish"))
        return self.findings.get("on_finish")


class Exploding(Layer):
    name = "exploding"

    def before_action(self, ctx, action):
        raise RuntimeError("probe crashed")

    def on_step(self, ctx, step):
        raise ValueError("bad telemetry")


class StepCounter(Layer):
    """Keeps a per-episode counter in the episode context, never on itself."""

    name = "counter"

    def new_state(self, ctx):
        return {"steps": 0}

    def on_step(self, ctx, step):
        state = ctx.state(self)
        state["steps"] += 1
        ctx.record_score(self, float(state["steps"]))
        return None


def blocking(check: str = "file_exists") -> Finding:
    return Finding(layer="gate", check=check, message="reports.csv does not exist", blocking=True,
                   predicate="file_exists", args=["reports.csv"], hint="did you mean report.csv?")


def tool_step(i: int) -> Step:
    return Step(index=i, kind=StepKind.TOOL_CALL, text=f"[lookup({i}) -> ok]")


def test_layers_run_in_the_order_given_for_every_hook():
    log: list[tuple[str, str]] = []
    guard = Guard([Recorder("a", log), Recorder("b", log)])
    ep = guard.start_episode(task="t")
    action = Action.tool_call("lookup", {"id": 1})
    ep.before_action(action)
    ep.after_result(action, Result(output="ok"))
    ep.on_step(tool_step(0))
    ep.finish(answer="done")
    assert log == [
        ("a", "before_action"), ("b", "before_action"),
        ("a", "after_result"), ("b", "after_result"),
        ("a", "on_step"), ("b", "on_step"),
        ("a", "on_finish"), ("b", "on_finish"),
    ]


def test_report_mode_warns_but_never_blocks():
    guard = Guard([Recorder("gate", [], {"before_action": [blocking()]})], mode="report")
    decision = guard.start_episode().before_action(Action.shell("cat reports.csv"))
    assert decision.verdict is Verdict.WARN
    assert decision.allowed
    assert decision.findings[0].predicate == "file_exists"


def test_intervene_mode_blocks_a_blocking_finding_before_the_action():
    guard = Guard([Recorder("gate", [], {"before_action": [blocking()]})], mode="intervene")
    decision = guard.start_episode().before_action(Action.shell("cat reports.csv"))
    assert decision.verdict is Verdict.BLOCK
    assert "reports.csv does not exist" in decision.message()
    assert "did you mean report.csv?" in decision.message()


def test_intervene_mode_does_not_block_a_non_blocking_warning():
    warning = Finding(layer="gate", check="symbol_defined", message="unknown", blocking=False)
    guard = Guard([Recorder("gate", [], {"before_action": [warning]})], mode="intervene")
    assert guard.start_episode().before_action(Action.python("import x")).verdict is Verdict.WARN


def test_intervene_mode_asks_for_repair_when_an_end_of_run_check_fails():
    finding = Finding(layer="verifiers", check="total_consistency", message="stated 900, items sum to 950",
                      blocking=True)
    for mode, expected in (("intervene", Verdict.REPAIR), ("report", Verdict.WARN)):
        guard = Guard([Recorder("verifiers", [], {"on_finish": [finding]})], mode=mode)  # type: ignore[arg-type]
        assert guard.start_episode().finish(answer="900").verdict is expected


def test_alarm_severity_gives_an_alarm_in_both_modes():
    alarm = Finding(layer="monitor", check="esn_cusum", message="score 4.1 > 2.7", severity=Severity.ALARM,
                    score=4.1)
    for mode in ("report", "intervene"):
        guard = Guard([Recorder("monitor", [], {"on_step": [alarm]})], mode=mode)  # type: ignore[arg-type]
        assert guard.start_episode().on_step(tool_step(0)).verdict is Verdict.ALARM


def test_info_findings_alone_allow():
    note = Finding(layer="gate", check="unknown", message="compiled extension, not probed", severity=Severity.INFO)
    guard = Guard([Recorder("gate", [], {"before_action": [note]})], mode="intervene")
    assert guard.start_episode().before_action(Action.python("import numpy")).verdict is Verdict.ALLOW


def test_a_raising_layer_becomes_a_finding_and_the_next_layer_still_runs():
    log: list[tuple[str, str]] = []
    guard = Guard([Exploding(), Recorder("after", log)], mode="intervene")
    decision = guard.start_episode().before_action(Action.shell("ls"))
    assert decision.verdict is Verdict.WARN  # fail-open: the agent goes on
    [error] = decision.findings
    assert error.check == "internal_error" and error.severity is Severity.ERROR
    assert "RuntimeError: probe crashed" in error.message
    assert log == [("after", "before_action")]


def test_fail_closed_blocks_on_an_internal_error_in_either_mode():
    for mode in ("report", "intervene"):
        guard = Guard([Exploding()], mode=mode, fail_closed=True)  # type: ignore[arg-type]
        decision = guard.start_episode().before_action(Action.shell("ls"))
        assert decision.verdict is Verdict.BLOCK
        assert decision.findings[0].blocking


def test_a_step_is_recorded_even_when_every_layer_fails():
    guard = Guard([Exploding()])
    ep = guard.start_episode()
    for i in range(3):
        ep.on_step(tool_step(i))
    assert [s.index for s in ep.episode.steps] == [0, 1, 2]
    assert len(ep.findings) == 3


def test_a_layer_returning_something_other_than_findings_is_reported_not_raised():
    class Sloppy(Layer):
        name = "sloppy"

        def on_step(self, ctx, step):
            return ["not a finding"]

    decision = Guard([Sloppy()]).start_episode().on_step(tool_step(0))
    assert decision.findings[0].check == "internal_error"
    assert "expected Finding" in decision.findings[0].message


def test_per_episode_state_lives_in_the_context_not_on_the_layer():
    counter = StepCounter()
    guard = Guard([counter])
    first, second = guard.start_episode(), guard.start_episode()
    for i in range(3):
        first.on_step(tool_step(i))
    decision = second.on_step(tool_step(0))
    assert first.state(counter) == {"steps": 3}
    assert second.state(counter) == {"steps": 1}
    assert decision.score == 1.0
    assert not vars(counter)  # nothing stored on the layer instance


def test_finish_appends_the_answer_as_a_final_step_and_releases_the_episode():
    guard = Guard([])
    ep = guard.start_episode("ep-1")
    ep.on_step(tool_step(0))
    ep.finish(answer="The total is $900.")
    assert ep.episode.answer == "The total is $900."
    assert ep.episode.steps[-1].kind is StepKind.FINAL
    assert guard.running_episodes == []
    with pytest.raises(GuardError, match="no running episode"):
        guard.on_step("ep-1", tool_step(1))


def test_finishing_twice_is_a_clear_error():
    guard = Guard([])
    ep = guard.start_episode()
    ep.finish()
    with pytest.raises(GuardError, match="already finished"):
        guard.on_finish(ep)


def test_episode_ids_are_unique_while_running():
    guard = Guard([])
    guard.start_episode("same")
    with pytest.raises(GuardError, match="already running"):
        guard.start_episode("same")


def test_hooks_accept_the_episode_id_instead_of_the_context():
    log: list[tuple[str, str]] = []
    guard = Guard([Recorder("a", log)])
    guard.start_episode("by-id")
    guard.on_step("by-id", tool_step(0))
    assert log == [("a", "on_step")]


def test_bad_configuration_is_rejected_with_a_clear_message():
    with pytest.raises(GuardError, match="mode must be"):
        Guard([], mode="block-everything")  # type: ignore[arg-type]
    with pytest.raises(GuardError, match="share the name"):
        Guard([Recorder("x", []), Recorder("x", [])])


def test_layers_that_implement_no_hook_cost_nothing():
    class Nothing(Layer):
        name = "nothing"

    guard = Guard([Nothing()])
    assert all(not layers for layers in guard._by_hook.values())


async def test_async_entry_points_use_the_async_twins():
    class AsyncGate(Layer):
        name = "agate"

        async def abefore_action(self, ctx, action):
            await asyncio.sleep(0)
            return [blocking()]

    guard = Guard([AsyncGate(), Exploding()], mode="intervene")
    ep = guard.start_episode()
    decision = await ep.abefore_action(Action.shell("cat reports.csv"))
    assert decision.verdict is Verdict.BLOCK
    assert [f.check for f in decision.findings] == ["file_exists", "internal_error"]
    step_decision = await ep.aon_step(tool_step(0))
    assert step_decision.findings[0].check == "internal_error"
    final = await ep.afinish(answer="ok")
    assert final.verdict is Verdict.ALLOW


def test_decision_round_trips_as_json():
    decision = Decision(verdict=Verdict.BLOCK, hook="before_action", findings=[blocking()])
    again = Decision.model_validate_json(decision.model_dump_json())
    assert again == decision
    assert json.loads(decision.model_dump_json())["verdict"] == "block"
