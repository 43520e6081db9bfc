"""Fitted monitor files: one versioned .npz holding the arrays plus a JSON header (settings, schema); never pickle.

The header (stored in the archive as the UTF-8 bytes of member ``__header__``) names the format
and version, the monitor's hyperparameters and telemetry settings, the channels fitted, the
threshold, and every array with its shape. `load_monitor` checks all of it before building a
monitor, so a file from another version or a damaged one fails with a message saying what to do.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import struct
import zipfile
import zlib
from typing import Any

import numpy as np

from guardrail.core.fileio import UnsafeFile, atomic_write_bytes, json_nesting_exceeds, read_regular
from guardrail.core.version import version
from monitors.calibration import Calibration
from monitors.features import CHANNELS, MAX_LATENCY_FLOOR_S, Telemetry
from monitors.hybrid import Hybrid
from monitors.monitor import StepMonitor

__all__ = ["MODEL_FORMAT", "MODEL_VERSION", "ModelFileError", "load_monitor", "monitor_sha256", "save_monitor"]

MODEL_FORMAT = "guardrail-step-monitor"
MODEL_VERSION = 2  # 2: g channel with novelty features + the healthy lexicon arrays, calibration record
_HEADER = "__header__"


class ModelFileError(Exception):
    """A model file that cannot be used: not ours, another format version, or damaged."""


def monitor_sha256(monitor: StepMonitor) -> str:
    """A digest of what a fitted monitor scores with (its settings, threshold and every fitted array), for a
    monitor that never was a file; a model file's own digest is the sha256 of its bytes."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"params": monitor.get_params(), "channels": list(monitor.telemetry_.channels_),
                              "threshold": float(monitor.threshold_)}, sort_keys=True, default=str).encode())
    for prefix, state in (("hybrid.", monitor.hybrid_.get_state()), ("telemetry.", monitor.telemetry_.get_state())):
        for key in sorted(state):
            value = np.ascontiguousarray(state[key])
            digest.update(f"{prefix}{key}:{value.dtype}:{value.shape}".encode())
            digest.update(value.tobytes())
    return digest.hexdigest()


def save_monitor(monitor: StepMonitor, path: str | os.PathLike[str], *, extra: dict[str, Any] | None = None) -> None:
    """Write a fitted monitor atomically (a reader sees the old file or the whole new one)."""
    if not hasattr(monitor, "hybrid_"):
        raise ValueError("save_monitor needs a fitted StepMonitor (call fit first)")
    calibration = getattr(monitor, "calibration_", None)
    arrays = {f"hybrid.{key}": np.ascontiguousarray(value) for key, value in monitor.hybrid_.get_state().items()}
    arrays.update({f"telemetry.{key}": np.ascontiguousarray(value)
                   for key, value in monitor.telemetry_.get_state().items()})
    maxima = getattr(monitor, "calibration_maxima_", None)
    if maxima is not None and len(maxima):  # the calibration set, for drift's conformal p-values
        arrays["calibration.maxima"] = np.ascontiguousarray(maxima, dtype=np.float64)
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
    archive = _Archive(path)
    return _header(archive, path)


def load_monitor(path: str | os.PathLike[str]) -> StepMonitor:
    """Read a model file written by `save_monitor` and return the fitted, calibrated StepMonitor.

    Nothing in the file is trusted: the archive is read within a memory budget set by the file's
    size, every array's claimed shape and type is checked against the bytes it really holds
    before it is built, the header's numbers must be finite and of the right type, and the
    settings must describe features of the width the arrays were fitted on. Every refusal is a
    `ModelFileError` with a one-line message.
    """
    archive = _Archive(path)
    header = _header(archive, path)
    arrays: dict[str, np.ndarray] = {}
    for key, spec in header["arrays"].items():
        if key not in archive.names:
            raise ModelFileError(f"{path}: array {key!r} named in the header is missing; the file is damaged")
        value = archive.array(key)
        if list(value.shape) != spec["shape"] or str(value.dtype) != spec["dtype"]:
            raise ModelFileError(f"{path}: array {key!r} is {value.dtype}{list(value.shape)}, the header says "
                                 f"{spec['dtype']}{_short_list(spec['shape'])}; the file is damaged")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ModelFileError(f"{path}: array {key!r} holds NaN or infinite values; the file is damaged")
        arrays[key] = value
    try:
        params = dict(header["params"])
        telemetry = Telemetry(**params.pop("telemetry"))
        monitor = StepMonitor(telemetry=telemetry, **params)
        monitor.telemetry_ = Telemetry(**telemetry.get_params())
        monitor.telemetry_.set_channels(header["telemetry"]["channels"])
        monitor.telemetry_.set_state({key[len("telemetry."):]: value for key, value in arrays.items()
                                      if key.startswith("telemetry.")})
        _check_widths(monitor.telemetry_.dim_, arrays)
        monitor.hybrid_ = Hybrid(monitor.components, monitor.fusion, detector_params=monitor.detector_params,
                                 n_folds=monitor.n_folds, random_state=monitor.random_state)
        state = {key[len("hybrid."):]: value for key, value in arrays.items() if key.startswith("hybrid.")}
        monitor.hybrid_.set_state(state, monitor.telemetry_.slices_)
    except (KeyError, TypeError, ValueError, IndexError, MemoryError) as exc:
        raise ModelFileError(f"{path}: the header and arrays do not describe a monitor this guardrail can build "
                             f"({type(exc).__name__}: {_one_line(exc)}); refit with `guardrail fit`") from exc
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
    # Absent from files written before drift checks existed.
    found = arrays.get("calibration.maxima")
    monitor.calibration_maxima_ = np.sort(found) if found is not None and found.ndim == 1 else None
    return monitor


# --------------------------------------------------------------------------- reading an untrusted file
MAX_FILE_BYTES = 256 * 1024 * 1024  # a model file larger than this is refused unread
MAX_MEMBERS = 1024  # a fitted monitor has a few dozen arrays
MAX_HEADER_BYTES = 1024 * 1024  # the JSON header (a default monitor's is 1.6 KB)
MAX_HEADER_DEPTH = 32
# What the arrays may inflate to, as a multiple of the file (plus a floor for tiny files). A fitted
# monitor compresses about 1.3x (dense float64); 16x leaves room for sparse reservoirs while a zip
# bomb (1000x and more) is refused before a byte is inflated.
INFLATION = 16
INFLATION_FLOOR = 4 * 1024 * 1024
MAX_E_DIM = 4096  # hash buckets; `guardrail fit` uses 32
_NUMERIC_KINDS = "biuf"  # bool, signed, unsigned, float: what a monitor's state is made of
# What zipfile and zlib raise on a damaged or crafted archive (bad CRC, truncated stream, an unknown
# compression method, a lying header): each becomes one ModelFileError.
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, NotImplementedError)
_EOCD = b"PK\x05\x06"


def _one_line(value: Any, cap: int = 300) -> str:
    return " ".join(str(value).split())[:cap]


def _short_list(value: Any) -> str:
    return _one_line(value, 80)


class _Archive:
    """The members of an .npz, read within a budget: nothing is inflated or allocated before it is checked."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        if not os.path.lexists(path):
            raise FileNotFoundError(errno.ENOENT, "no such model file", str(path))
        try:
            data = read_regular(path, MAX_FILE_BYTES, "the model file")
        except UnsafeFile as exc:
            raise ModelFileError(f"{path}: {exc}") from exc
        self._check_directory(data)
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self._zip.infolist()
        except _ZIP_ERRORS as exc:
            raise ModelFileError(f"{path}: not a guardrail monitor file (.npz): {_one_line(exc)}") from exc
        budget = max(INFLATION * len(data), INFLATION_FLOOR)
        claimed = sum(info.file_size for info in infos)
        if claimed > budget:
            raise ModelFileError(f"{path}: its arrays would inflate to {claimed} bytes from a {len(data)}-byte file "
                                 f"(more than {INFLATION}x): refused as a zip bomb or a damaged file")
        self._infos = {info.filename.removesuffix(".npy"): info for info in infos}
        self.names = set(self._infos)

    def _check_directory(self, data: bytes) -> None:
        """Refuse an archive whose central directory lists more members than a monitor has (before parsing it)."""
        at = data.rfind(_EOCD, max(0, len(data) - 65_557))
        if at < 0 or at + 22 > len(data):
            raise ModelFileError(f"{self.path}: not a guardrail monitor file (.npz): no zip directory")
        entries, directory_size = struct.unpack_from("<HI", data, at + 10)
        if entries > MAX_MEMBERS or directory_size > MAX_MEMBERS * 1024:
            raise ModelFileError(f"{self.path}: the archive lists {entries} members in {directory_size} bytes; "
                                 f"a monitor file has at most {MAX_MEMBERS}")

    def member(self, name: str) -> bytes:
        info = self._infos[name]
        try:
            with self._zip.open(info) as handle:
                data = handle.read(info.file_size + 1)
        except (*_ZIP_ERRORS, RuntimeError) as exc:  # RuntimeError: an encrypted member
            raise ModelFileError(f"{self.path}: member {name!r} is damaged ({_one_line(exc)})") from exc
        if len(data) != info.file_size:
            raise ModelFileError(f"{self.path}: member {name!r} holds {len(data)} bytes, the archive says "
                                 f"{info.file_size}; the file is damaged")
        return data

    def array(self, name: str) -> np.ndarray:
        """A member as an array, built only after its .npy header was checked against its real bytes."""
        data = self.member(name)
        buffer = io.BytesIO(data)
        try:
            major, _ = np.lib.format.read_magic(buffer)
            if major not in (1, 2, 3):
                raise ValueError(f"unknown .npy version {major}")
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(buffer, max_header_size=4096)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError, EOFError) as exc:
            raise ModelFileError(f"{self.path}: member {name!r} is not a plain array ({_one_line(exc)})") from exc
        if dtype.hasobject or dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None:
            raise ModelFileError(f"{self.path}: member {name!r} has type {_one_line(dtype, 60)}; a monitor file "
                                 "holds only numeric arrays")
        count = math.prod(shape)
        offset = buffer.tell()
        if count * dtype.itemsize != len(data) - offset:
            raise ModelFileError(f"{self.path}: member {name!r} claims shape {_short_list(shape)} "
                                 f"({count * dtype.itemsize} bytes) but holds {len(data) - offset}; the file is damaged")
        array = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
        return array.reshape(shape, order="F" if fortran else "C").copy()


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a monitor file may hold")


def _header(archive: _Archive, path: str | os.PathLike[str]) -> dict[str, Any]:
    if _HEADER not in archive.names:
        raise ModelFileError(f"{path}: an .npz without a guardrail header; is this a file from `guardrail fit`?")
    if archive._infos[_HEADER].file_size > MAX_HEADER_BYTES:
        raise ModelFileError(f"{path}: the header is larger than {MAX_HEADER_BYTES} bytes; the file is damaged")
    raw = archive.array(_HEADER)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ModelFileError(f"{path}: the header is not a byte string; the file is damaged")
    text = raw.tobytes()
    if json_nesting_exceeds(text, MAX_HEADER_DEPTH):
        raise ModelFileError(f"{path}: the header is nested deeper than {MAX_HEADER_DEPTH} levels; the file is damaged")
    try:
        header = json.loads(text.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelFileError(f"{path}: the header is not valid JSON ({_one_line(exc)}); the file is damaged") from exc
    if not isinstance(header, dict) or header.get("format") != MODEL_FORMAT:
        raise ModelFileError(f"{path}: not a guardrail step-monitor file (format {_one_line(repr(header.get('format')), 60)})"
                             if isinstance(header, dict) else f"{path}: header is not a JSON object")
    if header.get("version") != MODEL_VERSION:
        raise ModelFileError(
            f"{path}: model file format version {_one_line(repr(header.get('version')), 40)} (written by guardrail "
            f"{_one_line(header.get('guardrail_version', '?'), 40)}); this guardrail {version()} reads version "
            f"{MODEL_VERSION}. Refit with `guardrail fit CORPUS -o MODEL`."
        )
    for key in ("params", "telemetry", "arrays"):
        if not isinstance(header.get(key), dict):
            raise ModelFileError(f"{path}: header has no {key!r} object; the file is damaged")
    problem = _header_problem(header)
    if problem:
        raise ModelFileError(f"{path}: {problem}; the file is damaged or was not written by `guardrail fit`")
    return header


def _header_problem(header: dict[str, Any]) -> str | None:
    """What is wrong with the header fields the loader uses (types, finiteness, ranges), or None."""
    threshold = header.get("threshold")
    if threshold is not None and not _finite_number(threshold):
        return f"threshold must be a finite number or null, got {_one_line(repr(threshold), 40)}"
    for key in ("n_train", "n_val"):
        value = header.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            return f"{key} must be a non-negative integer, got {_one_line(repr(value), 40)}"
    for key, spec in header["arrays"].items():
        if not (isinstance(spec, dict) and isinstance(spec.get("dtype"), str) and isinstance(spec.get("shape"), list)
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in spec["shape"])):
            return f"array {_one_line(key, 60)!r} has no valid shape and dtype"
    params = header["params"]
    telemetry = params.get("telemetry")
    if not isinstance(telemetry, dict):
        return "params has no telemetry settings"
    e_dim = telemetry.get("e_dim")
    if not (isinstance(e_dim, int) and not isinstance(e_dim, bool) and 4 <= e_dim <= MAX_E_DIM
            and not e_dim & (e_dim - 1)):
        return f"telemetry e_dim must be a power of two in [4, {MAX_E_DIM}], got {_one_line(repr(e_dim), 40)}"
    floor = telemetry.get("latency_floor_s", 0.0)
    if not (_finite_number(floor) and 0.0 <= floor <= MAX_LATENCY_FLOOR_S):
        return (f"telemetry latency_floor_s must be a number of seconds in [0, {MAX_LATENCY_FLOOR_S:g}], "
                f"got {_one_line(repr(floor), 40)}")
    channels = header["telemetry"].get("channels")
    if not (isinstance(channels, list) and channels and all(c in CHANNELS for c in channels)
            and len(set(channels)) == len(channels)):
        return f"telemetry channels must be distinct names from {list(CHANNELS)}"
    for key in ("beta",):
        if key in params and not _finite_number(params[key]):
            return f"params {key} must be a finite number, got {_one_line(repr(params[key]), 40)}"
    for key in ("n_folds", "random_state"):
        if key in params and not (isinstance(params[key], int) and not isinstance(params[key], bool)):
            return f"params {key} must be an integer, got {_one_line(repr(params[key]), 40)}"
    return _numbers_problem(params.get("detector_params"), "detector_params")


def _numbers_problem(value: Any, where: str, depth: int = 0) -> str | None:
    """Every number under `value` finite and every size-like integer modest (detector settings)."""
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _numbers_problem(item, f"{where}.{key}", depth + 1)
            if problem:
                return problem
    elif isinstance(value, list):
        for item in value:
            problem = _numbers_problem(item, where, depth + 1)
            if problem:
                return problem
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{_one_line(where, 80)} is not finite"
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 6 \
            and not where.endswith("random_state"):
        return f"{_one_line(where, 80)} = {value} is out of range for a monitor setting"
    return None


def _check_widths(dim: int, arrays: dict[str, np.ndarray]) -> None:
    """The telemetry's feature width must be the width the detectors' arrays were fitted on.

    Each detector's state has its feature axis in a known place (a Mahalanobis `location`, an ESN
    `w_in`'s columns); a header whose settings imply another width would make every step allocate
    and compute on features the arrays cannot score.
    """
    for key, value in arrays.items():
        if key.endswith(".location") and value.shape != (dim,):
            raise ValueError(f"{key} has {value.shape[0] if value.ndim else 0} features, the telemetry makes {dim}")
        if key.endswith(".w_in") and (value.ndim != 2 or value.shape[1] != dim):
            raise ValueError(f"{key} takes {value.shape[-1] if value.ndim else 0} features, the telemetry makes {dim}")
