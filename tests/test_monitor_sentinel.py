"""The step monitor on real sentinel traces: fit/score, threshold from healthy validation, model files, Guard alarms, CLI."""

from __future__ import annotations

import io
import json
import zipfile
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from guardrail import Guard
from guardrail.core.cli import main
from guardrail.core.corpus import Corpus, read_corpus
from guardrail.core.events import Severity, Verdict
from guardrail.core.spans import GUARDRAIL_SCORE
from monitors.layer import MonitorLayer
from monitors.model_file import ModelFileError, load_monitor, save_monitor
from monitors.monitor import StepMonitor
from traces.bench.monitor import published_split


@pytest.fixture(scope="module")
def langgraph(sentinel_dir: Path) -> Corpus:
    return read_corpus(sentinel_dir / "langgraph7b")


@pytest.fixture(scope="module")
def fitted(langgraph: Corpus) -> tuple[StepMonitor, object]:
    split = published_split(langgraph.episodes, seed=0)
    return StepMonitor().fit(split.train).calibrate(split.val), split


def test_default_monitor_separates_injected_from_healthy_held_out_episodes(fitted: tuple) -> None:
    monitor, split = fitted
    scored = [(e, monitor.score_episode(e)) for e in split.test]
    labels = [0 if e.is_healthy else 1 for e, _ in scored]
    assert roc_auc_score(labels, [s.max_score for _, s in scored]) > 0.85
    looping = [s for e, s in scored if e.label == "looping"]
    assert np.mean([s.alarm_step is not None for s in looping]) > 0.8


def test_threshold_is_the_quantile_of_healthy_validation_maxima(fitted: tuple) -> None:
    monitor, split = fitted
    maxima = [monitor.score_episode(e).max_score for e in split.val]
    assert monitor.threshold_ == pytest.approx(float(np.quantile(maxima, 0.95)))
    # Test and injected episodes play no part: recalibrating on the same validation set gives the same value.
    before = monitor.threshold_
    monitor.calibrate(split.val)
    assert monitor.threshold_ == before


def test_calibration_and_fit_refuse_injected_episodes(fitted: tuple, langgraph: Corpus) -> None:
    monitor, split = fitted
    injected = [e for e in langgraph.episodes if not e.is_healthy][:2]
    with pytest.raises(ValueError, match="healthy validation episodes only"):
        monitor.calibrate(split.val + injected)
    with pytest.raises(ValueError, match="healthy episodes only"):
        StepMonitor().fit(split.train + injected)


def test_model_file_round_trip_scores_identically(fitted: tuple, tmp_path: Path) -> None:
    monitor, split = fitted
    path = tmp_path / "monitor.npz"
    save_monitor(monitor, path)
    loaded = load_monitor(path)
    assert loaded.threshold_ == monitor.threshold_
    assert loaded.telemetry_.channels_ == monitor.telemetry_.channels_
    for episode in split.test[:10]:
        assert loaded.score_episode(episode).scores == monitor.score_episode(episode).scores
    with zipfile.ZipFile(path) as archive:
        assert all(not name.endswith(".pkl") for name in archive.namelist())


def test_model_file_from_another_version_fails_clearly(fitted: tuple, tmp_path: Path) -> None:
    monitor, _ = fitted
    path = tmp_path / "monitor.npz"
    save_monitor(monitor, path)
    with np.load(path, allow_pickle=False) as archive:
        members = {k: archive[k] for k in archive.files}
    header = json.loads(members["__header__"].tobytes())
    header["version"] = 99
    members["__header__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(tmp_path / "future.npz", **members)
    with pytest.raises(ModelFileError, match="format version 99.*reads version 1.*guardrail fit"):
        load_monitor(tmp_path / "future.npz")


def test_a_file_that_is_not_a_model_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ModelFileError, match="not a guardrail monitor file"):
        load_monitor(tmp_path / "junk.npz")
    np.savez(tmp_path / "plain.npz", a=np.zeros(3))
    with pytest.raises(ModelFileError, match="without a guardrail header"):
        load_monitor(tmp_path / "plain.npz")


def test_guard_layer_raises_one_alarm_on_a_real_failing_episode(fitted: tuple, spans) -> None:
    monitor, split = fitted
    episode = next(e for e in split.test if e.label == "tool_cascade" and monitor.score_episode(e).alarm_step)
    guard = Guard([MonitorLayer(monitor)])
    ctx = guard.start_episode(task=episode.task)
    decisions = [guard.on_step(ctx, step) for step in episode.steps]
    alarms = [f for d in decisions for f in d.findings if f.severity is Severity.ALARM]
    assert len(alarms) == 1 and alarms[0].check == "step_monitor"
    assert alarms[0].step == monitor.score_episode(episode).alarm_step
    assert any(d.verdict is Verdict.ALARM for d in decisions)
    assert all(d.score is not None for d in decisions)
    recorded = [s.attributes.get(GUARDRAIL_SCORE) for s in spans.get_finished_spans() if s.name == "guardrail.monitor"]
    assert len(recorded) == len(episode.steps) and None not in recorded


def _run_cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def test_cli_fit_then_score_a_real_corpus(sentinel_dir: Path, tmp_path: Path) -> None:
    corpus = str(sentinel_dir / "autogen7b")
    model = tmp_path / "autogen.npz"
    code, _ = _run_cli(["fit", corpus, "-o", str(model), "--quiet"])
    assert code == 0 and model.is_file()
    assert np.isfinite(load_monitor(model).threshold_)
    code, out = _run_cli(["score", corpus, "--model", str(model), "--json"])
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == len(read_corpus(corpus).episodes)
    assert {"episode_id", "max_score", "alarm_step", "channel_scores", "label"} <= set(rows[0])
    assert {"delta_mahalanobis.e", "delta_mahalanobis.m", "delta_mahalanobis.g"} <= set(rows[0]["channel_scores"])
    healthy = [r["alarm"] for r in rows if r["label"] == "healthy"]
    injected = [r["alarm"] for r in rows if r["label"] != "healthy"]
    assert np.mean(injected) > np.mean(healthy)


def test_bench_with_a_split_file_reports_the_documented_fields(sentinel_dir: Path, langgraph: Corpus,
                                                               tmp_path: Path) -> None:
    split = published_split(langgraph.episodes, seed=3)
    spec = {"langgraph7b": {"train": [e.episode_id for e in split.train], "val": [e.episode_id for e in split.val],
                            "test": [e.episode_id for e in split.test]}}
    (tmp_path / "split.json").write_text(json.dumps(spec))
    code, out = _run_cli(["bench", "monitor", "--corpus", str(sentinel_dir / "langgraph7b"), "--split",
                          str(tmp_path / "split.json"), "--monitor", "delta_mahalanobis", "--json"])
    row = json.loads(out)
    assert code == 0
    assert list(row) == ["corpus", "monitor", "auroc", "detection_rate", "healthy_fa_rate", "median_delay",
                         "per_class", "fit_s", "step_us_median", "featurize_us_median", "n_train", "n_val", "n_test"]
    assert (row["n_train"], row["n_val"], row["n_test"]) == (len(split.train), len(split.val), len(split.test))
    assert set(row["per_class"]) == {"looping", "tool_cascade", "context_corruption"}
