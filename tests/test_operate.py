"""Operating a guard: deployed from a guardrail.toml, its model swapped while episodes run, a shadow model beside it,
drift read back, and the metrics at a real OTLP receiver; on this file's own order agent, on LangChain and AutoGen."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from guardrail import Guard
from guardrail.core.cli import main
from guardrail.core.fileio import sha256_file
from guardrail.core.otlp import configure_metrics
from guardrail.core.runstore import open_store
from monitors.model_file import load_monitor
from tests.operate_agents import Shop, fitted_models, run_autogen, run_langchain


def _label_all(store: str, label: str = "healthy") -> None:
    with open_store(store, create=False) as opened:
        opened.set_labels({s.episode_id: label for s in opened.summaries() if s.status == "complete"})


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return fitted_models(tmp_path_factory)


def _deployment(tmp_path: Path, models: Path, **extra: str) -> Path:
    shutil.copy(models / "monitor.npz", tmp_path / "monitor.npz")
    shutil.copy(models / "next.npz", tmp_path / "next.npz")
    lines = ['mode = "report"', "", "[monitor]", 'model = "monitor.npz"', 'shadow_model = "next.npz"', "",
             "[record]", 'store = "sqlite:///runs.db"', "finish_timeout_s = 5"]
    for section, text in extra.items():
        lines += ["", f"[{section}]", text]
    (tmp_path / "guardrail.toml").write_text("\n".join(lines) + "\n")
    return tmp_path / "guardrail.toml"


def _swap(path: Path, source: Path) -> None:
    """Replace the deployed file the way an operator would: write beside it, rename over it."""
    staged = path.with_suffix(".tmp")
    shutil.copy(source, staged)
    staged.replace(path)


def _scores(episode) -> list[float | None]:
    return [(s.meta.get("guard") or {}).get("score") for s in episode.steps if s.kind.value != "final"]


def test_a_guard_from_guardrail_toml_swaps_its_model_between_episodes_and_never_inside_one(
        tmp_path, models, otlp_receiver):
    config = _deployment(tmp_path, models)
    provider = configure_metrics("operate-test", endpoint=otlp_receiver.endpoint, set_global=False,
                                 export_interval_ms=3_600_000)
    try:
        _swap_while_running(tmp_path, models, otlp_receiver, Guard.from_config(config, meter=provider.get_meter("g")),
                            provider)
    finally:
        provider.shutdown()


def _swap_while_running(tmp_path, models, otlp_receiver, guard, provider) -> None:
    store = guard.recorder.store.url
    sha_a, sha_b = sha256_file(models / "monitor.npz"), sha256_file(models / "next.npz")
    assert guard.versions()["model_sha256"] == sha_a and guard.versions()["shadow_model_sha256"] == sha_b

    # One LangChain run holds inside its first tool call while the model file is replaced and other runs go on.
    release, holding = threading.Event(), threading.Event()

    class HeldShop(Shop):
        def lookup_order(self, order_id: str) -> str:
            holding.set()
            assert release.wait(30)
            return super().lookup_order(order_id)

    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(run_langchain, guard, 101, HeldShop())
        assert holding.wait(30)
        _swap(tmp_path / "monitor.npz", models / "next.npz")
        run_langchain(guard, 102, Shop())  # starts after the swap: the new model judges it
        asyncio.run(run_autogen(guard, 103, Shop()))
        release.set()
        held.result(timeout=60)
    (tmp_path / "monitor.npz").write_bytes(b"PK\x03\x04 a half-copied file")  # corrupt: refused
    asyncio.run(run_autogen(guard, 104, Shop()))
    run_langchain(guard, 105, Shop())
    assert guard.flush()

    assert [(e.outcome, e.new_sha256) for e in guard.swaps][:1] == [("swapped", sha_b)]
    assert [e.outcome for e in guard.swaps] == ["swapped", "refused"]
    with open_store(store, create=False) as opened:
        episodes = {e.task: e for e in opened.episodes()}
    judged = {task: e.meta["run"]["versions"]["model_sha256"] for task, e in episodes.items()}
    by_seed = {seed: next(e for task, e in episodes.items() if task == _task(seed)) for seed in range(101, 106)}
    assert judged[_task(101)] == sha_a  # started before the swap: kept model A to its end
    assert {judged[_task(s)] for s in (102, 103, 104, 105)} == {sha_b}
    model_a, model_b = load_monitor(models / "monitor.npz"), load_monitor(models / "next.npz")
    for seed, episode in by_seed.items():
        model = model_a if seed == 101 else model_b
        rescored = model.score_episode(episode).scores
        assert _scores(episode) == pytest.approx(rescored[:len(_scores(episode))], rel=1e-6), seed  # one version
    refused = [f for f in by_seed[104].meta["run"]["findings"] if f["check"] == "swap_refused"]
    assert len(refused) == 1  # said once, by the run that saw it
    assert not [f for f in by_seed[105].meta["run"]["findings"] if f["check"] == "swap_refused"]

    # The shadow (next.npz) scored every step beside the live decision and never acted.
    for episode in by_seed.values():
        shadow = episode.meta["run"]["shadow"]["shadow_monitor"]
        assert shadow["versions"] == {"model_sha256": sha_b}
        steps = [s for s in episode.steps if "shadow" in s.meta]
        assert steps and all(s.meta["shadow"]["shadow_monitor"]["score"] is not None for s in steps)
        shadow_scores = [s.meta["shadow"]["shadow_monitor"]["score"] for s in steps]
        assert shadow_scores == pytest.approx(model_b.score_episode(episode).scores[:len(steps)], rel=1e-6)

    # The metrics reached the receiver: decisions, per-layer latency histograms, episodes, swaps, recorder drops.
    provider.force_flush()
    assert otlp_receiver.got_metrics.wait(10)
    decisions = otlp_receiver.metric("guardrail.decisions")
    assert sum(p.value for p in decisions if p.attributes["guardrail.hook"] == "on_step") >= 10
    latency = {p.attributes["guardrail.layer"]: p for p in otlp_receiver.metric("guardrail.layer.duration")
               if p.attributes["guardrail.hook"] == "on_step"}
    assert {"monitor", "shadow_monitor"} <= set(latency) and latency["monitor"].kind == "histogram"
    assert latency["monitor"].value >= 10 and sum(latency["monitor"].bucket_counts) == latency["monitor"].value
    assert sum(p.value for p in otlp_receiver.metric("guardrail.episodes")) == 5
    swaps = {p.attributes["guardrail.outcome"]: p.value for p in otlp_receiver.metric("guardrail.swaps")}
    assert swaps == {"swapped": 1, "refused": 1}
    assert [p.value for p in otlp_receiver.metric("guardrail.recorder.dropped")] == [0]
    assert {p.service_name for p in otlp_receiver.points} == {"operate-test"}
    guard.close()


def _task(seed: int) -> str:
    from tests.operate_agents import task_text

    return task_text(seed)


def test_runs_compare_lists_where_live_and_shadow_disagree(tmp_path, models, capsys):
    config = _deployment(tmp_path, models)
    guard = Guard.from_config(config)
    for seed in range(300, 306):
        run_langchain(guard, seed, Shop(shifted=seed % 2 == 0))  # shifted runs: the models may part ways
    guard.close()
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    capsys.readouterr()

    assert main(["runs", store, "--compare", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 6 and {r["layer"] for r in rows} == {"monitor"}
    with open_store(store, create=False) as opened:
        episodes = {e.episode_id: e for e in opened.episodes()}
    for row in rows:
        episode = episodes[row["episode_id"]]
        live_alarm = any(f["severity"] == "alarm" for f in episode.meta["run"]["findings"])
        shadow_alarm = episode.meta["run"]["shadow"]["shadow_monitor"]["alarm_step"] is not None
        assert row["agree"] == (live_alarm == shadow_alarm)
    assert main(["runs", store, "--compare"]) == 0
    out = capsys.readouterr().out
    assert f"live and shadow disagree on {sum(not r['agree'] for r in rows)}" in out


def test_drift_says_refit_when_healthy_runs_change_shape_and_not_on_fresh_healthy_runs(
        tmp_path, models, otlp_receiver, capsys):
    config = _deployment(tmp_path, models)
    guard = Guard.from_config(config, shadow_model=None)
    for seed in range(400, 412):
        run_langchain(guard, seed, Shop())
    for seed in range(412, 424):
        asyncio.run(run_autogen(guard, seed, Shop()))
    guard.flush()
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    _label_all(store)
    capsys.readouterr()

    assert main(["drift", store, "--model", str(tmp_path / "monitor.npz"), "--json",
                 "--otlp", otlp_receiver.endpoint]) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert fresh["verdict"] == "ok" and fresh["runs"] == 24, fresh["message"]
    assert fresh["alarm_ci"][0] <= fresh["alarm_rate"] <= fresh["alarm_ci"][1] and fresh["budget"] == 0.05
    assert otlp_receiver.got_metrics.wait(10)
    exported = {p.metric: p for p in otlp_receiver.points if p.metric.startswith("guardrail.drift.")}
    assert exported["guardrail.drift.alarm_rate"].value == pytest.approx(fresh["alarm_rate"])
    assert exported["guardrail.drift.refit"].value == 0.0
    assert exported["guardrail.drift.runs"].attributes["guardrail.verdict"] == "ok"

    for seed in range(500, 512):  # the tools' new API version: same answers, another result shape
        run_langchain(guard, seed, Shop(shifted=True))
    for seed in range(512, 524):
        asyncio.run(run_autogen(guard, seed, Shop(shifted=True)))
    guard.close()
    _label_all(store)

    assert main(["drift", store, "--model", str(tmp_path / "monitor.npz"), "--json"]) == 0
    shifted = json.loads(capsys.readouterr().out)
    assert shifted["verdict"] == "refit" and shifted["runs"] == 48
    assert shifted["message"].startswith("refit recommended:") and "budget 5%" in shifted["message"]
    assert "g" in shifted["channels_moved"]
    assert main(["drift", store, "--model", str(tmp_path / "monitor.npz")]) == 0
    assert capsys.readouterr().out.startswith("refit recommended:")
