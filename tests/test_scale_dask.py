"""The Dask engine: the same function over the same shards gives the same results as the local engine, in order."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from guardrail.core.corpus import CorpusError, read_corpus
from guardrail.core.engine import LocalEngine, make_engine

distributed = pytest.importorskip("distributed", reason="the dask engine needs 'distributed' "
                                  "(pip install 'guardrail[scale]')")

from guardrail.core.engine_dask import DaskEngine  # noqa: E402 - after the importorskip on purpose

# Worker processes cannot import this test module by name: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SHARD_NAMES = ["langgraph7b", "autogen7b", "ollama7b", "real_task_rollback"]


@pytest.fixture(scope="module")
def user_cluster() -> Iterator[Any]:
    """A two-process cluster standing in for the user's own scheduler (a `dask scheduler` + 2 `dask worker`s)."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                       scheduler_kwargs={"dashboard": False}, silence_logs=40)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def shards(sentinel_dir: Path) -> list[str]:
    return [str(sentinel_dir / name) for name in SHARD_NAMES]


@pytest.fixture(scope="module")
def small_corpus(sentinel_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The first 80 autogen7b episodes as a corpus of our own: three CLI shards of 32, small enough to run twice."""
    from guardrail.core.corpus import write_corpus

    out = tmp_path_factory.mktemp("corpus") / "autogen80"
    write_corpus(out, read_corpus(sentinel_dir / "autogen7b").episodes[:80])
    return str(out)


def shard_step_digest(shard: str) -> list[tuple[str, str, int, float]]:
    """Per episode: id, label, steps, and a float computed from every step, so any lost or reordered step shows."""
    corpus = read_corpus(shard)
    out = []
    for episode in corpus.episodes:
        weighted = sum((i + 1) * (len(s.text) + sum(len(e.name) for e in s.tool_events))
                       for i, s in enumerate(episode.steps))
        out.append((episode.episode_id, episode.label, len(episode.steps), weighted / 7.0))
    return out


def test_dask_on_the_users_cluster_matches_the_local_engine_shard_for_shard(user_cluster, shards):
    local = LocalEngine().map(shard_step_digest, shards)
    with DaskEngine(address=user_cluster.scheduler_address) as engine:
        assert engine.n_workers == engine.workers == 2
        remote = engine.map(shard_step_digest, shards)
    assert remote == local
    assert [len(r) for r in remote] == [len(read_corpus(s).episodes) for s in shards]
    assert len({ep for shard in remote for ep, *_ in shard}) == sum(len(r) for r in remote)


def test_full_episodes_round_trip_through_the_cluster_unchanged(user_cluster, shards):
    with DaskEngine(address=user_cluster.scheduler_address) as engine:
        remote = engine.map(read_corpus, shards[:2])
    for corpus, shard in zip(remote, shards[:2], strict=True):
        assert corpus.episodes == read_corpus(shard).episodes


def test_closing_the_engine_leaves_the_users_cluster_running(user_cluster, shards):
    with DaskEngine(address=user_cluster.scheduler_address) as engine:
        engine.map(len, ["a"])
    assert user_cluster.status.name == "running"
    with DaskEngine(address=user_cluster.scheduler_address) as again:
        assert again.map(len, ["ab", "c"]) == [2, 1]


def test_a_failing_shard_raises_its_own_error_in_the_caller(user_cluster, tmp_path):
    with DaskEngine(address=user_cluster.scheduler_address) as engine:
        with pytest.raises(CorpusError):
            engine.map(read_corpus, [str(tmp_path / "no-such-corpus")])


def test_without_an_address_the_engine_starts_and_stops_its_own_local_cluster(shards):
    with make_engine("dask", workers=1) as engine:  # one process: this test is about the cluster's lifetime
        assert isinstance(engine, DaskEngine)
        assert engine.n_workers == 1
        cluster = engine._cluster
        assert engine.map(shard_step_digest, shards[-1:]) == [shard_step_digest(shards[-1])]
    assert cluster.status.name == "closed"


def test_an_unreachable_scheduler_is_a_clear_error():
    with pytest.raises(RuntimeError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"):
        DaskEngine(address="tcp://127.0.0.1:9", connect_timeout_s=1)


def test_an_empty_batch_needs_no_task(user_cluster):
    with DaskEngine(address=user_cluster.scheduler_address) as engine:
        assert engine.map(len, []) == []


# ----------------------------------------------------------------------------- real batch work through the engines
@pytest.fixture(scope="module")
def model_file(sentinel_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default step monitor fitted on langgraph7b's healthy episodes (train half), calibrated on the rest."""
    from monitors.model_file import save_monitor
    from monitors.monitor import StepMonitor

    healthy = [e for e in read_corpus(sentinel_dir / "langgraph7b").healthy() if e.steps]
    monitor = StepMonitor().fit(healthy[0::2]).calibrate(healthy[1::2])
    path = tmp_path_factory.mktemp("model") / "langgraph7b.npz"
    save_monitor(monitor, path)
    return path


def test_monitor_scores_and_alarms_are_identical_on_local_and_dask(user_cluster, shards, small_corpus, model_file):
    from traces.bench.scale import results_equal, score_shard, score_tasks

    tasks = score_tasks([Path(small_corpus), Path(shards[-1])], model_file)
    local = LocalEngine().map(score_shard, tasks)
    with DaskEngine(address=user_cluster.scheduler_address) as engine:
        remote = engine.map(score_shard, tasks)
    assert results_equal(local, remote)
    assert [[r["episode_id"] for r in rows] for rows in remote] == [t["ids"] for t in tasks]
    alarms = [r["alarm_step"] is not None for rows in remote for r in rows]
    assert 0 < sum(alarms) < len(alarms)  # a real threshold: some alarms, not all


def test_results_equal_catches_a_changed_score_an_alarm_or_an_order(shards, model_file):
    import copy

    from traces.bench.scale import results_equal, score_shard, score_tasks

    reference = [score_shard(score_tasks([Path(shards[-1])], model_file)[0])]
    assert results_equal(reference, copy.deepcopy(reference))
    nudged = copy.deepcopy(reference)
    nudged[0][3]["scores"][-1] += 1e-6
    moved_alarm = copy.deepcopy(reference)
    moved_alarm[0][0]["alarm_step"] = 99
    swapped = copy.deepcopy(reference)
    swapped[0][:2] = swapped[0][1::-1]
    assert not any(results_equal(reference, bad) for bad in (nudged, moved_alarm, swapped, []))


def _json_lines(text: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_verify_cli_gives_the_same_records_on_dask_and_local(user_cluster, small_corpus, capsys):
    from guardrail.core.cli import main

    corpus = small_corpus
    assert main(["verify", corpus, "--json"]) in (0, 1)
    local = _json_lines(capsys.readouterr().out)
    assert main(["verify", corpus, "--json", "--engine", "dask", "--address", user_cluster.scheduler_address]) in (0, 1)
    remote = _json_lines(capsys.readouterr().out)
    assert len(local) == 80 and remote == local


def test_score_cli_gives_the_same_scores_and_alarms_on_dask_and_local(user_cluster, small_corpus, model_file,
                                                                       capsys):
    from guardrail.core.cli import main

    corpus = small_corpus
    assert main(["score", corpus, "--model", str(model_file), "--json"]) == 0
    local = _json_lines(capsys.readouterr().out)
    assert main(["score", corpus, "--model", str(model_file), "--json", "--engine", "dask",
                 "--address", user_cluster.scheduler_address]) == 0
    remote = _json_lines(capsys.readouterr().out)
    assert len(local) == len(read_corpus(corpus).episodes)
    assert [r["episode_id"] for r in remote] == [r["episode_id"] for r in local]
    assert [r["alarm_step"] for r in remote] == [r["alarm_step"] for r in local]
    for a, b in zip(local, remote, strict=True):
        assert b["scores"] == pytest.approx(a["scores"], rel=1e-9, abs=1e-12)


def test_fit_cli_writes_the_same_model_on_dask_and_local(user_cluster, small_corpus, tmp_path):
    import numpy as np

    from guardrail.core.cli import main
    from monitors.model_file import read_header

    corpus = small_corpus
    local_model, dask_model = tmp_path / "local.npz", tmp_path / "dask.npz"
    assert main(["fit", corpus, "-o", str(local_model), "--quiet"]) == 0
    assert main(["fit", corpus, "-o", str(dask_model), "--quiet", "--engine", "dask",
                 "--address", user_cluster.scheduler_address]) == 0
    local_header, dask_header = read_header(local_model), read_header(dask_model)
    assert dask_header["threshold"] == pytest.approx(local_header["threshold"], rel=1e-9)
    assert dask_header["telemetry"] == local_header["telemetry"]
    assert dask_header["arrays"] == local_header["arrays"]
    with np.load(local_model) as a, np.load(dask_model) as b:
        for key in local_header["arrays"]:
            np.testing.assert_allclose(b[key], a[key], rtol=1e-9, atol=1e-12, err_msg=key)


def test_scale_bench_reports_each_configuration_with_the_equality_check(user_cluster, shards, model_file, capsys):
    from guardrail.core.cli import main

    code = main(["bench", "scale", "--corpus", shards[-1], shards[1], "--model", str(model_file), "--address",
                 user_cluster.scheduler_address, "--repeats", "1", "--json"])
    rows = _json_lines(capsys.readouterr().out)
    assert code == 0
    assert [(r["engine"], r["workers"]) for r in rows] == [("local", 1), ("dask", 2)]
    expected = sum(len(read_corpus(s).episodes) for s in (shards[-1], shards[1]))
    for row in rows:
        assert list(row)[:5] == ["engine", "workers", "episodes", "episodes_per_s", "equal_to_local"]
        assert row["episodes"] == expected and row["equal_to_local"] is True and row["episodes_per_s"] > 0


def test_a_fleets_store_is_fitted_on_the_cluster_as_it_is_locally(user_cluster, small_corpus, tmp_path):
    import json

    from guardrail.core.cli import main
    from guardrail.core.corpus import read_corpus
    from guardrail.core.runstore import open_store, write_episodes

    store = f"sqlite:///{tmp_path}/fleet.db"
    episodes = read_corpus(small_corpus).episodes
    write_episodes(store, episodes)
    healthy = [e.episode_id for e in episodes if e.is_healthy]
    assert healthy and open_store(store).set_labels({i: "healthy" for i in healthy}) == []

    local, remote = tmp_path / "local.json", tmp_path / "dask.json"
    assert main(["fit-spec", store, "-o", str(local)]) in (0, 1)
    assert main(["fit-spec", store, "-o", str(remote), "--engine", "dask",
                 "--address", user_cluster.scheduler_address]) in (0, 1)
    local_spec, remote_spec = json.loads(local.read_text()), json.loads(remote.read_text())
    for spec in (local_spec, remote_spec):  # they say how many episodes were given: the cluster reads the healthy ones
        spec.pop("description", None)
        spec["fitted"].pop("messages", None)
    assert remote_spec == local_spec
    model = tmp_path / "fleet.npz"
    assert main(["fit", store, "-o", str(model), "--quiet", "--engine", "dask",
                 "--address", user_cluster.scheduler_address]) == 0
