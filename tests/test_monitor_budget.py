"""The fit-time budget check: a deployment whose healthy runs drift, or run long, is told the budget will not hold."""

from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest

from guardrail.core.cli import main
from guardrail.core.corpus import write_corpus
from guardrail.core.events import Episode, Step, StepKind, ToolEvent
from monitors.budget import check_budget
from monitors.model_file import read_header
from monitors.monitor import StepMonitor

OLD = "ticket opened queue triage assigned engineer resolved closed customer notified".split()
NEW = "escalation vendor firmware rollback regression hotfix outage postmortem incident pager".split()


def _run(i: int, words: list[str], steps: int, rng: random.Random) -> Episode:
    events = [Step(index=t, kind=StepKind.TOOL_CALL, text=f"[status(ticket) -> {' '.join(chosen)}]",
                   tool_events=[ToolEvent(name="status", args={"ticket": "open"}, result=" ".join(chosen))])
              for t, chosen in enumerate(rng.sample(words, 4) for _ in range(steps))]
    return Episode(episode_id=f"r{i:03d}", task="report the ticket status",
                   steps=[*events, Step(index=steps, kind=StepKind.FINAL, text="status reported")])


def drifting(n: int = 60) -> list[Episode]:
    """Healthy runs in recording order whose tool starts answering about other things from the middle on."""
    rng = random.Random(0)
    return [_run(i, OLD if i < n // 2 else NEW, 4, rng) for i in range(n)]


def fitted(episodes: list[Episode]) -> StepMonitor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return StepMonitor().fit(episodes)


def test_runs_that_drift_over_time_fail_the_forward_check_and_the_drifting_component_is_named() -> None:
    runs = drifting()
    check = fitted(runs).check_budget(runs)
    assert not check.holds and check.forward_fa is not None and check.forward_fa > 3 * check.beta
    assert check.forward_p is not None and check.forward_p < 0.05
    assert "will not hold on new runs" in check.warnings[0] and "not exchangeable across time" in check.warnings[0]
    assert check.drifting is not None and check.drifting in check.warnings[0]


def test_the_same_runs_in_shuffled_order_hold_the_budget() -> None:
    runs = drifting()
    random.Random(1).shuffle(runs)
    check = fitted(runs).check_budget(runs)
    assert check.holds, check.warnings
    assert check.forward_runs > 0 and (check.forward_fa or 0.0) <= 0.1


def test_long_runs_that_alarm_more_than_the_budget_are_reported() -> None:
    # Out-of-fold maxima where half of the longest fifth (30 steps) crosses the threshold, and no short run does.
    lengths = [4] * 40 + [30] * 10
    check = check_budget(lengths, np.array([1.0] * 40 + [1.0] * 5 + [9.0] * 5), np.zeros((50, 1)), ["c"],
                         threshold=5.0, beta=0.05, forward=lambda cut, end: (0, end - cut))
    assert check.long_min_steps == 30 and (check.long_alarms, check.long_runs) == (5, 10)
    assert not check.holds and "not for long runs" in check.warnings[0] and "30 steps or more" in check.warnings[0]


def test_check_budget_refuses_episodes_other_than_those_fitted() -> None:
    runs = drifting(20)
    with pytest.raises(ValueError, match="fitted on, in the same order"):
        fitted(runs).check_budget(runs[:10])


def test_guardrail_fit_warns_when_its_own_check_says_the_budget_will_not_hold(tmp_path, capsys) -> None:
    write_corpus(tmp_path / "drift", drifting(), name="drift")
    assert main(["fit", str(tmp_path / "drift"), "-o", str(tmp_path / "m.npz"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "guardrail fit: warning: the false-alarm budget will not hold on new runs" in err
    assert "budget check WILL NOT HOLD" in err
    recorded = read_header(tmp_path / "m.npz")["extra"]["budget_check"]
    assert recorded["holds"] is False and recorded["forward_alarms"] > 0
    json.dumps(recorded)  # plain JSON in the model file's header

    steady = drifting()
    random.Random(1).shuffle(steady)
    write_corpus(tmp_path / "steady", steady, name="steady")
    assert main(["fit", str(tmp_path / "steady"), "-o", str(tmp_path / "s.npz"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "budget check holds" in err and "warning: the false-alarm budget" not in err
