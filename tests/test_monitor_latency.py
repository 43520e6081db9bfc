"""The latency channel's floor: a host stall in a fast deployment is no alarm, a slow step still is, and model
files written before the floor existed read latencies as they were fitted."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest

from guardrail.core.events import Episode, Step, StepKind, ToolEvent
from monitors import StepMonitor
from monitors.features import LATENCY_FLOOR_S, Telemetry
from monitors.model_file import load_monitor, save_monitor
from tests.hostile.model_files import members_of, write_members


def _episode(i: int, rng: random.Random, *, stall: float | None = None) -> Episode:
    """A healthy run of a deployment whose model and tools answer in a millisecond or two (a cached model)."""
    city = rng.choice(["Prague", "Lisbon", "Oslo", "Quito", "Lima"])
    steps = []
    for t in range(rng.randint(3, 6)):
        tool = rng.choice(["weather", "convert"])
        steps.append(Step(index=t, kind=StepKind.TOOL_CALL, text=f"calling {tool} for {city}",
                          latency_s=rng.uniform(0.0008, 0.003), output_tokens=rng.randint(8, 30),
                          tool_events=[ToolEvent(name=tool, args={"city": city},
                                                 result=f"{city}: {rng.randint(-5, 30)} C")]))
    steps.append(Step(index=len(steps), kind=StepKind.FINAL, text=f"It is mild in {city}.",
                      latency_s=rng.uniform(0.0008, 0.003)))
    if stall is not None:
        steps[0] = steps[0].model_copy(update={"latency_s": stall})
    return Episode(episode_id=f"run{i}", steps=steps, task=f"What is the weather in {city}?")


@pytest.fixture(scope="module")
def healthy() -> list[Episode]:
    rng = random.Random(7)
    return [_episode(i, rng) for i in range(40)]


def _alarms(monitor: StepMonitor, episode: Episode) -> bool:
    return monitor.score_episode(episode).alarm_step is not None


def test_a_stall_below_the_floor_is_no_alarm_and_a_slow_step_still_is(healthy):
    monitor = StepMonitor().fit(healthy)
    unfloored = StepMonitor(telemetry=Telemetry(latency_floor_s=0.0)).fit(healthy)
    rng = random.Random(11)
    stalled = [_episode(100 + i, rng, stall=0.44) for i in range(5)]  # one host stall of 0.44 s at step 0
    slow = [_episode(200 + i, rng, stall=30.0) for i in range(5)]  # a tool that hangs for 30 s

    assert not any(_alarms(monitor, e) for e in stalled)
    assert all(_alarms(unfloored, e) for e in stalled)  # what the floor is for: without it, each stall alarms
    assert all(_alarms(monitor, e) for e in slow)


def test_latencies_under_the_floor_give_the_same_features(healthy):
    telemetry = Telemetry().fit(healthy)
    fast = healthy[0]
    slower = fast.model_copy(update={"steps": [s.model_copy(update={"latency_s": LATENCY_FLOOR_S * 0.9})
                                               for s in fast.steps]})
    over = fast.model_copy(update={"steps": [s.model_copy(update={"latency_s": LATENCY_FLOOR_S * 4})
                                             for s in fast.steps]})

    assert telemetry.latency_floor_ == LATENCY_FLOOR_S
    np.testing.assert_array_equal(telemetry.transform(fast), telemetry.transform(slower))
    assert not np.array_equal(telemetry.transform(fast), telemetry.transform(over))


def test_a_deployment_whose_latencies_spread_past_the_floor_reads_them_as_measured(healthy):
    rng = random.Random(3)
    # A real model: most steps take a few hundred milliseconds, a few take seconds.
    timed = [e.model_copy(update={"steps": [s.model_copy(update={"latency_s": rng.lognormvariate(-1.0, 0.8)})
                                            for s in e.steps]}) for e in healthy]
    telemetry = Telemetry().fit(timed)
    quick = timed[0].model_copy(update={"steps": [s.model_copy(update={"latency_s": 0.01}) for s in timed[0].steps]})

    assert telemetry.latency_floor_ == 0.0
    assert not np.array_equal(telemetry.transform(quick), telemetry.transform(
        quick.model_copy(update={"steps": [s.model_copy(update={"latency_s": 0.2}) for s in quick.steps]})))


def test_the_floor_travels_in_the_model_file_and_a_file_from_before_it_reads_latencies_as_fitted(healthy, tmp_path):
    floored = StepMonitor().fit(healthy)
    save_monitor(floored, tmp_path / "floored.npz")
    assert load_monitor(tmp_path / "floored.npz").telemetry_.latency_floor_ == LATENCY_FLOOR_S

    # A file from before the floor: its detectors were fitted on latencies as measured, and it names no floor.
    unfloored = StepMonitor(telemetry=Telemetry(latency_floor_s=0.0)).fit(healthy)
    save_monitor(unfloored, tmp_path / "new.npz")
    members = members_of(tmp_path / "new.npz")
    header = json.loads(np.lib.format.read_array(io.BytesIO(members["__header__"])).tobytes())
    del header["arrays"]["telemetry.latency_floor"], header["params"]["telemetry"]["latency_floor_s"]
    del members["telemetry.latency_floor"]
    members["__header__"] = _npy_bytes(json.dumps(header).encode())
    write_members(tmp_path / "old.npz", members)

    loaded = load_monitor(tmp_path / "old.npz")
    stalled = _episode(300, random.Random(5), stall=0.44)
    assert loaded.telemetry_.latency_floor_ == 0.0
    assert loaded.score_episode(stalled).scores == unfloored.score_episode(stalled).scores


def _npy_bytes(raw: bytes) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.frombuffer(raw, dtype=np.uint8))
    return buffer.getvalue()
