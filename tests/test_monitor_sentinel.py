"""The step monitor on real sentinel traces: fit/score, threshold from healthy validation, model files, Guard alarms, CLI."""

from __future__ import annotations

import io
import json
import math
import warnings
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


def test_split_threshold_is_the_conformal_order_statistic_of_healthy_validation_maxima(fitted: tuple) -> None:
    monitor, split = fitted
    maxima = sorted(monitor.score_episode(e).max_score for e in split.val)
    k = math.ceil((len(maxima) + 1) * 0.95)  # 21 validation episodes: the 21st, i.e. the largest
    assert monitor.threshold_ == maxima[k - 1]
    assert monitor.calibration_.method == "split" and monitor.calibration_.rank == k
    # Test and injected episodes play no part: recalibrating on the same validation set gives the same value.
    before = monitor.threshold_
    monitor.calibrate(split.val)
    assert monitor.threshold_ == before


def test_crossfit_threshold_comes_from_out_of_fold_maxima_of_every_healthy_episode(langgraph: Corpus) -> None:
    split = published_split(langgraph.episodes, seed=0)
    healthy = split.train + split.val
    monitor = StepMonitor().fit(healthy)  # the default: cross-fit, no validation set spent
    oof = np.sort(monitor.hybrid_.oof_maxima_)
    k = math.ceil((len(healthy) + 1) * 0.95)
    assert monitor.calibration_.method == "crossfit" and monitor.calibration_.n == len(healthy)
    assert monitor.threshold_ == oof[k - 1]
    # Out of fold means out of fold: in-sample scores of the same episodes sit lower than their cross-fit ones.
    in_sample = np.array([monitor.score_episode(e).max_score for e in healthy])
    assert np.median(in_sample) < np.median(monitor.hybrid_.oof_maxima_)
    held_out = [e for e in split.test if e.is_healthy]
    alarms = sum(monitor.score_episode(e).alarm_step is not None for e in held_out)
    assert alarms <= 2  # 21 held-out healthy episodes at a 5% budget


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
    with pytest.raises(ModelFileError, match="format version 99.*reads version 2.*guardrail fit"):
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
                          str(tmp_path / "split.json"), "--monitor", "delta_mahalanobis", "--calibration", "split",
                          "--no-release", "--json"])
    row = json.loads(out)
    assert code == 0
    assert list(row) == ["corpus", "protocol", "monitor", "calibration", "auroc", "detection_rate", "healthy_fa_rate",
                         "healthy_fa_ci", "healthy_alarms", "healthy_test", "median_delay", "per_class",
                         "per_class_n", "threshold_fa_bound", "threshold_fa_interval", "n_cal", "fit_s",
                         "step_us_median", "score_us_median", "featurize_us_median", "n_train", "n_val", "n_test"]
    assert row["protocol"] == "file"
    assert (row["n_train"], row["n_val"], row["n_test"]) == (len(split.train), len(split.val), len(split.test))
    assert set(row["per_class"]) == {"looping", "tool_cascade", "context_corruption"}
    healthy_test = sum(e.is_healthy for e in split.test)
    assert row["healthy_test"] == healthy_test and row["healthy_fa_rate"] == row["healthy_alarms"] / healthy_test
    low, high = row["healthy_fa_ci"]
    assert low <= row["healthy_fa_rate"] <= high
    assert row["n_cal"] == len(split.val) and 0 < row["threshold_fa_bound"] <= 0.05


def _later_schema_copy(source: Path, target: Path, break_events: bool) -> None:
    """A copy of a sentinel corpus whose tool events carry a field a later release added; with `break_events`
    the events are also unusable (a name that is not a string), so every tool step is rejected."""
    target.mkdir()
    manifest = json.loads((source / "manifest.json").read_text())
    for entry in manifest:
        lines = []
        for line in (source / entry["file"]).read_text().splitlines():
            step = json.loads(line)
            step["tool_events"] = [{**e, "mcp_server": "x", **({"name": None} if break_events else {})}
                                   for e in step.get("tool_events") or []]
            lines.append(json.dumps({**step, "schema": 6}))
        (target / entry["file"]).write_text("\n".join(lines) + "\n")
    (target / "manifest.json").write_text(json.dumps(manifest))


def test_fit_on_a_corpus_with_nothing_usable_says_what_was_read_and_why(sentinel_dir: Path, tmp_path: Path,
                                                                         capsys) -> None:
    _later_schema_copy(sentinel_dir / "autogen7b", tmp_path / "autogen_broken", break_events=True)
    code, _ = _run_cli(["fit", str(tmp_path / "autogen_broken"), "-o", str(tmp_path / "m.npz"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "m.npz").exists()
    assert "not enough usable healthy episodes" in err and "autogen_broken: 148 episode(s) listed, 148 read" in err
    assert "(60 healthy, 0 usable with >= 2 steps)" in err
    # The top reason, with its count: every tool step's event has a name that is not a string.
    assert "658 x not a valid sentinel step: tool_events.N.name: Input should be a valid string" in err
    assert "schema 6 is newer than 5" in err


def test_fit_and_score_a_later_schema_copy_of_a_real_corpus(sentinel_dir: Path, tmp_path: Path) -> None:
    _later_schema_copy(sentinel_dir / "autogen7b", tmp_path / "autogen_later", break_events=False)
    model = tmp_path / "m.npz"
    code, _ = _run_cli(["fit", str(tmp_path / "autogen_later"), "-o", str(model), "--quiet"])
    assert code == 0 and load_monitor(model).calibration_.method == "crossfit"


def test_bench_reports_a_failed_corpus_as_an_error_row_and_goes_on(sentinel_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, out = _run_cli(["bench", "monitor", "--corpus", str(tmp_path / "empty"), "--corpus",
                          str(sentinel_dir / "autogen7b"), "--monitor", "delta_mahalanobis", "--calibration",
                          "crossfit", "--timing-repeats", "0", "--no-release", "--json"])
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 1
    assert rows[0]["corpus"] == "empty" and "no manifest.json" in rows[0]["error"]
    assert rows[1]["corpus"] == "autogen7b" and rows[1]["auroc"] > 0.9 and "error" not in rows[1]


def test_bench_runs_the_release_monitors_on_the_same_split(sentinel_dir: Path, langgraph: Corpus,
                                                           tmp_path: Path) -> None:
    from traces.bench.release import find_release, load_release

    root = find_release(None, [str(sentinel_dir / "langgraph7b")])
    if root is None:
        pytest.skip("the release's code is not at ../shared/anchors/sentinel (the public release's anchors)")
    release = load_release(root)
    assert not isinstance(release, str), release  # present but not importable: a regression, not a skip
    split = published_split(langgraph.episodes, seed=1)
    spec = {"langgraph7b": dict(zip(("train", "val", "test"), split.ids(), strict=True))}
    (tmp_path / "split.json").write_text(json.dumps(spec))
    code, out = _run_cli(["bench", "monitor", "--corpus", str(sentinel_dir / "langgraph7b"), "--split",
                          str(tmp_path / "split.json"), "--monitor", "delta_mahalanobis", "--calibration", "crossfit",
                          "--timing-repeats", "1", "--json"])
    rows = {row["monitor"]: row for row in map(json.loads, out.splitlines())}
    assert code == 0 and set(rows) == {"delta_mahalanobis", "release.esn_cusum_max", "release.delta_mahalanobis"}
    release = rows["release.esn_cusum_max"]
    assert release["n_test"] == len(split.test) and release["n_train"] == len(split.train)
    assert 0.5 < release["auroc"] <= 1.0 and release["step_us_median"] > 0
    ours = rows["delta_mahalanobis"]
    assert ours["step_vs_release_esn"] == pytest.approx(ours["step_us_median"] / release["step_us_median"])


def test_cli_fit_builds_the_same_monitor_as_the_library(sentinel_dir: Path, tmp_path: Path) -> None:
    """The sharded path (lexicon keys gathered per shard, leave-one-out features per shard) is the in-process fit."""
    corpus = sentinel_dir / "autogen7b"
    code, _ = _run_cli(["fit", str(corpus), "-o", str(tmp_path / "cli.npz"), "--quiet", "--seed", "4"])
    cli = load_monitor(tmp_path / "cli.npz")
    usable = [e for e in read_corpus(corpus).episodes if e.is_healthy and len(e.steps) >= 2]
    library = StepMonitor().fit(usable)  # crossfit: the healthy runs in the corpus's (recorded) order
    assert code == 0 and cli.threshold_ == pytest.approx(library.threshold_)
    for episode in read_corpus(corpus).episodes[::20]:
        assert cli.score_episode(episode).scores == pytest.approx(library.score_episode(episode).scores)


def test_a_weak_crossfit_threshold_warns_when_it_is_used_not_when_it_is_replaced(langgraph: Corpus) -> None:
    healthy = [e for e in langgraph.healthy() if len(e.steps) >= 4]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        weak = StepMonitor().fit(healthy[:8])
    assert weak.calibration_.fa_bound == pytest.approx(1 / 9)
    with pytest.warns(UserWarning, match="only 8 healthy calibration episode"):
        weak.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replaced = StepMonitor().fit(healthy[:8]).calibrate(healthy[8:30])  # 22 validation episodes: enough
        replaced.start()
