"""Hostile monitor model files: shapes that lie, zip bombs, NaN thresholds, object arrays, CRC damage, deep headers."""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["HOSTILE_MODELS", "fit_small_monitor", "members_of", "write_members"]

# Sizes of the two inflating cases (scaled up under `make fuzz` by the tests): 12,000^2 float64 zeros
# inflate to 1.15 GB from about 1 MB.
ZIP_BOMB_SIDE = 12_000
LYING_MEMBER_FLOATS = 25_000_000


def fit_small_monitor(seed: int = 0, preset: str = "default") -> Any:
    """A StepMonitor (`preset`) fitted on small synthetic episodes (a mechanism fixture, no corpus needed)."""
    from guardrail import Episode, Step, StepKind, ToolEvent
    from monitors import StepMonitor

    rng = random.Random(seed)

    def episode(i: int) -> Episode:
        n = rng.randint(3, 7)
        steps = [Step(index=t, kind=StepKind.TOOL_CALL, text=f"look {t}", latency_s=rng.random(),
                      output_tokens=rng.randint(5, 40),
                      tool_events=[ToolEvent(name=rng.choice(["search", "read"]), args={"q": f"w{rng.randint(0, 20)}"},
                                             result="r" * rng.randint(5, 50))]) for t in range(n - 1)]
        steps.append(Step(index=n - 1, kind=StepKind.FINAL, text="answer"))
        return Episode(episode_id=f"e{i}", steps=steps, task="find the thing")

    episodes = [episode(i) for i in range(40)]
    return StepMonitor.preset(preset).fit(episodes[:25]).calibrate(episodes[25:])


def members_of(path: Path) -> dict[str, bytes]:
    """The raw .npy bytes of every member of an .npz (keys without the .npy suffix)."""
    with zipfile.ZipFile(path) as archive:
        return {name.removesuffix(".npy"): archive.read(name) for name in archive.namelist()}


def write_members(path: Path, members: dict[str, bytes], *, compress: bool = True,
                  zeros: dict[str, tuple[int, ...]] | None = None) -> Path:
    """An .npz of `members`; `zeros` adds float64 members of that shape, streamed (never held in memory)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            if name not in (zeros or {}):
                archive.writestr(name + ".npy", data)
        for name, shape in (zeros or {}).items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                member.write(_npy_claiming(shape, b""))
                left, chunk = 8 * _count(shape), bytes(1 << 20)
                while left > 0:
                    member.write(chunk[:left])
                    left -= len(chunk)
    return path


def _count(shape: tuple[int, ...]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _header(members: dict[str, bytes]) -> dict[str, Any]:
    array = np.lib.format.read_array(io.BytesIO(members["__header__"]))
    return json.loads(array.tobytes())


def _with_header(members: dict[str, bytes], header: Any, raw: bytes | None = None) -> dict[str, bytes]:
    text = raw if raw is not None else json.dumps(header).encode()
    return {**members, "__header__": _npy(np.frombuffer(text, dtype=np.uint8))}


def _npy_claiming(shape: tuple[int, ...], payload: bytes, dtype: str = "<f8") -> bytes:
    """A .npy member whose header claims `shape` but which holds only `payload`."""
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    text = repr(header).encode("latin1")
    pad = 64 - (10 + len(text) + 1) % 64
    text = text + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload


def _member(members: dict[str, bytes], suffix: str) -> str:
    """The first detector array named ``...<suffix>`` (a Mahalanobis detector's, whatever its position)."""
    return next(key for key in sorted(members) if key.startswith("hybrid.") and key.endswith(suffix))


# Each maker takes the good members and a work directory and returns the hostile file.
def _huge_dimension(members: dict[str, bytes], out: Path) -> Path:
    header = _header(members)
    header["params"]["telemetry"]["e_dim"] = 2 ** 30  # the streams would allocate 8 GB per step
    return write_members(out, _with_header(members, header))


def _member_claims_huge_shape(members: dict[str, bytes], out: Path) -> Path:
    hostile = dict(members)
    location = _member(members, ".location")
    hostile[location] = _npy_claiming((10 ** 9,), b"\0" * 64)
    header = _header(members)
    header["arrays"][location]["shape"] = [10 ** 9]
    return write_members(out, _with_header(hostile, header))


def _zip_bomb(members: dict[str, bytes], out: Path) -> Path:
    side = ZIP_BOMB_SIDE
    header = _header(members)
    precision = _member(members, ".precision")
    header["arrays"][precision]["shape"] = [side, side]
    return write_members(out, _with_header(members, header), zeros={precision: (side, side)})


def _nan_threshold(members: dict[str, bytes], out: Path) -> Path:
    header = _header(members)
    header["threshold"] = "nan"
    return write_members(out, _with_header(members, header))


def _nan_literal_threshold(members: dict[str, bytes], out: Path) -> Path:
    text = json.dumps(_header(members)).replace('"threshold": ', '"threshold": NaN, "_was": ')
    return write_members(out, _with_header(members, None, raw=text.encode()))


def _object_member(members: dict[str, bytes], out: Path) -> Path:
    return write_members(out, {**members, "hybrid.weights": _npy(np.array([{"a": 1}, None], dtype=object))})


def _crc_corrupted(members: dict[str, bytes], out: Path) -> Path:
    write_members(out, members, compress=False)
    data = bytearray(out.read_bytes())
    marker = data.find((_member(members, ".precision") + ".npy").encode())
    start = data.find(b"\x93NUMPY", marker)
    data[start + 200] ^= 0xFF  # flip one byte of the array: the member's CRC no longer matches
    out.write_bytes(bytes(data))
    return out


def _deep_header(members: dict[str, bytes], out: Path) -> Path:
    depth = 100_000
    raw = b'{"format": "guardrail-step-monitor", "x": ' + b"[" * depth + b"]" * depth + b"}"
    return write_members(out, _with_header(members, None, raw=raw))


def _shape_lies(members: dict[str, bytes], out: Path) -> Path:
    header = _header(members)
    header["arrays"][_member(members, ".location")]["shape"] = [3, 10 ** 12]
    return write_members(out, _with_header(members, header))


def _non_numeric_fields(members: dict[str, bytes], out: Path) -> Path:
    header = _header(members)
    header["n_train"] = "many"
    header["params"]["beta"] = "0.05"
    return write_members(out, _with_header(members, header))


def _mismatched_feature_width(members: dict[str, bytes], out: Path) -> Path:
    header = _header(members)
    header["params"]["telemetry"]["e_dim"] = 4096  # plausible, but the arrays were fitted on 32 buckets
    return write_members(out, _with_header(members, header))


def _infinite_number(members: dict[str, bytes], out: Path) -> Path:
    header = _header(members)
    header["threshold"] = 1e400  # json.dumps writes Infinity
    return write_members(out, _with_header(members, header))


def _truncated(members: dict[str, bytes], out: Path) -> Path:
    write_members(out, members)
    data = out.read_bytes()
    out.write_bytes(data[: len(data) // 2])
    return out


def _compressed_member_lies_about_size(members: dict[str, bytes], out: Path) -> Path:
    """A deflated member whose directory entry claims a small size but which inflates to 200 MB."""
    write_members(out, members, zeros={"hybrid.weights": (LYING_MEMBER_FLOATS,)})
    data = bytearray(out.read_bytes())
    name = b"hybrid.weights.npy"
    for signature, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = 0
        while (at := data.find(signature, at)) >= 0:
            name_len = struct.unpack_from("<H", data, at + (26 if signature == b"PK\x03\x04" else 28))[0]
            name_at = at + (30 if signature == b"PK\x03\x04" else 46)
            if bytes(data[name_at:name_at + name_len]) == name:
                struct.pack_into("<I", data, at + size_at, 200)
            at += 4
    out.write_bytes(bytes(data))
    return out


def esn_units_lie(members: dict[str, bytes], out: Path) -> Path:
    """An ESN model whose settings claim 100,000 units per reservoir (its arrays hold 12): the recurrent map
    the loader builds from the settings would take terabytes."""
    header = _header(members)
    header["params"]["detector_params"] = {"esn_cusum_max": {"n_units": 100_000}}
    return write_members(out, _with_header(members, header))


def _latency_floor_out_of_range(members: dict[str, bytes], out: Path) -> Path:
    """A latency floor of a billion seconds: every latency the monitor sees would read as the same."""
    header = _header(members)
    header["params"]["telemetry"]["latency_floor_s"] = 1e9
    return write_members(out, _with_header(members, header))


def _fitted_latency_floor_out_of_range(members: dict[str, bytes], out: Path) -> Path:
    """A fitted latency floor of -1 s (the array itself; its header entry is left true to it)."""
    return write_members(out, {**members, "telemetry.latency_floor": _npy(np.array(-1.0))})


HOSTILE_MODELS: dict[str, Callable[[dict[str, bytes], Path], Path]] = {
    "huge_dimension": _huge_dimension,
    "member_claims_huge_shape": _member_claims_huge_shape,
    "zip_bomb": _zip_bomb,
    "nan_threshold": _nan_threshold,
    "nan_literal_threshold": _nan_literal_threshold,
    "infinite_threshold": _infinite_number,
    "object_member": _object_member,
    "crc_corrupted": _crc_corrupted,
    "deep_header": _deep_header,
    "shape_lies": _shape_lies,
    "non_numeric_fields": _non_numeric_fields,
    "mismatched_feature_width": _mismatched_feature_width,
    "truncated": _truncated,
    "member_lies_about_size": _compressed_member_lies_about_size,
    "latency_floor_out_of_range": _latency_floor_out_of_range,
    "fitted_latency_floor_out_of_range": _fitted_latency_floor_out_of_range,
}


def report_loads(paths: list[str], extra_bytes: int) -> None:
    """Child-process side of the memory test: load each model file under an address-space cap and print
    one JSON line per file (the error it raised, and the peak RSS growth so far in bytes)."""
    import resource
    import sys

    from monitors.model_file import load_monitor
    from tests.hostile.memlimit import address_space_limit

    def peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    load_monitor(paths[0])  # the good file first: every import and first-use allocation is in the baseline
    baseline = peak()
    with address_space_limit(extra_bytes):
        for path in paths[1:]:
            try:
                load_monitor(path)
                error, message = None, ""
            except Exception as exc:  # noqa: BLE001 - the parent asserts which type it was
                error, message = type(exc).__name__, str(exc)
            print(json.dumps({"path": path, "error": error, "message": message, "growth": peak() - baseline}))
            sys.stdout.flush()


if __name__ == "__main__":
    import sys

    report_loads(sys.argv[2:], int(sys.argv[1]))
