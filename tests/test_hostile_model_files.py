"""Hostile monitor model files are refused with one-line ModelFileErrors, in memory bounded by the file (issue 15, item 7)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitors.model_file import ModelFileError, load_monitor, save_monitor
from tests.conftest import REPO
from tests.fuzzing import FUZZ, FUZZ_EXAMPLES
from tests.hostile import model_files
from tests.hostile.memlimit import address_space_limit
from tests.hostile.model_files import HOSTILE_MODELS, fit_small_monitor, members_of

GIB = 1024 ** 3


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "good.npz"
    save_monitor(fit_small_monitor(), path)
    return path


@pytest.fixture(scope="module")
def hostile(good, tmp_path_factory) -> dict[str, Path]:
    large = FUZZ_EXAMPLES > 200  # make fuzz: the 1.15 GB bomb and a 200 MB lying member; make test: 128 MB, 40 MB
    model_files.ZIP_BOMB_SIDE = 12_000 if large else 4_000
    model_files.LYING_MEMBER_FLOATS = 25_000_000 if large else 5_000_000
    members = members_of(good)
    work = tmp_path_factory.mktemp("hostile")
    return {name: make(members, work / f"{name}.npz") for name, make in HOSTILE_MODELS.items()}


def test_the_good_file_still_loads_and_scores(good):
    monitor = load_monitor(good)
    assert math.isfinite(monitor.threshold_)


@pytest.mark.parametrize("case", sorted(HOSTILE_MODELS))
def test_each_hostile_file_is_one_model_file_error(hostile, case):
    with pytest.raises(ModelFileError) as caught, address_space_limit(GIB):
        load_monitor(hostile[case])
    message = str(caught.value)
    assert "\n" not in message and len(message) < 600 and str(hostile[case]) in message


@pytest.mark.fuzz  # larger bombs under make fuzz
def test_peak_memory_stays_within_a_small_multiple_of_each_file(good, hostile):
    """In a child process under a 1 GiB address-space cap: every file refused, RSS growth bounded by its size."""
    order = sorted(hostile, key=lambda name: hostile[name].stat().st_size)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "tests.hostile.model_files", str(GIB), str(good),
                          *[str(hostile[name]) for name in order]],
                         capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [Path(r["path"]).stem for r in rows] == order
    for row in rows:
        size = Path(row["path"]).stat().st_size
        assert row["error"] == "ModelFileError", row
        # peak RSS is a high-water mark: files are loaded smallest first, so each bound covers all before it
        assert row["growth"] <= 8 * size + 24 * 1024 * 1024, (Path(row["path"]).stem, row["growth"], size)


def test_a_nan_threshold_is_refused_not_a_silent_never_alarm(hostile):
    with pytest.raises(ModelFileError, match="threshold"), address_space_limit(GIB):
        load_monitor(hostile["nan_threshold"])


def test_a_device_or_fifo_is_not_a_model(tmp_path):
    os.mkfifo(tmp_path / "pipe.npz")
    for path in (tmp_path / "pipe.npz", Path("/dev/zero")):
        with pytest.raises(ModelFileError, match="not a regular file"):
            load_monitor(path)


def test_an_esn_model_whose_settings_lie_about_its_size_is_refused(tmp_path):
    from tests.hostile.model_files import esn_units_lie

    good = tmp_path / "esn.npz"
    save_monitor(fit_small_monitor(preset="esn_cusum_max"), good)
    load_monitor(good)
    with pytest.raises(ModelFileError, match="n_units|ESN state") as caught, address_space_limit(GIB):
        load_monitor(esn_units_lie(members_of(good), tmp_path / "lie.npz"))
    assert "\n" not in str(caught.value)


@pytest.mark.fuzz
@FUZZ
@given(flips=st.lists(st.tuples(st.floats(min_value=0, max_value=1, exclude_max=True), st.integers(1, 255)),
                      min_size=1, max_size=4))
def test_a_damaged_model_file_loads_or_is_a_model_file_error(good, tmp_path_factory, flips):
    data = bytearray(good.read_bytes())
    for where, mask in flips:
        data[int(where * len(data))] ^= mask
    path = tmp_path_factory.mktemp("flip") / "m.npz"
    path.write_bytes(bytes(data))
    with address_space_limit(GIB):
        try:
            load_monitor(path)
        except ModelFileError as exc:
            assert "\n" not in str(exc)
