"""Fitted monitor files: one versioned .npz holding the arrays plus a JSON header (settings, schema); never pickle.

The header (stored in the archive as the UTF-8 bytes of member ``__header__``) names the format
and version, the monitor's hyperparameters and telemetry settings, the channels fitted, the
threshold, and every array with its shape. `load_monitor` checks all of it before building a
monitor, so a file from another version or a damaged one fails with a message saying what to do.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from typing import Any

import numpy as np

from guardrail.core.fileio import atomic_write_bytes
from guardrail.core.version import version
from monitors.calibration import Calibration
from monitors.features import Telemetry
from monitors.hybrid import Hybrid
from monitors.monitor import StepMonitor

__all__ = ["MODEL_FORMAT", "MODEL_VERSION", "ModelFileError", "load_monitor", "save_monitor"]

MODEL_FORMAT = "guardrail-step-monitor"
MODEL_VERSION = 2  # 2: g channel with novelty features + the healthy lexicon arrays, calibration record
_HEADER = "__header__"


class ModelFileError(Exception):
    """A model file that cannot be used: not ours, another format version, or damaged."""


def save_monitor(monitor: StepMonitor, path: str | os.PathLike[str], *, extra: dict[str, Any] | None = None) -> None:
    """Write a fitted monitor atomically (a reader sees the old file or the whole new one)."""
    if not hasattr(monitor, "hybrid_"):
        raise ValueError("save_monitor needs a fitted StepMonitor (call fit first)")
    calibration = getattr(monitor, "calibration_", None)
    arrays = {f"hybrid.{key}": np.ascontiguousarray(value) for key, value in monitor.hybrid_.get_state().items()}
    arrays.update({f"telemetry.{key}": np.ascontiguousarray(value)
                   for key, value in monitor.telemetry_.get_state().items()})
    header = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "guardrail_version": version(),
        "params": monitor.get_params(),
        "telemetry": {"params": monitor.telemetry_.get_params(), "channels": list(monitor.telemetry_.channels_)},
        "threshold": monitor.threshold_ if np.isfinite(monitor.threshold_) else None,
        "calibration": None if calibration is None else calibration.to_json(),
        "n_train": getattr(monitor, "n_train_", None),
        "n_val": getattr(monitor, "n_val_", None),
        "arrays": {key: {"shape": list(value.shape), "dtype": str(value.dtype)} for key, value in arrays.items()},
        "extra": extra or {},
    }
    members: dict[str, Any] = {**arrays, _HEADER: np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **members)
    atomic_write_bytes(path, buffer.getvalue())


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON header of a model file, checked for format and version."""
    with _open(path) as archive:
        return _header(archive, path)


def load_monitor(path: str | os.PathLike[str]) -> StepMonitor:
    """Read a model file written by `save_monitor` and return the fitted, calibrated StepMonitor."""
    with _open(path) as archive:
        header = _header(archive, path)
        arrays: dict[str, np.ndarray] = {}
        for key, spec in header["arrays"].items():
            if key not in archive.files:
                raise ModelFileError(f"{path}: array {key!r} named in the header is missing; the file is damaged")
            value = archive[key]
            if list(value.shape) != spec["shape"]:
                raise ModelFileError(f"{path}: array {key!r} has shape {list(value.shape)}, the header says "
                                     f"{spec['shape']}; the file is damaged")
            arrays[key] = value
    try:
        params = dict(header["params"])
        telemetry = Telemetry(**params.pop("telemetry"))
        monitor = StepMonitor(telemetry=telemetry, **params)
        monitor.telemetry_ = Telemetry(**telemetry.get_params())
        monitor.telemetry_.set_channels(header["telemetry"]["channels"])
        monitor.telemetry_.set_state({key[len("telemetry."):]: value for key, value in arrays.items()
                                      if key.startswith("telemetry.")})
        monitor.hybrid_ = Hybrid(monitor.components, monitor.fusion, detector_params=monitor.detector_params,
                                 n_folds=monitor.n_folds, random_state=monitor.random_state)
        state = {key[len("hybrid."):]: value for key, value in arrays.items() if key.startswith("hybrid.")}
        monitor.hybrid_.set_state(state, monitor.telemetry_.slices_)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"{path}: the header and arrays do not describe a monitor this guardrail can build "
                             f"({type(exc).__name__}: {exc}); refit with `guardrail fit`") from exc
    threshold = header.get("threshold")
    monitor.threshold_ = float("inf") if threshold is None else float(threshold)
    calibration = header.get("calibration")
    try:
        monitor.calibration_ = None if calibration is None else Calibration.from_json(calibration)
    except (AttributeError, ValueError) as exc:
        raise ModelFileError(f"{path}: the header's calibration record is damaged ({exc}); refit with "
                             "`guardrail fit`") from exc
    monitor.n_train_ = int(header.get("n_train") or 0)
    monitor.n_val_ = int(header.get("n_val") or 0)
    return monitor


def _open(path: str | os.PathLike[str]) -> Any:
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ModelFileError(f"{path}: not a guardrail monitor file (.npz): {exc}") from exc


def _header(archive: Any, path: str | os.PathLike[str]) -> dict[str, Any]:
    if _HEADER not in archive.files:
        raise ModelFileError(f"{path}: an .npz without a guardrail header; is this a file from `guardrail fit`?")
    try:
        header = json.loads(archive[_HEADER].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{path}: the header is not valid JSON ({exc}); the file is damaged") from exc
    if not isinstance(header, dict) or header.get("format") != MODEL_FORMAT:
        raise ModelFileError(f"{path}: not a guardrail step-monitor file (format {header.get('format')!r})"
                             if isinstance(header, dict) else f"{path}: header is not a JSON object")
    if header.get("version") != MODEL_VERSION:
        raise ModelFileError(
            f"{path}: model file format version {header.get('version')!r} (written by guardrail "
            f"{header.get('guardrail_version', '?')}); this guardrail {version()} reads version "
            f"{MODEL_VERSION}. Refit with `guardrail fit CORPUS -o MODEL`."
        )
    for key in ("params", "telemetry", "arrays"):
        if not isinstance(header.get(key), dict):
            raise ModelFileError(f"{path}: header has no {key!r} object; the file is damaged")
    return header
