"""The Dask engine: the same function over the same shards gives the same results as the local engine, in order."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from guardrail.corpus import CorpusError, read_corpus
from guardrail.engine import LocalEngine, make_engine

distributed = pytest.importorskip("distributed", reason="the dask engine needs 'distributed' "
                                  "(pip install 'guardrail[scale]')")

from guardrail.engine_dask import DaskEngine  # noqa: E402 - after the importorskip on purpose

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
        assert engine.n_workers == 2
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
    with make_engine("dask", workers=2) as engine:
        assert isinstance(engine, DaskEngine)
        assert engine.n_workers == 2
        cluster = engine._cluster
        assert engine.map(shard_step_digest, shards[-1:]) == [shard_step_digest(shards[-1])]
    assert cluster.status.name == "closed"


def test_an_unreachable_scheduler_is_a_clear_error():
    with pytest.raises(RuntimeError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"):
        DaskEngine(address="tcp://127.0.0.1:9", connect_timeout_s=1)


def test_an_empty_batch_needs_no_task(user_cluster):
    with DaskEngine(address=user_cluster.scheduler_address) as engine:
        assert engine.map(len, []) == []
